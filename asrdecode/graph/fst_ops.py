"""The FST operations of the recipes (kaldifst + kaldilm): L, T (the CTC topologies), G from an ARPA,
LG = min(det(L o G)) with disambiguation symbols removed, and label relabelling."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode.errors import GraphError
from asrdecode.graph.format import (
    DeviceGraph,
)
from asrdecode.graph.units import Units

log = logging.getLogger("asrdecode.graph")


# ====================================================================== FST pieces
def fst_from_lists(
    num_states: int, start: int, finals: dict[int, float], arcs: list[tuple[int, int, int, float, int]]
):
    """kaldifst StdVectorFst from (src, ilabel, olabel, weight, dst) tuples."""
    final = np.full(num_states, np.inf, dtype=np.float32)
    for s, w in finals.items():
        final[s] = w
    a = np.array(arcs, dtype=np.float64).reshape(-1, 5)
    g = DeviceGraph.from_arrays(
        num_states,
        start,
        final,
        a[:, 0].astype(np.int64),
        a[:, 1].astype(np.int64),
        a[:, 2].astype(np.int64),
        a[:, 3].astype(np.float32),
        a[:, 4].astype(np.int64),
    )
    return g.to_kaldifst()


def make_lexicon_fst(
    prons: list[tuple[str, tuple[int, ...], int]],
    word_ids: dict[str, int],
    first_disambig: int,
    word_disambig0: int,
    optional_units: tuple[int, ...] = (),
    optional_cost: float = 0.0,
):
    """L with disambiguation: loop state 0 (start, final); each pron is a path 0 -> ... -> 0 that
    outputs the word on its first arc; #0:#0 self-loop passes G's backoff symbol; each unit in
    `optional_units` (e.g. a word separator, or silence) may be read between words with no output,
    at `optional_cost`."""
    arcs: list[tuple[int, int, int, float, int]] = []
    n = 1
    for word, units, dis in prons:
        labels = list(units) + ([first_disambig + dis] if dis else [])
        src = 0
        for k, lab in enumerate(labels):
            dst = 0 if k == len(labels) - 1 else n
            if dst:
                n += 1
            arcs.append((src, lab, word_ids[word] if k == 0 else 0, 0.0, dst))
            src = dst
    arcs.append((0, first_disambig, word_disambig0, 0.0, 0))
    for u in optional_units:
        arcs.append((0, u, 0, optional_cost, 0))
    return fst_from_lists(n, 0, {0: 0.0}, arcs)


def make_ctc_topo(units: Units, topology: str):
    """CTC T transducer over ilabels = column + 1; outputs unit ids (same numbers), blank -> eps.

    normal  (paper 001 fig. 2): state 0 = after blank, one state per unit; a unit repeated on
            consecutive frames is one output, a real repeat needs a blank in between.
    compact (paper 001 fig. 3): hub state with blank self-loop; unit u enters its own state
            (self-loop u:eps), returns by epsilon; repeats need no blank.
    minimal (Laptev et al. 2022): one state; every non-blank frame outputs its unit.
    """
    b = units.blank_ilabel
    toks = [c + 1 for c in range(len(units.names)) if c != units.blank_column]
    arcs: list[tuple[int, int, int, float, int]] = []
    if topology == "minimal":
        arcs.append((0, b, 0, 0.0, 0))
        arcs += [(0, t, t, 0.0, 0) for t in toks]
        return fst_from_lists(1, 0, {0: 0.0}, arcs)
    state = {t: k + 1 for k, t in enumerate(toks)}
    n = len(toks) + 1
    if topology == "compact":
        arcs.append((0, b, 0, 0.0, 0))
        for t in toks:
            s = state[t]
            arcs += [(0, t, t, 0.0, s), (s, t, 0, 0.0, s), (s, 0, 0, 0.0, 0)]
        return fst_from_lists(n, 0, {0: 0.0}, arcs)
    # normal
    for src in range(n):
        arcs.append((src, b, 0, 0.0, 0))
        for t in toks:
            dst = state[t]
            arcs.append((src, t, 0 if dst == src else t, 0.0, dst))
    return fst_from_lists(n, 0, {s: 0.0 for s in range(n)}, arcs)


def arpa_to_g(arpa_plain: Path, words_txt: Path, out_fst: Path, max_order: int) -> None:
    """kaldilm arpa2fst in a child process (it aborts the process on errors it finds)."""
    code = (
        "import sys, kaldilm; kaldilm.arpa2fst(sys.argv[1], output_fst=sys.argv[3], disambig_symbol='#0', "
        "read_symbol_table=sys.argv[2], max_order=int(sys.argv[4]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(arpa_plain), str(words_txt), str(out_fst), str(max_order)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not out_fst.is_file():
        lines = [
            ln for ln in (proc.stderr or "").splitlines() if "[E]" in ln or "Error" in ln or "error" in ln
        ]
        msg = lines[-1].strip() if lines else (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise GraphError(f"{arpa_plain}: kaldilm could not convert the ARPA: {msg}")


def relabel(fst: Any, min_disambig: int | None = None, olabel_zero: tuple[int, ...] = ()):
    """Set ilabels >= min_disambig and the given olabels to epsilon (numpy pass, no Python arc loop)."""
    g = DeviceGraph.from_kaldifst(fst)
    a = g.arc_arrays()
    il, ol = a["ilabel"].astype(np.int64).copy(), a["olabel"].astype(np.int64).copy()
    if min_disambig is not None:
        il[il >= min_disambig] = 0
    for o in olabel_zero:
        ol[ol == o] = 0
    final = g.final.numpy()
    g2 = DeviceGraph.from_arrays(g.num_states, g.start, final, a["src"], il, ol, a["weight"], a["nextstate"])
    return g2.to_kaldifst()


def compile_lg(
    L: Any,
    G: Any,
    first_disambig: int,
    word_disambig0: int,
    remove_epsilon: bool = False,
    keep_disambig: bool = False,
    word_labels: str = "earliest",
) -> Any:
    """min(det(L o G)) in the tropical semiring, then disambiguation symbols -> epsilon (the unit-side
    ones only without keep_disambig, for HCLG's later determinization), arc-sorted.

    word_labels `earliest`: det as a transducer (labels delayed to where the word is certain);
    `first_unit`: det of the acceptor over (unit, word) pairs (labels stay on first units)."""
    import kaldifst

    kaldifst.arcsort(L, sort_type="olabel")
    kaldifst.arcsort(G, sort_type="ilabel")
    LG = kaldifst.compose(L, G)
    if LG.num_states == 0:
        raise GraphError("L o G is empty: no lexicon word can be read by the LM")
    if word_labels == "first_unit":
        LG = determinize_label_pairs(LG)
    else:
        if kaldifst.determinize_star(LG):
            raise GraphError("determinization of L o G stopped early")
        kaldifst.minimize_encoded(LG)
    LG = relabel(LG, min_disambig=None if keep_disambig else first_disambig, olabel_zero=(word_disambig0,))
    if remove_epsilon:
        kaldifst.rmepsilon(LG)
    kaldifst.connect(LG)
    kaldifst.arcsort(LG, sort_type="ilabel")
    return LG


def determinize_label_pairs(fst: Any) -> Any:
    """min(det()) of `fst` read as an acceptor over its (ilabel, olabel) pairs (OpenFst's label
    encoding, done with numpy): the labels stay on the arcs L put them on."""
    import kaldifst

    g = DeviceGraph.from_kaldifst(fst)
    a = g.arc_arrays()
    il, ol = a["ilabel"].astype(np.int64), a["olabel"].astype(np.int64)
    radix = int(ol.max(initial=0)) + 1
    pairs, code = np.unique(il * radix + ol, return_inverse=True)
    code = code.reshape(-1).astype(np.int64) + 1
    code[(il == 0) & (ol == 0)] = 0  # eps:eps stays epsilon
    acceptor = DeviceGraph.from_arrays(
        g.num_states, g.start, g.final.numpy(), a["src"], code, code, a["weight"], a["nextstate"]
    ).to_kaldifst()
    if kaldifst.determinize_star(acceptor):
        raise GraphError("determinization of L o G (label pairs) stopped early")
    kaldifst.minimize(acceptor)
    d = DeviceGraph.from_kaldifst(acceptor)
    b = d.arc_arrays()
    lut = np.concatenate([[0], pairs])[b["ilabel"].astype(np.int64)]
    return DeviceGraph.from_arrays(
        d.num_states,
        d.start,
        d.final.numpy(),
        b["src"],
        lut // radix,
        lut % radix,
        b["weight"],
        b["nextstate"],
    ).to_kaldifst()


def num_arcs(fst: Any) -> int:
    import kaldifst

    return sum(fst.num_arcs(s) for s in kaldifst.StateIterator(fst))
