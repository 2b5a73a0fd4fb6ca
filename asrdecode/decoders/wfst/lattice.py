"""Lattices of the `wfst` decoder: lattice-beam pruning, state lattices, word lattices, n-best.

Kaldi-style exact lattice generation (prior-art D.1; Kaldi's LatticeFasterDecoder) in three steps:

1. **During the search** both backends keep every arc that survives the search beam (source and
   destination *node* = (frame, graph state), graph arc, acoustic cost) and every frame's token
   set after the epsilon closure (node forward costs ``alpha``), per utterance. Every
   ``prune_interval`` frames (Kaldi's default 25) they are pruned with `prune_window`, Kaldi's
   PruneForwardLinks / PruneActiveTokens: backward costs to the newest frame, where each node
   ends with cost ``-alpha`` (any current token may still be on the best path), so an arc's
   *window extra cost* ``alpha[src] + cost + beta[dst]`` is a lower bound of its extra cost over
   the final best path; arcs above ``lattice_beam`` (+ a float slack) can never be in the final
   lattice and are dropped, with the nodes no arc uses any more. Memory is then proportional to
   the lattice, not to the search. The compiled backend prunes inside its numba frame loop, the
   torch backend on its host copies (`LatticeStore`), with the same kernel; the final lattice
   does not depend on when (or whether) this happened.
2. **At the end** (`build_lattice`) the exact forward-backward pruning with final costs: backward
   costs ``beta`` frame by frame (epsilon arcs of a frame relaxed to a fixed point, then the
   emitting arcs into the frame), final costs at the last frame (if the search reached a final
   state; otherwise every last-frame node ends with cost 0, as Kaldi's fallback); keep arcs with
   ``alpha[src] + arc + beta[dst] <= best + lattice_beam``. The result is a `StateLattice`
   (Kaldi's raw state-level ``Lattice``: ilabel, olabel, graph cost, acoustic cost per arc), with
   nodes numbered canonically (frame, then state) and arcs sorted, so both backends give the
   same object.
3. **Word lattice** (`determinize`): Kaldi's pruned lattice determinization in the lattice
   semiring — weights (graph cost, acoustic cost, unit string), ``⊕`` = the lower total cost —
   into a `CompactLattice`: deterministic on words, for each word sequence the best path's graph
   and acoustic cost and its unit alignment (one graph ilabel per frame; word start/end frames
   follow from the string lengths as in Kaldi's CompactLatticeStateTimes). Non-word arcs are
   first collapsed into word arcs between word-arc destinations (their best path per pair, which
   keeps every word sequence's best path), then subsets of (node, residual weight) are built with
   the common string prefix emitted as early as possible; subsets whose best continuation is
   more than ``lattice_beam`` worse than the best path are not expanded, and a final
   forward-backward pass drops arcs on no path within the beam.

Writers: one Kaldi text archive for all utterances (`CompactLattice.to_kaldi_text`, ``lat.ark,t``
style: ``utt-id``, ``src dst word graph,acoustic,u1_u2_...`` per arc, ``state graph,acoustic,units``
per final state, blank line) and OpenFst binary word acceptors with total costs.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np

from asrdecode.numba_status import configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)

# window pruning keeps arcs up to lattice_beam + slack: float32 token costs against float64 sums
# along the arcs (a bound of their rounding differences, so pruning never changes the result)
WINDOW_SLACK = 0.05
WINDOW_SLACK_REL = 2e-5
# window pruning stops going back at a frame whose extra costs moved by at most this x lattice_beam
# (Kaldi's prune_scale)
PRUNE_SCALE = 0.1


@numba.njit(cache=True, nogil=True)
def _fill_slots(slot, node_frame, node_state, n_nodes, frame, start, value) -> int:
    """slot[state] = node index (value=True) or -1 (value=False) for the nodes of `frame`, which
    start at node `start`; returns the first node after them."""
    i = start
    while i < n_nodes and node_frame[i] == frame:
        slot[node_state[i]] = i if value else -1
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def _first_of_frame(frames, n, frame) -> int:
    """The index of the first node (or arc) of `frame` or later among the first `n`, from their
    `frames` in non-decreasing order (binary search)."""
    return np.searchsorted(frames[:n], frame)


@numba.njit(cache=True, nogil=True)
def backward_costs(frame, src, dst, cost, emit, beta) -> None:
    """Backward costs in place (``beta`` holds the terminal costs of the last frame's nodes, inf
    elsewhere): arcs in non-decreasing frame order, taken frame by frame from the newest; the
    epsilon arcs of a frame relaxed to a fixed point, then the emitting arcs into it (they set
    the previous frame's nodes). Arcs with a missing node (-1) are skipped."""
    p_end = frame.shape[0]
    while p_end > 0:
        f = frame[p_end - 1]
        p0 = p_end - 1
        while p0 > 0 and frame[p0 - 1] == f:
            p0 -= 1
        for _ in range(p_end - p0 + 1):  # epsilon arcs of the frame to a fixed point
            changed = False
            for p in range(p_end - 1, p0 - 1, -1):
                if not emit[p] and src[p] >= 0 and dst[p] >= 0:
                    c = cost[p] + beta[dst[p]]
                    if c < beta[src[p]]:
                        beta[src[p]] = c
                        changed = True
            if not changed:
                break
        for p in range(p0, p_end):  # emitting arcs into the frame
            if emit[p] and src[p] >= 0 and dst[p] >= 0:
                c = cost[p] + beta[dst[p]]
                if c < beta[src[p]]:
                    beta[src[p]] = c
        p_end = p0


@numba.njit(cache=True, nogil=True)
def compact_arcs(lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, score, limit, lo, hi) -> int:
    """Keep the arcs p in [lo, hi) with ``score[p] < limit``, moved in order to lo, lo+1, ...
    (compaction in place; `lat_lm` None without an on-the-fly LM); returns the end of the kept
    arcs. One call per range, not per arc: numba reference-counts a call's array arguments."""
    k = lo
    for p in range(lo, hi):
        if score[p] < limit:
            lat_frame[k] = lat_frame[p]
            lat_src[k] = lat_src[p]
            lat_dst[k] = lat_dst[p]
            lat_arc[k] = lat_arc[p]
            lat_ac[k] = lat_ac[p]
            if lat_lm is not None:
                lat_lm[k] = lat_lm[p]
            k += 1
    return k


@numba.njit(cache=True, nogil=True)
def _map_frame_arcs(
    arcs, boost, g, a_lo, a_hi, node_frame, node_state, n_nodes, lo_slot, hi_slot,
    lat_src, lat_dst, lat_arc, lat_ac, lat_lm, src, dst, cost, emit,
):  # fmt: skip
    """For the kept arcs [a_lo, a_hi) of frame `g`: source and destination node (-1: gone), total
    cost (with the on-the-fly LM's share `lat_lm`, None without one) and whether the arc is
    emitting (from frame g-1), each looked up once."""
    p_lo = _first_of_frame(node_frame, n_nodes, g - 1)
    p_hi = _fill_slots(lo_slot, node_frame, node_state, n_nodes, g - 1, p_lo, True)
    _fill_slots(hi_slot, node_frame, node_state, n_nodes, g, p_hi, True)
    n_boost = boost.shape[0]
    for p in range(a_lo, a_hi):
        a = lat_arc[p]
        e = arcs[a].column >= 0
        emit[p] = e
        src[p] = lo_slot[lat_src[p]] if e else hi_slot[lat_src[p]]
        dst[p] = hi_slot[lat_dst[p]]
        # graph + acoustic (+ word boost) cost; written out here, not called: a call with the
        # arrays as arguments costs numba a reference count on `boost` per arc
        c = np.float64(arcs[a].weight) + np.float64(lat_ac[p])
        ol = arcs[a].olabel
        if ol > 0 and ol < n_boost:
            c += np.float64(boost[ol])
        if lat_lm is not None:
            c += np.float64(lat_lm[p])
        cost[p] = c
    _fill_slots(lo_slot, node_frame, node_state, n_nodes, g - 1, p_lo, False)
    _fill_slots(hi_slot, node_frame, node_state, n_nodes, g, p_hi, False)


@numba.njit(cache=True, nogil=True)
def prune_window(
    arcs, boost, last_frame, beam,
    node_frame, node_state, node_cost, node_extra, n_nodes,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, n_arcs,
    lo_slot, hi_slot,
):  # fmt: skip
    """Kaldi's PruneActiveTokens / PruneForwardLinks over the kept lattice of one utterance up to
    `last_frame` (module docstring, step 1), incremental: each node stores its extra cost
    ``alpha + beta`` (`node_extra`; NaN for a node not seen by a pruning yet, inf above the
    beam). Frames are taken back from `last_frame` (its nodes: extra 0) until a frame whose
    nodes' extra costs all moved by at most ``PRUNE_SCALE * beam`` (Kaldi's delta): extra costs
    only grow as frames are added, so the older frames' stored values are lower bounds and
    pruning with them keeps a superset. The arcs into the frames taken are pruned at extra cost
    ``alpha[src] + cost + beta[dst] > beam`` (+ float slack) and the nodes there that no kept arc
    uses any more are dropped; the arrays are compacted in place from the first frame taken
    (order kept). The work per call follows the frames taken, so a long input costs O(T).
    Nodes and arcs are in non-decreasing frame order; `arcs` is the graph's arc record array
    (column, olabel, nextstate, weight), `boost` the word-id -> cost array, `lat_lm` the arcs'
    on-the-fly LM costs (`wfst-otf`; None without an LM); lo_slot / hi_slot: state-indexed scratch
    arrays, all -1 (and left so). Nodes' "states" are lattice states: graph states, or with an LM
    the (graph state, LM state) pair ids of the search. Returns (nodes kept, arcs kept, frames
    taken)."""
    if n_nodes == 0:
        return 0, 0, 0
    delta = PRUNE_SCALE * beam
    lo = _first_of_frame(node_frame, n_nodes, last_frame)  # first node of the newest frame taken
    best_end = np.inf
    beta_next = np.empty(max(n_nodes - lo, 64), np.float64)  # backward costs of that frame's nodes
    for i in range(lo, n_nodes):
        node_extra[i] = 0.0
        beta_next[i - lo] = -np.float64(node_cost[i])
        best_end = min(best_end, np.float64(node_cost[i]))
    limit = beam + WINDOW_SLACK + WINDOW_SLACK_REL * abs(best_end)
    # per arc, filled frame by frame as the frames are taken: nodes, cost, emitting
    src = np.empty(n_arcs, np.int64)
    dst = np.empty(n_arcs, np.int64)
    cost = np.empty(n_arcs, np.float64)
    emit = np.empty(n_arcs, np.bool_)
    a_hi = n_arcs
    a_mid = _first_of_frame(lat_frame, n_arcs, last_frame)  # arcs of the newest frame taken
    _map_frame_arcs(
        arcs, boost, last_frame, a_mid, a_hi, node_frame, node_state, n_nodes, lo_slot, hi_slot,
        lat_src, lat_dst, lat_arc, lat_ac, lat_lm, src, dst, cost, emit,
    )  # fmt: skip
    first_frame = np.int64(node_frame[0])
    stop = np.int64(last_frame)
    f = np.int64(last_frame) - 1
    tmp = np.empty(64, np.float64)  # backward costs of the nodes of frame f
    while f >= first_frame:
        f_lo = _first_of_frame(node_frame, lo, f)
        if f_lo == lo:
            break  # no nodes at frame f: nothing before it reaches the newest frame
        stop = f
        a_lo = _first_of_frame(lat_frame, a_mid, f)
        _map_frame_arcs(
            arcs, boost, f, a_lo, a_mid, node_frame, node_state, n_nodes, lo_slot, hi_slot,
            lat_src, lat_dst, lat_arc, lat_ac, lat_lm, src, dst, cost, emit,
        )  # fmt: skip
        if lo - f_lo > tmp.shape[0]:
            tmp = np.empty(2 * (lo - f_lo), np.float64)
        for i in range(lo - f_lo):
            tmp[i] = np.inf
        for p in range(a_mid, a_hi):  # emitting arcs into frame f + 1 (their sources: frame f)
            s = src[p]
            d = dst[p]
            if emit[p] and s >= 0 and d >= 0:
                c = cost[p] + beta_next[d - lo]
                if c < tmp[s - f_lo]:
                    tmp[s - f_lo] = c
        for _ in range(a_mid - a_lo + 1):  # epsilon arcs of frame f, to a fixed point
            changed = False
            for p in range(a_mid - 1, a_lo - 1, -1):
                s = src[p]
                d = dst[p]
                if not emit[p] and s >= 0 and d >= 0:
                    c = cost[p] + tmp[d - f_lo]
                    if c < tmp[s - f_lo]:
                        tmp[s - f_lo] = c
                        changed = True
            if not changed:
                break
        moved = False
        for i in range(f_lo, lo):
            e = np.float64(node_cost[i]) + tmp[i - f_lo]
            if not e <= limit:
                e = np.inf
                tmp[i - f_lo] = np.inf
            old = np.float64(node_extra[i])
            if not (e == old or abs(e - old) <= delta):
                moved = True
            node_extra[i] = e
        tmp, beta_next = beta_next, tmp  # frame f's backward costs serve the next frame back
        lo = f_lo
        a_hi = a_mid
        a_mid = a_lo
        if not moved:
            break
        f -= 1
    # prune the arcs into the frames taken (from `stop`), then their nodes; compact in place
    n0 = _first_of_frame(node_frame, n_nodes, stop)
    a0 = _first_of_frame(lat_frame, n_arcs, stop)
    used = np.zeros(n_nodes - n0, np.bool_)
    for i in range(n0, n_nodes):
        used[i - n0] = node_frame[i] == last_frame
    for p in range(a0, n_arcs):  # cost[p] becomes the arc's extra cost (inf: a node is gone)
        s = src[p]
        d = dst[p]
        extra = np.inf
        if s >= 0 and d >= 0:
            extra = np.float64(node_cost[s]) + cost[p] + np.float64(node_extra[d]) - np.float64(node_cost[d])
        if extra <= limit:
            if s >= n0:
                used[s - n0] = True
            used[d - n0] = True
        cost[p] = extra
    keep_below = np.nextafter(limit, np.inf)
    k = compact_arcs(lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, cost, keep_below, a0, n_arcs)
    m = n0
    for i in range(n0, n_nodes):
        if used[i - n0]:
            node_frame[m] = node_frame[i]
            node_state[m] = node_state[i]
            node_cost[m] = node_cost[i]
            node_extra[m] = node_extra[i]
            m += 1
    return m, k, last_frame - stop + 1


@numba.njit(cache=True, nogil=True)
def prune_final(
    arcs, boost, last_frame, beam,
    node_frame, node_state, node_cost, n_nodes,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, n_arcs,
    prev_slot, cur_slot, final_costs, use_final,
):  # fmt: skip
    """The end-of-utterance pruning over the whole kept lattice of one utterance (Kaldi's
    PruneForwardLinksFinal): last-frame nodes end with their final cost (state-indexed
    `final_costs`), or 0 if not `use_final`; arcs more than `beam` (+ float slack) above the best
    complete path are dropped, with the nodes no kept arc uses. It keeps a superset of what
    `build_lattice` keeps, which uses it to shrink the arcs before its exact pass. Compacts the
    node and arc arrays in place (order kept) and returns (nodes kept, arcs kept). Nodes and arcs
    are in non-decreasing frame order; `arcs` is the graph's arc record array (column, olabel,
    nextstate, weight), `boost` the word-id -> cost array; prev_slot / cur_slot: state-indexed
    scratch arrays, all -1 (and left so), that map the states of the previous and current frame
    to their nodes (O(1) lookups, no sort)."""
    if n_nodes == 0:
        return 0, 0
    beta = np.full(n_nodes, np.inf)
    best_end = np.inf
    for i in range(n_nodes):
        if node_frame[i] == last_frame:
            beta[i] = np.float64(final_costs[node_state[i]]) if use_final else 0.0
            best_end = min(best_end, np.float64(node_cost[i]) + beta[i])
    src = np.empty(n_arcs, np.int64)
    dst = np.empty(n_arcs, np.int64)
    cost = np.empty(n_arcs, np.float64)
    emit = np.empty(n_arcs, np.bool_)
    p = 0
    while p < n_arcs:  # the arcs of each frame: their nodes and costs
        q = p
        while q < n_arcs and lat_frame[q] == lat_frame[p]:
            q += 1
        _map_frame_arcs(
            arcs, boost, np.int64(lat_frame[p]), p, q, node_frame, node_state, n_nodes, prev_slot, cur_slot,
            lat_src, lat_dst, lat_arc, lat_ac, lat_lm, src, dst, cost, emit,
        )  # fmt: skip
        p = q
    backward_costs(lat_frame[:n_arcs], src, dst, cost, emit, beta)
    if not best_end < np.inf:
        return n_nodes, n_arcs  # no complete path: leave it to build_lattice
    limit = best_end + beam + WINDOW_SLACK + WINDOW_SLACK_REL * abs(best_end)
    used = np.zeros(n_nodes, np.bool_)
    for i in range(n_nodes):
        used[i] = node_frame[i] == last_frame
    for p in range(n_arcs):  # cost[p] becomes the arc's best total (inf: a node is gone)
        s = src[p]
        d = dst[p]
        total = np.inf
        if s >= 0 and d >= 0:
            total = np.float64(node_cost[s]) + cost[p] + beta[d]
        if total <= limit:
            used[s] = True
            used[d] = True
        cost[p] = total
    keep_below = np.nextafter(limit, np.inf)
    k = compact_arcs(lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, cost, keep_below, 0, n_arcs)
    m = 0
    for i in range(n_nodes):
        if used[i]:
            node_frame[m] = node_frame[i]
            node_state[m] = node_state[i]
            node_cost[m] = node_cost[i]
            m += 1
    return m, k


ARC_FIELDS = ("frame", "src", "dst", "arc", "ac")
ARC_DTYPES = (np.int32, np.int32, np.int32, np.int32, np.float32)
NODE_FIELDS = ("frame", "state", "cost")
NODE_DTYPES = (np.int32, np.int32, np.float32)
EXTRA_DTYPE = np.float32  # a node's stored extra cost (`prune_window`)


class LatticeStore:
    """The lattice arcs and nodes of one utterance or stream on the host (torch backend), in
    growable arrays with the compiled backend's dtypes, pruned in place by `prune_window` (the
    nodes carry a fourth column, their extra cost, NaN until a pruning sets it)."""

    def __init__(self) -> None:
        self.arcs = [np.empty(0, dt) for dt in ARC_DTYPES]
        self.nodes = [np.empty(0, dt) for dt in (*NODE_DTYPES, EXTRA_DTYPE)]
        self.n_arcs = 0
        self.n_nodes = 0
        self.dirty = False  # new data since the last pruning

    @staticmethod
    def _append(cols: list[np.ndarray], n: int, new: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
        k = len(new[0])
        if n + k > len(cols[0]):
            cap = max(2 * len(cols[0]), n + k, 256)
            grown = []
            for c in cols:
                g = np.empty(cap, c.dtype)
                g[:n] = c[:n]
                grown.append(g)
            cols = grown
        for c, x in zip(cols, new, strict=True):
            c[n : n + k] = x
        return cols, n + k

    def add_arcs(self, cols: list[np.ndarray]) -> None:
        self.arcs, self.n_arcs = self._append(self.arcs, self.n_arcs, cols)
        self.dirty = True

    def add_nodes(self, cols: list[np.ndarray]) -> None:
        extra = np.full(len(cols[0]), np.nan, EXTRA_DTYPE)
        self.nodes, self.n_nodes = self._append(self.nodes, self.n_nodes, [*cols, extra])
        self.dirty = True

    def prune(self, arc_records: np.ndarray, boost: np.ndarray, beam: float, slots: np.ndarray) -> None:
        """Window pruning up to the newest frame of this store (see the module docstring); a no-op
        when nothing was added since the last call (a finished utterance, an idle stream)."""
        if not self.n_nodes or not self.dirty:
            return
        self.dirty = False
        last = int(self.nodes[0][: self.n_nodes].max())
        self.n_nodes, self.n_arcs, _ = prune_window(
            arc_records, boost, last, float(beam),
            *self.nodes, self.n_nodes, *self.arcs, None, self.n_arcs, slots[0], slots[1],
        )  # fmt: skip

    def data(self) -> tuple[np.recarray, np.recarray]:
        """Copies of the arcs and nodes (the fields `build_lattice` reads)."""
        arcs = np.rec.fromarrays([c[: self.n_arcs].copy() for c in self.arcs], names=list(ARC_FIELDS))
        nodes = np.rec.fromarrays(
            [c[: self.n_nodes].copy() for c in self.nodes[: len(NODE_FIELDS)]], names=list(NODE_FIELDS)
        )
        return arcs, nodes


@dataclass
class StateLattice:
    """A pruned state-level lattice of one utterance (Kaldi's raw ``Lattice``).

    Nodes 0..num_nodes-1 in (frame, state) order (node 0 = the start); node_frame / node_state:
    each node's frame (-1 = before the first frame) and graph state. Arcs sorted by (src, dst,
    graph arc): src, dst, arc (graph arc index), ilabel (graph input label, column + 1, 0 =
    epsilon), olabel (word id, 0 = none), graph, acoustic (costs of the arc; graph includes the
    word boost). final: node id -> final cost (graph part; acoustic 0).
    """

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    arc: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    graph: np.ndarray
    acoustic: np.ndarray
    final: dict[int, float]
    node_frame: np.ndarray
    node_state: np.ndarray
    num_frames: int
    words: dict[int, str]
    beam: float = 8.0
    alpha: np.ndarray | None = None  # forward cost of each node (the search's token cost)
    beta: np.ndarray | None = None  # backward cost of each node (with final costs)

    @property
    def num_arcs(self) -> int:
        return int(len(self.src))

    def best_path_of(self, word_ids: list[int]) -> tuple[np.ndarray, np.ndarray, float] | None:
        """The cheapest path of the lattice that outputs exactly `word_ids` (graph word ids), as
        (graph arc indices, the frame of each: an emitting arc's is the frame it reads, an epsilon
        arc's the last frame read, as the searches' back pointers give them; total cost with the
        final cost), or None if no path outputs them (`word_path_kernel`)."""
        words = np.asarray(word_ids, dtype=np.int64)
        if self.num_nodes == 0 or not self.final:
            return None
        best, back_arc, back_k, lo, hi, off = word_path_kernel(
            self.src, self.dst, self.ilabel, self.olabel, self.graph + self.acoustic, self.node_frame,
            words, self.num_arcs + 1,
        )  # fmt: skip

        def slot(node: int, k: int) -> int:  # the (node, words read) pair's entry, -1 if outside the band
            return int(off[node] + k - lo[node]) if lo[node] <= k <= hi[node] else -1

        k = len(words)
        end, total = -1, math.inf
        for node, fin in self.final.items():
            j = slot(node, k)
            if j >= 0 and best[j] + fin < total:
                end, total = node, float(best[j] + fin)
        if end < 0:
            return None
        path: list[int] = []
        node, j = end, slot(end, k)
        while back_arc[j] >= 0 and len(path) <= self.num_arcs:
            a = int(back_arc[j])
            path.append(a)
            node, k = int(self.src[a]), int(back_k[j])
            j = slot(node, k)
        path.reverse()
        idx = np.asarray(path, dtype=np.int64)
        return self.arc[idx].astype(np.int64), self.node_frame[self.dst[idx]].astype(np.int64), total

    def to_kaldi_text(self, utt_id: str) -> str:
        """Kaldi text form of a state-level ``Lattice``: `utt-id`, then `src dst ilabel olabel
        graph,acoustic` per arc and `node graph,acoustic` per final node, then a blank line."""
        lines = [utt_id]
        for i in range(self.num_arcs):
            lines.append(
                f"{self.src[i]} {self.dst[i]} {self.ilabel[i]} {self.olabel[i]} "
                f"{_num(self.graph[i])},{_num(self.acoustic[i])}"
            )
        for s, w in sorted(self.final.items()):
            lines.append(f"{s} {_num(w)},0")
        return "\n".join(lines) + "\n\n"


def _num(x: float) -> str:
    return f"{float(x):.8g}"


@dataclass
class CompactLattice:
    """A word lattice of one utterance in Kaldi's CompactLattice form: deterministic on words,
    each arc (src, dst, word, graph cost, acoustic cost, units) where units are the graph input
    labels of the frames the arc covers (one per frame, epsilons dropped). State 0 is the start;
    final: state -> (graph, acoustic, units). times[s] = frames before state s, so an arc covers
    frames [times[src], times[src] + len(units)). `state_lattice` is what it was made from."""

    num_states: int
    src: np.ndarray
    dst: np.ndarray
    word: np.ndarray
    graph: np.ndarray
    acoustic: np.ndarray
    units: list[tuple[int, ...]]
    final: dict[int, tuple[float, float, tuple[int, ...]]]
    times: np.ndarray
    num_frames: int
    words: dict[int, str]
    beam: float = 8.0
    state_lattice: StateLattice | None = None
    frame_shift: float = 0.0  # seconds per frame (set by the decoder)
    _fst: Any = field(default=None, repr=False)
    _walk: Any = field(default=None, repr=False)

    @property
    def num_arcs(self) -> int:
        return int(len(self.src))

    def density(self) -> float:
        """Arcs per frame (Kaldi's lattice density)."""
        return self.num_arcs / max(self.num_frames, 1)

    def word_arcs(self) -> list[tuple[int, int, str, int, int, float, float]]:
        """(src, dst, word, start frame, end frame, graph, acoustic) of every word arc (epsilon
        arcs, word 0, left out), from the state times (Kaldi CompactLatticeStateTimes; without
        word-boundary alignment the boundaries sit where the graph puts its word labels).
        Seconds = frames * `frame_shift`."""
        out = []
        for i in range(self.num_arcs):
            if int(self.word[i]) == 0:
                continue
            start = int(self.times[self.src[i]])
            out.append(
                (
                    int(self.src[i]),
                    int(self.dst[i]),
                    self.words.get(int(self.word[i]), str(int(self.word[i]))),
                    start,
                    start + len(self.units[i]),
                    float(self.graph[i]),
                    float(self.acoustic[i]),
                )
            )
        return out

    def to_kaldi_text(self, utt_id: str) -> str:
        """One ``lat.ark,t`` entry (Kaldi's CompactLattice text form): `utt-id`, then `src dst word
        graph,acoustic,u1_u2_...` per arc, `state graph,acoustic,units` per final state, a blank
        line (the units part may be empty, the comma before it stays, as Kaldi writes it)."""
        lines = [utt_id]
        for i in range(self.num_arcs):
            units = "_".join(map(str, self.units[i]))
            lines.append(
                f"{self.src[i]} {self.dst[i]} {self.word[i]} "
                f"{_num(self.graph[i])},{_num(self.acoustic[i])},{units}"
            )
        for s in sorted(self.final):
            g, a, units = self.final[s]
            lines.append(f"{s} {_num(g)},{_num(a)},{'_'.join(map(str, units))}")
        return "\n".join(lines) + "\n\n"

    def word_fst(self) -> Any:
        """The word acceptor with total costs (graph + acoustic) as a kaldifst StdVectorFst
        (deterministic, like the lattice), for OpenFst tools and n-best."""
        if self._fst is not None:
            return self._fst
        import kaldifst

        fst = kaldifst.StdVectorFst()
        for _ in range(self.num_states):
            fst.add_state()
        if self.num_states:
            fst.start = 0
        for i in range(self.num_arcs):
            w = int(self.word[i])
            total = float(self.graph[i] + self.acoustic[i])
            fst.add_arc(int(self.src[i]), kaldifst.StdArc(w, w, total, int(self.dst[i])))
        for s, (g, a, _) in self.final.items():
            fst.set_final(s, g + a)
        self._fst = fst
        return fst

    def _walk_order(self) -> tuple[list[int], list[int], list[float], list[list[int]], list[int] | None]:
        """(src, dst, total cost per arc, each state's arcs, states in topological order; None if
        the arcs have a cycle) as Python lists, built once per lattice."""
        if self._walk is None:
            n = self.num_states
            src, dst = self.src.tolist(), self.dst.tolist()
            cost = (np.asarray(self.graph, np.float64) + np.asarray(self.acoustic, np.float64)).tolist()
            out_arcs = _by_source(src, n)
            order = _topological_order(list(zip(src, dst, strict=True)), out_arcs, n)
            self._walk = (src, dst, cost, out_arcs, order)
        return self._walk

    def arc_posteriors(self) -> np.ndarray:
        """Each arc's posterior: the probability mass of the paths through it, path probabilities
        ``exp(-total cost)`` normalised over all complete paths (forward-backward in the log
        semiring over the lattice's costs, which carry the search's acoustic scale, as Kaldi's
        ``lattice-arc-post --acoustic-scale``). All zeros without a complete path."""
        n, m = self.num_states, self.num_arcs
        post = np.zeros(m)
        if n == 0 or not self.final:
            return post
        src, dst, cost, out_arcs, order = self._walk_order()
        if order is None:  # a determinized lattice is acyclic; anything else gets no confidences
            return post
        fwd = [-math.inf] * n
        fwd[0] = 0.0
        for s in order:
            for i in out_arcs[s]:
                fwd[dst[i]] = _log_add(fwd[dst[i]], fwd[s] - cost[i])
        bwd = [-math.inf] * n
        for s, (g, a, _) in self.final.items():
            bwd[s] = -(g + a)
        for s in reversed(order):
            for i in out_arcs[s]:
                bwd[s] = _log_add(bwd[s], bwd[dst[i]] - cost[i])
        total = bwd[0]
        if not math.isfinite(total):
            return post
        for i in range(m):
            post[i] = math.exp(min(fwd[src[i]] - cost[i] + bwd[dst[i]] - total, 0.0))
        return post

    def path_of(self, names: list[str]) -> list[int] | None:
        """The word arcs (indices) of the cheapest complete path reading the word sequence `names`
        (epsilon arcs, word 0, skipped over); None if the lattice has no such path."""
        n, k_max = self.num_states, len(names)
        if n == 0 or not self.final:
            return None
        _, dst, cost, out_arcs, order = self._walk_order()
        if order is None:
            return None
        label = [self.words.get(int(w), str(int(w))) if w else "" for w in self.word.tolist()]
        best: dict[tuple[int, int], tuple[float, int, tuple[int, int] | None]] = {(0, 0): (0.0, -1, None)}
        counts: list[set[int]] = [set() for _ in range(n)]  # the word counts each state is reached with
        counts[0].add(0)
        for s in order:  # (state, words read) -> (cost, arc in, previous pair)
            for k in sorted(counts[s]):
                here = best[(s, k)]
                for i in out_arcs[s]:
                    if label[i] == "":
                        nxt = (dst[i], k)
                    elif k < k_max and label[i] == names[k]:
                        nxt = (dst[i], k + 1)
                    else:
                        continue
                    c = here[0] + cost[i]
                    if nxt not in best or c < best[nxt][0]:
                        best[nxt] = (c, i, (s, k))
                        counts[nxt[0]].add(nxt[1])
        ends = [(best[(f, k_max)][0] + g + a, f) for f, (g, a, _) in self.final.items() if (f, k_max) in best]
        if not ends:
            return None
        pair: tuple[int, int] | None = (min(ends)[1], k_max)
        arcs = []
        while pair is not None and best[pair][1] >= 0:
            _, i, prev = best[pair]
            if label[i]:
                arcs.append(i)
            pair = prev
        return arcs[::-1]

    def word_confidences(self, names: list[str]) -> list[float] | None:
        """Confidence of each word of the hypothesis `names`: over the frames of its arc on the
        hypothesis' path (`path_of`), the highest summed posterior of the lattice arcs with that
        word covering the frame (Wessel et al. 2001's frame-based word posterior, C_max; Kaldi's
        ``lattice-to-ctm-conf`` gives sausage posteriors instead). Spans are the arcs' own (the
        frames between word labels), so they are compared within the lattice. None if the lattice
        has no path for the hypothesis."""
        path = self.path_of(names)
        if path is None:
            return None
        post = self.arc_posteriors()
        units_len = [len(u) for u in self.units]
        times, word = self.times.tolist(), self.word.tolist()
        by_word: dict[int, list[tuple[int, int, float]]] = {}
        for i in range(self.num_arcs):
            if word[i]:
                start = times[self.src[i]]
                by_word.setdefault(word[i], []).append((start, start + max(units_len[i], 1), float(post[i])))
        out = []
        for i in path:
            first = times[self.src[i]]
            end = first + max(units_len[i], 1)
            cover = np.zeros(end - first)
            for a0, a1, p in by_word[word[i]]:
                lo, hi = max(a0, first), min(a1, end)
                if lo < hi:
                    cover[lo - first : hi - first] += p
            out.append(float(min(cover.max(), 1.0)))
        return out

    def nbest(self, n: int) -> list[tuple[list[str], float]]:
        """Up to n distinct word sequences with their total cost, best first (n shortest paths of
        the deterministic word lattice)."""
        import kaldifst

        if self.num_states == 0 or not self.final:
            return []
        paths = kaldifst.convert_nbest_to_vector(kaldifst.shortest_path(self.word_fst(), n=n))
        out = []
        for p in paths:
            ok, _, olabels, weight = kaldifst.get_linear_symbol_sequence(p)
            if ok:
                out.append(([self.words.get(o, str(o)) for o in olabels], float(weight.value)))
        out.sort(key=lambda x: x[1])
        return out


def concatenate(parts: list[CompactLattice], frame_offsets: list[int]) -> CompactLattice | None:
    """One word lattice from the lattices of consecutive segments of an input (OpenFst's Concat in
    the lattice semiring): every final state of a segment gets an epsilon arc (word 0) to the next
    segment's start state carrying its final weight and units; the last segment's final states
    stay final. `frame_offsets`: each segment's first frame in the input, which shifts its state
    times. None if some segment has no path to a final state (nothing to join through)."""
    if not parts or any(p.num_states == 0 or not p.final for p in parts):
        return None
    src, dst, word, graph, acoustic, units, times = [], [], [], [], [], [], []
    words: dict[int, str] = {}
    base = 0
    for k, part in enumerate(parts):
        src.append(part.src + base)
        dst.append(part.dst + base)
        word.append(part.word)
        graph.append(np.asarray(part.graph, np.float64))
        acoustic.append(np.asarray(part.acoustic, np.float64))
        units += list(part.units)
        times.append(np.asarray(part.times, np.int64) + int(frame_offsets[k]))
        words.update(part.words)
        if k + 1 < len(parts):
            finals = sorted(part.final)
            nxt = base + part.num_states  # the next segment's start state
            src.append(np.array(finals, np.int64) + base)
            dst.append(np.full(len(finals), nxt, np.int64))
            word.append(np.zeros(len(finals), np.int64))
            graph.append(np.array([part.final[f][0] for f in finals], np.float64))
            acoustic.append(np.array([part.final[f][1] for f in finals], np.float64))
            units += [part.final[f][2] for f in finals]
        base += part.num_states
    last = parts[-1]
    offset = base - last.num_states
    return CompactLattice(
        num_states=base,
        src=np.concatenate(src).astype(np.int64),
        dst=np.concatenate(dst).astype(np.int64),
        word=np.concatenate(word).astype(np.int64),
        graph=np.concatenate(graph),
        acoustic=np.concatenate(acoustic),
        units=units,
        final={s + offset: w for s, w in last.final.items()},
        times=np.concatenate(times),
        num_frames=int(frame_offsets[-1]) + last.num_frames,
        words=words,
        beam=parts[0].beam,
        frame_shift=parts[0].frame_shift,
    )


def write_kaldi_text(path: str | Path, lattices: dict[str, CompactLattice], append: bool = False) -> None:
    """Lattices into one `lat.ark,t`-style text archive (appended with append=True)."""
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        for utt, lat in lattices.items():
            fh.write(lat.to_kaldi_text(utt))


def write_word_fst(path: str | Path, lattice: CompactLattice) -> None:
    """The word lattice as an OpenFst binary acceptor with total costs (`fstprint` reads it)."""
    lattice.word_fst().write(str(path))


def read_kaldi_text(text: str) -> dict[str, tuple[list[tuple], dict[int, tuple]]]:
    """Parse a CompactLattice text archive: utt -> (arcs (src, dst, word, graph, acoustic, units),
    finals state -> (graph, acoustic, units))."""
    out: dict[str, tuple[list[tuple], dict[int, tuple]]] = {}
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        arcs, finals = [], {}
        for line in lines[1:]:
            f = line.split()
            g, a, units = f[-1].split(",")
            w = (float(g), float(a), tuple(int(u) for u in units.split("_")) if units else ())
            if len(f) == 4:
                arcs.append((int(f[0]), int(f[1]), int(f[2]), *w))
            elif len(f) == 2:
                finals[int(f[0])] = w
            else:
                raise ValueError(f"lattice {lines[0]}: cannot parse line {line!r}")
        out[lines[0].strip()] = (arcs, finals)
    return out


def _prefilter(
    arcs: np.recarray,
    nodes: np.recarray,
    num_frames: int,
    num_states: int,
    arc_records: np.ndarray,
    boost: dict[int, float],
    g_final: np.ndarray,
    reached_final: bool,
    beam: float,
) -> tuple[np.recarray, np.recarray]:
    """`prune_final` on copies of the arcs and nodes."""
    a_cols = [np.ascontiguousarray(arcs[f], dtype=dt) for f, dt in zip(ARC_FIELDS, ARC_DTYPES, strict=True)]
    n_cols = [
        np.ascontiguousarray(nodes[f], dtype=dt) for f, dt in zip(NODE_FIELDS, NODE_DTYPES, strict=True)
    ]
    lm = np.ascontiguousarray(arcs["lm"], dtype=np.float32) if _has_lm(arcs) else None
    dense = np.zeros(max(boost, default=-1) + 1, np.float32)
    for w, c in boost.items():
        dense[w] = c
    slots = np.full((2, max(num_states, 1)), -1, np.int32)
    nn, na = prune_final(
        arc_records, dense, num_frames - 1, float(beam),
        *n_cols, len(n_cols[0]), *a_cols, lm, len(a_cols[0]), slots[0], slots[1],
        np.ascontiguousarray(g_final, dtype=np.float32), bool(reached_final),
    )  # fmt: skip
    kept = [c[:na] for c in a_cols] + ([lm[:na]] if lm is not None else [])
    names = list(ARC_FIELDS) + (["lm"] if lm is not None else [])
    return (
        np.rec.fromarrays([c[:nn] for c in n_cols], names=list(NODE_FIELDS)),
        np.rec.fromarrays(kept, names=names),
    )


def _has_lm(arcs: np.recarray) -> bool:
    """Lattice arcs of a search with an on-the-fly LM carry its cost per arc (field ``lm``)."""
    return "lm" in (arcs.dtype.names or ())


def build_lattice(
    arcs: np.recarray | None,
    nodes: np.recarray | None,
    num_frames: int,
    start_state: int,
    g_ilabel: np.ndarray,
    g_olabel: np.ndarray,
    g_weight: np.ndarray,
    g_final: np.ndarray,
    boost: dict[int, float],
    reached_final: bool,
    lattice_beam: float,
    words: dict[int, str],
    arc_records: np.ndarray | None = None,
) -> StateLattice | None:
    """One utterance's pruned StateLattice from its search arcs and nodes (module doc, step 2).
    With the graph's `arc_records` (graph.format.graph_records) the arcs are first shrunk by the
    compiled pruning kernel at the end of the utterance (a superset of what is kept here).

    With an on-the-fly LM (`wfst-otf`) the nodes' states are the search's (graph state, LM state)
    pair ids, `g_final` holds each pair's final cost (graph final + the LM's end-of-sentence
    share), `start_state` is the start pair, and the arcs' field ``lm`` (the LM's share of each
    arc) is part of its graph cost."""
    if nodes is None or not len(nodes):
        return None
    S = int(len(g_final))
    if arc_records is not None and arcs is not None and len(arcs):
        nodes, arcs = _prefilter(
            arcs, nodes, num_frames, S, arc_records, boost, g_final, reached_final, lattice_beam
        )
    node_key = (nodes.frame.astype(np.int64) + 1) * S + nodes.state
    order = np.argsort(node_key, kind="stable")
    node_key, alpha = node_key[order], nodes.cost[order].astype(np.float64)
    node_frame = nodes.frame[order].astype(np.int64)
    n_nodes = len(node_key)
    if arcs is None:
        arcs = np.rec.fromarrays([np.zeros(0, np.int64)] * 5, names=list(ARC_FIELDS))
    arc_id = arcs.arc.astype(np.int64)
    emitting = g_ilabel[arc_id] > 0
    src_frame = arcs.frame.astype(np.int64) - emitting
    skey = (src_frame + 1) * S + arcs.src
    dkey = (arcs.frame.astype(np.int64) + 1) * S + arcs.dst

    def lookup(k: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(node_key, k).clip(max=max(n_nodes - 1, 0))
        return np.where(node_key[pos] == k, pos, -1)

    src, dst = lookup(skey), lookup(dkey)
    ok = (src >= 0) & (dst >= 0)
    # an improved token re-expands its epsilon arcs: keep one copy of each (src node, arc) (the
    # graph arc and its source node fix the destination node)
    if ok.any():
        _, first = np.unique(np.where(ok, src, -1) * (len(g_ilabel) + 1) + arc_id, return_index=True)
        dup = np.ones(len(ok), dtype=bool)
        dup[first] = False
        ok &= ~dup
    src, dst, arc_id, ac = src[ok], dst[ok], arc_id[ok], arcs.ac[ok].astype(np.float64)
    emitting, frame = emitting[ok], arcs.frame[ok].astype(np.int64)
    ol = g_olabel[arc_id]
    graph = g_weight[arc_id].astype(np.float64)
    if _has_lm(arcs):
        graph = graph + arcs["lm"][ok].astype(np.float64)
    if boost:
        graph = graph + np.array([boost.get(int(o), 0.0) for o in ol])
    cost = graph + ac

    # final costs at the last frame
    last = node_frame == num_frames - 1
    fin = np.full(n_nodes, math.inf)
    if reached_final:
        fin[last] = g_final[node_key[last] % S]
    else:
        fin[last] = 0.0
    # backward costs (the search's arcs come in frame order)
    beta = fin.copy()
    if len(frame) and np.any(np.diff(frame) < 0):
        by_frame = np.argsort(frame, kind="stable")
        src, dst, arc_id, ac, emitting, frame = (x[by_frame] for x in (src, dst, arc_id, ac, emitting, frame))
        ol, graph, cost = ol[by_frame], graph[by_frame], cost[by_frame]
    backward_costs(frame, src, dst, cost, emitting, beta)
    if not np.isfinite(alpha + fin).any():
        return None  # no token survived to the last frame
    best = float(np.min(alpha + fin))
    keep = alpha[src] + cost + beta[dst] <= best + lattice_beam + 1e-4
    src, dst, arc_id, ol, graph, ac = src[keep], dst[keep], arc_id[keep], ol[keep], graph[keep], ac[keep]
    # renumber: start node first, then kept nodes in (frame, state) order; arcs sorted
    start = lookup(np.array([0 * S + start_state]))[0]
    used = np.zeros(n_nodes, dtype=bool)
    used[src] = used[dst] = True
    if start >= 0:
        used[start] = True
    ids = np.flatnonzero(used)
    if start >= 0:
        ids = np.concatenate(([start], ids[ids != start]))
    new_id = np.full(n_nodes, -1, dtype=np.int64)
    new_id[ids] = np.arange(len(ids))
    src, dst = new_id[src], new_id[dst]
    order = np.lexsort((arc_id, dst, src))
    final = {int(new_id[i]): float(fin[i]) for i in np.flatnonzero(np.isfinite(fin) & used) if new_id[i] >= 0}
    return StateLattice(
        num_nodes=len(ids),
        src=src[order],
        dst=dst[order],
        arc=arc_id[order],
        ilabel=g_ilabel[arc_id[order]].astype(np.int64),
        olabel=ol[order].astype(np.int64),
        graph=graph[order],
        acoustic=ac[order],
        final=final,
        node_frame=node_frame[ids],
        node_state=node_key[ids] % S,
        num_frames=num_frames,
        words=words,
        beam=lattice_beam,
        alpha=alpha[ids],
        beta=beta[ids],
    )


# ---------------------------------------------------------------------------------------------
# the best path of a given word sequence (n-best rescoring reads the path of its new best)


@numba.njit(cache=True, nogil=True)
def _frame_groups(src, node_frame) -> tuple[np.ndarray, np.ndarray]:
    """The first node and the first arc of each frame's nodes (nodes in frame order after node 0,
    arcs sorted by source node), with one end entry each."""
    n_nodes, n_arcs = len(node_frame), len(src)
    node_start = [0]
    arc_start = [0]
    n0, a0 = 0, 0
    while n0 < n_nodes:
        n1 = n0 + 1
        while n1 < n_nodes and node_frame[n1] == node_frame[n0]:
            n1 += 1
        a1 = a0
        while a1 < n_arcs and src[a1] < n1:
            a1 += 1
        node_start.append(n1)
        arc_start.append(a1)
        n0, a0 = n1, a1
    return np.array(node_start, np.int64), np.array(arc_start, np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def _relax_band(i, src, dst, olabel, n_words, lo, hi) -> bool:
    """Widen the band of word counts of arc i's destination by its source's (clipped at n_words)."""
    s, d = src[i], dst[i]
    if lo[s] > n_words:
        return False
    w = 1 if olabel[i] > 0 else 0
    nlo, nhi = lo[s] + w, min(hi[s] + w, n_words)
    if nlo > nhi:
        return False
    changed = False
    if nlo < lo[d]:
        lo[d] = nlo
        changed = True
    if nhi > hi[d]:
        hi[d] = nhi
        changed = True
    return changed


@numba.njit(cache=True, nogil=True, inline="always")
def _relax_word_arc(i, src, dst, olabel, cost, words, lo, hi, off, best, back_arc, back_k) -> bool:
    """Relax arc i for every word position its source node holds: an arc without a word keeps
    the position, an arc with the position's next word moves one on. Whether anything improved."""
    s, d, w = src[i], dst[i], olabel[i]
    n_words = len(words)
    changed = False
    for k in range(lo[s], hi[s] + 1):
        c = best[off[s] + k - lo[s]]
        if c == np.inf:
            continue
        if w == 0:
            nk = k
        elif k < n_words and words[k] == w:
            nk = k + 1
        else:
            continue
        nc = c + cost[i]
        j = off[d] + nk - lo[d]
        if nc < best[j]:
            best[j] = nc
            back_arc[j] = i
            back_k[j] = k
            changed = True
    return changed


@numba.njit(cache=True, nogil=True)
def word_path_kernel(src, dst, ilabel, olabel, cost, node_frame, words, max_passes):
    """Lowest cost of reaching each (node, words read) pair from node 0 over the arcs of a
    StateLattice (arcs sorted by source node; nodes in frame order after node 0), with back
    pointers: frame by frame, the frame's epsilon arcs relaxed to a fixed point (at most
    `max_passes` passes), then its emitting arcs into the next frame. Only the pairs whose count
    lies between the fewest and the most words of any path to the node are kept (a first pass
    finds that band ``lo..hi`` per node), so memory follows the lattice, not nodes x words.
    Returns (best, back arc, back position) over the kept pairs, ``lo``, ``hi`` and each node's
    offset into them."""
    n_nodes, n_words = len(node_frame), len(words)
    node_start, arc_start = _frame_groups(src, node_frame)
    lo = np.full(n_nodes, n_words + 1, np.int64)
    hi = np.full(n_nodes, -1, np.int64)
    if n_nodes:
        lo[0] = hi[0] = 0
    for g in range(len(node_start) - 1):
        a0, a1 = arc_start[g], arc_start[g + 1]
        for _ in range(max_passes):
            changed = False
            for i in range(a0, a1):
                if ilabel[i] == 0 and _relax_band(i, src, dst, olabel, n_words, lo, hi):
                    changed = True
            if not changed:
                break
        for i in range(a0, a1):
            if ilabel[i] != 0:
                _relax_band(i, src, dst, olabel, n_words, lo, hi)
    off = np.zeros(n_nodes + 1, np.int64)
    for n in range(n_nodes):
        off[n + 1] = off[n] + max(hi[n] - lo[n] + 1, 0)
    best = np.full(off[n_nodes], np.inf)
    back_arc = np.full(off[n_nodes], -1, np.int64)
    back_k = np.full(off[n_nodes], -1, np.int64)
    if n_nodes:
        best[0] = 0.0
    for g in range(len(node_start) - 1):
        a0, a1 = arc_start[g], arc_start[g + 1]
        for _ in range(max_passes):
            changed = False
            for i in range(a0, a1):
                if ilabel[i] == 0 and _relax_word_arc(
                    i, src, dst, olabel, cost, words, lo, hi, off, best, back_arc, back_k
                ):
                    changed = True
            if not changed:
                break
        for i in range(a0, a1):
            if ilabel[i] != 0:
                _relax_word_arc(i, src, dst, olabel, cost, words, lo, hi, off, best, back_arc, back_k)
    return best, back_arc, back_k, lo, hi, off


# ---------------------------------------------------------------------------------------------
# word lattice: pruned determinization in the lattice semiring (module doc, step 3)

_QUANT = 1e-4  # residual weights are compared (hashed) at this resolution, as Kaldi's delta
# unit strings inside the determinization: bytes of big-endian int32 (units are positive, so the
# bytes order like the integer tuples)
_UNIT_DTYPE = np.dtype(">i4")
UNIT_BYTES = _UNIT_DTYPE.itemsize


def _shared_units(a: bytes, b: bytes) -> int:
    """The number of leading units two unit strings share (binary search over prefix slices)."""
    n = min(len(a), len(b)) // UNIT_BYTES
    if a[: UNIT_BYTES * n] == b[: UNIT_BYTES * n]:
        return n
    lo, hi = 0, n  # a and b share lo units, not hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[: UNIT_BYTES * mid] == b[: UNIT_BYTES * mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _unit_tuples(strings: list[bytes]) -> list[tuple[int, ...]]:
    """Unit strings (bytes) as tuples of ints, decoded at once."""
    flat = np.frombuffer(b"".join(strings), _UNIT_DTYPE).tolist()
    out, k = [], 0
    for b in strings:
        n = len(b) // UNIT_BYTES
        out.append(tuple(flat[k : k + n]))
        k += n
    return out


def _better(a: tuple, b: tuple) -> bool:
    """Lattice-semiring order of (graph, acoustic, units): lower total, then lower graph, then
    shorter and smaller units (a total order, so ties never depend on arc order)."""
    ta, tb = a[0] + a[1], b[0] + b[1]
    if ta != tb:
        return ta < tb
    if a[0] != b[0]:
        return a[0] < b[0]
    return (len(a[2]), a[2]) < (len(b[2]), b[2])


@numba.njit(cache=True, nogil=True)
def _grown(a: np.ndarray, need: int) -> np.ndarray:
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), a.dtype)
    b[: a.shape[0]] = a
    return b


@numba.njit(cache=True, nogil=True)
def _path_units(x, u, pred_node, pred_arc, ilabel, extra, units, n_units):
    """Append the unit labels of the best path u -> x (then `extra` if > 0) to `units`; returns
    (units, start, length)."""
    length = 1 if extra > 0 else 0
    y = x
    while y != u:
        if ilabel[pred_arc[y]] > 0:
            length += 1
        y = pred_node[y]
    units = _grown(units, n_units + length)
    k = n_units + length
    if extra > 0:
        k -= 1
        units[k] = extra
    y = x
    while y != u:
        if ilabel[pred_arc[y]] > 0:
            k -= 1
            units[k] = ilabel[pred_arc[y]]
        y = pred_node[y]
    return units, n_units, length


@numba.njit(cache=True, nogil=True)
def collapse_kernel(out_ptr, dst, ilabel, olabel, graph, acoustic, alpha, beta, fin, entries, limit):
    """For each entry node: label-correcting best paths over non-word arcs (lower total, then
    lower graph cost), nodes popped in (frame, state) order, partial paths outside the beam not
    followed; every word arc reached and the best final. Returns flat arrays: arcs (entry, word,
    dst, graph, acoustic, unit start, unit length), finals per entry (graph, acoustic, unit
    start, unit length; graph inf = none) and the unit buffer."""
    n = alpha.shape[0]
    stamp = np.full(n, -1, np.int64)
    inq = np.full(n, -1, np.int64)
    lab_g = np.zeros(n)
    lab_a = np.zeros(n)
    pred_node = np.full(n, -1, np.int64)
    pred_arc = np.full(n, -1, np.int64)
    cap = 1024
    o_u = np.empty(cap, np.int64)
    o_w = np.empty(cap, np.int64)
    o_v = np.empty(cap, np.int64)
    o_g = np.empty(cap)
    o_a = np.empty(cap)
    o_s = np.empty(cap, np.int64)
    o_l = np.empty(cap, np.int64)
    m = 0
    units = np.empty(4096, np.int64)
    n_units = 0
    ne = entries.shape[0]
    f_g = np.full(ne, np.inf)
    f_a = np.zeros(ne)
    f_s = np.zeros(ne, np.int64)
    f_l = np.zeros(ne, np.int64)
    # the queue: a binary min-heap of node ids, written out here (no heapq, no helper calls: numba
    # reference-counts a list or array argument on every call); `touched`: the nodes labelled
    heap = np.empty(max(n, 1), np.int64)
    touched = np.empty(max(n, 1), np.int64)
    for e in range(ne):
        u = entries[e]
        base = alpha[u]
        stamp[u] = e
        lab_g[u] = 0.0
        lab_a[u] = 0.0
        touched[0] = u
        n_touched = 1
        heap[0] = u
        n_heap = 1
        inq[u] = e
        while n_heap > 0:
            x = heap[0]  # pop the lowest node id
            n_heap -= 1
            if n_heap > 0:
                last = heap[n_heap]
                j = 0
                while True:
                    c = 2 * j + 1
                    if c >= n_heap:
                        break
                    if c + 1 < n_heap and heap[c + 1] < heap[c]:
                        c += 1
                    if heap[c] >= last:
                        break
                    heap[j] = heap[c]
                    j = c
                heap[j] = last
            inq[x] = -1
            for i in range(out_ptr[x], out_ptr[x + 1]):
                y = dst[i]
                g = lab_g[x] + graph[i]
                a = lab_a[x] + acoustic[i]
                if base + g + a + beta[y] > limit:
                    continue
                if olabel[i] > 0:
                    if m == o_u.shape[0]:
                        o_u, o_w, o_v = _grown(o_u, m + 1), _grown(o_w, m + 1), _grown(o_v, m + 1)
                        o_g, o_a = _grown(o_g, m + 1), _grown(o_a, m + 1)
                        o_s, o_l = _grown(o_s, m + 1), _grown(o_l, m + 1)
                    units, start, length = _path_units(
                        x, u, pred_node, pred_arc, ilabel, ilabel[i], units, n_units
                    )
                    n_units += length
                    o_u[m], o_w[m], o_v[m], o_g[m], o_a[m], o_s[m], o_l[m] = (
                        u,
                        olabel[i],
                        y,
                        g,
                        a,
                        start,
                        length,
                    )
                    m += 1
                    continue
                if stamp[y] == e:
                    t_old = lab_g[y] + lab_a[y]
                    if not (g + a < t_old or (g + a == t_old and g < lab_g[y])):
                        continue
                else:
                    stamp[y] = e
                    touched[n_touched] = y
                    n_touched += 1
                lab_g[y] = g
                lab_a[y] = a
                pred_node[y] = x
                pred_arc[y] = i
                if inq[y] != e:  # push y
                    inq[y] = e
                    j = n_heap
                    n_heap += 1
                    while j > 0:
                        parent = (j - 1) >> 1
                        if heap[parent] <= y:
                            break
                        heap[j] = heap[parent]
                        j = parent
                    heap[j] = y
        best_x = -1
        for t in range(n_touched):
            x = touched[t]
            if fin[x] < np.inf and base + lab_g[x] + lab_a[x] + fin[x] <= limit:
                g = lab_g[x] + fin[x]
                a = lab_a[x]
                if best_x < 0 or g + a < f_g[e] + f_a[e] or (g + a == f_g[e] + f_a[e] and g < f_g[e]):
                    best_x = x
                    f_g[e] = g
                    f_a[e] = a
        if best_x >= 0:
            units, f_s[e], f_l[e] = _path_units(best_x, u, pred_node, pred_arc, ilabel, 0, units, n_units)
            n_units += f_l[e]
        for t in range(n_touched):
            stamp[touched[t]] = -1
    return o_u[:m], o_w[:m], o_v[:m], o_g[:m], o_a[:m], o_s[:m], o_l[:m], f_g, f_a, f_s, f_l, units[:n_units]


def _collapse(lat: StateLattice, beam: float) -> tuple[list[int], dict[int, list[tuple]], dict[int, tuple]]:
    """Word graph of a state lattice: for every *entry* node (the start and each word arc's
    destination) the best non-word path to every node it reaches, joined with the word arcs
    leaving those nodes (`collapse_kernel`). Returns (entries, entry -> [(word, dst entry,
    graph, acoustic, units)], entry -> final (graph, acoustic, units)). A partial path from entry
    u to node y is followed only while ``alpha[u] + cost + beta[y]`` is within `beam` of the best
    path (no complete path through it could be), which keeps the word graph near the size of
    the lattice."""
    n = lat.num_nodes
    alpha = lat.alpha if lat.alpha is not None else np.zeros(n)
    beta = lat.beta if lat.beta is not None else np.zeros(n)
    best = float((alpha + beta).min()) if n else 0.0
    limit = best + beam + WINDOW_SLACK + WINDOW_SLACK_REL * abs(best)
    entries = np.unique(np.concatenate([[0], lat.dst[lat.olabel > 0]])).astype(np.int64)
    out_ptr = np.searchsorted(lat.src, np.arange(n + 1)).astype(np.int64)  # arcs sorted by src
    fin = np.full(n, np.inf)
    for x, w in lat.final.items():
        fin[x] = w
    o_u, o_w, o_v, o_g, o_a, o_s, o_l, f_g, f_a, f_s, f_l, units = collapse_kernel(
        out_ptr, lat.dst.astype(np.int64), lat.ilabel.astype(np.int64), lat.olabel.astype(np.int64),
        lat.graph.astype(np.float64), lat.acoustic.astype(np.float64), alpha.astype(np.float64),
        beta.astype(np.float64), fin, entries, limit,
    )  # fmt: skip
    # unit strings as big-endian int32 bytes (`UNIT_BYTES` per unit): concatenated, sliced, hashed
    # and compared without a Python object per unit, in the order of the unit tuples
    ub = units.astype(_UNIT_DTYPE).tobytes()
    # one arc per (entry, word, destination): the best (any other path of it is worse); sorted by
    # (entry, word, destination), then total, graph cost and length, the first of a key is the
    # best unless the next one ties on all three (then the units decide, `_better`)
    total = o_g + o_a
    order = np.lexsort((o_l, o_g, total, o_v, o_w, o_u))
    su, sw, sv, sg, sa, ss, sl, st = (x[order] for x in (o_u, o_w, o_v, o_g, o_a, o_s, o_l, total))
    same_key = (su[1:] == su[:-1]) & (sw[1:] == sw[:-1]) & (sv[1:] == sv[:-1])
    first = np.concatenate([[True], ~same_key]) if len(su) else np.zeros(0, np.bool_)
    tied = same_key & (st[1:] == st[:-1]) & (sg[1:] == sg[:-1]) & (sl[1:] == sl[:-1])
    entry_list = entries.tolist()
    word_arcs: dict[int, list[tuple]] = {u: [] for u in entry_list}
    rows = zip(*(x.tolist() for x in (su, sw, sv, sg, sa, ss, sl, first)), strict=True)
    tied_l = tied.tolist()
    in_tie = False  # the arc ties with its key's first on total, graph cost and length
    for i, (u, w, v, g, a, s, ln, is_first) in enumerate(rows):
        if not (is_first or (in_tie and tied_l[i - 1])):
            in_tie = False
            continue
        arc = (w, v, g, a, ub[UNIT_BYTES * s : UNIT_BYTES * (s + ln)])
        if is_first:
            word_arcs[u].append(arc)
        elif _better(arc[2:], word_arcs[u][-1][2:]):
            word_arcs[u][-1] = arc  # the same cost and length: the smaller units
        in_tie = True
    f_gl, f_al = f_g.tolist(), f_a.tolist()
    finals = {
        u: (f_gl[e], f_al[e], ub[UNIT_BYTES * f_s[e] : UNIT_BYTES * (f_s[e] + f_l[e])])
        for e, u in enumerate(entry_list)
        if np.isfinite(f_g[e])
    }
    return entry_list, word_arcs, finals


def determinize(lat: StateLattice, beam: float | None = None, max_states: int = 100000) -> CompactLattice:
    """Pruned lattice determinization into a `CompactLattice` (module doc, step 3); `beam`
    defaults to the lattice beam, `max_states` caps the output (then the best states are kept)."""
    beam = lat.beam if beam is None else beam
    entries, word_arcs, finals = _collapse(lat, beam)
    # backward costs on the word graph (best total cost to the end); the word graph is acyclic
    # in node order except for same-frame epsilon-input word arcs: relax to a fixed point
    back = {u: (finals[u][0] + finals[u][1]) if u in finals else math.inf for u in entries}
    for _ in range(len(entries) + 1):
        changed = False
        for u in reversed(entries):
            for _w, v, g, a, _units in word_arcs[u]:
                c = g + a + back[v]
                if c < back[u]:
                    back[u] = c
                    changed = True
        if not changed:
            break
    best = back.get(0, math.inf)
    if not math.isfinite(best):
        return _empty(lat, beam)
    limit = best + beam + 1e-4

    def key_of(elements: list[tuple]) -> tuple:
        return tuple((u, round(g / _QUANT), round(a / _QUANT), units) for u, g, a, units in elements)

    start_elems = [(0, 0.0, 0.0, b"")]
    ids: dict[tuple, int] = {key_of(start_elems): 0}
    subsets: list[list[tuple]] = [start_elems]
    forward = [0.0]
    heap = [(best, 0)]
    done: set[int] = set()
    out_arcs: list[tuple] = []  # (src, dst, word, graph, acoustic, units)
    out_final: dict[int, tuple] = {}
    while heap:
        _, d = heapq.heappop(heap)
        if d in done:
            continue
        done.add(d)
        fwd = forward[d]
        elems = subsets[d]
        # final weight: the best element that ends here
        for u, g, a, units in elems:
            if u in finals:
                fg, fa, funits = finals[u]
                cand = (g + fg, a + fa, units + funits)
                if fwd + cand[0] + cand[1] <= limit and (d not in out_final or _better(cand, out_final[d])):
                    out_final[d] = cand
        # transitions, word by word: the best (node, residual) per destination node
        by_word: dict[int, dict[int, tuple]] = {}
        for u, g, a, units in elems:
            for w, v, ag, aa, aunits in word_arcs[u]:
                cand = (g + ag, a + aa, units + aunits)
                targets = by_word.setdefault(w, {})
                if v not in targets or _better(cand, targets[v]):
                    targets[v] = cand
        for w in sorted(by_word):
            targets = by_word[w]
            top = min(targets.values(), key=lambda x: (x[0] + x[1], x[0], len(x[2]), x[2]))
            # the units all destinations share: the common prefix of the lexicographically
            # smallest and largest strings is that of all of them
            strings = [t[2] for t in targets.values()]
            lo = min(strings)
            k = UNIT_BYTES * _shared_units(lo, max(strings))
            prefix = lo[:k]
            new_elems = sorted((v, g - top[0], a - top[1], units[k:]) for v, (g, a, units) in targets.items())
            arc_fwd = fwd + top[0] + top[1]
            reach = min(g + a + back[v] for v, g, a, _ in new_elems)
            if arc_fwd + reach > limit:
                continue  # no word sequence within the beam continues here (pruned determinization)
            key = key_of(new_elems)
            e = ids.get(key)
            if e is None:
                if len(subsets) >= max_states:
                    continue
                e = ids[key] = len(subsets)
                subsets.append(new_elems)
                forward.append(arc_fwd)
                heapq.heappush(heap, (arc_fwd + reach, e))
            elif arc_fwd < forward[e] and e not in done:
                forward[e] = arc_fwd
                heapq.heappush(heap, (arc_fwd + reach, e))
            out_arcs.append((d, e, w, top[0], top[1], prefix))
    return _trim(out_arcs, out_final, len(subsets), lat, beam)


def _empty(lat: StateLattice, beam: float) -> CompactLattice:
    none = np.zeros(0, np.int64)
    return CompactLattice(
        0, none, none, none, np.zeros(0), np.zeros(0), [], {}, none, lat.num_frames, lat.words, beam, lat
    )


def _by_source(src: list[int], num_states: int) -> list[list[int]]:
    """Each state's outgoing arc indices."""
    out: list[list[int]] = [[] for _ in range(num_states)]
    for i, s in enumerate(src):
        out[s].append(i)
    return out


def _log_add(x: float, y: float) -> float:
    """log(exp(x) + exp(y))."""
    if x < y:
        x, y = y, x
    if y == -math.inf:
        return x
    return x + math.log1p(math.exp(y - x))


def _topological_order(arcs: list[tuple], by_src: list[list[int]], num_states: int) -> list[int] | None:
    """States in an order where every arc goes forward (Kahn), or None if the arcs have a cycle."""
    indegree = [0] * num_states
    for _, d, *_rest in arcs:
        indegree[d] += 1
    ready = [s for s in range(num_states) if indegree[s] == 0]
    order = []
    while ready:
        s = ready.pop()
        order.append(s)
        for i in by_src[s]:
            d = arcs[i][1]
            indegree[d] -= 1
            if indegree[d] == 0:
                ready.append(d)
    return order if len(order) == num_states else None


def _trim(
    arcs: list[tuple], finals: dict[int, tuple], num_states: int, lat: StateLattice, beam: float
) -> CompactLattice:
    """Forward-backward pruning of the determinized lattice at `beam` (shortest distances in
    topological order: linear in the lattice), unreachable states removed,
    states renumbered in topological (time, then discovery) order, arcs sorted by source."""
    total = [g + a for _, _, _, g, a, _ in arcs]
    fwd = [math.inf] * num_states
    bwd = [math.inf] * num_states
    fwd[0] = 0.0
    by_src: list[list[int]] = [[] for _ in range(num_states)]
    for i, (s, *_rest) in enumerate(arcs):
        by_src[s].append(i)
    for s, (g, a, _) in finals.items():
        bwd[s] = g + a
    order = _topological_order(arcs, by_src, num_states)
    if order is not None:  # acyclic (always, for determinized lattices): one pass each way
        for s in order:
            for i in by_src[s]:
                d = arcs[i][1]
                if fwd[s] + total[i] < fwd[d]:
                    fwd[d] = fwd[s] + total[i]
        for s in reversed(order):
            for i in by_src[s]:
                if total[i] + bwd[arcs[i][1]] < bwd[s]:
                    bwd[s] = total[i] + bwd[arcs[i][1]]
    else:
        for _ in range(num_states + 1):  # Bellman-Ford
            changed = False
            for i, (s, d, *_rest) in enumerate(arcs):
                if fwd[s] + total[i] < fwd[d]:
                    fwd[d] = fwd[s] + total[i]
                    changed = True
                if total[i] + bwd[d] < bwd[s]:
                    bwd[s] = total[i] + bwd[d]
                    changed = True
            if not changed:
                break
    best = bwd[0]
    if not math.isfinite(best):
        return _empty(lat, beam)
    limit = best + beam + 1e-4
    keep = [i for i in range(len(arcs)) if fwd[arcs[i][0]] + total[i] + bwd[arcs[i][1]] <= limit]
    kept_finals = {s: w for s, w in finals.items() if fwd[s] + w[0] + w[1] <= limit}
    # state times (frames before the state) and a topological numbering by (time, id)
    times = {0: 0}
    order_arcs = sorted(keep, key=lambda i: (arcs[i][0], arcs[i][1]))
    adj: dict[int, list[int]] = {}
    for i in order_arcs:
        adj.setdefault(arcs[i][0], []).append(i)
    stack = [0]
    while stack:
        s = stack.pop()
        for i in adj.get(s, ()):
            d = arcs[i][1]
            if d not in times:
                times[d] = times[s] + len(arcs[i][5]) // UNIT_BYTES
                stack.append(d)
    used = sorted(times, key=lambda s: (times[s], s))
    new_id = {s: k for k, s in enumerate(used)}
    keep = sorted(
        (i for i in keep if arcs[i][0] in new_id and arcs[i][1] in new_id),
        key=lambda i: (new_id[arcs[i][0]], new_id[arcs[i][1]], arcs[i][2]),
    )
    final_states = [s for s in kept_finals if s in new_id]
    unit_tuples = _unit_tuples([arcs[i][5] for i in keep] + [kept_finals[s][2] for s in final_states])
    return CompactLattice(
        num_states=len(used),
        src=np.array([new_id[arcs[i][0]] for i in keep], dtype=np.int64),
        dst=np.array([new_id[arcs[i][1]] for i in keep], dtype=np.int64),
        word=np.array([arcs[i][2] for i in keep], dtype=np.int64),
        graph=np.array([arcs[i][3] for i in keep], dtype=np.float64),
        acoustic=np.array([arcs[i][4] for i in keep], dtype=np.float64),
        units=unit_tuples[: len(keep)],
        final={
            new_id[s]: (kept_finals[s][0], kept_finals[s][1], unit_tuples[len(keep) + j])
            for j, s in enumerate(final_states)
        },
        times=np.array([times[s] for s in used], dtype=np.int64),
        num_frames=lat.num_frames,
        words=lat.words,
        beam=beam,
        state_lattice=lat,
    )
