"""`bench.search_loss.follow_path` on random WFSTs against brute force: when a pruned search ends
costlier than the exhaustive best word sequence (a search error, `wfst_ref.all_word_sequences`),
that sequence's best path is lost at some frame, by a pruning step of the kind the search ran
(beam-only pruning: beam or bound; max_active-only: max_active or bound); an unpruned search never
loses it, and the search's final cost is its own 1-best's."""

import math

import numpy as np
import pytest
import torch
from helpers.wfst_graphs import V, device_graph, log_probs
from helpers.wfst_ref import all_word_sequences, random_wfst, single_thread  # noqa: F401

from asrdecode.bench.search_loss import follow_path
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.paths import utterance_costs
from asrdecode.graph.restrict import WordSequenceGraphs
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

WORDS = {i: f"w{i}" for i in range(1, 10)}
WIDE = {"beam": math.inf, "max_active": 2**31 - 1, "min_active": 0}


def costs(decoder: WfstDecoder, lp: np.ndarray) -> np.ndarray:
    lp_t = torch.from_numpy(lp[None])
    out = ModelOutput(lp_t, torch.tensor([len(lp)]), 0.01, -1, [])
    rows, convert = utterance_costs(out, decoder._blank_column(out), 1.0, 0.0)
    return np.ascontiguousarray(convert(rows[0]))


@pytest.mark.parametrize("pruning", ["beam", "max_active"])
def test_a_search_error_is_lost_at_a_frame_by_the_pruning_that_ran(pruning):
    if pruning == "beam":
        tight = {"beam": 1.0, "max_active": 2**31 - 1}
    else:
        tight = {"beam": math.inf, "max_active": 2}
    found = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        fst = random_wfst(rng, 8, V, 4, eps_forward=True)
        lp = log_probs(rng, 6)
        sequences = all_word_sequences(fst, lp)
        if not sequences:
            continue
        best_words, best_cost = min(sequences.items(), key=lambda kv: kv[1])
        graph = device_graph(fst)
        pruned = WfstDecoder(
            WfstConfig(backend="compiled", threads=1, min_active=0, **tight), graph=graph, words=WORDS
        )
        wide = WfstDecoder(WfstConfig(backend="compiled", threads=1, **WIDE), graph=graph, words=WORDS)
        ac, graphs = costs(pruned, lp), WordSequenceGraphs(graph)
        kept = follow_path(wide, ac, list(best_words), graphs)
        assert kept is not None and kept["lost"] is None
        assert kept["search_cost"] == pytest.approx(best_cost, abs=1e-4)
        got = follow_path(pruned, ac, list(best_words), graphs)
        if got["search_cost"] > best_cost + 1e-3:  # the pruned search missed the best sequence
            found += 1
            assert got["lost"] is not None
            allowed = {"beam", "bound", "start"} if pruning == "beam" else {"max_active", "bound", "start"}
            assert got["lost"]["step"] in allowed
    assert found >= 3  # the cases above are not vacuous


@pytest.mark.parametrize(
    "pruning, allowed",
    [({"beam": 1.0}, {"beam", "bound", "start"}), ({"beam": 1e9, "history_max": 1}, {"history_max"})],
)
def test_on_the_fly_search_follows_the_lm_state(tmp_path, pruning, allowed):
    """`wfst-otf`: the path's LM state and difference are followed too. The best word sequence of the
    composition (graph cost + large - small LM cost, plain-Python ARPA scorers) is never lost by an
    unpruned search, whose final cost is its cost; a tightly pruned search (a beam, or one LM
    history per graph state) that ends costlier loses it at some frame, by that pruning."""
    from helpers.otf_ref import WORDS as OTF_WORDS
    from helpers.otf_ref import ArpaScorer, random_arpa

    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

    found = 0
    for seed in range(30):
        rng = np.random.default_rng(900 + seed)
        fst = random_wfst(rng, 7, V, 6, eps_forward=True)
        lp = log_probs(rng, 6)
        sequences = all_word_sequences(fst, lp)
        if not sequences:
            continue
        names = list(OTF_WORDS.values())
        large = random_arpa(tmp_path / f"large{seed}.arpa", rng, names, 3)
        small = random_arpa(tmp_path / f"small{seed}.arpa", rng, names, 2)
        lm_large, lm_small = ArpaScorer(large), ArpaScorer(small)
        composed = {}
        for seq, cost in sequences.items():
            words = [OTF_WORDS[w] for w in seq]
            composed[seq] = cost + lm_large.cost(words) - lm_small.cost(words)
        best_words, best_cost = min(composed.items(), key=lambda kv: kv[1])
        graph = device_graph(fst)
        opts = {"lm": str(large), "small_lm": str(small), "threads": 1, "backend": "compiled"}
        opts.update(min_active=0, max_active=10**9)
        wide = WfstOtfDecoder(WfstOtfConfig(**opts, beam=1e9), graph=graph, words=OTF_WORDS)
        pruned = WfstOtfDecoder(WfstOtfConfig(**opts, **pruning), graph=graph, words=OTF_WORDS)
        ac, graphs = costs(wide, lp), WordSequenceGraphs(graph)
        kept = follow_path(wide, ac, list(best_words), graphs)
        assert kept["lost"] is None
        assert kept["search_cost"] == pytest.approx(best_cost, abs=1e-3)
        got = follow_path(pruned, ac, list(best_words), graphs)
        if got["search_cost"] > best_cost + 1e-3:
            found += 1
            assert got["lost"] is not None and got["lost"]["step"] in allowed
    assert found >= 2
