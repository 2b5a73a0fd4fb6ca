"""Where a graph puts its output (word) labels, and whether label pushing could move them.

OpenFst's label pushing towards the initial state (Push with kPushLabels; Mohri, "Weighted automata
algorithms", sec. on pushing) moves the longest common prefix of the output strings of all
successful paths leaving a state onto the arcs entering it. That prefix is non-empty exactly when
every successful path from the state emits the same first output label, which `first_output_labels`
computes as a greatest fixpoint over the CSR arrays (no OpenFst needed, no path enumeration):

    F(s) = meet( {epsilon if s is final} U {o(e) if o(e) != 0 else F(n(e)) : e leaves s} )

over the flat lattice TOP (no successful path seen) > label > BOTTOM (paths disagree or one is
empty). States other than the start with F(s) = label are where label pushing would act.
"""

from __future__ import annotations

import numpy as np

from asrdecode.graph.format import DeviceGraph

NO_PATH = -1  # TOP: no successful path leaves the state
MIXED = 0  # BOTTOM: paths emit different first labels, or one emits nothing


def first_output_labels(graph: DeviceGraph, max_iterations: int = 100_000) -> np.ndarray:
    """Per state: the output label every successful path from it emits first (> 0), MIXED (0) if
    they differ or one emits nothing, NO_PATH (-1) if no path from it reaches a final state."""
    num_states = graph.num_states
    off = graph.offsets.cpu().numpy().astype(np.int64)
    olabel = graph.olabel.cpu().numpy().astype(np.int64)
    nextstate = graph.nextstate.cpu().numpy().astype(np.int64)
    final = np.isfinite(graph.final.cpu().numpy())
    has_arcs = off[1:] > off[:-1]
    starts = off[:-1][has_arcs]
    top = np.iinfo(np.int64).max
    value = np.full(num_states, NO_PATH, dtype=np.int64)
    value[final] = MIXED
    for _ in range(max_iterations):
        contrib = np.where(olabel > 0, olabel, value[nextstate])
        lowest = np.full(num_states, top, dtype=np.int64)
        highest = np.full(num_states, NO_PATH, dtype=np.int64)
        if contrib.size:
            lowest[has_arcs] = np.minimum.reduceat(np.where(contrib == NO_PATH, top, contrib), starts)
            highest[has_arcs] = np.maximum.reduceat(contrib, starts)
        new = np.where(highest == NO_PATH, NO_PATH, np.where(lowest == highest, highest, MIXED))
        new[final] = MIXED
        if np.array_equal(new, value):
            return value
        value = new
    raise RuntimeError("first_output_labels did not converge")  # cannot happen: 3-level lattice


def pushable_label_states(graph: DeviceGraph) -> int:
    """States (not the start) whose every successful path emits the same first label: the states
    where label pushing towards the initial state would move a label. 0 = pushing is a no-op."""
    value = first_output_labels(graph)
    pushable = value > 0
    if 0 <= graph.start < graph.num_states:
        pushable[graph.start] = False
    return int(pushable.sum())


def emitting_fanout(graph: DeviceGraph) -> dict[str, float]:
    """Input non-determinism: share of emitting arcs whose (state, ilabel) is shared with another
    arc, and the largest number of arcs with one (state, ilabel). A deterministic graph: 0 and 1."""
    a = graph.arc_arrays()
    emitting = a["ilabel"] > 0
    if not emitting.any():
        return {"shared_share": 0.0, "max_fanout": 0}
    key = a["src"][emitting] * (int(a["ilabel"].max()) + 1) + a["ilabel"][emitting]
    _, counts = np.unique(key, return_counts=True)
    return {
        "shared_share": float(counts[counts > 1].sum() / emitting.sum()),
        "max_fanout": int(counts.max()),
    }
