"""`wfst` with a huge beam equals exhaustive Viterbi (plain-Python DP) on tiny random WFSTs with
epsilon arcs, and OpenFst's shortest path of (frame lattice o graph)."""

import math

import numpy as np
import pytest
import torch
from helpers.wfst_graphs import V, device_graph, epsilon_cycle_fst, kaldi_get_cutoff, log_probs, run
from helpers.wfst_ref import random_wfst, single_thread, to_kaldifst, viterbi_reference  # noqa: F401

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0, "backend": "torch"}  # compiled: test_wfst_compiled


def decoder(fst: dict, **kw) -> WfstDecoder:
    words = {i: f"w{i}" for i in range(1, 10)}
    return WfstDecoder(WfstConfig(**{**WIDE, **kw}), graph=device_graph(fst), words=words)


def shortest_path_reference(fst: dict, lp: np.ndarray):
    """OpenFst: shortest path of (acceptor with one arc per frame and column) o graph."""
    import kaldifst

    acc = kaldifst.StdVectorFst()
    for _ in range(len(lp) + 1):
        acc.add_state()
    acc.start = 0
    acc.set_final(len(lp), 0.0)
    for t in range(len(lp)):
        for c in range(V):
            acc.add_arc(t, kaldifst.StdArc(c + 1, c + 1, float(-lp[t, c]), t + 1))
    g = to_kaldifst(fst)
    kaldifst.arcsort(g, sort_type="ilabel")
    composed = kaldifst.compose(acc, g)
    if composed.num_states == 0:
        return None
    best = kaldifst.shortest_path(composed)
    if best.num_states == 0:
        return None
    ok, _, olabels, w = kaldifst.get_linear_symbol_sequence(best)
    return w.value, list(olabels)


@pytest.mark.parametrize("seed", range(40))
def test_random_wfst_equals_exhaustive_viterbi(seed):
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, int(rng.integers(3, 9)), V, 6)
    lp = log_probs(rng, int(rng.integers(1, 9)))
    ref = viterbi_reference(fst, lp)
    dec = decoder(fst)
    (res,) = run(dec, [lp])
    if ref is None:
        # no final state reachable: Kaldi's fallback to the best token, flagged
        assert dec.last_info["not_final"] == [0] or res.score == -math.inf
        return
    assert dec.last_info["not_final"] == []
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    assert [w.word for w in res.words] == [f"w{o}" for o in ref[1]]
    # cost split: acoustic = -sum of the path's log-probs, graph = weights + final
    assert -(res.acoustic_score + res.lm_score) == pytest.approx(ref[0], abs=1e-4)


@pytest.mark.parametrize("seed", range(10))
def test_random_wfst_equals_openfst_shortest_path(seed):
    rng = np.random.default_rng(1000 + seed)
    fst = random_wfst(rng, int(rng.integers(4, 9)), V, 6)
    lp = log_probs(rng, int(rng.integers(2, 7)))
    ref = shortest_path_reference(fst, lp)
    (res,) = run(decoder(fst), [lp])
    if ref is None:
        return
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    assert [w.word for w in res.words] == [f"w{o}" for o in ref[1]]


def test_acoustic_scale_and_batch_of_random_lengths():
    rng = np.random.default_rng(7)
    fst = random_wfst(rng, 7, V, 6)
    lps = [log_probs(rng, n) for n in (5, 1, 8, 3, 0, 6)]
    res = run(decoder(fst, acoustic_scale=0.5), lps)
    for lp, r in zip(lps, res, strict=True):
        ref = viterbi_reference(fst, lp, acoustic_scale=0.5)
        if ref is None:
            continue
        assert -r.score == pytest.approx(ref[0], abs=1e-4)
        assert [w.word for w in r.words] == [f"w{o}" for o in ref[1]]


def test_epsilon_cycle_terminates():
    """An epsilon cycle (positive weight) with outputs: closure stops, best path exact."""
    fst = epsilon_cycle_fst()
    rng = np.random.default_rng(3)
    lp = log_probs(rng, 6)
    ref = viterbi_reference(fst, lp)
    (res,) = run(decoder(fst), [lp])
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    assert [w.word for w in res.words] == [f"w{o}" for o in ref[1]]


@pytest.mark.parametrize("seed", range(6))
def test_cutoff_per_utterance_matches_kaldi_rule(seed):
    from asrdecode.decoders.wfst.core import SearchOptions, TokenBuffer, TokenPassing, Tokens

    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 30, size=5)
    utt = torch.repeat_interleave(torch.arange(5), torch.from_numpy(counts))
    cost = torch.from_numpy(rng.uniform(0, 20, size=int(counts.sum())).astype(np.float32))
    tok = Tokens(utt, torch.zeros_like(utt), cost, torch.zeros_like(utt))
    fst = random_wfst(rng, 3, V, 2)
    state = torch.from_numpy(rng.permutation(int(counts.sum())))  # distinct keys per utterance
    for beam, max_active, min_active in [(5.0, 10, 3), (30.0, 7, 0), (2.0, 100, 12), (8.0, 2**31 - 1, 0)]:
        opts = SearchOptions(beam=beam, max_active=max_active, min_active=min_active, beam_delta=0.5)
        search = TokenPassing(device_graph(fst), opts)
        cut, adaptive = search.cutoff(tok, 5)
        # the same through a key-sorted buffer with empty slots, as the search calls it
        search.num_states = int(counts.sum())
        buf = TokenBuffer.from_tokens(Tokens(utt, state, cost, utt), 5, search.num_states, 256)
        assert buf.per_utt == int(counts.max()) and buf.capacity > len(utt)
        bcut, badaptive = search._cutoff(buf.utt, buf.cost, 5, buf.per_utt)
        assert torch.equal(bcut, cut) and torch.equal(badaptive, adaptive)
        for b in range(5):
            ref = kaldi_get_cutoff(cost[utt == b].tolist(), beam, max_active, min_active, 0.5)
            assert cut[b].item() == pytest.approx(ref[0], abs=1e-4)
            assert adaptive[b].item() == pytest.approx(ref[1], abs=1e-4)


def test_blank_penalty_equals_shifted_blank_logprob():
    rng = np.random.default_rng(14)  # a case where the penalty changes the 1-best
    fst = random_wfst(rng, 6, V, 6)
    lp = log_probs(rng, 6)
    shifted = lp.copy()
    shifted[:, V - 1] -= 1.5  # blank = last column
    ref = viterbi_reference(fst, shifted)
    assert ref is not None and ref[1] != viterbi_reference(fst, lp)[1]
    dec = decoder(fst, blank_penalty=1.5)
    out = ModelOutput(torch.from_numpy(lp[None]), torch.tensor([6]), 0.04, V - 1, [])
    (res,) = dec.decode(out)
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    assert [w.word for w in res.words] == [f"w{o}" for o in ref[1]]


@pytest.mark.parametrize("backend", ["torch", "compiled"])
def test_word_insertion_penalty_equals_penalised_word_arcs(backend):
    """`word_insertion_penalty` p = exhaustive Viterbi over the graph with p added to every arc
    that outputs a word; on this case the penalty changes the 1-best to fewer words."""
    p = 2.0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        fst = random_wfst(rng, 6, V, 6)
        lp = log_probs(rng, 6)
        penalised = {**fst, "arcs": [(s, i, o, w + (p if o else 0.0), n) for s, i, o, w, n in fst["arcs"]]}
        ref, plain = viterbi_reference(penalised, lp), viterbi_reference(fst, lp)
        if ref is not None and plain is not None and len(ref[1]) < len(plain[1]):
            break
    (res,) = run(decoder(fst, word_insertion_penalty=p, backend=backend), [lp])
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    assert [w.word for w in res.words] == [f"w{o}" for o in ref[1]]
