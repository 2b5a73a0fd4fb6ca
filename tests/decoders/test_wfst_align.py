"""Forced alignment (`decoders.wfst.align`) against independent references: the plain-Python
Viterbi over (state, words output so far) of `wfst_ref.word_sequence_cost` on random WFSTs, and
the decoder's own 1-best score when the transcript is the decoder's 1-best."""

import math

import numpy as np
import pytest
import torch
from helpers.wfst_graphs import V, device_graph, log_probs
from helpers.wfst_ref import all_word_sequences, random_wfst, single_thread, word_sequence_cost  # noqa: F401

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.align import force_align
from asrdecode.graph.restrict import WordSequenceGraphs
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

WORDS = {i: f"w{i}" for i in range(1, 10)}


def model_output(lp: np.ndarray) -> ModelOutput:
    return ModelOutput(torch.from_numpy(lp[None]), torch.tensor([len(lp)]), 0.01, -1, [])


@pytest.mark.parametrize("seed", range(25))
def test_forced_cost_equals_exhaustive_reference(seed):
    """Every word sequence the graph can output in T frames, and some it cannot: the forced cost is
    the reference's best cost of that sequence (None where the reference finds no path). The
    decoder's own pruning (beam, max_active, word_beam; tight on odd seeds) does not apply."""
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), V, 4, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(2, 7)))
    tight = {"beam": 2.0, "max_active": 3, "min_active": 0, "word_beam": 0.3} if seed % 2 else {}
    cfg = WfstConfig(backend="compiled", threads=1, **tight)
    dec = WfstDecoder(cfg, graph=device_graph(fst), words=WORDS)
    graphs = WordSequenceGraphs(dec.graph_cpu)
    sequences = list(all_word_sequences(fst, lp))[:8]
    sequences += [tuple(int(w) for w in rng.integers(1, 5, size=int(rng.integers(0, 4)))) for _ in range(4)]
    for seq in sequences:
        ref = word_sequence_cost(fst, lp, list(seq))
        got = force_align(dec, model_output(lp), [[WORDS[w] for w in seq]], graphs)[0]
        if math.isinf(ref):
            assert got is None, seq
        else:
            assert got is not None, seq
            assert -got.score == pytest.approx(ref, abs=1e-4), seq


@pytest.mark.parametrize("backend", ["compiled", "torch"])
@pytest.mark.parametrize("seed", range(10))
def test_forced_cost_of_the_one_best_is_its_score(seed, backend):
    """The decoder's 1-best, force-aligned, costs what the decoder said it costs (acoustic and
    graph parts too), with a word insertion penalty and an acoustic scale."""
    rng = np.random.default_rng(100 + seed)
    cfg = WfstConfig(backend=backend, threads=1, acoustic_scale=0.7, word_insertion_penalty=0.3)
    while True:  # a graph whose final states are reachable in these frames
        fst = random_wfst(rng, 7, V, 4, eps_forward=True)
        lp = log_probs(rng, 6)
        dec = WfstDecoder(cfg, graph=device_graph(fst), words=WORDS)
        best = dec.decode(model_output(lp))[0]
        if math.isfinite(best.score) and not dec.last_info["not_final"]:
            break
    forced = force_align(dec, model_output(lp), [[w.word for w in best.words]])[0]
    assert forced is not None
    assert forced.score == pytest.approx(best.score, abs=1e-4)
    assert forced.acoustic_score == pytest.approx(best.acoustic_score, abs=1e-4)
    assert forced.lm_score == pytest.approx(best.lm_score, abs=1e-4)


def test_unknown_word_and_empty_sequence():
    rng = np.random.default_rng(7)
    fst = random_wfst(rng, 5, V, 4, eps_forward=True)
    lp = log_probs(rng, 4)
    dec = WfstDecoder(WfstConfig(backend="compiled", threads=1), graph=device_graph(fst), words=WORDS)
    assert force_align(dec, model_output(lp), [["nope"]])[0] is None
    ref = word_sequence_cost(fst, lp, [])
    got = force_align(dec, model_output(lp), [[]])[0]
    assert (got is None) == math.isinf(ref)


@pytest.mark.parametrize("decoder", ["wfst-otf", "let"])
@pytest.mark.parametrize("seed", range(8))
def test_forced_cost_of_the_on_the_fly_decoders_is_the_composed_cost(tmp_path, seed, decoder):
    """`wfst-otf` and `let`: the forced cost of every word sequence is its best path in the graph plus
    lm_scale * (large - small) of its words (plain-Python ARPA scorers), also when the decoder has a
    history beam (odd seeds: pruning does not apply), and the forced cost of the decoder's 1-best
    is the decoder's own score."""
    from helpers.otf_ref import WORDS as OTF_WORDS
    from helpers.otf_ref import ArpaScorer, random_arpa

    from asrdecode.decoders.let import LetConfig, LetDecoder
    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

    rng = np.random.default_rng(4400 + seed)
    sequences: list = []
    while not sequences:  # a graph that outputs words in these frames
        fst = random_wfst(rng, int(rng.integers(3, 8)), 4, 6, eps_forward=True)
        lp = log_probs(rng, int(rng.integers(2, 7)))
        sequences = list(all_word_sequences(fst, lp).items())[:8]
    names = list(OTF_WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, int(rng.integers(1, 3)))
    scale = 1.0 if seed % 2 else 0.7
    opts = {"lm": str(large), "small_lm": str(small), "lm_scale": scale, "threads": 1, "beam": 1e9}
    opts.update(max_active=10**9, min_active=0, history_beam=0.2 if seed % 2 else 0.0)
    if decoder == "let":
        dec = LetDecoder(LetConfig(**opts, group_capacity=64), graph=device_graph(fst), words=OTF_WORDS)
    else:
        dec = WfstOtfDecoder(
            WfstOtfConfig(**opts, backend="compiled"), graph=device_graph(fst), words=OTF_WORDS
        )
    lm_large, lm_small = ArpaScorer(large), ArpaScorer(small)
    for seq, graph_cost in sequences:
        ws = [OTF_WORDS[w] for w in seq]
        ref = graph_cost + scale * (lm_large.cost(ws) - lm_small.cost(ws))
        got = force_align(dec, model_output(lp), [ws])[0]
        assert got is not None and -got.score == pytest.approx(ref, abs=1e-3), seq
    if seed % 2:
        return
    (best,) = dec.decode(model_output(lp))
    forced = force_align(dec, model_output(lp), [[w.word for w in best.words]])[0]
    assert forced.score == pytest.approx(best.score, abs=1e-3)
    assert forced.lm_score == pytest.approx(best.lm_score, abs=1e-3)


@pytest.mark.parametrize("seed", range(10))
def test_restriction_states_name_the_product_states(seed):
    """`restrict_with_states`: each state of the restriction is a (graph state, words out) pair; each
    of its arcs is an arc of the graph between those graph states with the same labels and weight,
    advancing the word count by one exactly on the next word; the start is (start, 0) and the final
    states have every word out."""
    rng = np.random.default_rng(300 + seed)
    fst = random_wfst(rng, 6, V, 4, eps_forward=True)
    graph = device_graph(fst)
    words = [int(w) for w in rng.integers(1, 5, size=int(rng.integers(1, 4)))]
    restricted, states = WordSequenceGraphs(graph).restrict_with_states(words)
    assert len(states) == restricted.num_states
    if restricted.num_states == 0:
        return
    assert tuple(states[restricted.start]) == (graph.start, 0)
    full = graph.arc_arrays()
    arcs = {(int(s), int(i), int(o), float(w), int(n)) for s, i, o, w, n in zip(
        full["src"], full["ilabel"], full["olabel"], full["weight"], full["nextstate"], strict=True
    )}  # fmt: skip
    part = restricted.arc_arrays()
    for s, i, o, w, n in zip(
        part["src"], part["ilabel"], part["olabel"], part["weight"], part["nextstate"], strict=True
    ):
        (gs, k), (gn, kn) = states[s], states[n]
        assert (int(gs), int(i), int(o), float(w), int(gn)) in arcs
        assert kn == k + (o != 0)
        if o != 0:
            assert o == words[k]
    final = restricted.final.numpy()
    assert all(states[q][1] == len(words) for q in np.flatnonzero(np.isfinite(final)))
