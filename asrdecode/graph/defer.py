"""Deferred arc weights: a decoding graph reweighted so that part of each arc's cost is paid later.

A determinized graph carries its LM costs as early as they are known (determinization moves a
weight to where the paths that share it part): a word the LM finds unlikely costs its whole LM
weight on the arc where its prefix stops being shared, often several nats in one frame, long
before its acoustics can pay it back. A beam search drops such a path if that step puts it beyond
the beam, although it would have been the cheapest path a few frames later (`scripts/
probe_search_error_frames.py` finds this step behind most of the default setup's search errors
against pocketsphinx).

`defer_weights` moves part of those costs later without changing the cost of any complete path.
It reweights by a potential phi over the states (the reweighting of Mohri's weight pushing, run
the other way): an arc p -> q of weight w becomes ``w + phi(p) - phi(q)`` and a final weight f(q)
becomes ``f(q) + phi(q)``, so a path from the start (phi = 0) to a final state keeps its cost: the
potentials telescope. phi(q) is the cost deferred into q: the least fixed point of

    phi(start) = 0,  phi(q) = min over arcs p -> q, p != q, of  decay * phi(p) + share * max(w, 0)

(states with no such arc: 0). The arc that sets phi(q) then charges ``(1 - share)`` of its own
weight plus ``(1 - decay)`` of the deferred cost it came in with, the rest going on to the next
state; any other arc into q charges more (phi(q) is below its own term).
Self-loops are unchanged (phi cancels). Every arc of non-negative weight stays non-negative:
``w + phi(p) - phi(q) >= (1 - share) * w + (1 - decay) * phi(p) >= 0``, which holds for every
iterate of the fixed-point iteration below (it rises monotonically from 0), not only the limit.
"""

from __future__ import annotations

import numpy as np

from asrdecode.graph.format import DeviceGraph

TOLERANCE = 1e-4  # cost units: the iteration stops when no potential moved by more


def deferred_potentials(
    num_states: int,
    start: int,
    src: np.ndarray,
    nextstate: np.ndarray,
    weight: np.ndarray,
    share: float,
    decay: float,
    max_iterations: int = 200,
) -> np.ndarray:
    """phi of the module docstring (float64 [num_states]), by Jacobi iteration from 0. With decay < 1
    the iteration contracts by `decay` per step; it stops at `TOLERANCE` or `max_iterations`."""
    if not (0.0 <= share <= 1.0 and 0.0 <= decay < 1.0):
        raise ValueError("defer_weights: share must be in [0, 1] and decay in [0, 1)")
    phi = np.zeros(num_states, dtype=np.float64)
    move = src != nextstate
    s, d = src[move].astype(np.int64), nextstate[move].astype(np.int64)
    own = share * np.maximum(weight[move].astype(np.float64), 0.0)
    for _ in range(max_iterations):
        new = np.full(num_states, np.inf)
        np.minimum.at(new, d, decay * phi[s] + own)
        new[~np.isfinite(new)] = 0.0
        if 0 <= start < num_states:
            new[start] = 0.0
        moved = float(np.abs(new - phi).max()) if num_states else 0.0
        phi = new
        if moved < TOLERANCE:
            break
    return phi


def defer_weights(graph: DeviceGraph, share: float, decay: float) -> DeviceGraph:
    """`graph` with its arc and final weights reweighted by `deferred_potentials` (module docstring):
    the same states, arcs and labels, the same cost for every complete path."""
    arcs = graph.arc_arrays()
    src = arcs["src"].astype(np.int64)
    nxt = arcs["nextstate"].astype(np.int64)
    weight = arcs["weight"].astype(np.float64)
    phi = deferred_potentials(graph.num_states, graph.start, src, nxt, weight, share, decay)
    final = graph.final.cpu().numpy().astype(np.float64)
    return DeviceGraph.from_arrays(
        graph.num_states,
        graph.start,
        np.where(np.isfinite(final), final + phi, final).astype(np.float32),
        src,
        arcs["ilabel"],
        arcs["olabel"],
        (weight + phi[src] - phi[nxt]).astype(np.float32),
        nxt,
        meta=dict(graph.meta),
    )
