"""Deferred arc weights (`graph.defer`) against brute force: every complete path keeps its cost, so
every word sequence keeps its best cost (exhaustive DP of `wfst_ref` on random WFSTs and log-probs)
and an unpruned search returns the same 1-best; arcs of non-negative weight stay non-negative;
self-loops are unchanged; the potentials are the least fixed point of the module's recursion."""

import math

import numpy as np
import pytest
import torch
from helpers.graph_toy import toy_config
from helpers.wfst_graphs import V, device_graph, log_probs
from helpers.wfst_ref import all_word_sequences, random_wfst, single_thread  # noqa: F401

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.graph import DeviceGraph
from asrdecode.graph.defer import defer_weights, deferred_potentials
from asrdecode.models.base import ModelOutput

WORDS = {i: f"w{i}" for i in range(1, 10)}


def as_dict(graph: DeviceGraph) -> dict:
    a = graph.arc_arrays()
    arcs = [
        (int(s), int(i), int(o), float(w), int(n))
        for s, i, o, w, n in zip(a["src"], a["ilabel"], a["olabel"], a["weight"], a["nextstate"], strict=True)
    ]
    final = [float(f) for f in graph.final.numpy()]
    return {"num_states": graph.num_states, "start": graph.start, "final": final, "arcs": arcs}


@pytest.mark.parametrize("share, decay", [(0.5, 0.9), (1.0, 0.5), (0.3, 0.0)])
@pytest.mark.parametrize("seed", range(12))
def test_every_word_sequence_keeps_its_best_cost(seed, share, decay):
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, int(rng.integers(3, 9)), V, 4, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(2, 7)))
    deferred = as_dict(defer_weights(device_graph(fst), share, decay))
    before, after = all_word_sequences(fst, lp), all_word_sequences(deferred, lp)
    assert before.keys() == after.keys()
    for seq, cost in before.items():
        assert after[seq] == pytest.approx(cost, abs=1e-4), seq


@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("backend", ["compiled", "torch"])
@pytest.mark.parametrize("seed", range(6))
def test_unpruned_search_returns_the_same_best_path(seed, backend):
    rng = np.random.default_rng(50 + seed)
    fst = random_wfst(rng, 7, V, 4, eps_forward=True)
    lp = log_probs(rng, 6)
    output = ModelOutput(torch.from_numpy(lp[None]), torch.tensor([6]), 0.01, -1, [])
    cfg = WfstConfig(backend=backend, threads=1, beam=math.inf, max_active=2**31 - 1, min_active=0)
    graph = device_graph(fst)
    graphs = (graph, defer_weights(graph, 0.5, 0.9))
    got = [WfstDecoder(cfg, graph=g, words=WORDS).decode(output)[0] for g in graphs]
    assert [w.word for w in got[0].words] == [w.word for w in got[1].words]
    assert got[1].score == pytest.approx(got[0].score, abs=1e-4)


@pytest.mark.parametrize("seed", range(10))
def test_weights_stay_non_negative_and_self_loops_unchanged(seed):
    rng = np.random.default_rng(100 + seed)
    fst = random_wfst(rng, 8, V, 4)
    fst["arcs"].append((3, 1, 0, 2.5, 3))  # a self-loop
    graph = device_graph(fst)
    out = defer_weights(graph, 0.8, 0.9)
    a, b = graph.arc_arrays(), out.arc_arrays()
    assert np.array_equal(a["src"], b["src"]) and np.array_equal(a["nextstate"], b["nextstate"])
    assert np.array_equal(a["ilabel"], b["ilabel"]) and np.array_equal(a["olabel"], b["olabel"])
    assert (b["weight"] >= -1e-6).all()
    loops = a["src"] == a["nextstate"]
    assert np.allclose(a["weight"][loops], b["weight"][loops])


def test_potentials_are_the_least_fixed_point():
    """A chain 0 -> 1 -> 2 -> 3 with a second way into 2: phi follows the recursion by hand."""
    src = np.array([0, 1, 2, 0])
    nxt = np.array([1, 2, 3, 2])
    w = np.array([4.0, 2.0, 0.0, 8.0])
    phi = deferred_potentials(4, 0, src, nxt, w, share=0.5, decay=0.5)
    # phi1 = 0.5*4 = 2; phi2 = min(0.5*2 + 0.5*2, 0 + 0.5*8) = 2; phi3 = 0.5*2 + 0 = 1
    assert phi == pytest.approx([0.0, 2.0, 2.0, 1.0])
    assert deferred_potentials(4, 0, src, nxt, w, share=0.0, decay=0.5) == pytest.approx([0, 0, 0, 0])
    with pytest.raises(ValueError):
        deferred_potentials(4, 0, src, nxt, w, share=0.5, decay=1.0)


def test_build_option_writes_the_deferred_graph_in_every_file(toy_paths, tmp_path):
    """`defer_share` in a build: graph.pt, graph.safetensors and TLG.fst hold the same deferred graph
    (same arcs and labels as without it, weights moved), meta.json records it, the cache key tells
    the two builds apart, and a build without it keeps the key it had before the option."""
    import kaldifst

    from asrdecode.graph import build_graph
    from asrdecode.graph.build import describe_graph
    from asrdecode.graph.staging import cache_key

    plain_cfg, deferred_cfg = toy_config(toy_paths), toy_config(toy_paths, defer_share=0.5, defer_decay=0.8)
    plain_meta = build_graph(plain_cfg, tmp_path / "plain")
    meta = build_graph(deferred_cfg, tmp_path / "deferred")
    assert meta["deferred_weights"] == {"share": 0.5, "decay": 0.8} and "defer" in meta["seconds"]
    assert describe_graph(tmp_path / "deferred")["deferred weights"].startswith("share 0.5, decay 0.8")
    assert "deferred weights" not in describe_graph(tmp_path / "plain")
    assert "defer_share" not in plain_meta["cache_key"]["config"]
    assert meta["cache_key"] != cache_key(plain_cfg, meta["inputs"])
    plain = DeviceGraph.load(tmp_path / "plain" / "graph.pt")
    expected = defer_weights(plain, 0.5, 0.8).arc_arrays()
    for name in ("graph.pt", "graph.safetensors"):
        got = DeviceGraph.load(tmp_path / "deferred" / name).arc_arrays()
        assert np.array_equal(got["olabel"], expected["olabel"])
        assert np.allclose(got["weight"], expected["weight"])
    fst = DeviceGraph.from_kaldifst(kaldifst.StdConstFst.read(str(tmp_path / "deferred" / "TLG.fst")))
    back = fst.arc_arrays()
    assert np.allclose(np.sort(back["weight"]), np.sort(expected["weight"]), atol=1e-6)
    assert not np.allclose(np.sort(back["weight"]), np.sort(plain.arc_arrays()["weight"]))


def test_build_option_bad_values_are_one_line_errors(toy_paths, tmp_path):
    from asrdecode.errors import GraphError
    from asrdecode.graph import build_graph

    for bad in ({"defer_share": 1.5}, {"defer_share": 0.5, "defer_decay": 1.0}):
        with pytest.raises(GraphError, match="defer_share must be in"):
            build_graph(toy_config(toy_paths, **bad), tmp_path / "bad")
