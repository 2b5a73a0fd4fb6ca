"""`decoder.backend: compiled` (numba token passing) against the references and the torch path.

* tiny random WFSTs with epsilons (and epsilon cycles): exhaustive Viterbi (wfst_ref), and the
  torch backend: same words, same costs (float32 bit for bit: both add in the same order);
* built TLGs (NeMo BPE fixture, toy lexicon) with real and synthetic log-probs: kaldi-decoder's
  FasterDecoder, on the same cases as test_wfst_kaldi.py (whose `compare` runs the torch backend);
* batch == single utterances, 1 thread == 2 threads, word boosts, backend selection, the cutoff;
* lattices and n-best: the same state lattice as the torch path (random WFSTs, built TLG);
* streaming: chunked == offline, partial hypotheses == the torch path's.

The first test in a fresh checkout compiles the numba code (~15 s, cached in __pycache__).
"""

import math
import threading

import numpy as np
import pytest
import torch
from helpers.wfst_graphs import (
    NO_MAX,
    V,
    compare,
    device_graph,
    epsilon_cycle_fst,
    kaldi_get_cutoff,
    log_probs,
    synthetic,
)
from helpers.wfst_ref import nemo_log_probs, random_wfst, single_thread, viterbi_reference  # noqa: F401

from asrdecode.decoders import decoder_config_from_dict
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.compiled import (
    STAT_RECORDS,
    CompiledSearch,
    get_cutoff,
    search_advance,
    search_settings,
)
from asrdecode.decoders.wfst.core import PruningOptions
from asrdecode.decoders.wfst.paths import acoustic_costs, utterance_costs
from asrdecode.errors import ConfigError
from asrdecode.models.base import ModelOutput
from asrdecode.numba_status import disk_cache_index

pytestmark = pytest.mark.usefixtures("single_thread")

WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0}
WORDS = {i: f"w{i}" for i in range(1, 10)}


def batch_output(lps: list[np.ndarray], blank: int = -1) -> ModelOutput:
    T = max(len(x) for x in lps)
    x = np.zeros((len(lps), T, lps[0].shape[1]), dtype=np.float32)
    for b, lp in enumerate(lps):
        x[b, : len(lp)] = lp
    return ModelOutput(torch.from_numpy(x), torch.tensor([len(lp) for lp in lps]), 0.04, blank, [])


def decode(graph, lps, backend: str, words=WORDS, blank: int = -1, **kw):
    cfg = WfstConfig(**{**WIDE, **kw, "backend": backend})
    dec = WfstDecoder(cfg, graph=graph, words=words)
    res = dec.decode(batch_output(lps, blank))
    assert dec.last_info["stats"]["backend"] == backend
    return dec, res


def same(a, b) -> None:
    """Identical results of the two backends (words with times, tokens, scores; word confidences
    where both have lattices)."""
    assert [(w.word, w.start, w.end) for w in a.words] == [(w.word, w.start, w.end) for w in b.words]
    if a.lattice is not None and b.lattice is not None:
        assert [w.confidence for w in a.words] == pytest.approx([w.confidence for w in b.words], abs=1e-6)
    assert a.tokens == b.tokens and a.token_frames == b.token_frames
    assert a.score == pytest.approx(b.score, abs=1e-5)
    if math.isfinite(a.score):
        assert a.acoustic_score == pytest.approx(b.acoustic_score, abs=1e-4)
        assert a.lm_score == pytest.approx(b.lm_score, abs=1e-4)


@pytest.mark.parametrize("seed", range(40))
def test_random_wfst_equals_viterbi_and_torch(seed):
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, int(rng.integers(3, 9)), V, 6)
    lp = log_probs(rng, int(rng.integers(1, 9)))
    ref = viterbi_reference(fst, lp)
    g = device_graph(fst)
    dec, (res,) = decode(g, [lp], "compiled")
    _, (tor,) = decode(g, [lp], "torch")
    same(res, tor)
    if ref is None:
        assert dec.last_info["not_final"] == [0] or res.score == -math.inf
        return
    assert dec.last_info["not_final"] == []
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    assert [w.word for w in res.words] == [f"w{o}" for o in ref[1]]
    assert -(res.acoustic_score + res.lm_score) == pytest.approx(ref[0], abs=1e-4)


def test_epsilon_cycle_terminates():
    fst = epsilon_cycle_fst()
    lp = log_probs(np.random.default_rng(3), 6)
    ref = viterbi_reference(fst, lp)
    _, (res,) = decode(device_graph(fst), [lp], "compiled")
    assert -res.score == pytest.approx(ref[0], abs=1e-4)
    assert [w.word for w in res.words] == [f"w{o}" for o in ref[1]]


def test_a_token_above_the_final_bound_is_revived_by_the_closure():
    """Frame 1: the best token's (A) arc costs 10 and is entered first (the running bound starts
    at 10 + beam), then B's arc (1) sets the final bound 6: A's new token dies where `_emit` put
    it. B's epsilon arc reaches the same state at 1.5, which must revive it for the only cheap
    path: the exhaustive search's words and cost, without lattices (tokens left in place) and with
    them (tokens compacted), and the torch path's."""
    fst = {
        "num_states": 6,
        "start": 0,
        "final": [math.inf] * 5 + [0.0],
        "arcs": [
            (0, 1, 0, 0.0, 1), (0, 2, 0, 0.0, 2), (1, 3, 0, 0.0, 3), (2, 4, 0, 0.0, 4),
            (4, 0, 1, 0.5, 3), (3, 1, 2, 0.0, 5),
        ],
    }  # fmt: skip
    lp = -np.array([[0, 1, 50, 50], [50, 50, 10, 0], [0, 50, 50, 50]], np.float32)
    ref = viterbi_reference(fst, lp)
    assert ref[0] == pytest.approx(1.5) and list(ref[1]) == [1, 2]
    g = device_graph(fst)
    for lattice in (False, True):
        dec, (res,) = decode(g, [lp], "compiled", beam=5.0, lattice=lattice)
        assert dec.last_info["stats"]["epsilon_limit_hit"] == 0
        assert -res.score == pytest.approx(1.5)
        assert [w.word for w in res.words] == ["w1", "w2"]
    _, (tor,) = decode(g, [lp], "torch", beam=5.0)
    same(res, tor)


def test_mixed_lengths_scale_and_blank_penalty_batch_equals_single():
    """acoustic_scale and blank_penalty as the torch path; lengths 0..8 in one batch; 2 threads."""
    rng = np.random.default_rng(7)
    fst = random_wfst(rng, 7, V, 6)
    g = device_graph(fst)
    lps = [log_probs(rng, n) for n in (5, 1, 8, 3, 0, 6)]
    kw = {"acoustic_scale": 0.5, "blank_penalty": 0.7}
    _, res = decode(g, lps, "compiled", blank=V - 1, threads=2, **kw)
    _, tor = decode(g, lps, "torch", blank=V - 1, **kw)
    for b, lp in enumerate(lps):
        same(res[b], tor[b])
        if len(lp):
            _, (one,) = decode(g, [lp], "compiled", blank=V - 1, threads=1, **kw)
            assert one == res[b]
        shifted = lp.copy()
        shifted[:, V - 1] -= 0.7
        ref = viterbi_reference(fst, shifted, acoustic_scale=0.5)
        if ref is not None:
            assert -res[b].score == pytest.approx(ref[0], abs=1e-4)
            assert [w.word for w in res[b].words] == [f"w{o}" for o in ref[1]]


@pytest.mark.parametrize("threads", [1, 2])
def test_submit_batch_prepares_and_finishes_each_utterance_in_its_worker(threads):
    """`CompiledRunner.submit_batch`: `prepare` makes each utterance's costs and `finish(result, index)`
    runs once per utterance after its search (the decoders build word lattices there); results
    come back in input order whatever the thread count."""
    rng = np.random.default_rng(5)
    search = CompiledSearch(device_graph(random_wfst(rng, 6, V, 5)), threads=threads)
    settings = search_settings(PruningOptions(beam=16.0, max_active=NO_MAX, min_active=0), 1)
    lps = [log_probs(rng, n) for n in (4, 9, 1, 6)]
    seen: dict[int, object] = {}
    got = search.submit(
        [torch.from_numpy(lp) for lp in lps],
        [np.zeros(0, np.float32)] * len(lps),
        settings,
        prepare=lambda t: (-t).numpy(),
        finish=lambda path, i: seen.setdefault(i, path),
    ).result()
    want = [search.decode_one(-lp, np.zeros(0, np.float32), settings) for lp in lps]
    assert sorted(seen) == [0, 1, 2, 3] and all(seen[i] is got[i] for i in seen)
    for a, b in zip(got, want, strict=True):
        assert a.total == b.total and np.array_equal(a.arcs, b.arcs)


def test_batches_queue_behind_each_other_and_cancel_drops_the_unstarted():
    """`CompiledRunner.submit_batch` returns at once: a second batch queues behind the first on the
    same workers (a worker done with the first takes the second's utterances before the first's
    results are collected), each batch's results in its own input order; `cancel` drops the
    utterances no worker has started."""
    rng = np.random.default_rng(6)
    search = CompiledSearch(device_graph(random_wfst(rng, 6, V, 5)), threads=2)
    settings = search_settings(PruningOptions(beam=16.0, max_active=NO_MAX, min_active=0), 1)
    none = np.zeros(0, np.float32)
    first = [log_probs(rng, n) for n in (12, 3)]
    second = [log_probs(rng, n) for n in (5, 8, 2)]
    release = threading.Event()

    def held(lp: np.ndarray) -> np.ndarray:  # the first batch's longest waits for `release`
        if lp is first[0]:
            assert release.wait(30)
        return -lp

    a = search.submit(first, [none] * 2, settings, prepare=held)
    b = search.submit(second, [none] * 3, settings, prepare=lambda lp: -lp)
    got_b = b.result()  # on the other worker, while the first batch's longest is held
    assert not a.futures[0].done()
    release.set()
    got_a = a.result()
    for got, lps in ((got_a, first), (got_b, second)):
        for p, lp in zip(got, lps, strict=True):
            want = search.decode_one(-lp, none, settings)
            assert p.total == want.total and np.array_equal(p.arcs, want.arcs)
    gate, running = threading.Event(), threading.Semaphore(0)

    def gated(lp: np.ndarray) -> np.ndarray:
        running.release()
        assert gate.wait(30)
        return -lp

    c = search.submit(second + first, [none] * 5, settings, prepare=gated)
    assert running.acquire(timeout=30) and running.acquire(timeout=30)  # one on each worker
    c.cancel()  # the other three never start
    gate.set()
    assert [f.cancelled() for f in c.futures] == [True, False, True, False, True]  # longest first
    assert all(f.result().found for f in c.futures if not f.cancelled())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_utterance_costs_equal_the_costs_of_the_whole_batch(dtype):
    """The compiled searches convert each utterance's valid frames in their worker threads: the
    same float32 numbers as converting the whole padded batch (scale and blank penalty), lengths
    past the batch's frames clipped, padding never read."""
    rng = np.random.default_rng(3)
    lp = torch.from_numpy(rng.normal(-5, 3, (3, 9, V)).astype(np.float32)).to(dtype)
    lp[1, 4:] = float("nan")  # padding
    lengths = [9, 4, 12]
    rows, costs = utterance_costs(ModelOutput(lp, torch.tensor(lengths), 0.04, V - 1, []), V - 1, 0.3, 0.7)
    whole = acoustic_costs(lp, V - 1, 0.3, 0.7).numpy()
    assert [len(r) for r in rows] == [9, 4, 9]
    for b, r in enumerate(rows):
        got = costs(r)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, whole[b, : len(r)])
        assert not np.isnan(got).any()


@pytest.mark.parametrize("topology", ["compact", "normal"])
@pytest.mark.parametrize("beam,max_active,min_active", [(16.0, NO_MAX, 0), (8.0, 10000, 20), (10.0, 50, 20)])
def test_nemo_logprobs_match_kaldi(nemo_graphs, topology, beam, max_active, min_active):  # noqa: F811
    lp, lengths, _ = nemo_log_probs()
    compare(nemo_graphs[topology], lp, lengths, beam, max_active, min_active, backend="compiled")


@pytest.mark.parametrize("topology", ["compact", "normal"])
@pytest.mark.parametrize("beam,max_active,min_active", [(12.0, NO_MAX, 0), (14.0, 15, 10)])
def test_synthetic_logprobs_match_kaldi(nemo_graphs, topology, beam, max_active, min_active):  # noqa: F811
    lp = synthetic(0, 4, 60, 129, 128)
    compare(nemo_graphs[topology], lp, np.array([60, 50, 37, 60]), beam, max_active, min_active, "compiled")


@pytest.mark.parametrize("topology", ["compact", "normal"])
def test_toy_tlg_matches_kaldi(toy_graph_dirs, topology):  # noqa: F811
    for seed in range(4):
        lp = synthetic(seed, 3, 25, 4, 3)
        compare(toy_graph_dirs[topology], lp, np.array([25, 17, 9]), 16.0, 10000, 20, "compiled")


@pytest.mark.parametrize("beam,max_active,min_active", [(12.0, 10000, 200), (10.0, 50, 20), (6.0, 30, 0)])
def test_nemo_tlg_equals_torch_with_boosts_and_threads(nemo_graphs, beam, max_active, min_active):  # noqa: F811
    """Binding max_active, per-utterance boosts: both backends give the same 1-best; the batch on
    two threads equals each utterance decoded alone."""
    lp, lengths, _ = nemo_log_probs()
    graph_dir = nemo_graphs["compact"]
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    opts = {"graph": str(graph_dir), "beam": beam, "max_active": max_active, "min_active": min_active}
    torch_dec = WfstDecoder(WfstConfig(**opts, backend="torch"))
    comp = WfstDecoder(WfstConfig(**opts, backend="compiled", threads=2))
    words = sorted(comp.word_ids)
    out.extra["boost"] = [
        {words[(7 * b) % len(words)]: 3.0, words[b % len(words)]: 1.5} for b in range(len(lp))
    ]
    out.extra["boost"][1] = None
    tor, res = torch_dec.decode(out), comp.decode(out)
    assert comp.last_info["not_final"] == torch_dec.last_info["not_final"]
    for b in range(len(lp)):
        same(res[b], tor[b])
        one = ModelOutput(
            torch.from_numpy(lp[b : b + 1, : lengths[b]]), torch.tensor([lengths[b]]), 0.08, 128, []
        )
        one.extra["boost"] = [out.extra["boost"][b]]
        assert comp.decode(one)[0] == res[b]


def test_backend_selection_and_config(nemo_graphs):  # noqa: F811
    cfg = decoder_config_from_dict({"type": "wfst", "graph": "g", "backend": "compiled", "threads": 2})
    assert cfg.backend == "compiled" and cfg.threads == 2
    d = str(nemo_graphs["compact"])
    with pytest.raises(ConfigError, match="decoder.backend"):
        WfstDecoder(WfstConfig(graph=d, backend="gpu"))
    auto = WfstDecoder(WfstConfig(graph=d))
    assert auto.backend_for(torch.device("cpu")) == "compiled"
    assert auto.backend_for(torch.device("cuda")) == "torch"
    # n-best / lattices are compiled too
    lat = WfstDecoder(WfstConfig(graph=d, backend="compiled", nbest=3, beam=8.0, lattice_beam=4.0))
    assert lat.backend_for(torch.device("cpu")) == "compiled"
    lp, lengths, _ = nemo_log_probs()
    res = lat.decode(ModelOutput(torch.from_numpy(lp[:1]), torch.from_numpy(lengths[:1]), 0.08, 128, []))
    assert lat.last_info["stats"]["backend"] == "compiled" and res[0].nbest


@pytest.mark.parametrize("seed", range(4))
def test_cutoff_matches_kaldi_rule(seed):
    """`get_cutoff` against Kaldi's rule written out; the large cases (the selection runs in the
    bucket of the beam that holds the max_active-th cost) include repeated costs, costs at a
    bucket's edge and dead tokens (+inf)."""
    rng = np.random.default_rng(seed)
    for n in (1, 5, 29, 300, 5000):
        cost = rng.uniform(0, 20, size=n).astype(np.float32)
        if n == 5000:
            cost[: n // 4] = np.round(cost[: n // 4], 1)  # ties
            cost[n // 4 : n // 2] = np.float32(5.0) * rng.integers(0, 4, size=n // 4)  # edges at beam 5
            cost[-10:] = np.inf
        scratch = np.empty(n, np.float32)
        settings = [(5.0, 10, 3), (30.0, 7, 0), (2.0, 100, 12), (8.0, NO_MAX, 0)]
        if n == 5000:
            settings += [(5.0, 1000, 0), (5.0, 1249, 0), (20.0, 2000, 200), (1e9, 3000, 0)]
        for beam, max_active, min_active in settings:
            cut, adaptive = get_cutoff(
                cost, n, scratch, np.float32(beam), max_active, min_active, np.float32(0.5)
            )
            ref = kaldi_get_cutoff(cost.tolist(), beam, max_active, min_active, 0.5)
            assert cut == pytest.approx(ref[0], abs=1e-4)
            assert adaptive == pytest.approx(ref[1], abs=1e-4)
            if ref[0] < np.float32(beam) + cost.min():  # max_active decided: one of the costs
                assert cut in cost


def test_compiled_code_is_cached_on_disk(nemo_graphs):  # noqa: F811
    dec = WfstDecoder(WfstConfig(graph=str(nemo_graphs["compact"]), backend="compiled", threads=1))
    dec.compiled_search().ensure_compiled()
    assert disk_cache_index(search_advance).is_file()


def test_thousands_of_active_tokens_equal_torch():
    """A wide graph (start --eps--> 3000 states, random emitting and epsilon arcs among them) keeps
    thousands of tokens per frame: the growable token, queue and record arrays of the compiled
    search resize (regression: a buffer that is not swapped with the others must grow too)."""
    rng = np.random.default_rng(5)
    n = 3000
    arcs = [(0, 0, 0, float(rng.uniform(0, 2)), s) for s in range(1, n)]
    for s in range(1, n):
        for _ in range(2):
            arcs.append(
                (
                    s,
                    int(rng.integers(1, V + 1)),
                    int(rng.integers(0, 7)),
                    float(rng.uniform(0, 3)),
                    int(rng.integers(1, n)),
                )
            )
        if rng.random() < 0.3:
            arcs.append((s, 0, int(rng.integers(0, 7)), float(rng.uniform(0, 1)), int(rng.integers(1, n))))
    final = [math.inf] * n
    for s in rng.choice(np.arange(1, n), size=50, replace=False):
        final[int(s)] = float(rng.uniform(0, 2))
    g = device_graph({"num_states": n, "start": 0, "final": final, "arcs": arcs})
    lps = [log_probs(rng, 6), log_probs(rng, 4)]
    dec, res = decode(g, lps, "compiled", threads=2)
    _, tor = decode(g, lps, "torch")
    for a, b in zip(res, tor, strict=True):
        same(a, b)
    assert dec.last_info["stats"]["arcs"] > 20000
    # with max_active binding both backends prune the same way
    kw = {"beam": 8.0, "max_active": 500, "min_active": 50}
    _, res = decode(g, lps, "compiled", **kw)
    _, tor = decode(g, lps, "torch", **kw)
    for a, b in zip(res, tor, strict=True):
        same(a, b)


def same_lattice(a, b) -> None:
    """The same word lattice (Kaldi text, canonical numbering) and the same pruned state-level
    lattice (nodes numbered by frame, then state; arcs sorted)."""
    assert (a is None) == (b is None)
    if a is None:
        return
    assert a.to_kaldi_text("u") == b.to_kaldi_text("u")
    sa, sb = a.state_lattice, b.state_lattice
    assert sa.num_nodes == sb.num_nodes and sa.num_frames == sb.num_frames
    for name in ("src", "dst", "arc", "ilabel", "olabel", "node_frame", "node_state"):
        assert np.array_equal(getattr(sa, name), getattr(sb, name)), name
    assert np.allclose(sa.graph, sb.graph, atol=1e-4) and np.allclose(sa.acoustic, sb.acoustic, atol=1e-4)
    assert sorted(sa.final) == sorted(sb.final)
    for s in sa.final:
        assert sa.final[s] == pytest.approx(sb.final[s], abs=1e-4)


@pytest.mark.parametrize("seed", range(20))
def test_random_wfst_lattice_and_nbest_equal_torch(seed):
    """Compiled lattices keep the same arcs and nodes as the torch path: same state lattice, same
    n-best; its 1-best is the decoder's 1-best."""
    rng = np.random.default_rng(900 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), V, 5)
    lp = log_probs(rng, int(rng.integers(1, 7)))
    g = device_graph(fst)
    kw = {"lattice_beam": 5.0, "nbest": 4, "lattice": True}
    _, (res,) = decode(g, [lp], "compiled", **kw)
    _, (tor,) = decode(g, [lp], "torch", **kw)
    same(res, tor)
    same_lattice(res.lattice, tor.lattice)
    assert [w for w, _ in res.nbest] == [w for w, _ in tor.nbest]
    assert [c for _, c in res.nbest] == pytest.approx([c for _, c in tor.nbest], abs=1e-4)
    if res.nbest:
        assert res.nbest[0][0] == [w.word for w in res.words]
        assert res.nbest[0][1] == pytest.approx(res.score, abs=1e-3)


@pytest.mark.parametrize("beam,max_active,lattice_beam", [(10.0, 10000, 4.0), (12.0, 60, 6.0)])
def test_nemo_tlg_lattices_equal_torch(nemo_graphs, beam, max_active, lattice_beam):  # noqa: F811
    """Real log-probs on a built TLG, binding max_active, boosts, two threads: the compiled
    lattices equal the torch path's, and the lattice 1-best is the decoder 1-best."""
    lp, lengths, _ = nemo_log_probs()
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    opts = {
        "graph": str(nemo_graphs["compact"]),
        "beam": beam,
        "max_active": max_active,
        "min_active": 20,
        "lattice_beam": lattice_beam,
        "nbest": 3,
        "lattice": True,
    }
    torch_dec = WfstDecoder(WfstConfig(**opts, backend="torch"))
    comp = WfstDecoder(WfstConfig(**opts, backend="compiled", threads=2))
    words = sorted(comp.word_ids)
    out.extra["boost"] = [{words[(5 * b) % len(words)]: 2.0} for b in range(len(lp))]
    tor, res = torch_dec.decode(out), comp.decode(out)
    assert comp.last_info["lattice_density"] == pytest.approx(torch_dec.last_info["lattice_density"])
    for a, b in zip(res, tor, strict=True):
        same(a, b)
        same_lattice(a.lattice, b.lattice)
        assert a.nbest[0][0] == [w.word for w in a.words]
        assert [w for w, _ in a.nbest] == [w for w, _ in b.nbest]


def stream_chunks(dec: WfstDecoder, lp, lengths, utts, chunk: int, boost=None) -> tuple[list, list]:
    """Decode utterances `utts` as streams in chunks of `chunk` frames: (partials per chunk, finals)."""
    ids = dec.init_streams(len(utts), boost=boost)
    pos = dict.fromkeys(ids, 0)
    length = dict(zip(ids, [int(lengths[u]) for u in utts], strict=True))
    utt = dict(zip(ids, utts, strict=True))
    partials = []
    while any(pos[s] < length[s] for s in ids):
        active = [s for s in ids if pos[s] < length[s]]
        x = np.zeros((len(active), chunk, lp.shape[2]), np.float32)
        n = []
        for i, s in enumerate(active):
            piece = lp[utt[s], pos[s] : min(pos[s] + chunk, length[s])]
            x[i, : len(piece)] = piece
            n.append(len(piece))
            pos[s] += len(piece)
        partials.append(dec.decode_chunk(active, torch.from_numpy(x), torch.tensor(n), frame_shift=0.08))
    return partials, dec.finalize(ids, frame_shift=0.08)


@pytest.mark.parametrize("chunk", [1, 5, 16])
def test_streaming_chunks_equal_offline_and_torch_partials(nemo_graphs, chunk):  # noqa: F811
    """Compiled streams (own workspace each, boosts): chunked == offline, and every partial
    hypothesis equals the torch path's streaming partial."""
    lp, lengths, _ = nemo_log_probs()
    opts = {"graph": str(nemo_graphs["compact"]), "beam": 10.0, "max_active": 80, "min_active": 10}
    comp = WfstDecoder(WfstConfig(**opts, backend="compiled"))
    tor = WfstDecoder(WfstConfig(**opts, backend="torch"))
    utts = [0, 3, 5, 2]
    words = sorted(comp.word_ids)
    boost = [{words[3]: 2.0}, None, {words[11]: 1.0}, None]
    out = ModelOutput(torch.from_numpy(lp[utts]), torch.from_numpy(lengths[utts]), 0.08, 128, [])
    out.extra["boost"] = boost
    offline = comp.decode(out)
    partials, finals = stream_chunks(comp, lp, lengths, utts, chunk, boost)
    t_partials, t_finals = stream_chunks(tor, lp, lengths, utts, chunk, boost)
    for res, ref, tres in zip(finals, offline, t_finals, strict=True):
        assert res == ref
        same(res, tres)
    assert len(partials) == len(t_partials)
    for p, q in zip(partials, t_partials, strict=True):
        for a, b in zip(p, q, strict=True):
            same(a, b)
    assert comp._stream_backend == "compiled" and tor._stream_backend == "torch"
    with pytest.raises(KeyError):
        comp.decode_chunk([0], torch.from_numpy(lp[:1, :3]))


def test_record_garbage_collection_keeps_the_best_path(nemo_graphs):  # noqa: F811
    """Back-pointer records no live token leads back to are dropped (collected every frame here):
    the same best path and cost as without collection, with far fewer records kept."""
    lp, lengths, _ = nemo_log_probs()
    dec = WfstDecoder(WfstConfig(graph=str(nemo_graphs["compact"]), backend="compiled", threads=1))
    search = dec.compiled_search()
    pruning = PruningOptions(10.0, 10000, 20, 0.5)
    acs = [-lp[b, : lengths[b]] for b in range(len(lp))]
    for ac in [*acs, np.concatenate(acs)]:  # the last one: all clips in one
        ref = search.decode_one(ac, None, search_settings(pruning, search.num_states, gc_records=1 << 40))
        got = search.decode_one(ac, None, search_settings(pruning, search.num_states, gc_records=1))
        assert np.array_equal(got.arcs, ref.arcs) and np.array_equal(got.frames, ref.frames)
        assert got.total == ref.total and got.reached_final == ref.reached_final
        assert got.stats[STAT_RECORDS] < ref.stats[STAT_RECORDS]
    assert got.stats[STAT_RECORDS] * 3 < ref.stats[STAT_RECORDS]


@pytest.mark.parametrize("seed", range(16))
def test_word_beam_equals_torch_on_random_wfsts(seed):
    """`word_beam` (pocketsphinx's wbeam) prunes emitting and epsilon arcs with words the same way
    in both backends: same 1-best, costs and lattice; 0 (off) is the search without it, and a
    tight word beam expands fewer arcs."""
    rng = np.random.default_rng(700 + seed)
    fst = random_wfst(rng, int(rng.integers(4, 9)), V, 6)
    lp = log_probs(rng, int(rng.integers(2, 9)))
    g = device_graph(fst)
    kw = {"beam": 8.0, "max_active": 40, "min_active": 2, "lattice": True, "lattice_beam": 4.0}
    off, (plain,) = decode(g, [lp], "compiled", **kw)
    _, (zero,) = decode(g, [lp], "compiled", **kw, word_beam=0.0)
    same(plain, zero)
    for word_beam in (0.5, 2.0):
        dec, (res,) = decode(g, [lp], "compiled", **kw, word_beam=word_beam)
        _, (tor,) = decode(g, [lp], "torch", **kw, word_beam=word_beam)
        same(res, tor)
        same_lattice(res.lattice, tor.lattice)
        assert dec.last_info["stats"]["arcs"] <= off.last_info["stats"]["arcs"]


@pytest.mark.parametrize("word_beam", [3.0, 6.0])
def test_word_beam_on_a_built_tlg_equals_torch(nemo_graphs, word_beam):  # noqa: F811
    """Real log-probs on a built TLG, boosts, two threads: the word beam prunes (fewer arcs than
    without it) and both backends keep the same 1-best."""
    lp, lengths, _ = nemo_log_probs()
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    opts = {"graph": str(nemo_graphs["compact"]), "beam": 12.0, "max_active": 10000, "min_active": 20}
    plain = WfstDecoder(WfstConfig(**opts, backend="compiled"))
    plain.decode(out)
    torch_dec = WfstDecoder(WfstConfig(**opts, word_beam=word_beam, backend="torch"))
    comp = WfstDecoder(WfstConfig(**opts, word_beam=word_beam, backend="compiled", threads=2))
    words = sorted(comp.word_ids)
    out.extra["boost"] = [{words[(3 * b) % len(words)]: 2.0} for b in range(len(lp))]
    tor, res = torch_dec.decode(out), comp.decode(out)
    for a, b in zip(res, tor, strict=True):
        same(a, b)
    assert comp.last_info["stats"]["arcs"] < plain.last_info["stats"]["arcs"]
    with pytest.raises(ConfigError, match="word_beam"):
        WfstDecoder(WfstConfig(**opts, word_beam=-1.0))
