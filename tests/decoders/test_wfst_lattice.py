"""`wfst` lattices against independent references, both backends:

* the state-level lattice is exactly the union of the arcs of all paths within ``lattice_beam`` of
  the best, by enumerating every path of the composed search space (tiny random WFSTs, wide search
  beam), and equals Kaldi's own exact lattice (kaldi-decoder's LatticeSimpleDecoder raw lattice);
* window pruning during the search (every frame here) leaves the lattices unchanged and keeps
  far fewer search arcs;
* the word lattice (CompactLattice) holds, for every word sequence on it, that sequence's best
  path (total, graph and acoustic cost, unit alignment) found by enumeration, and every sequence
  within the beam; n-best == enumeration; lattice 1-best == decoder 1-best on model outputs;
* the Kaldi text archive parses back, and Kaldi's own n-best (kaldifst lattice_to_nbest) over the
  parsed lattice gives the enumerated best paths; the OpenFst file reads back.
"""

import math

import numpy as np
import pytest
import torch
from helpers.lattice_paths import compact_paths
from helpers.wfst_graphs import V, device_graph, log_probs, synthetic
from helpers.wfst_ref import (  # noqa: F401
    FIXTURES,
    all_paths,
    all_word_sequences,
    assert_kaldi_lattice,
    kaldi_raw_lattice,
    nemo_log_probs,
    nemo_sentences,
    random_wfst,
    single_thread,
    to_kaldifst,
    write_arpa,
)

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.lattice import (
    CompactLattice,
    concatenate,
    read_kaldi_text,
    write_kaldi_text,
    write_word_fst,
)
from asrdecode.decoders.wfst.paths import CONFIDENCE_CLIP
from asrdecode.graph import GraphBuildConfig, build_graph
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")
WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0}
WORDS = {i: f"w{i}" for i in range(1, 10)}
BACKENDS = ["torch", "compiled"]


def one(lp: np.ndarray) -> ModelOutput:
    return ModelOutput(torch.from_numpy(lp[None]), torch.tensor([len(lp)]), 0.04, -1, [])


def decode_lattice(fst: dict, lp: np.ndarray, backend: str, **kw):
    cfg = WfstConfig(**{**WIDE, "lattice": True, **kw, "backend": backend})
    dec = WfstDecoder(cfg, graph=device_graph(fst), words=WORDS)
    (res,) = dec.decode(one(lp))
    return dec, res


def f32(w: float) -> float:
    return round(float(np.float32(w)), 4)


def clear_beam(totals: list[float], beam: float) -> float:
    """`beam` moved off any path cost (no path within 1e-3 of best + beam: no float ties)."""
    best = min(totals)
    while any(abs(t - best - beam) < 1e-3 for t in totals):
        beam += 0.0137
    return beam


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(16))
def test_state_lattice_is_the_union_of_paths_within_the_beam(seed, backend):
    """Every path of (frames x graph) enumerated: the lattice's arcs are exactly the arcs of the
    paths whose cost is within lattice_beam of the best (pruning every frame or only at the end)."""
    rng = np.random.default_rng(700 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 7)), V, 5, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(1, 5)))
    paths = all_paths(fst, lp)
    if not paths:
        return
    beam = clear_beam([p["total"] for p in paths], float(rng.uniform(1.0, 6.0)))
    best = min(p["total"] for p in paths)
    expected = {
        (a[0], a[1], a[2], a[3], f32(a[4])) for p in paths if p["total"] <= best + beam for a in p["arcs"]
    }
    for interval in (1, 0):
        _, res = decode_lattice(fst, lp, backend, lattice_beam=beam, prune_interval=interval)
        lat = res.lattice.state_lattice
        nodes = list(zip(lat.node_frame.tolist(), lat.node_state.tolist(), strict=True))
        got = {
            (nodes[s], nodes[d], int(il), int(ol), f32(g))
            for s, d, il, ol, g in zip(lat.src, lat.dst, lat.ilabel, lat.olabel, lat.graph, strict=True)
        }
        assert got == expected, interval
        assert lat.num_arcs == len(expected)  # no duplicates


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(10))
def test_state_lattice_equals_kaldi_lattice_decoder(seed, backend):
    """Kaldi's exact lattice generation on the same graph and log-probs (with epsilon cycles; if
    no final state is reached both treat every last-frame state as final): the same arcs (time,
    ilabel, olabel, graph, acoustic) and final weights."""
    rng = np.random.default_rng(800 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), V, 5)
    lp = log_probs(rng, int(rng.integers(2, 7)))
    g = to_kaldifst(fst)
    ref = kaldi_raw_lattice(g, lp, lattice_beam=4.0)
    _, res = decode_lattice(fst, lp, backend, lattice_beam=4.0)
    if ref is None:  # nothing survived to the last frame
        assert res.words == []
    assert_kaldi_lattice(res.lattice, ref)


def test_window_pruning_keeps_the_lattice_and_bounds_memory():
    """Peaky CTC-like log-probs (300 frames) on a built TLG: lattices and n-best identical with
    window pruning every frame, every 25 frames and never (both backends), with far fewer search
    arcs kept until the end."""
    lp = synthetic(3, 2, 300, 129, 128)
    out = ModelOutput(torch.from_numpy(lp), torch.tensor([300, 240]), 0.08, 128, [])
    graph_dir = nemo_graph()
    results, kept = {}, {}
    for backend in BACKENDS:
        for interval in (1, 25, 0):
            cfg = WfstConfig(
                graph=str(graph_dir), beam=10.0, lattice_beam=3.0, lattice=True, nbest=4,
                prune_interval=interval, backend=backend,
            )  # fmt: skip
            dec = WfstDecoder(cfg)
            results[backend, interval] = dec.decode(out)
            kept[backend, interval] = dec.last_info["lattice_search_arcs"]
    ref = results["torch", 0]
    for key, res in results.items():
        for a, b in zip(res, ref, strict=True):
            assert a.lattice.to_kaldi_text("u") == b.lattice.to_kaldi_text("u"), key
            assert a.nbest == b.nbest
            sa, sb = a.lattice.state_lattice, b.lattice.state_lattice
            assert np.array_equal(sa.src, sb.src) and np.array_equal(sa.arc, sb.arc)
    for backend in BACKENDS:
        assert kept[backend, 1] * 3 < kept[backend, 0]
        assert kept[backend, 25] < kept[backend, 0]


def test_window_pruning_takes_back_a_bounded_number_of_frames():
    """Window pruning is incremental (Kaldi's PruneActiveTokens): each call goes back only until
    a frame whose extra costs did not move, so the frames it takes back per call do not grow with
    the input (O(T) in all, not O(T^2)), and the kept search arcs grow like the input."""
    graph_dir = nemo_graph()
    back, kept = {}, {}
    for T in (400, 1600):
        lp = synthetic(5, 1, T, 129, 128)
        out = ModelOutput(torch.from_numpy(lp), torch.tensor([T]), 0.08, 128, [])
        cfg = WfstConfig(graph=str(graph_dir), beam=10.0, lattice_beam=3.0, lattice=True, backend="compiled")
        dec = WfstDecoder(cfg)
        dec.decode(out)
        back[T] = dec.last_info["stats"]["lattice_prune_frames"] / (T // cfg.prune_interval)
        kept[T] = dec.last_info["lattice_search_arcs"]
    assert back[400] < 400 / 2
    assert back[1600] < 1.3 * back[400]
    assert kept[1600] < 1.3 * 4 * kept[400]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(16))
def test_word_lattice_holds_each_sequences_best_path(seed, backend):
    """Word lattice vs enumeration of every path: each of its word sequences carries exactly that
    sequence's best path (total, graph and acoustic cost, one unit per frame); every sequence
    within the beam is on it; its state times add up to the frames."""
    rng = np.random.default_rng(1100 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 7)), V, 5, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(1, 5)))
    paths = all_paths(fst, lp)
    if not paths:
        return
    beam = clear_beam([p["total"] for p in paths], 5.0)
    best_of: dict[tuple, dict] = {}
    for p in paths:
        w = p["olabels"]
        if w not in best_of or p["total"] < best_of[w]["total"]:
            best_of[w] = p
    _, res = decode_lattice(fst, lp, backend, lattice_beam=beam)
    lat = res.lattice
    got = compact_paths(lat)
    assert len({w for w, *_ in got}) == len(got)  # deterministic: one path per word sequence
    for words, g, a, units in got:
        ref = best_of[words]
        assert g + a == pytest.approx(ref["total"], abs=1e-4)
        # exact ties (same cost, other alignment) may pick either path
        ties = [p for p in paths if p["olabels"] == words and abs(p["total"] - ref["total"]) < 1e-5]
        assert any(units == p["ilabels"] and g == pytest.approx(p["graph"], abs=1e-4) for p in ties), (
            words,
            units,
        )
        assert len(units) == len(lp)
    best = min(p["total"] for p in paths)
    within = {w for w, p in best_of.items() if p["total"] <= best + beam}
    assert within <= {w for w, *_ in got}
    for s, d, _word, start, end, _g, _a in lat.word_arcs():
        assert lat.times[d] == end and start == lat.times[s] and 0 <= start <= end <= len(lp)


def lattice_paths_with_spans(lat) -> list[tuple[tuple, float, list]]:
    """Every complete path of a word lattice: (word ids, total cost, [(word, first frame, end
    frame)] of its word arcs; a unit-less arc spans its start frame)."""
    out = []
    by_src: dict[int, list[int]] = {}
    for i in range(lat.num_arcs):
        by_src.setdefault(int(lat.src[i]), []).append(i)

    def walk(s: int, cost: float, arcs: list) -> None:
        if s in lat.final:
            g, a, _ = lat.final[s]
            out.append((tuple(w for w, _, _ in arcs), cost + g + a, arcs))
        for i in by_src.get(s, ()):
            w, start = int(lat.word[i]), int(lat.times[s])
            span = [(w, start, start + max(len(lat.units[i]), 1))] if w else []
            walk(int(lat.dst[i]), cost + lat.graph[i] + lat.acoustic[i], arcs + span)

    if lat.num_states:
        walk(0, 0.0, [])
    return out


@pytest.mark.parametrize("seed", range(12))
def test_word_confidences_are_frame_posteriors_by_enumeration(seed):
    """Each word's confidence = the highest, over its frames, of the summed posteriors of the
    lattice arcs with that word covering the frame (C_max; a path's probability exp(-cost)
    normalised over every complete path, counted once per such arc on it), by enumerating the word
    lattice's paths; the hypothesis is the decoder's 1-best. These random graphs have word arcs
    without frames (they cover their start frame), so a path can count twice: clipped at 1."""
    rng = np.random.default_rng(1300 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 7)), V, 5, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(2, 6)))
    _, res = decode_lattice(fst, lp, "compiled", lattice_beam=8.0)
    lat = res.lattice
    if lat is None or not res.words:
        return
    paths = lattice_paths_with_spans(lat)
    low = min(c for _, c, _ in paths)
    weight = [math.exp(low - c) for _, c, _ in paths]
    z = sum(weight)
    names = [w.word for w in res.words]
    ids = {name: i for i, name in WORDS.items()}
    hyp = min((c, arcs) for words, c, arcs in paths if words == tuple(ids[n] for n in names))[1]
    want = []
    for w, first, end in hyp:
        at = [
            sum(p * sum(v == w and a0 <= t < a1 for v, a0, a1 in arcs)
                for p, (_, _, arcs) in zip(weight, paths, strict=True)) / z
            for t in range(first, end)
        ]  # fmt: skip
        want.append(min(max(at), 1.0))
    got = lat.word_confidences(names)
    assert got == pytest.approx(want, abs=1e-6)
    assert [w.confidence for w in res.words] == pytest.approx(want, abs=1e-6)
    assert all(0.0 <= c <= 1.0 for c in got)
    assert lat.word_confidences([*names, "no-such-word"]) is None  # no such path
    # a calibration (`confidence_bias`, `confidence_slope`): sigmoid(bias + slope * logit(posterior))
    _, cal = decode_lattice(fst, lp, "compiled", lattice_beam=8.0, confidence_bias=-0.5, confidence_slope=0.4)
    for w, raw in zip(cal.words, want, strict=True):
        p = min(max(raw, CONFIDENCE_CLIP), 1 - CONFIDENCE_CLIP)
        assert w.confidence == pytest.approx(1 / (1 + math.exp(0.5 - 0.4 * math.log(p / (1 - p)))), abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_concatenated_lattices_hold_every_pair_of_paths(seed):
    """Lattices of consecutive segments joined (`concatenate`, as for inputs decoded in segments):
    its complete paths are exactly the pairs of the parts' paths, words (epsilon arcs dropped),
    costs and units added, state times shifted by the segment offset; n-best and the Kaldi text
    form agree with that."""
    rng = np.random.default_rng(1300 + seed)
    parts = []
    for _ in range(2):
        fst = random_wfst(rng, int(rng.integers(3, 7)), V, 5, eps_forward=True)
        lp = log_probs(rng, int(rng.integers(1, 5)))
        _, res = decode_lattice(fst, lp, "compiled", lattice_beam=4.0)
        if res.lattice is None or not res.lattice.final:
            return
        parts.append(res.lattice)
    a, b = parts
    joined = concatenate(parts, [0, a.num_frames])
    assert joined.num_frames == a.num_frames + b.num_frames
    expected = sorted(
        (wa + wb, round(ga + gb, 4), round(aa + ab, 4), ua + ub)
        for wa, ga, aa, ua in compact_paths(a)
        for wb, gb, ab, ub in compact_paths(b)
    )
    got = sorted(
        (tuple(x for x in w if x), round(g, 4), round(ac, 4), u) for w, g, ac, u in compact_paths(joined)
    )
    assert got == expected
    for _src, dst, word, start, end, *_ in joined.word_arcs():
        assert word != "0" and start <= end <= joined.num_frames
        assert joined.times[dst] == end
    best = min(g + ac for _, g, ac, _ in expected)
    (words, cost), *_ = joined.nbest(1)
    assert cost == pytest.approx(best, abs=1e-3)
    arcs, finals = read_kaldi_text(joined.to_kaldi_text("u"))["u"]
    assert len(arcs) == joined.num_arcs and len(finals) == len(b.final)
    assert concatenate([a, CompactLattice(0, *[np.zeros(0)] * 5, [], {}, np.zeros(0), 0, {})], [0, 1]) is None


@pytest.mark.parametrize("seed", range(25))
def test_nbest_equals_exhaustive_enumeration(seed):
    rng = np.random.default_rng(500 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), V, 5, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(1, 6)))
    ref = all_word_sequences(fst, lp)
    dec = WfstDecoder(
        WfstConfig(**WIDE, lattice_beam=6.0, nbest=5, lattice=True), graph=device_graph(fst), words=WORDS
    )
    (res,) = dec.decode(one(lp))
    if not ref:
        return
    best = min(ref.values())
    expected = sorted((c, [f"w{o}" for o in seq]) for seq, c in ref.items() if c <= best + 6.0)[:5]
    got = [(-score, w) for w, score in res.nbest]
    # every hypothesis is a real word sequence with its exact best cost, best first
    names = {tuple(f"w{o}" for o in seq): c for seq, c in ref.items()}
    for cost, w in got:
        assert cost == pytest.approx(names[tuple(w)], abs=1e-3)
    assert [c for c, _ in got] == sorted(c for c, _ in got)
    assert len(got) == len(expected)
    # nothing better than the last one returned is missing (exact ties may come in any order)
    missing = [w for c, w in expected if c < got[-1][0] - 1e-3 and w not in [g for _, g in got]]
    assert not missing
    # lattice 1-best == decoder 1-best
    assert got[0][1] == [w.word for w in res.words]
    assert got[0][0] == pytest.approx(-res.score, abs=1e-3)


def kaldi_lattice_from_text(arcs: list[tuple], finals: dict):
    """A parsed CompactLattice as a kaldifst Lattice (Kaldi's ConvertLattice: the units of an arc
    become a chain of arcs, the first with the word and the weight)."""
    import kaldifst

    lat = kaldifst.Lattice()
    states = 1 + max([max(s, d) for s, d, *_ in arcs] + list(finals) + [0])
    for _ in range(states):
        lat.add_state()
    lat.start = 0

    def chain(s: int, d: int | None, word: int, g: float, a: float, units: tuple) -> None:
        labels = list(units) or [0]
        for k, il in enumerate(labels):
            last = k == len(labels) - 1
            nxt = d if last and d is not None else lat.add_state()
            w = kaldifst.LatticeWeight(g, a) if k == 0 else kaldifst.LatticeWeight(0.0, 0.0)
            lat.add_arc(s, kaldifst.LatticeArc(il, word if k == 0 else 0, w, nxt))
            s = nxt
        if d is None:
            lat.set_final(s, kaldifst.LatticeWeight(0.0, 0.0))

    for s, d, word, g, a, units in arcs:
        chain(s, d, word, g, a, units)
    for s, (g, a, units) in finals.items():
        if units:
            chain(s, None, 0, g, a, units)
        else:
            lat.set_final(s, kaldifst.LatticeWeight(g, a))
    return lat


@pytest.mark.parametrize("seed", range(8))
def test_kaldi_text_parses_back_and_kaldi_nbest_agrees(seed, tmp_path):
    """The text archive parses back to the lattice; Kaldi's n-best over the parsed lattice gives
    the enumerated best paths (words, graph + acoustic cost, units); the OpenFst file reads."""
    import kaldifst

    rng = np.random.default_rng(1300 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 7)), V, 5, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(2, 5)))
    paths = all_paths(fst, lp)
    if not paths:
        return
    _, res = decode_lattice(fst, lp, "compiled", lattice_beam=clear_beam([p["total"] for p in paths], 6.0))
    path = tmp_path / "lat.ark.txt"
    write_kaldi_text(path, {"utt-a": res.lattice})
    write_kaldi_text(path, {"utt-b": res.lattice}, append=True)
    parsed = read_kaldi_text(path.read_text())
    assert list(parsed) == ["utt-a", "utt-b"]
    arcs, finals = parsed["utt-a"]
    lat = res.lattice
    assert [(s, d, w) for s, d, w, *_ in arcs] == list(zip(lat.src, lat.dst, lat.word, strict=True))
    assert [u for *_, u in arcs] == lat.units
    assert [g for *_, g, _a, _u in arcs] == pytest.approx(lat.graph.tolist(), abs=1e-5)
    assert set(finals) == set(lat.final)
    best_of: dict[tuple, dict] = {}
    for p in paths:
        if p["olabels"] not in best_of or p["total"] < best_of[p["olabels"]]["total"]:
            best_of[p["olabels"]] = p
    ranked = sorted(best_of.values(), key=lambda p: p["total"])
    nbest = kaldifst.lattice_to_nbest(kaldi_lattice_from_text(arcs, finals), n=3)
    assert len(nbest) == min(3, len(compact_paths(lat)))
    for k, linear in enumerate(nbest):
        ok, ilabels, olabels, weight = kaldifst.get_linear_symbol_sequence(linear)
        assert ok
        ref = ranked[k]
        if abs(ref["total"] - ranked[min(k + 1, len(ranked) - 1)]["total"]) < 1e-4 and k + 1 < len(ranked):
            break  # an exact tie: Kaldi may list them in either order
        assert tuple(olabels) == ref["olabels"]
        assert weight.value1 + weight.value2 == pytest.approx(ref["total"], abs=1e-3)
        assert tuple(ilabels) == ref["ilabels"]
    write_word_fst(tmp_path / "u.fst", lat)
    back = kaldifst.StdVectorFst.read(str(tmp_path / "u.fst"))
    assert back.num_states == lat.num_states


_GRAPH: dict = {}


def nemo_graph():
    """TLG of the NeMo fixture model's BPE units with a bigram over the fixture words (built once)."""
    if "dir" not in _GRAPH:
        import tempfile
        from pathlib import Path

        d = Path(tempfile.mkdtemp(prefix="wfst_lat_nemo"))
        write_arpa(d / "lm.arpa", nemo_sentences())
        cfg = GraphBuildConfig(
            arpa=str(d / "lm.arpa"), model=str(FIXTURES / "ctc_bpe.nemo"), lexicon_type="bpe"
        )
        build_graph(cfg, d / "g")
        _GRAPH["dir"] = d / "g"
    return _GRAPH["dir"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_lattice_one_best_equals_decoder_on_model_outputs(backend, tmp_path):
    lp, lengths, _ = nemo_log_probs()
    cfg = WfstConfig(
        graph=str(nemo_graph()), beam=12.0, lattice_beam=4.0, lattice=True, nbest=3, backend=backend
    )
    dec = WfstDecoder(cfg)
    res = dec.decode(ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, []))
    for b, r in enumerate(res):
        assert r.nbest and r.nbest[0][0] == [w.word for w in r.words]
        assert r.nbest[0][1] == pytest.approx(r.score, abs=2e-3)
        assert all(a[1] >= b[1] for a, b in zip(r.nbest, r.nbest[1:], strict=False))
        # the best path of the word lattice carries the decoder's graph/acoustic split and one
        # unit per frame
        (words, g, a, units) = min(compact_paths(r.lattice), key=lambda p: p[1] + p[2])
        assert -g == pytest.approx(r.lm_score, abs=2e-3) and -a == pytest.approx(r.acoustic_score, abs=2e-3)
        assert len(units) == lengths[b]
        assert r.lattice.times[-1] <= lengths[b] and r.lattice.frame_shift == 0.08
    assert dec.last_info["lattice_density"] > 1.0
    assert dec.last_info["lattice_density"] == pytest.approx(
        np.mean([r.lattice.num_arcs / lengths[b] for b, r in enumerate(res)])
    )
    write_kaldi_text(tmp_path / "lat.txt", {f"u{i}": r.lattice for i, r in enumerate(res)})
    parsed = read_kaldi_text((tmp_path / "lat.txt").read_text())
    assert list(parsed) == [f"u{i}" for i in range(len(res))]
    for i, r in enumerate(res):
        arcs, finals = parsed[f"u{i}"]
        assert len(arcs) == r.lattice.num_arcs and set(finals) == set(r.lattice.final)
    assert all(not math.isnan(r.lattice.density()) for r in res)
