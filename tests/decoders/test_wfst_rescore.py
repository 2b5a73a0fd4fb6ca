"""N-best LM rescoring of `wfst`, `wfst-otf` and `let` (``decoder.rescore_lm``) against independent
references on tiny random WFSTs with random ARPA LMs:

* with no pruning and every word sequence rescored, the result is the sequence that minimises
  the exhaustive best-path cost (`wfst_ref.all_word_sequences`) + word insertion penalties +
  ``exact_new - cheapest_graph`` read by `BackoffReadings` (a second, dict-based reading of both
  LMs), with that total as its score, and its word times and score split are the forced
  alignment's of those words;
* `StateLattice.best_path_of` gives each sequence's exhaustive best cost, None for one not in it;
* the on-the-fly decoders take back what their search added: their rescored result is the
  exhaustive minimum of graph cost + new LM exact - small LM as G reads it, and with an
  exact-readable (unigram) small LM and the large LM as the rescoring LM no cost changes;
* bad options and LM files are one-line ConfigErrors naming the option.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.otf_ref import random_arpa, unigram_arpa
from helpers.wfst_graphs import V, device_graph, log_probs
from helpers.wfst_ref import all_word_sequences, random_wfst, single_thread  # noqa: F401

from asrdecode.decoders.let import LetConfig, LetDecoder
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.align import force_align
from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder
from asrdecode.errors import ConfigError
from asrdecode.lm.backoff import BackoffReadings
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

WORDS = {i: f"w{i}" for i in range(1, 5)}
WIP = 0.3
OPEN = {"beam": 1e9, "max_active": 2**30, "min_active": 0, "lattice_beam": 1e9}
ON_THE_FLY = {"wfst-otf": (WfstOtfConfig, WfstOtfDecoder), "let": (LetConfig, LetDecoder)}


def model_output(lp: np.ndarray) -> ModelOutput:
    return ModelOutput(torch.from_numpy(lp[None]), torch.tensor([len(lp)]), 0.01, -1, [])


def lms(tmp_path, rng) -> tuple:
    new = random_arpa(tmp_path / "new.arpa", rng, list(WORDS.values()), 3)
    graph = random_arpa(tmp_path / "graph.arpa", rng, list(WORDS.values()), 2)
    return new, graph


def added(new: BackoffReadings, graph: BackoffReadings, names: list[str]) -> float:
    return new.exact(names) - graph.cheapest_path(names)


def graph_and_frames(rng) -> tuple[dict, np.ndarray, dict]:
    """A random graph and log-probs with at least two complete word sequences."""
    while True:
        fst = random_wfst(rng, int(rng.integers(4, 8)), V, 4, eps_forward=True)
        lp = log_probs(rng, int(rng.integers(3, 7)))
        seqs = all_word_sequences(fst, lp)
        if len(seqs) >= 2:
            return fst, lp, seqs


def ranked_case(rng, total) -> tuple[dict, np.ndarray, list]:
    """A random graph and log-probs whose word sequences, ranked by `total(sequence, exhaustive
    cost)`, have a unique cheapest one (no tie within float rounding), with that ranking."""
    while True:
        fst, lp, seqs = graph_and_frames(rng)
        ranked = sorted(((s, total(s, c)) for s, c in seqs.items()), key=lambda x: x[1])
        if ranked[1][1] - ranked[0][1] >= 1e-3:
            return fst, lp, ranked


@pytest.mark.parametrize("backend", ["compiled", "torch"])
@pytest.mark.parametrize("seed", range(12))
def test_rescored_result_is_the_exhaustive_minimum(tmp_path, seed, backend):
    rng = np.random.default_rng(seed)
    new_path, graph_path = lms(tmp_path, rng)
    new, graph = BackoffReadings.read(new_path), BackoffReadings.read(graph_path)
    fst, lp, ranked = ranked_case(
        rng, lambda s, c: c + WIP * len(s) + added(new, graph, [WORDS[w] for w in s])
    )
    cfg = WfstConfig(
        backend=backend, threads=1, word_insertion_penalty=WIP, rescore_lm=str(new_path),
        rescore_graph_lm=str(graph_path), rescore_nbest=1000, nbest=3, **OPEN,
    )  # fmt: skip
    dec = WfstDecoder(cfg, graph=device_graph(fst), words=WORDS)
    res = dec.decode(model_output(lp))[0]
    best_words, best_total = ranked[0]
    assert [w.word for w in res.words] == [WORDS[w] for w in best_words]
    assert -res.score == pytest.approx(best_total, abs=2e-3)
    assert [w for w, _ in res.nbest] == [[WORDS[w] for w in s] for s, _ in ranked[:3]]
    assert [-s for _, s in res.nbest] == pytest.approx([t for _, t in ranked[:3]], abs=2e-3)
    # the path read back is the forced alignment's in the rescored model: word times, costs
    forced = force_align(dec, model_output(lp), [[w.word for w in res.words]])[0]
    assert forced is not None
    assert [(w.word, w.start, w.end) for w in res.words] == [(w.word, w.start, w.end) for w in forced.words]
    assert res.acoustic_score == pytest.approx(forced.acoustic_score, abs=2e-3)
    assert res.lm_score == pytest.approx(forced.lm_score, abs=2e-3)
    assert res.score == pytest.approx(forced.score, abs=2e-3)


@pytest.mark.parametrize("kind", sorted(ON_THE_FLY))
@pytest.mark.parametrize("seed", range(6))
def test_on_the_fly_rescored_result_is_the_exhaustive_minimum(tmp_path, seed, kind):
    """An on-the-fly decoder (random small bigram graph LM on the fly to a random trigram) rescored
    by a third LM: the result is the minimum over every word sequence of its exhaustive graph cost
    + the on-the-fly difference (large - small, both exact) + the rescoring cost (new exact - small
    as G reads it) - what the search added, i.e. graph cost + new exact - small cheapest path."""
    config_type, decoder_type = ON_THE_FLY[kind]
    rng = np.random.default_rng(200 + seed)
    new_path, small_path = lms(tmp_path, rng)
    large_path = random_arpa(tmp_path / "large.arpa", rng, list(WORDS.values()), 3)
    new, small = BackoffReadings.read(new_path), BackoffReadings.read(small_path)
    fst, lp, ranked = ranked_case(rng, lambda s, c: c + added(new, small, [WORDS[w] for w in s]))
    cfg = config_type(
        backend="compiled", threads=1, lm=str(large_path), small_lm=str(small_path), rescore_lm=str(new_path),
        rescore_graph_lm=str(small_path), rescore_nbest=1000, **OPEN,
    )  # fmt: skip
    res = decoder_type(cfg, graph=device_graph(fst), words=WORDS).decode(model_output(lp))[0]
    assert [w.word for w in res.words] == [WORDS[w] for w in ranked[0][0]]
    assert -res.score == pytest.approx(ranked[0][1], abs=2e-3)


@pytest.mark.parametrize("seed", range(8))
def test_best_path_of_each_word_sequence(seed):
    rng = np.random.default_rng(50 + seed)
    fst, lp, seqs = graph_and_frames(rng)
    cfg = WfstConfig(backend="compiled", threads=1, lattice=True, **OPEN)
    res = WfstDecoder(cfg, graph=device_graph(fst), words=WORDS).decode(model_output(lp))[0]
    lat = res.lattice.state_lattice
    for seq, cost in seqs.items():
        found = lat.best_path_of(list(seq))
        assert found is not None, seq
        arcs, frames, total = found
        assert total == pytest.approx(cost, abs=1e-4)
        assert len(arcs) == len(frames) and frames.max(initial=-1) == len(lp) - 1
    missing = next(s for s in ((w,) * 9 for w in WORDS) if s not in seqs)
    assert lat.best_path_of(list(missing)) is None


@pytest.mark.parametrize("kind", sorted(ON_THE_FLY))
@pytest.mark.parametrize("seed", range(4))
def test_on_the_fly_share_is_taken_back(tmp_path, seed, kind):
    """An on-the-fly decoder over a graph of its unigram small LM (read exactly by its G) with the
    large LM on the fly: the search already charged the large LM read exactly, so rescoring with
    the large LM adds nothing and keeps the words and costs."""
    config_type, decoder_type = ON_THE_FLY[kind]
    rng = np.random.default_rng(80 + seed)
    large = random_arpa(tmp_path / "large.arpa", rng, list(WORDS.values()), 3)
    small = unigram_arpa(tmp_path / "small.arpa", [list(WORDS.values())])
    fst, lp, _ = graph_and_frames(rng)
    base = dict(backend="compiled", threads=1, lm=str(large), small_lm=str(small), nbest=4, **OPEN)
    plain = decoder_type(config_type(**base), graph=device_graph(fst), words=WORDS)
    rescored = decoder_type(
        config_type(**base, rescore_lm=str(large), rescore_graph_lm=str(small)),
        graph=device_graph(fst),
        words=WORDS,
    )
    a = plain.decode(model_output(lp))[0]
    b = rescored.decode(model_output(lp))[0]
    assert b.text == a.text
    assert b.score == pytest.approx(a.score, abs=1e-3)
    assert [w for w, _ in b.nbest] == [w for w, _ in a.nbest]
    assert [s for _, s in b.nbest] == pytest.approx([s for _, s in a.nbest], abs=1e-3)


def arpa_of_unigrams(path: Path, prob: dict[str, float]) -> Path:
    """A unigram ARPA file of word -> log10 p."""
    lines = [f"{p} {w}" for w, p in prob.items()]
    path.write_text(f"\\data\\\nngram 1={len(lines)}\n\n\\1-grams:\n" + "\n".join(lines) + "\n\n\\end\\\n")
    return path


def test_unknown_words_read_as_unk_or_dropped(tmp_path):
    from asrdecode.lm.ngram_tensor import BatchedNgramLM
    from asrdecode.lm.rescore import NbestRescorer, rescoring_vocabulary

    g = BackoffReadings({("a",): -0.5, ("b",): -0.7, ("</s>",): -0.3, ("<s>",): -99.0}, {})
    vocab = rescoring_vocabulary(g)
    no_unk = arpa_of_unigrams(tmp_path / "no_unk.arpa", {"<s>": -99.0, "a": -0.4, "</s>": -0.2})
    with_unk = arpa_of_unigrams(tmp_path / "unk.arpa", {"<s>": -99.0, "a": -0.4, "</s>": -0.2, "<unk>": -2.0})
    rescorer = NbestRescorer(BatchedNgramLM.from_file(no_unk, vocab), g)
    assert rescorer.added_costs([["a", "b"], ["a"]])[0] == math.inf
    got = NbestRescorer(BatchedNgramLM.from_file(with_unk, vocab), g).added_costs([["a", "b"], ["a", "zzz"]])
    want = (0.4 + 2.0 + 0.2 - (0.5 + 0.7 + 0.3)) * math.log(10)
    assert got[0] == pytest.approx(want)
    # a word the graph LM does not know (a noise word of the lexicon) is in neither reading
    assert got[1] == pytest.approx((0.4 + 0.2 - 0.5 - 0.3) * math.log(10))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"rescore_lm": "nope.arpa", "rescore_graph_lm": "graph"}, "decoder.rescore_lm: "),
        ({"rescore_lm": "new", "rescore_graph_lm": "nope.arpa"}, "decoder.rescore_graph_lm: "),
        ({"rescore_lm": "new"}, "decoder.rescore_graph_lm: give the LM"),
        ({"rescore_lm": "bad", "rescore_graph_lm": "graph"}, "decoder.rescore_lm: "),
        ({"rescore_lm": "binary", "rescore_graph_lm": "graph"}, "decoder.rescore_lm: "),
        ({"rescore_lm": "new", "rescore_graph_lm": "graph", "rescore_nbest": 0}, "decoder.rescore_nbest"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, options, message):
    rng = np.random.default_rng(3)
    new, graph = lms(tmp_path, rng)
    (tmp_path / "bad.arpa").write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0 a\n\\end\\\n")
    (tmp_path / "binary.arpa").write_bytes(b"\xff\xfe\x00binary")
    files = {"new": new, "graph": graph, "bad": tmp_path / "bad.arpa", "binary": tmp_path / "binary.arpa"}
    opts = {k: str(files.get(v, tmp_path / v)) if isinstance(v, str) else v for k, v in options.items()}
    fst, _, _ = graph_and_frames(rng)
    with pytest.raises(ConfigError) as err:
        WfstDecoder(WfstConfig(backend="compiled", **opts), graph=device_graph(fst), words=WORDS)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_unreadable_hypotheses_keep_the_search_result(tmp_path, caplog):
    """A new LM that can read none of the lattice's word sequences (a vocabulary without the
    graph's words, no <unk>): the search's result stays, with a one-line warning and a count."""
    rng = np.random.default_rng(11)
    (tmp_path / "other.arpa").write_text(
        "\\data\\\nngram 1=3\n\n\\1-grams:\n-99 <s>\n-0.5 zz\n-0.5 </s>\n\n\\end\\\n"
    )
    _, graph_path = lms(tmp_path, rng)
    while True:
        fst, lp, seqs = graph_and_frames(rng)
        if () not in seqs:
            break
    plain = WfstDecoder(
        WfstConfig(backend="compiled", threads=1, **OPEN), graph=device_graph(fst), words=WORDS
    )
    cfg = WfstConfig(
        backend="compiled", threads=1, rescore_lm=str(tmp_path / "other.arpa"),
        rescore_graph_lm=str(graph_path), **OPEN,
    )  # fmt: skip
    dec = WfstDecoder(cfg, graph=device_graph(fst), words=WORDS)
    a = plain.decode(model_output(lp))[0]
    b = dec.decode(model_output(lp))[0]
    assert (b.text, b.score) == (a.text, a.score)
    assert dec.last_info["rescore_unreadable"] == 1
    assert "decoder.rescore_lm: no hypothesis" in caplog.text


def test_word_path_memory_follows_the_lattice():
    """A chain of N word arcs reading N words: every node has one possible count of words read, so
    the kernel keeps N + 1 entries, not (N + 1) x (N + 1); the path is the chain."""
    from asrdecode.decoders.wfst.lattice import word_path_kernel

    n = 500
    src, dst = np.arange(n, dtype=np.int64), np.arange(1, n + 1, dtype=np.int64)
    ilabel, olabel = np.ones(n, np.int64), np.ones(n, np.int64)
    cost, frame = np.full(n, 0.5), np.arange(-1, n, dtype=np.int64)
    best, back_arc, _, lo, hi, off = word_path_kernel(src, dst, ilabel, olabel, cost, frame, olabel, n + 1)
    assert off[-1] == n + 1 and list(lo) == list(range(n + 1)) and list(hi) == list(range(n + 1))
    assert best[off[n]] == pytest.approx(0.5 * n) and back_arc[off[n]] == n - 1
