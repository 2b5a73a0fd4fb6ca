"""DeviceGraph: CSR invariants, OpenFst round trip (checked with kaldifst's own iterators),
save/load with the safe loader, const FSTs, Kaldi HCLG transition-id mapping."""

import math
import random

import kaldifst
import numpy as np
import pytest
import torch

from asrdecode.errors import GraphError
from asrdecode.graph import DeviceGraph, load_openfst_graph
from asrdecode.graph.openfst import convert_openfst_graph, read_tid2pdf


def arcs_by_kaldifst(fst) -> tuple[dict, dict, int]:
    """Per state: sorted arc tuples, and final weights, read with kaldifst's iterators."""
    arcs, finals = {}, {}
    for s in kaldifst.StateIterator(fst):
        finals[s] = fst.final(s).value
        arcs[s] = sorted(
            (a.ilabel, a.olabel, round(a.weight.value, 6), a.nextstate) for a in kaldifst.ArcIterator(fst, s)
        )
    return arcs, finals, fst.start


def random_fst(seed: int, states: int = 30, arcs: int = 150):
    rng = random.Random(seed)
    lines = []
    for _ in range(arcs):
        lines.append(
            f"{rng.randrange(states)} {rng.randrange(states)} {rng.choice([0, 0, 1, 2, 3, 7])} "
            f"{rng.choice([0, 1, 5, 9])} {rng.uniform(-1, 5):.4f}"
        )
    lines += [f"{s} {rng.uniform(0, 2):.3f}" for s in range(states) if rng.random() < 0.3]
    return kaldifst.compile("\n".join(lines) + "\n")


def check_csr(g: DeviceGraph) -> None:
    """The layout contract, written out without DeviceGraph.validate."""
    off, split, il = g.offsets.tolist(), g.split.tolist(), g.ilabel.tolist()
    assert off[0] == 0 and off[-1] == g.num_arcs
    assert all(a <= b for a, b in zip(off, off[1:], strict=False))
    for s in range(g.num_states):
        assert off[s] <= split[s] <= off[s + 1]
        assert all(x > 0 for x in il[off[s] : split[s]])
        assert all(x == 0 for x in il[split[s] : off[s + 1]])
    for name in ("offsets", "split", "ilabel", "olabel", "nextstate"):
        assert getattr(g, name).dtype == torch.int32
    assert g.weight.dtype == torch.float32 and g.final.dtype == torch.float32


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trip_same_arcs_and_finals(seed):
    fst = random_fst(seed)
    g = DeviceGraph.from_kaldifst(fst)
    check_csr(g)
    g.validate()
    assert arcs_by_kaldifst(g.to_kaldifst()) == arcs_by_kaldifst(fst)
    assert arcs_by_kaldifst(g.to_kaldifst(const=True)) == arcs_by_kaldifst(fst)
    # the fast (binary image) path equals the plain iterator path
    slow = DeviceGraph._from_kaldifst_slow(fst)
    for name, t in g.tensors().items():
        assert torch.equal(t, getattr(slow, name)), name


def test_csr_arc_content_matches_states(toy_graphs):
    fst = kaldifst.StdFst.read(str(toy_graphs["normal"] / "TLG.fst"))
    g = DeviceGraph.load(toy_graphs["normal"] / "graph.pt")
    check_csr(g)
    ref, finals, start = arcs_by_kaldifst(fst)
    assert g.start == start
    a = g.arc_arrays()
    for s in range(g.num_states):
        lo, hi = int(g.offsets[s]), int(g.offsets[s + 1])
        mine = sorted(
            (
                int(a["ilabel"][i]),
                int(a["olabel"][i]),
                round(float(a["weight"][i]), 6),
                int(a["nextstate"][i]),
            )
            for i in range(lo, hi)
        )
        assert mine == ref[s]
        assert (finals[s] == math.inf and g.final[s] == math.inf) or finals[s] == pytest.approx(
            float(g.final[s])
        )


def test_round_trip_keeps_shortest_distance(toy_graphs):
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(toy_graphs["compact"] / "TLG.fst")))
    back = DeviceGraph.from_kaldifst(fst).to_kaldifst()
    for f in (fst, back):
        ok, _, _, w = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(f))
        assert ok
    w1 = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(fst))[3].value
    w2 = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(back))[3].value
    assert w1 == w2
    assert back.is_ilabel_sorted  # epsilon arcs come first again


def test_save_load_weights_only_and_to(tmp_path):
    g = DeviceGraph.from_kaldifst(random_fst(5), meta={"kind": "test", "n": 3})
    g.save(tmp_path / "g.pt")
    raw = torch.load(tmp_path / "g.pt", weights_only=True)  # plain tensors + strings
    assert raw["format"] == "asrdecode-graph"
    h = DeviceGraph.load(tmp_path / "g.pt")
    assert h.meta == {"kind": "test", "n": 3} and h.start == g.start
    for name, t in g.tensors().items():
        assert torch.equal(t, getattr(h, name))
    moved = h.to("meta")
    assert all(t.device.type == "meta" for t in moved.tensors().values())
    assert g.nbytes() == sum(t.numel() * t.element_size() for t in g.tensors().values())
    assert g.nbytes() == 4 * (2 * g.num_states + 1) + 4 * g.num_states + 16 * g.num_arcs


def test_load_rejects_bad_files(tmp_path):
    (tmp_path / "x.pt").write_bytes(b"not a torch file")
    with pytest.raises(GraphError, match="x.pt"):
        DeviceGraph.load(tmp_path / "x.pt")
    with pytest.raises(GraphError, match="not found"):
        DeviceGraph.load(tmp_path / "missing.pt")
    g = DeviceGraph.from_kaldifst(random_fst(1))
    g.split = g.offsets[1:].clone()  # claims every arc is emitting
    with pytest.raises(GraphError, match="emitting"):
        g.validate()


def test_load_const_fst_with_symbol_tables(toy_graphs, tmp_path):
    """A const FST carrying symbol tables (as Kaldi/riva tools may write) loads like the vector one."""
    vec = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(toy_graphs["compact"] / "TLG.fst")))
    words = kaldifst.SymbolTable.read_text(str(toy_graphs["compact"] / "words.txt"))
    units = kaldifst.SymbolTable.read_text(str(toy_graphs["compact"] / "units.txt"))
    lines = []
    for line in vec.to_str(show_weight_one=True).splitlines():
        f = line.split()
        if len(f) >= 4:
            f[2], f[3] = units.find(int(f[2])), words.find(int(f[3]))
        lines.append(" ".join(f))
    with_syms = kaldifst.compile(
        "\n".join(lines) + "\n",
        isymbols=units,
        osymbols=words,
        keep_isymbols=True,
        keep_osymbols=True,
        keep_state_numbering=True,
    )
    assert with_syms.input_symbols is not None
    kaldifst.StdConstFst(with_syms).write(str(tmp_path / "TLG_const.fst"))
    g = load_openfst_graph(tmp_path / "TLG_const.fst", toy_graphs["compact"] / "words.txt")
    ref = DeviceGraph.load(toy_graphs["compact"] / "graph.pt")
    assert arcs_by_kaldifst(g.to_kaldifst()) == arcs_by_kaldifst(with_syms)  # text printing rounds weights
    assert torch.equal(g.ilabel, ref.ilabel) and torch.equal(g.offsets, ref.offsets)
    assert torch.allclose(g.weight, ref.weight, atol=1e-5)
    assert g.meta["kind"] == "TLG" and g.meta["num_columns"] == ref.max_ilabel


SHOW_TRANSITIONS = """Transition-state 1: phone = SIL hmm-state = 0 pdf = 0
 Transition-id = 1 p = 0.75 [self-loop]
 Transition-id = 2 p = 0.25 [0 -> 1]
Transition-state 2: phone = a hmm-state = 0 forward-pdf = 1 self-loop-pdf = 2
 Transition-id = 3 p = 0.5 count of pdf = 12 [self-loop]
 Transition-id = 4 p = 0.5 count of pdf = 12 [0 -> 1]
"""


def test_kaldi_hclg_transition_ids_become_pdf_plus_one(tmp_path):
    (tmp_path / "trans.txt").write_text(SHOW_TRANSITIONS)
    assert read_tid2pdf(tmp_path / "trans.txt") == {1: 0, 2: 0, 3: 2, 4: 1}
    hclg = kaldifst.compile("0 0 1 0 0.1\n0 1 2 5 0.2\n1 1 3 0 0.3\n1 2 4 6 0.4\n1 0 0 0 0.5\n2 0.0\n")
    kaldifst.StdConstFst(hclg).write(str(tmp_path / "HCLG.fst"))
    (tmp_path / "words.txt").write_text("".join(f"w{i} {i}\n" for i in range(7)))
    g = load_openfst_graph(tmp_path / "HCLG.fst", tmp_path / "words.txt", tmp_path / "trans.txt")
    check_csr(g)
    got = sorted(zip(g.ilabel.tolist(), g.olabel.tolist(), strict=True))
    assert got == sorted([(1, 0), (1, 5), (3, 0), (2, 6), (0, 0)])
    assert g.meta["kind"] == "HCLG" and g.meta["num_pdfs"] == 3
    (tmp_path / "bad.txt").write_text("1 0\n2 0\n")
    with pytest.raises(GraphError, match="transition-id 3"):
        load_openfst_graph(tmp_path / "HCLG.fst", tmp_path / "words.txt", tmp_path / "bad.txt")
    meta = convert_openfst_graph(
        tmp_path / "HCLG.fst", tmp_path / "words.txt", tmp_path / "out", tmp_path / "trans.txt"
    )
    assert meta["sizes"]["graph"]["arcs"] == 5 and (tmp_path / "out" / "graph.pt").is_file()


def test_words_table_too_small_is_an_error(tmp_path):
    fst = kaldifst.compile("0 1 1 9 0\n1 0\n")
    fst.write(str(tmp_path / "g.fst"))
    (tmp_path / "words.txt").write_text("<eps> 0\nx 1\n")
    with pytest.raises(GraphError, match="output label 9"):
        load_openfst_graph(tmp_path / "g.fst", tmp_path / "words.txt")


def test_large_conversion_is_vectorised():
    """100k arcs convert in well under a second each way (no Python loop over arcs)."""
    import time

    rng = np.random.default_rng(0)
    S, A = 20000, 100000
    src = rng.integers(0, S, A)
    g = DeviceGraph.from_arrays(
        S,
        0,
        np.zeros(S, np.float32),
        src,
        rng.integers(0, 50, A),
        rng.integers(0, 9, A),
        rng.random(A).astype(np.float32),
        rng.integers(0, S, A),
    )
    t = time.perf_counter()
    back = DeviceGraph.from_kaldifst(g.to_kaldifst())
    assert time.perf_counter() - t < 5.0
    check = DeviceGraph.from_arrays(S, 0, back.final.numpy(), **{k: v for k, v in back.arc_arrays().items()})
    assert back.num_arcs == A and torch.equal(check.ilabel, back.ilabel)


# ---------------------------------------------------------------- safetensors form
def test_safetensors_round_trip_exact_and_readable_by_safetensors(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    g = DeviceGraph.from_kaldifst(random_fst(7), meta={"kind": "TLG", "blank_ilabel": 4, "x": [1, 2]})
    names = g.save_folder(tmp_path, "both")
    assert names == ("graph.pt", "graph.safetensors")
    for name in names:
        h = DeviceGraph.load(tmp_path / name)
        assert h.start == g.start and h.meta == g.meta
        for key, t in g.tensors().items():
            got = getattr(h, key)
            assert got.dtype == t.dtype and torch.equal(got, t), (name, key)
    # the plain safetensors reader sees the CSR arrays and the header strings, nothing else needed
    raw = load_file(str(tmp_path / "graph.safetensors"))
    assert set(raw) == set(g.tensors())
    assert np.array_equal(raw["weight"].numpy(), g.weight.numpy())
    with safe_open(str(tmp_path / "graph.safetensors"), framework="pt") as fh:
        header = fh.metadata()
    assert header["format"] == "asrdecode-graph" and int(header["start"]) == g.start


def test_safetensors_empty_graph_round_trip(tmp_path):
    empty = DeviceGraph.from_arrays(
        1, 0, np.zeros(1, np.float32), *(np.zeros(0, np.int64) for _ in range(4)), np.zeros(0, np.int64)
    )
    empty.save(tmp_path / "e.safetensors")
    back = DeviceGraph.load(tmp_path / "e.safetensors")
    assert back.num_arcs == 0 and back.num_states == 1 and float(back.final[0]) == 0.0


class _RunsCode:
    """A pickle whose loading would create a marker file (what an untrusted pickle can do)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("name", ["graph.safetensors", "graph.pt"])
def test_untrusted_graph_file_cannot_run_code(tmp_path, name):
    import pickle

    marker = tmp_path / "code-ran"
    path = tmp_path / name
    if name == "graph.pt":
        torch.save({"format": "asrdecode-graph", "tensors": _RunsCode(marker)}, path)  # a real torch zip
    else:
        path.write_bytes(pickle.dumps(_RunsCode(marker)))
    assert not marker.exists()
    expected = (
        "refused: holds objects other than tensors" if name == "graph.pt" else "not a readable safetensors"
    )
    with pytest.raises(GraphError, match=f"{name}: {expected}") as err:
        DeviceGraph.load(path)
    assert "\n" not in str(err.value)
    assert not marker.exists()  # neither loader executed the payload


@pytest.mark.parametrize("name", ["graph.safetensors", "graph.pt"])
def test_truncated_or_foreign_graph_file_is_one_line_error(tmp_path, name):
    from safetensors.torch import save_file

    g = DeviceGraph.from_kaldifst(random_fst(3))
    g.save(tmp_path / name)
    data = (tmp_path / name).read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "header only": data[:8],
        "empty": b"",
        "garbage": b"\x00" * 64,
    }
    for what, blob in cases.items():
        bad = tmp_path / f"bad-{what.replace(' ', '_')}-{name}"
        bad.write_bytes(blob)
        with pytest.raises(GraphError, match=bad.name) as err:
            DeviceGraph.load(bad)
        assert "\n" not in str(err.value), what
    # a well-formed safetensors file that is not an asrdecode graph
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(3)}, str(foreign), metadata={"format": "pt"})
    with pytest.raises(GraphError, match="foreign.safetensors: not an asrdecode graph"):
        DeviceGraph.load(foreign)
    # right header, wrong dtype: named with the file
    tensors = {k: v.clone() for k, v in g.tensors().items()}
    tensors["weight"] = tensors["weight"].double()
    meta = {"format": "asrdecode-graph", "version": "1", "start": str(g.start), "meta_json": "{}"}
    save_file(tensors, str(tmp_path / "dtype.safetensors"), metadata=meta)
    with pytest.raises(GraphError, match="dtype.safetensors: graph tensor 'weight' must be float32"):
        DeviceGraph.load(tmp_path / "dtype.safetensors")


def test_folder_with_only_safetensors_is_a_graph_folder(toy_graphs, tmp_path):
    from asrdecode.decoders.wfst.paths import load_graph
    from asrdecode.graph import find_graph_file

    meta = convert_openfst_graph(
        toy_graphs["compact"] / "TLG.fst",
        toy_graphs["compact"] / "words.txt",
        tmp_path / "st",
        save_format="safetensors",
    )
    assert meta["graph_files"] == ["graph.safetensors"]
    assert not (tmp_path / "st" / "graph.pt").exists()
    assert find_graph_file(tmp_path / "st") == tmp_path / "st" / "graph.safetensors"
    graph, words = load_graph(str(tmp_path / "st"))
    ref = DeviceGraph.load(toy_graphs["compact"] / "graph.pt")
    for name, t in ref.tensors().items():
        assert torch.equal(t, getattr(graph, name)), name
    assert words[1] == read_words_first(toy_graphs["compact"] / "words.txt")


def read_words_first(path) -> str:
    return next(line.split()[0] for line in path.read_text().splitlines() if line.split()[1] == "1")
