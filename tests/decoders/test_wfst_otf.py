"""`wfst-otf` against independent references:

(c) brute force: on tiny random WFSTs (epsilon arcs, words on emitting and epsilon arcs) with random
    trigram/bigram ARPAs, the decoder's 1-best and cost equal the minimum over every output word
    sequence of (best graph path for it) + lm_scale * (large - small), the LMs scored by a
    plain-Python ARPA scorer;
(a) large LM == small LM: the same words and scores as plain `wfst` on the same graph;
(b) a graph built with a small (unigram) LM + the large (bigram) LM on the fly == plain `wfst` on
    the graph built directly with the large LM (both built by asrdecode.graph.build_graph, NeMo
    fixture log-probs, wide beams), and that graph's 1-best also equals kaldi-decoder's.
Both backends (compiled, torch) in every case, the torch backend with the LM tables on the device and
in host memory (`lm_on_host`, paper 000 sec. 2.2-2.3).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from helpers.otf_ref import (
    WORDS,
    ArpaScorer,
    backend_options,
    brute_force,
    history_pruned_search,
    random_arpa,
)
from helpers.wfst_graphs import device_graph, log_probs, run
from helpers.wfst_ref import (  # noqa: F401
    all_word_sequences,
    nemo_log_probs,
    random_wfst,
    single_thread,
)

from asrdecode.decoders import DECODERS, decoder_config_from_dict
from asrdecode.decoders.let import LetConfig, LetDecoder
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder, compiled
from asrdecode.decoders.wfst.compiled import MAP_SLACK, cap_histories
from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder
from asrdecode.decoders.workspace import INIT_CAPACITY
from asrdecode.errors import ConfigError
from asrdecode.lm.difference import new_memo
from asrdecode.lm.ngram_tensor import BatchedNgramLM
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0}
# torch: both LMs' tables on the device; torch-host: decoder.lm_on_host (paper 000: weights and next
# states in host memory, lookups deduplicated and cached), the path a GPU runs by default
BACKENDS = ("compiled", "torch", "torch-host")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(24))
def test_random_graph_and_lms_equal_brute_force(tmp_path, seed, backend):
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), 4, 6, eps_forward=True)
    names = list(WORDS.values())
    # on odd seeds histories that change no cost, which the difference LM merges
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3, bare=0.6 * (seed % 2))
    small = random_arpa(tmp_path / "small.arpa", rng, names, int(rng.integers(1, 3)))
    scale = 1.0 if seed % 3 else 0.6
    boost = {"w3": 1.5} if seed % 4 == 1 else {}  # word boosts as `wfst` (a bonus per occurrence)
    lp = log_probs(rng, int(rng.integers(1, 7)))
    cfg = WfstOtfConfig(
        **WIDE,
        **backend_options(backend, seed),
        lm=str(large),
        small_lm=str(small),
        lm_scale=scale,
        boost=boost,
    )
    dec = WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
    (res,) = run(dec, [lp])
    ref = brute_force(fst, lp, ArpaScorer(large), ArpaScorer(small), scale, boost)
    if ref is None:  # no final state reachable: Kaldi's fallback, flagged
        assert dec.last_info["not_final"] == [0] or res.score == -math.inf
        return
    assert dec.last_info["not_final"] == []
    assert -res.score == pytest.approx(ref[0], abs=1e-3)
    assert [w.word for w in res.words] == ref[1]
    # score split: the acoustic part is the path's -log-probs, the rest graph + LM difference
    assert -(res.acoustic_score + res.lm_score) == pytest.approx(ref[0], abs=1e-3)


@pytest.mark.parametrize("seed", range(6))
def test_word_prefetch_is_only_a_hint(tmp_path, monkeypatch, seed):
    """The prefetch of the LM memo (`wfst-otf`) and of the word-block cache (`let`) for the word
    arcs of tokens ahead runs only where the table is larger than the L2 cache (`prefetch_pays`,
    from the settings' `l2_bytes`): with it forced on (L2 unknown) and off (a huge L2) the compiled
    `wfst-otf` equals brute force, and `let` gives the same words, cost and counters either way."""
    rng = np.random.default_rng(900 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 6)), 4, 6, eps_forward=True)
    fst["arcs"] = [(s, il, ol if il else 0, w, ns) for s, il, ol, w, ns in fst["arcs"]]  # `let`'s words
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, int(rng.integers(1, 3)))
    lp = log_probs(rng, int(rng.integers(4, 9)))
    ref = brute_force(fst, lp, ArpaScorer(large), ArpaScorer(small), 1.0, {})
    opts = {**WIDE, "lm": str(large), "small_lm": str(small)}
    let_results = []
    for l2_bytes in (0, 1 << 40):
        monkeypatch.setattr(compiled, "l2_cache_bytes", lambda l2=l2_bytes: l2)
        assert compiled.prefetch_pays(new_memo(), l2_bytes) == (l2_bytes == 0)
        otf = WfstOtfDecoder(WfstOtfConfig(**opts, backend="compiled"), graph=device_graph(fst), words=WORDS)
        assert otf.search_settings()["l2_bytes"] == l2_bytes
        (res,) = run(otf, [lp])
        if ref is None:
            assert res.score == -math.inf or otf.last_info["not_final"] == [0]
        else:
            assert -res.score == pytest.approx(ref[0], abs=1e-3)
            assert [w.word for w in res.words] == ref[1]
        let = LetDecoder(LetConfig(**opts, group_capacity=64), graph=device_graph(fst), words=WORDS)
        assert let.settings["l2_bytes"] == l2_bytes
        (res,) = run(let, [lp])
        let_results.append(([w.word for w in res.words], res.score, let.last_info["stats"]))
    assert let_results[0] == let_results[1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(12))
def test_history_beam_equals_its_plain_search(tmp_path, seed, backend):
    """`history_beam`: the 1-best and cost of the plain search that drops, before each frame's
    emitting arcs, hypotheses more than history_beam above the cheapest in their graph state
    (`history_pruned_search`, dictionaries over word sequences; on half of these seeds the
    pruning changes that 1-best); a wide one is the search without it; tight ones expand fewer
    arcs (compiled)."""
    rng = np.random.default_rng(300 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 6)), 4, 6, eps_forward=True)
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, int(rng.integers(1, 3)))
    lp = log_probs(rng, int(rng.integers(6, 12)))
    opts = {**WIDE, **backend_options(backend, seed), "lm": str(large), "small_lm": str(small)}
    off = WfstOtfDecoder(WfstOtfConfig(**opts), graph=device_graph(fst), words=WORDS)
    (plain,) = run(off, [lp])
    for history_beam in (0.1, 0.5, 1e6):
        cfg = WfstOtfConfig(**opts, history_beam=history_beam)
        dec = WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
        (res,) = run(dec, [lp])
        ref = history_pruned_search(fst, lp, ArpaScorer(large), ArpaScorer(small), 1.0, history_beam)
        if ref is None:
            assert res.score == -math.inf or dec.last_info["not_final"] == [0]
            continue
        assert -res.score == pytest.approx(ref[0], abs=1e-3)
        assert [w.word for w in res.words] == ref[1]
        if history_beam == 1e6:
            assert res.words == plain.words and res.score == pytest.approx(plain.score, abs=1e-5)
        if backend == "compiled":
            assert dec.last_info["stats"]["arcs"] <= off.last_info["stats"]["arcs"]


def test_history_beam_drops_tokens_and_is_checked(tmp_path):
    """On a graph where several LM histories meet in one state, a tight history beam drops
    tokens (counted in the stats); negative values and plain `wfst` (one token per state) are
    one-line config errors."""
    rng = np.random.default_rng(11)
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, 1)
    # a word loop: every word from state 0 back to 0, one frame per word
    fst = {"num_states": 1, "start": 0, "final": [0.0], "arcs": [(0, i, i, 0.5, 0) for i in range(1, 5)]}
    lp = log_probs(rng, 8)
    cfg = WfstOtfConfig(**WIDE, lm=str(large), small_lm=str(small), history_beam=0.1)
    dec = WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
    run(dec, [lp])
    assert dec.last_info["stats"]["history_pruned"] > 0
    with pytest.raises(ConfigError, match="history_beam"):
        bad = WfstOtfConfig(**WIDE, lm=str(large), small_lm=str(small), history_beam=-1.0)
        WfstOtfDecoder(bad, graph=device_graph(fst), words=WORDS)
    with pytest.raises(ConfigError, match="history_beam"):
        WfstDecoder(WfstConfig(history_beam=2.0), graph=device_graph(fst), words=WORDS)


def reference_cap(state: np.ndarray, cost: np.ndarray, cap: int) -> np.ndarray:
    """`history_max` by sorting: per graph state, the cap cheapest finite costs kept (equal costs:
    the first in token order), the rest +inf."""
    out = cost.copy()
    for s in np.unique(state):
        idx = np.flatnonzero((state == s) & np.isfinite(cost))
        order = idx[np.argsort(cost[idx], kind="stable")]
        out[order[cap:]] = np.inf
    return out


@pytest.mark.parametrize("seed", range(6))
def test_cap_histories_keeps_the_cheapest_per_state(seed):
    """The compiled `history_max` step against sorting, with dead tokens (+inf) and ties."""
    rng = np.random.default_rng(seed)
    n, num_states = int(rng.integers(1, 400)), int(rng.integers(1, 30))
    state = rng.integers(0, num_states, n).astype(np.int32)
    cost = rng.integers(0, 8, n).astype(np.float32) + (0 if seed % 2 else rng.random(n).astype(np.float32))
    cost[rng.random(n) < 0.1] = np.inf
    for cap in (1, 2, 3, 7):
        count = np.full(num_states, -1, np.int32)
        got = cost.copy()
        dropped = cap_histories(state, got, n, count, cap)
        want = reference_cap(state, cost, cap)
        np.testing.assert_array_equal(got, want)
        assert dropped == int(np.isfinite(cost).sum() - np.isfinite(want).sum())
        assert (count == -1).all()


@pytest.mark.parametrize("seed", range(12))
def test_history_max_equals_the_torch_path_and_bounds_the_tokens(tmp_path, seed):
    """`history_max` on random graphs and LMs (a word loop, where LM histories meet): the compiled
    and the torch path give the same 1-best and cost at every cap; a cap above the histories
    there is the search without it; a cap of 1 drops tokens and expands fewer arcs."""
    rng = np.random.default_rng(700 + seed)
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, 1)
    fst = random_wfst(rng, int(rng.integers(3, 6)), 4, 6, eps_forward=True)
    fst["arcs"] += [(0, i, i, 0.5, 0) for i in range(1, 5)]
    lp = log_probs(rng, int(rng.integers(6, 10)))
    opts = {**WIDE, "lm": str(large), "small_lm": str(small)}
    results = {}
    for backend in ("compiled", "torch"):
        for cap in (0, 1, 2, 10**6):
            cfg = WfstOtfConfig(**opts, **backend_options(backend), history_max=cap)
            dec = WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
            (res,) = run(dec, [lp])
            results[backend, cap] = (res, dec.last_info["stats"])
    for cap in (0, 1, 2, 10**6):
        a, b = results["compiled", cap][0], results["torch", cap][0]
        assert [w.word for w in a.words] == [w.word for w in b.words]
        assert a.score == pytest.approx(b.score, abs=1e-3)
    plain, capped = results["compiled", 0], results["compiled", 1]
    assert results["compiled", 10**6][0].score == pytest.approx(plain[0].score, abs=1e-5)
    assert capped[1]["history_pruned"] > 0 and capped[1]["arcs"] < plain[1]["arcs"]


def test_history_max_is_checked():
    """Negative caps, and a cap for plain `wfst` (one token per state): one-line config errors."""
    fst = {"num_states": 1, "start": 0, "final": [0.0], "arcs": [(0, 1, 1, 0.5, 0)]}
    with pytest.raises(ConfigError, match="history_max"):
        WfstDecoder(WfstConfig(history_max=2), graph=device_graph(fst), words=WORDS)
    with pytest.raises(ConfigError, match="history_max"):
        WfstDecoder(WfstConfig(history_max=-1), graph=device_graph(fst), words=WORDS)


def compiled_tokens_vs_brute_force(tmp_path, rng, arcs, end: int) -> int:
    """Decode 4 random frames over the graph of `arcs` (start 0, final state `end`, the last) with
    random LMs, compiled and unpruned: the same cost and words as the exhaustive search. Returns
    the tokens the search made."""
    final = [math.inf] * (end + 1)
    final[end] = 0.5
    fst = {"num_states": end + 1, "start": 0, "final": final, "arcs": arcs}
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, 2)
    lp = log_probs(rng, 4)
    cfg = WfstOtfConfig(**WIDE, **backend_options("compiled"), lm=str(large), small_lm=str(small))
    dec = WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
    (res,) = run(dec, [lp])
    ref = brute_force(fst, lp, ArpaScorer(large), ArpaScorer(small), 1.0, {})
    assert -res.score == pytest.approx(ref[0], abs=1e-3)
    assert [w.word for w in res.words] == ref[1]
    return dec.last_info["stats"]["tokens"]


def test_fan_out_beyond_the_frame_map_equals_brute_force(tmp_path):
    """A start state with 1,200 arcs to distinct states: the first frame makes more new (state,
    LM state) pairs than its map holds at half load (the workspace's first map, 2 x
    INIT_CAPACITY keys, is kept for a frame that starts with one token), so `_emit` grows it
    mid-frame; later frames start with 1,200 tokens and a map sized for them. Same 1-best and
    cost as the exhaustive search (compiled)."""
    rng = np.random.default_rng(11)
    fan = 1200
    assert fan > INIT_CAPACITY and MAP_SLACK * 256 <= 2 * INIT_CAPACITY
    end = fan + 1
    arcs = [(end, 1, 0, 0.3, end)]
    for i in range(1, fan + 1):
        arcs.append((0, 1 + i % 4, 1 + i % 6, float(rng.uniform(0, 3)), i))
        arcs.append((i, 1 + (i + 1) % 4, 0, float(rng.uniform(0, 1)), i))
        arcs.append((i, 1 + (i + 2) % 4, 1 + (7 * i) % 6 if i % 3 else 0, float(rng.uniform(0, 3)), end))
    assert compiled_tokens_vs_brute_force(tmp_path, rng, arcs, end) >= 3 * fan


def test_frame_map_grown_after_tokens_are_mapped_equals_brute_force(tmp_path):
    """40 tokens after the first frame, each with 60 arcs to distinct states: in the second frame
    the map (sized for 40 tokens) fills up after some of its new tokens are mapped, so `_emit`
    stops before a token, the map grows and takes the mapped tokens again, and `_emit` goes on
    from that token (possibly several times). Same 1-best and cost as the exhaustive search."""
    rng = np.random.default_rng(12)
    first, second = 40, 60
    assert first * second > 4 * MAP_SLACK * first
    end = 1 + first + first * second
    arcs = [(end, 1, 0, 0.2, end)]
    for i in range(1, first + 1):
        arcs.append((0, 1 + i % 4, 1 + i % 6, float(rng.uniform(0, 3)), i))
        for j in range(second):
            d = 1 + first + (i - 1) * second + j
            arcs.append((i, 1 + (i + j) % 4, 1 + (i * j) % 6 if j % 2 else 0, float(rng.uniform(0, 3)), d))
    for d in range(1 + first, end):
        arcs.append((d, 1 + d % 4, 0, float(rng.uniform(0, 1)), end))
    assert compiled_tokens_vs_brute_force(tmp_path, rng, arcs, end) >= first * second


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_lm_equals_plain_wfst_on_random_graphs(tmp_path, backend):
    rng = np.random.default_rng(5)
    arpa = random_arpa(tmp_path / "lm.arpa", rng, list(WORDS.values()), 3)
    for _ in range(8):
        fst = random_wfst(rng, int(rng.integers(3, 9)), 4, 6)
        lps = [log_probs(rng, int(n)) for n in rng.integers(0, 9, size=3)]
        opts = {"beam": 6.0, "max_active": 10**9, "min_active": 0}
        wfst = {**opts, "backend": backend_options(backend)["backend"]}
        plain = run(WfstDecoder(WfstConfig(**wfst), graph=device_graph(fst), words=WORDS), lps)
        cfg = WfstOtfConfig(**opts, **backend_options(backend), lm=str(arpa), small_lm=str(arpa))
        otf = run(WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS), lps)
        for a, b in zip(plain, otf, strict=True):
            assert a.words == b.words and a.tokens == b.tokens
            assert a.score == pytest.approx(b.score, abs=1e-5)


# ---------------------------------------------------------------------- built graphs (b)
@pytest.fixture
def built(otf_graphs):
    """The session's small (unigram) and large (bigram) graphs over the fixture words (conftest)."""
    return otf_graphs


def nemo_output() -> ModelOutput:
    lp, lengths, _ = nemo_log_probs()
    return ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])


def test_large_lm_precondition_explicit_bigrams_beat_backoff(built):
    """In the tropical G of the large LM an explicit bigram must be cheaper than its backoff route,
    else that graph is not the ARPA and (b) could differ for that reason alone."""
    lm = ArpaScorer(built / "large.arpa")
    for gram, p in lm.prob.items():
        if len(gram) == 2:
            assert p >= lm.bow.get(gram[:1], 0.0) + lm.prob[gram[1:]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_graph_with_large_lm_equals_large_graph(built, backend):
    opts = {"beam": 30.0, "max_active": 10**6, "min_active": 0}
    wfst = {**opts, "backend": backend_options(backend)["backend"]}
    ref = WfstDecoder(WfstConfig(graph=str(built / "large"), **wfst)).decode(nemo_output())
    # small_lm defaults to the graph's recorded `arpa` input
    otf_opts = {**opts, **backend_options(backend)}
    otf = WfstOtfDecoder(WfstOtfConfig(graph=str(built / "small"), lm=str(built / "large.arpa"), **otf_opts))
    assert otf.diff.small.info["path"] == str((built / "small.arpa").resolve())
    res = otf.decode(nemo_output())
    assert sum(len(r.words) for r in ref) > 10
    for a, b in zip(ref, res, strict=True):
        assert [w.word for w in a.words] == [w.word for w in b.words]
        assert a.tokens == b.tokens
        # float32 costs: G's weights (arpa2fst, pushed by determinization) vs the LM tables
        assert a.score == pytest.approx(b.score, rel=1e-4)
        assert a.acoustic_score == pytest.approx(b.acoustic_score, rel=1e-4)


def test_large_graph_reference_is_kaldi_faster_decoder(built):
    """The (b) reference is itself checked: kaldi-decoder on the large TLG gives the same words."""
    import kaldifst
    from helpers.wfst_ref import kaldi_best_path

    lp, lengths, _ = nemo_log_probs()
    tlg = kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(built / "large" / "TLG.fst")))
    otf = WfstOtfDecoder(
        WfstOtfConfig(graph=str(built / "small"), lm=str(built / "large.arpa"), beam=30.0, backend="compiled")
    )
    words = {i: w for i, w in otf.words.items()}
    for b, res in enumerate(otf.decode(nemo_output())):
        kaldi = kaldi_best_path(tlg, lp[b, : lengths[b]], beam=30.0)
        assert [w.word for w in res.words] == [words[o] for o in kaldi[3] if o > 0]
        assert -res.score == pytest.approx(kaldi[0], abs=2e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_lm_equals_plain_wfst_on_a_built_graph(built, backend):
    opts = {"beam": 14.0, "max_active": 3000}
    wfst = {**opts, "backend": backend_options(backend)["backend"]}
    plain = WfstDecoder(WfstConfig(graph=str(built / "large"), **wfst)).decode(nemo_output())
    large = str(built / "large.arpa")
    cfg = WfstOtfConfig(
        graph=str(built / "large"), lm=large, small_lm=large, **opts, **backend_options(backend)
    )
    otf = WfstOtfDecoder(cfg)
    for a, b in zip(plain, otf.decode(nemo_output()), strict=True):
        assert a.words == b.words and a.tokens == b.tokens
        assert a.score == pytest.approx(b.score, abs=1e-4)
    assert otf.last_info["stats"]["backend"] == wfst["backend"]


# ---------------------------------------------------------------------- config
def test_registry_config_and_errors(built, tmp_path):
    assert DECODERS["wfst-otf"] is WfstOtfDecoder
    cfg = decoder_config_from_dict(
        {"type": "wfst-otf", "graph": str(built / "small"), "lm": "x.arpa", "lm_scale": 0.5, "beam": 9}
    )
    assert isinstance(cfg, WfstOtfConfig) and cfg.lm_scale == 0.5 and cfg.beam == 9
    small = str(built / "small")
    with pytest.raises(ConfigError, match="decoder.lm"):
        WfstOtfDecoder(WfstOtfConfig(graph=small))
    with pytest.raises(ConfigError, match="missing.arpa: file not found"):
        WfstOtfDecoder(WfstOtfConfig(graph=small, lm=str(tmp_path / "missing.arpa")))
    with pytest.raises(ConfigError, match="lattices with the compiled backend"):  # (test_wfst_otf_lattice)
        WfstOtfDecoder(WfstOtfConfig(graph=small, lm=str(built / "large.arpa"), nbest=3, backend="torch"))
    (tmp_path / "bad.arpa").write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 a\n")
    with pytest.raises(ConfigError, match="decoder.lm: .*bad.arpa"):
        WfstOtfDecoder(WfstOtfConfig(graph=small, lm=str(tmp_path / "bad.arpa")))
    # a large LM without the graph's words (and no <unk>): named with the file
    (tmp_path / "other.arpa").write_text(
        "\\data\\\nngram 1=3\n\n\\1-grams:\n-99 <s>\n-1 zzz\n-1 </s>\n\n\\end\\\n"
    )
    with pytest.raises(ConfigError, match="other.arpa: .* graph words have no probability"):
        WfstOtfDecoder(WfstOtfConfig(graph=small, lm=str(tmp_path / "other.arpa")))
    # a damaged pocketsphinx binary LM (trie header, then too few bytes): one line naming it
    (tmp_path / "cut.lm.bin").write_bytes(b"Trie Language Model\x03" + bytes(40))
    with pytest.raises(ConfigError, match=r"decoder.lm: .*cut.lm.bin: truncated") as err:
        WfstOtfDecoder(WfstOtfConfig(graph=small, lm=str(tmp_path / "cut.lm.bin")))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="embedded:lm/nope.arpa: no such file"):
        WfstOtfDecoder(WfstOtfConfig(graph=small, lm="embedded:lm/nope.arpa"))
    otf = WfstOtfDecoder(WfstOtfConfig(graph=small, lm=str(built / "large.arpa")))
    with pytest.raises(ConfigError, match="streams"):
        otf.init_streams(1)


def test_a_small_lm_its_graph_does_not_read_exactly_is_reported(tmp_path, caplog):
    """One warning line when the small LM has n-grams below their backoff route (the graph's G then
    reads it more cheaply than the LM difference subtracts); none for `exact_bigram`'s LM."""
    from asrdecode.lm.backoff import BackoffReadings, exact_bigram

    rng = np.random.default_rng(0)
    fst = random_wfst(rng, 5, 4, 6)
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, 3)
    below = BatchedNgramLM.from_arpa(small, vocab=names, token_ids="words").ngrams_below_backoff_route()
    assert below > 0
    exact = exact_bigram(BackoffReadings.read(small))[0].write(tmp_path / "exact.arpa")
    for path, expected in ((small, [f"{below} of its n-grams"]), (exact, [])):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="asrdecode.decoders"):
            cfg = WfstOtfConfig(**WIDE, lm=str(large), small_lm=str(path))
            WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
        found = [r.getMessage() for r in caplog.records if "backoff route" in r.getMessage()]
        assert len(found) == len(expected) and all(e in m for e, m in zip(expected, found, strict=True))
