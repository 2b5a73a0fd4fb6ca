"""Compiled CPU backend of the `wfst` decoder: token passing for one utterance in numba (issue 7).

The torch core (`asrdecode.decoders.wfst.core`) is built for a GPU: one flat token list for the
whole batch, sort-based recombination, prefix sums for arc expansion. On a CPU every one of those
torch operations costs microseconds of dispatch, so here the same search is written as scalar
loops, compiled with ``numba.njit(nogil=True, cache=True)``, one utterance per call; a batch is
spread over a thread pool (the compiled function releases the GIL). The data structures are the
ones a CPU decoder uses (Kaldi's FasterDecoder, prior-art D; paper 000 sec. 2):

* **tokens** of the current and the next frame in flat arrays (state, cost, record) of a
  *workspace* per worker thread, reused from utterance to utterance (or one per stream, carried
  between chunks). The hot loops are small functions that never reassign an array: capacities
  are checked before each loop (new tokens <= arcs to expand and <= states) and grown by the
  frame driver, because numba emits atomic reference-count updates around arrays that are
  reassigned inside a loop (measured: 45% of the time before, 4.6x fewer CPU-ns per arc after);
* **recombination** through a state-indexed scratch array ``slot[state] -> token index`` (-1 =
  no token), allocated once per worker thread and reset per frame only at the states that were
  touched (instead of a hash list): one token per state, the better cost wins, the first token
  wins ties;
* **cutoff** as Kaldi's ``GetCutoff``: ``best + beam``; with more than ``max_active`` tokens the
  ``max_active``-th smallest cost (0-based) if tighter, with ``min_active`` the ``min_active``-th
  smallest if looser, then the *adaptive beam* ``cutoff - best + beam_delta``. The k-th smallest
  cost is found by selection (quickselect, what ``std::nth_element`` does), never a sort; an exact
  value is needed for parity with Kaldi and the torch path, so the approximate bucket cut-off of
  paper 002 is not used;
* **emitting expansion** from tokens below the cutoff: ``cost = token cost + arc weight +
  ac[t, ilabel-1]`` (``ac = -acoustic_scale * log-probs``, blank penalty applied by the caller,
  exactly as the torch path) ``+ boost[olabel]``. As in Kaldi, the best token is expanded first
  to get a tight running bound ``best_new + adaptive_beam`` that skips most arcs early; after
  the frame, tokens at or above the final bound are dropped, which makes the kept set identical
  to the torch path's (it prunes after recombination with the final bound);
* **epsilon closure** as Kaldi's ``ProcessNonemitting``: a LIFO queue of tokens, tokens and
  candidates above the cutoff are not expanded (``<=`` keeps), an improved token is queued again;
* **back-pointers** in flat arrays (previous record, arc, frame), appended for every kept token
  and every epsilon improvement (paper 001 sec. 3, "D2H copy of back-pointers" becomes a no-op),
  garbage-collected when they pass max(1M, 4x the live ones): records no current token leads
  back to are dropped (Kaldi frees such tokens by reference counting), so memory stays bounded
  on long utterances and streams;
  the 1-best is traced back in the compiled code and returned as (arc, frame) arrays, which the
  decoder turns into words, word times and scores exactly as for the torch path;
* **final costs**: the best token after adding final costs if some token is in a final state,
  else the best token without final costs, flagged (Kaldi ``GetBestPath`` / ``ReachedFinal``).

Costs are float32 and added in the same order as the torch path, so both backends give the same
costs bit for bit on the same path (Kaldi accumulates in double: equal within float rounding).
Lattices (for n-best too): every emitting candidate below the frame's final bound and every
epsilon arc below the cutoff is kept with its source/destination state and frame, and every
frame's tokens after the closure as nodes: the data the torch path's `core.LatticeArcs` keeps, so
`lattice.build_lattice` makes the same state lattice from either backend. Every ``prune_interval``
frames the kept arcs and nodes are pruned in place by `lattice.prune_window` (Kaldi's
PruneForwardLinks at ``lattice_beam``; the torch path runs the same kernel on its host copies),
so lattice memory follows the lattice, not the search. Streaming: a workspace per stream,
`search_advance` per chunk; frames continue where the last chunk ended.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np

from asrdecode.decoders.wfst.lattice import prune_window
from asrdecode.graph.format import DeviceGraph
from asrdecode.numba_status import announce_first_compile, configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)

log = logging.getLogger("asrdecode.decoders.wfst")

_F32_INF = np.float32(np.inf)
_INIT_CAPACITY = 1024

# stats slots returned by decode_utterance
STAT_FRAMES, STAT_ARCS, STAT_TOKENS, STAT_EPS_POPS, STAT_EPS_LIMIT, STAT_RECORDS = range(6)
STAT_PRUNE_FRAMES = 6  # frames taken back by the lattice window pruning, over all its calls
NUM_STATS = 7


@numba.njit(nogil=True, cache=True)
def _grow(a: np.ndarray, need: int) -> np.ndarray:
    """`a` if it holds `need` elements, else a copy with (at least) twice the capacity."""
    if need <= a.shape[0]:
        return a
    cap = max(need, 2 * a.shape[0])
    b = np.empty(cap, dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@numba.njit(nogil=True, cache=True)
def kth_smallest(buf: np.ndarray, n: int, k: int) -> np.float32:
    """The k-th smallest (0-based) of ``buf[:n]`` by quickselect (``std::nth_element``); reorders buf."""
    lo = 0
    hi = n - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        a = buf[lo]
        b = buf[mid]
        c = buf[hi]
        if a > b:
            a, b = b, a
        if b > c:
            b = c
        if a > b:
            b = a
        pivot = b  # median of three
        i = lo
        j = hi
        while i <= j:
            while buf[i] < pivot:
                i += 1
            while buf[j] > pivot:
                j -= 1
            if i <= j:
                tmp = buf[i]
                buf[i] = buf[j]
                buf[j] = tmp
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return buf[k]
    return buf[k]


@numba.njit(nogil=True, cache=True)
def get_cutoff(
    cost: np.ndarray,
    n: int,
    scratch: np.ndarray,
    beam: np.float32,
    max_active: int,
    min_active: int,
    beam_delta: np.float32,
) -> tuple[np.float32, np.float32]:
    """Kaldi FasterDecoder::GetCutoff on ``cost[:n]``: (cutoff, adaptive beam), float32 as the torch path."""
    best = _F32_INF
    for i in range(n):
        if cost[i] < best:
            best = cost[i]
    beam_cut = best + beam
    if n == 0 or (max_active >= 2147483647 and min_active <= 0):
        return beam_cut, beam
    max_cut = _F32_INF
    if n > max_active:
        scratch[:n] = cost[:n]
        max_cut = kth_smallest(scratch, n, max_active)
    if max_cut < beam_cut:
        return max_cut, max_cut - best + beam_delta
    min_cut = _F32_INF
    if min_active <= 0:
        min_cut = best
    elif n > min_active:
        scratch[:n] = cost[:n]
        min_cut = kth_smallest(scratch, n, min_active)
    if min_cut > beam_cut:
        return min_cut, min_cut - best + beam_delta
    return beam_cut, beam


# ---------------------------------------------------------------------------------------------
# Workspace: the arrays of one search (a worker thread's, reused across utterances, or a stream's).
# Hot loops live in small functions that never reassign an array (numba would otherwise emit
# atomic reference-count updates inside them); capacities are checked before each loop and the
# arrays grown by the frame driver.
W_CUR_STATE, W_CUR_COST, W_CUR_REC = 0, 1, 2
W_NXT_STATE, W_NXT_COST, W_NXT_REC, W_NXT_ARC = 3, 4, 5, 6
W_QUEUE, W_SCRATCH = 7, 8
W_REC_PREV, W_REC_ARC, W_REC_FRAME = 9, 10, 11
W_LAT_FRAME, W_LAT_SRC, W_LAT_DST, W_LAT_ARC, W_LAT_AC, W_LAT_COST = 12, 13, 14, 15, 16, 17
W_NODE_FRAME, W_NODE_STATE, W_NODE_COST, W_NODE_EXTRA = 18, 19, 20, 21
WORKSPACE_DTYPES = (
    (np.int32, np.float32, np.int64)
    + (np.int32, np.float32, np.int64, np.int32)
    + (np.int32, np.float32)
    + (np.int64, np.int32, np.int32)
    + (np.int32, np.int32, np.int32, np.int32, np.float32, np.float32)
    + (np.int32, np.int32, np.float32, np.float32)
)
# counters of a workspace (int64 array)
C_TOKENS, C_RECORDS, C_LAT_ARCS, C_NODES, C_NEXT_FRAME, C_GC_AT, C_GC_MIN = range(7)
NUM_COUNTERS = 7
GC_MIN_RECORDS = 1 << 20  # back-pointer records before the first garbage collection


@numba.njit(nogil=True, cache=True)
def _collect_records(cur_rec, n, rec_prev, rec_arc, rec_frame, nrec) -> int:
    """Drop the back-pointer records no current token leads back to (Kaldi frees such tokens by
    reference counting); compacts in place, keeps the order (a record's predecessor comes
    first), renumbers the tokens' records. Returns the number of records kept."""
    new_id = np.full(nrec, -1, np.int64)
    for i in range(n):
        r = cur_rec[i]
        while r >= 0 and new_id[r] == -1:
            new_id[r] = -2
            r = rec_prev[r]
    k = 0
    for r in range(nrec):
        if new_id[r] == -2:
            p = rec_prev[r]
            rec_prev[k] = new_id[p] if p >= 0 else -1
            rec_arc[k] = rec_arc[r]
            rec_frame[k] = rec_frame[r]
            new_id[r] = k
            k += 1
    for i in range(n):
        cur_rec[i] = new_id[cur_rec[i]]
    return k


@numba.njit(nogil=True, cache=True)
def _seed_queue(queue: np.ndarray, n: int) -> None:
    """Queue all tokens so that they pop in token order (LIFO)."""
    for i in range(n):
        queue[i] = n - 1 - i


@numba.njit(nogil=True, cache=True)
def _reset_slots(slot: np.ndarray, state: np.ndarray, n: int) -> None:
    for i in range(n):
        slot[state[i]] = -1


@numba.njit(nogil=True, cache=True)
def _emitting_arcs(states, cost: np.ndarray, state: np.ndarray, n: int, cut: np.float32) -> int:
    """Emitting arcs of the tokens below the cutoff (an upper bound of the new tokens)."""
    total = 0
    for i in range(n):
        if cost[i] < cut:
            s = state[i]
            total += states[s].split - states[s].first
    return total


@numba.njit(nogil=True, cache=True)
def _record_nodes(frame, cur_state, cur_cost, n, node_frame, node_state, node_cost, node_extra, k) -> None:
    """The lattice nodes of a frame's tokens (extra cost NaN: not pruned yet)."""
    for i in range(n):
        node_frame[k + i] = frame
        node_state[k + i] = cur_state[i]
        node_cost[k + i] = cur_cost[i]
        node_extra[k + i] = np.nan


@numba.njit(nogil=True, cache=True)
def _closure(
    states, arcs, boost, cut, frame, slot, eps_limit, lattice,
    cur_state, cur_cost, cur_rec, queue, rec_prev, rec_arc, rec_frame,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, io, stats,
) -> bool:  # fmt: skip
    """Epsilon closure (Kaldi ProcessNonemitting) of the queued tokens: a LIFO queue, tokens and
    candidates above ``cut`` are not expanded (``<=`` keeps), an improved token is queued again.

    io: [tokens, records, lattice arcs, queue length, pops]. Returns False (with io updated) when
    an array is too small for the next token's epsilon arcs: the caller grows it and calls again.
    """
    n, nrec, nlat, nq, pops = io[0], io[1], io[2], io[3], io[4]
    n_boost = boost.shape[0]
    num_states = slot.shape[0]
    while nq > 0:
        i = queue[nq - 1]
        s = cur_state[i]
        a0 = states[s].split
        a1 = states[s].end
        k = a1 - a0
        if (
            min(n + k, num_states) > cur_state.shape[0]
            or nrec + k > rec_prev.shape[0]
            or nq - 1 + k > queue.shape[0]
            or (lattice and nlat + k > lat_frame.shape[0])
        ):
            io[0], io[1], io[2], io[3], io[4] = n, nrec, nlat, nq, pops
            return False
        nq -= 1
        pops += 1
        if pops > eps_limit:
            stats[STAT_EPS_LIMIT] += 1
            nq = 0
            break
        c0 = cur_cost[i]
        if c0 > cut:
            continue
        for a in range(a0, a1):
            arc = arcs[a]
            c = c0 + arc.weight
            ol = arc.olabel
            if ol > 0 and ol < n_boost:
                c = c + boost[ol]
            if c > cut:
                continue
            d = arc.nextstate
            if lattice:
                lat_frame[nlat] = frame
                lat_src[nlat] = s
                lat_dst[nlat] = d
                lat_arc[nlat] = a
                lat_ac[nlat] = 0.0
                nlat += 1
            j = slot[d]
            if j < 0:
                j = n
                n += 1
                cur_state[j] = d
                slot[d] = j
            elif not (c < cur_cost[j]):
                continue
            cur_cost[j] = c
            rec_prev[nrec] = cur_rec[i]
            rec_arc[nrec] = a
            rec_frame[nrec] = frame
            cur_rec[j] = nrec
            nrec += 1
            queue[nq] = j
            nq += 1
    io[0], io[1], io[2], io[3], io[4] = n, nrec, nlat, nq, pops
    return True


@numba.njit(nogil=True, cache=True)
def _emit(
    states, arcs, acrow, boost, cut, adaptive, slot, lattice, frame,
    cur_state, cur_cost, cur_rec, n, nxt_state, nxt_cost, nxt_rec, nxt_arc,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_cost, nlat,
):  # fmt: skip
    """Emitting arcs (Kaldi ProcessEmitting) of the tokens below ``cut`` into the nxt arrays
    (capacity checked by the caller); returns (new tokens, best new cost, lattice arcs).

    As Kaldi, the best token is expanded first for a tight running bound ``best_new + adaptive``
    that skips most arcs early. With lattices, every candidate below the running bound is kept
    with its cost (filtered with the frame's final bound by `_keep`)."""
    n_boost = boost.shape[0]
    best_i = -1
    best_c = _F32_INF
    for i in range(n):
        if cur_cost[i] < best_c:
            best_c = cur_cost[i]
            best_i = i
    best_new = _F32_INF
    bound = _F32_INF  # running bound: min(cost + adaptive) so far (>= the final bound)
    if best_i >= 0 and best_c < cut:
        s = cur_state[best_i]
        for a in range(states[s].first, states[s].split):
            arc = arcs[a]
            c = best_c + arc.weight + acrow[arc.column]
            ol = arc.olabel
            if ol > 0 and ol < n_boost:
                c = c + boost[ol]
            if c + adaptive < bound:
                bound = c + adaptive
    m = 0
    for i in range(n):
        c0 = cur_cost[i]
        if not (c0 < cut):
            continue
        s = cur_state[i]
        r0 = cur_rec[i]
        for a in range(states[s].first, states[s].split):
            arc = arcs[a]
            ac = acrow[arc.column]
            c = c0 + arc.weight + ac
            ol = arc.olabel
            if ol > 0 and ol < n_boost:
                c = c + boost[ol]
            if c < best_new:
                best_new = c
            if not (c < bound):
                continue
            if c + adaptive < bound:
                bound = c + adaptive
            d = arc.nextstate
            if lattice:
                lat_frame[nlat] = frame
                lat_src[nlat] = s
                lat_dst[nlat] = d
                lat_arc[nlat] = a
                lat_ac[nlat] = ac
                lat_cost[nlat] = c
                nlat += 1
            j = slot[d]
            if j < 0:
                j = m
                m += 1
                nxt_state[j] = d
                slot[d] = j
            elif not (c < nxt_cost[j]):
                continue
            nxt_cost[j] = c
            nxt_rec[j] = r0
            nxt_arc[j] = a
    return m, best_new, nlat


@numba.njit(nogil=True, cache=True)
def _keep(
    cut, frame, slot, m, nxt_state, nxt_cost, nxt_rec, nxt_arc, rec_prev, rec_arc, rec_frame, nrec,
    lattice, lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_cost, lat0, nlat,
):  # fmt: skip
    """Keep the new tokens below the frame's final bound (a record each); the same for the
    frame's lattice candidates. Returns (tokens, records, lattice arcs)."""
    k = 0
    for j in range(m):
        d = nxt_state[j]
        c = nxt_cost[j]
        if c < cut:
            rec_prev[nrec] = nxt_rec[j]
            rec_arc[nrec] = nxt_arc[j]
            rec_frame[nrec] = frame
            nxt_state[k] = d
            nxt_cost[k] = c
            nxt_rec[k] = nrec
            nrec += 1
            slot[d] = k
            k += 1
        else:
            slot[d] = -1
    q = lat0
    if lattice:
        for p in range(lat0, nlat):
            if lat_cost[p] < cut:
                lat_frame[q] = lat_frame[p]
                lat_src[q] = lat_src[p]
                lat_dst[q] = lat_dst[p]
                lat_arc[q] = lat_arc[p]
                lat_ac[q] = lat_ac[p]
                q += 1
    return k, nrec, q


@numba.njit(nogil=True, cache=True)
def _close_frame(states, arcs, boost, cut, frame, slot, eps_limit, lattice, ws, ctr, stats):
    """Epsilon closure of the current tokens (growing arrays as needed), their lattice nodes, and
    the reset of the scratch map (only valid within a frame). Returns the workspace."""
    n = ctr[C_TOKENS]
    queue = _grow(ws[W_QUEUE], n)
    _seed_queue(queue, n)
    io = np.empty(5, np.int64)
    io[0], io[1], io[2], io[3], io[4] = n, ctr[C_RECORDS], ctr[C_LAT_ARCS], n, 0
    cur_state, cur_cost, cur_rec = ws[W_CUR_STATE], ws[W_CUR_COST], ws[W_CUR_REC]
    rec_prev, rec_arc, rec_frame = ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME]
    lat_frame, lat_src, lat_dst = ws[W_LAT_FRAME], ws[W_LAT_SRC], ws[W_LAT_DST]
    lat_arc, lat_ac, lat_cost = ws[W_LAT_ARC], ws[W_LAT_AC], ws[W_LAT_COST]
    while not _closure(
        states, arcs, boost, cut, frame, slot, eps_limit, lattice,
        cur_state, cur_cost, cur_rec, queue, rec_prev, rec_arc, rec_frame,
        lat_frame, lat_src, lat_dst, lat_arc, lat_ac, io, stats,
    ):  # fmt: skip
        need = (states[cur_state[queue[io[3] - 1]]].end - states[cur_state[queue[io[3] - 1]]].split) + 1
        cur_state = _grow(cur_state, min(io[0] + need, slot.shape[0]))
        cur_cost = _grow(cur_cost, cur_state.shape[0])
        cur_rec = _grow(cur_rec, cur_state.shape[0])
        rec_prev = _grow(rec_prev, io[1] + need)
        rec_arc = _grow(rec_arc, rec_prev.shape[0])
        rec_frame = _grow(rec_frame, rec_prev.shape[0])
        queue = _grow(queue, io[3] + need)
        if lattice:
            lat_frame = _grow(lat_frame, io[2] + need)
            lat_src = _grow(lat_src, lat_frame.shape[0])
            lat_dst = _grow(lat_dst, lat_frame.shape[0])
            lat_arc = _grow(lat_arc, lat_frame.shape[0])
            lat_ac = _grow(lat_ac, lat_frame.shape[0])
            lat_cost = _grow(lat_cost, lat_frame.shape[0])
    n = io[0]
    stats[STAT_EPS_POPS] += io[4]
    stats[STAT_TOKENS] += n
    node_frame, node_state, node_cost = ws[W_NODE_FRAME], ws[W_NODE_STATE], ws[W_NODE_COST]
    node_extra = ws[W_NODE_EXTRA]
    if lattice:
        k = ctr[C_NODES]
        node_frame = _grow(node_frame, k + n)
        node_state = _grow(node_state, node_frame.shape[0])
        node_cost = _grow(node_cost, node_frame.shape[0])
        node_extra = _grow(node_extra, node_frame.shape[0])
        _record_nodes(frame, cur_state, cur_cost, n, node_frame, node_state, node_cost, node_extra, k)
        ctr[C_NODES] = k + n
    _reset_slots(slot, cur_state, n)
    ctr[C_TOKENS], ctr[C_RECORDS], ctr[C_LAT_ARCS] = n, io[1], io[2]
    return (
        cur_state, cur_cost, cur_rec,
        ws[W_NXT_STATE], ws[W_NXT_COST], ws[W_NXT_REC], ws[W_NXT_ARC],
        queue, ws[W_SCRATCH],
        rec_prev, rec_arc, rec_frame,
        lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_cost,
        node_frame, node_state, node_cost, node_extra,
    )  # fmt: skip


@numba.njit(nogil=True, cache=True)
def search_init(states, arcs, start, boost, slot, eps_limit, lattice, ws, ctr, stats, gc_at):
    """Start a search: one start token (a record with no predecessor, frame -1) and its epsilon
    closure. gc_at: records before the first garbage collection. Returns the workspace."""
    rec_prev, rec_arc, rec_frame = ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME]
    rec_prev[0] = -1
    rec_arc[0] = -1
    rec_frame[0] = -1
    ctr[C_RECORDS] = 1
    ctr[C_TOKENS] = 0
    ctr[C_LAT_ARCS] = 0
    ctr[C_NODES] = 0
    ctr[C_NEXT_FRAME] = 0
    ctr[C_GC_AT] = gc_at
    ctr[C_GC_MIN] = gc_at
    if start >= 0:
        ws[W_CUR_STATE][0] = start
        ws[W_CUR_COST][0] = np.float32(0.0)
        ws[W_CUR_REC][0] = 0
        slot[start] = 0
        ctr[C_TOKENS] = 1
    return _close_frame(states, arcs, boost, _F32_INF, -1, slot, eps_limit, lattice, ws, ctr, stats)


@numba.njit(nogil=True, cache=True)
def search_advance(
    states, arcs, ac, beam, max_active, min_active, beam_delta, boost, slot, eps_limit, lattice,
    ws, ctr, stats, lattice_beam, prune_interval, slot2,
):  # fmt: skip
    """Advance a started search by the frames of ac (float32 [T, V] acoustic costs; frame numbers
    continue from the previous call). With lattices, the kept arcs and nodes are pruned with
    `lattice.prune_window` at `lattice_beam` after every `prune_interval`-th frame (0 = never);
    it maps states to nodes with `slot` (all -1 between frames) and `slot2` (all -1).
    Returns the workspace (arrays may have been grown)."""
    num_states = slot.shape[0]
    for t in range(ac.shape[0]):
        frame = ctr[C_NEXT_FRAME]
        ctr[C_NEXT_FRAME] = frame + 1
        n = ctr[C_TOKENS]
        if n == 0:
            continue
        stats[STAT_FRAMES] += 1
        cur_state, cur_cost, cur_rec = ws[W_CUR_STATE], ws[W_CUR_COST], ws[W_CUR_REC]
        # ------------------------------------------ cutoff (GetCutoff) of the current tokens
        scratch = _grow(ws[W_SCRATCH], n)
        cut, adaptive = get_cutoff(cur_cost, n, scratch, beam, max_active, min_active, beam_delta)
        # ------------------------------------------ capacities, then emitting arcs
        n_arcs = _emitting_arcs(states, cur_cost, cur_state, n, cut)
        stats[STAT_ARCS] += n_arcs
        bound = min(n_arcs, num_states)
        nxt_state = _grow(ws[W_NXT_STATE], bound)
        nxt_cost = _grow(ws[W_NXT_COST], bound)
        nxt_rec = _grow(ws[W_NXT_REC], bound)
        nxt_arc = _grow(ws[W_NXT_ARC], bound)
        nrec = ctr[C_RECORDS]
        rec_prev = _grow(ws[W_REC_PREV], nrec + bound)
        rec_arc = _grow(ws[W_REC_ARC], rec_prev.shape[0])
        rec_frame = _grow(ws[W_REC_FRAME], rec_prev.shape[0])
        lat0 = ctr[C_LAT_ARCS]
        lat_frame, lat_src, lat_dst = ws[W_LAT_FRAME], ws[W_LAT_SRC], ws[W_LAT_DST]
        lat_arc, lat_ac, lat_cost = ws[W_LAT_ARC], ws[W_LAT_AC], ws[W_LAT_COST]
        if lattice:
            lat_frame = _grow(lat_frame, lat0 + n_arcs)
            lat_src = _grow(lat_src, lat_frame.shape[0])
            lat_dst = _grow(lat_dst, lat_frame.shape[0])
            lat_arc = _grow(lat_arc, lat_frame.shape[0])
            lat_ac = _grow(lat_ac, lat_frame.shape[0])
            lat_cost = _grow(lat_cost, lat_frame.shape[0])
        m, best_new, nlat = _emit(
            states, arcs, ac[t], boost, cut, adaptive, slot, lattice, frame,
            cur_state, cur_cost, cur_rec, n, nxt_state, nxt_cost, nxt_rec, nxt_arc,
            lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_cost, lat0,
        )  # fmt: skip
        # final bound of this frame (as the torch path: best new cost + adaptive beam); keep below it
        cut = best_new + adaptive
        k, nrec, nlat = _keep(
            cut, frame, slot, m, nxt_state, nxt_cost, nxt_rec, nxt_arc, rec_prev, rec_arc, rec_frame, nrec,
            lattice, lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_cost, lat0, nlat,
        )  # fmt: skip
        ctr[C_TOKENS], ctr[C_RECORDS], ctr[C_LAT_ARCS] = k, nrec, nlat
        # the kept new tokens become the current ones; then their epsilon closure
        ws = (
            nxt_state, nxt_cost, nxt_rec,
            cur_state, cur_cost, cur_rec, nxt_arc,
            ws[W_QUEUE], scratch,
            rec_prev, rec_arc, rec_frame,
            lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_cost,
            ws[W_NODE_FRAME], ws[W_NODE_STATE], ws[W_NODE_COST], ws[W_NODE_EXTRA],
        )  # fmt: skip
        ws = _close_frame(states, arcs, boost, cut, frame, slot, eps_limit, lattice, ws, ctr, stats)
        if ctr[C_RECORDS] > ctr[C_GC_AT]:  # memory: keep only the records live tokens lead back to
            kept = _collect_records(
                ws[W_CUR_REC], ctr[C_TOKENS], ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME], ctr[C_RECORDS]
            )
            ctr[C_RECORDS] = kept
            ctr[C_GC_AT] = max(ctr[C_GC_MIN], 4 * kept)
        if lattice and prune_interval > 0 and (frame + 1) % prune_interval == 0:
            ctr[C_NODES], ctr[C_LAT_ARCS], taken = prune_window(
                arcs, boost, frame, lattice_beam,
                ws[W_NODE_FRAME], ws[W_NODE_STATE], ws[W_NODE_COST], ws[W_NODE_EXTRA], ctr[C_NODES],
                ws[W_LAT_FRAME], ws[W_LAT_SRC], ws[W_LAT_DST], ws[W_LAT_ARC], ws[W_LAT_AC], ctr[C_LAT_ARCS],
                slot, slot2,
            )  # fmt: skip
            stats[STAT_PRUNE_FRAMES] += taken
    return ws


@numba.njit(nogil=True, cache=True)
def search_best(states, ws, ctr, use_final):
    """Best token (Kaldi GetBestPath): after adding final costs if some token is in a final state
    (and use_final), else without, flagged. Returns (arcs, frames, total, reached, found): the arc
    index and frame of every arc of the best path (epsilon arcs included)."""
    cur_state, cur_cost, cur_rec = ws[W_CUR_STATE], ws[W_CUR_COST], ws[W_CUR_REC]
    rec_prev, rec_arc, rec_frame = ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME]
    n = ctr[C_TOKENS]
    reached = False
    if use_final:
        for i in range(n):
            if states[cur_state[i]].final < _F32_INF:
                fc = cur_cost[i] + states[cur_state[i]].final
                if fc < _F32_INF:
                    reached = True
                    break
    best_i = -1
    total = _F32_INF
    for i in range(n):
        sc = cur_cost[i] + states[cur_state[i]].final if reached else cur_cost[i]
        # ties: the lower state, as the torch path (its tokens are sorted by state)
        if best_i < 0 or sc < total or (sc == total and cur_state[i] < cur_state[best_i]):
            best_i = i
            total = sc
    if best_i < 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), _F32_INF, False, False
    path_arcs, path_frames = trace_records(rec_prev, rec_arc, rec_frame, cur_rec[best_i])
    return path_arcs, path_frames, total, reached, True


@numba.njit(nogil=True, cache=True)
def trace_records(rec_prev, rec_arc, rec_frame, r):
    """(arc indices, frames) of the arcs on the record chain ending at record r, in path order."""
    r0 = r
    length = 0
    while r >= 0:
        if rec_arc[r] >= 0:
            length += 1
        r = rec_prev[r]
    path_arcs = np.empty(length, dtype=np.int64)
    path_frames = np.empty(length, dtype=np.int64)
    r = r0
    p = length
    while r >= 0:
        if rec_arc[r] >= 0:
            p -= 1
            path_arcs[p] = rec_arc[r]
            path_frames[p] = rec_frame[r]
        r = rec_prev[r]
    return path_arcs, path_frames


STATE_DTYPE = np.dtype(
    [("first", np.int32), ("split", np.int32), ("end", np.int32), ("final", np.float32)], align=True
)
ARC_DTYPE = np.dtype(
    [("column", np.int32), ("olabel", np.int32), ("nextstate", np.int32), ("weight", np.float32)], align=True
)


def graph_records(graph: DeviceGraph) -> tuple[np.ndarray, np.ndarray]:
    """The CSR graph as arrays of 16-byte structs, as Kaldi's ConstFst stores states and arcs.

    states: first arc, first epsilon arc (split), end, final cost; arcs: model column
    (ilabel - 1, -1 = epsilon), olabel, nextstate, weight. One cache line holds 4 arcs, so a
    token's arcs cost one or two cache misses instead of one per array (measured ~1.5x faster
    than separate arrays on a 236k-arc TLG).
    """
    if graph.num_arcs >= 2**31:
        raise ValueError("compiled wfst backend: graphs with >= 2^31 arcs are not supported")
    off = graph.offsets.cpu().numpy()
    states = np.empty(graph.num_states, STATE_DTYPE)
    states["first"] = off[:-1]
    states["split"] = graph.split.cpu().numpy()
    states["end"] = off[1:]
    states["final"] = graph.final.cpu().numpy()
    arcs = np.empty(graph.num_arcs, ARC_DTYPE)
    arcs["column"] = graph.ilabel.cpu().numpy().astype(np.int32) - 1
    arcs["olabel"] = graph.olabel.cpu().numpy()
    arcs["nextstate"] = graph.nextstate.cpu().numpy()
    arcs["weight"] = graph.weight.cpu().numpy()
    return states, arcs


@dataclass
@dataclass
class CompiledPath:
    """The 1-best of one utterance from the compiled search (and its lattice data, if kept)."""

    arcs: np.ndarray  # int64 arc indices, in path order (epsilon arcs included)
    frames: np.ndarray  # int64 frame of each arc (-1 = before the first frame)
    total: float  # total cost (float32 value), inf when nothing survived
    reached_final: bool
    found: bool  # some token survived to the end
    stats: np.ndarray
    lattice_arcs: np.recarray | None = None  # as lattice.LatticeStore: frame, src, dst, arc, ac
    lattice_nodes: np.recarray | None = None  # frame, state, cost


def default_threads() -> int:
    """Cores this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


_compile_lock = threading.Lock()


def dense_boost(table: dict[int, float]) -> np.ndarray:
    """word id -> cost table as a dense float32 array (empty when there are no boosts)."""
    if not table:
        return np.zeros(0, dtype=np.float32)
    arr = np.zeros(max(table) + 1, dtype=np.float32)
    for wid, c in table.items():
        arr[wid] = c
    return arr


class Workspace:
    """The arrays and counters of one search: a worker thread's (reused from utterance to
    utterance, so steady-state decoding allocates nothing) or one stream's (carried between
    chunks). Arrays grow by doubling and never shrink."""

    def __init__(self, lattice: bool = False) -> None:
        self.arrays = tuple(np.empty(_INIT_CAPACITY, dtype=dt) for dt in WORKSPACE_DTYPES)
        self.ctr = np.zeros(NUM_COUNTERS, dtype=np.int64)
        self.stats = np.zeros(NUM_STATS, dtype=np.int64)
        self.lattice = lattice

    @property
    def frames(self) -> int:
        """Frames decoded since `start`."""
        return int(self.ctr[C_NEXT_FRAME])

    def lattice_data(self) -> tuple[np.recarray, np.recarray]:
        """Copies of the kept lattice arcs and nodes (the fields of the torch path's
        `lattice.LatticeStore.data`)."""
        na, nn = int(self.ctr[C_LAT_ARCS]), int(self.ctr[C_NODES])
        w = self.arrays
        arcs = np.rec.fromarrays(
            [w[i][:na].copy() for i in (W_LAT_FRAME, W_LAT_SRC, W_LAT_DST, W_LAT_ARC, W_LAT_AC)],
            names=["frame", "src", "dst", "arc", "ac"],
        )
        nodes = np.rec.fromarrays(
            [w[i][:nn].copy() for i in (W_NODE_FRAME, W_NODE_STATE, W_NODE_COST)],
            names=["frame", "state", "cost"],
        )
        return arcs, nodes


class CompiledSearch:
    """The compiled search over one graph: graph arrays in the compiled functions' dtypes, a
    workspace and scratch ``slot`` array per worker thread and a thread pool (one utterance per
    task, GIL released)."""

    def __init__(self, graph: DeviceGraph, threads: int = 0) -> None:
        g = graph.to("cpu")
        self.num_states = g.num_states
        self.start = int(g.start)
        self.states, self.arcs = graph_records(g)
        self.threads = threads if threads > 0 else default_threads()
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def ensure_compiled() -> None:
        """Compile (or load from numba's disk cache) once, on the calling thread, with a status line."""
        with _compile_lock:
            if getattr(search_advance, "signatures", True):  # (plain function under NUMBA_DISABLE_JIT)
                return
            announce_first_compile("wfst: decoder", search_advance, search_init)
            # a one-state graph with one self-loop, two frames: fixes the signatures
            states = np.zeros(1, STATE_DTYPE)
            states[0] = (0, 1, 1, 0.0)
            arcs = np.zeros(1, ARC_DTYPE)
            arcs[0] = (0, 0, 0, 0.0)
            w = Workspace(lattice=True)
            slot = np.full(1, -1, np.int32)
            boost = np.zeros(0, np.float32)
            f32 = np.float32
            w.arrays = search_init(states, arcs, 0, boost, slot, 100, True, w.arrays, w.ctr, w.stats, 1)
            w.arrays = search_advance(
                states, arcs, np.zeros((2, 1), f32), f32(1.0), 10, 1, f32(0.5), boost, slot, 100, True,
                w.arrays, w.ctr, w.stats, 8.0, 1, np.full(1, -1, np.int32),
            )  # fmt: skip
            search_best(states, w.arrays, w.ctr, True)

    def _slot(self, which: int = 1) -> np.ndarray:
        """A thread's state-indexed scratch map (all -1 between uses): 1 = the search's, 2 = the
        lattice pruning's second one."""
        name = "slot" if which == 1 else "slot2"
        s = getattr(self._local, name, None)
        if s is None:
            s = np.full(self.num_states, -1, dtype=np.int32)
            setattr(self._local, name, s)
        return s

    def _workspace(self) -> Workspace:
        w = getattr(self._local, "workspace", None)
        if w is None:
            w = Workspace()
            self._local.workspace = w
        return w

    # ---------------------------------------------------------------- search
    def begin(
        self, w: Workspace, boost: np.ndarray, eps_limit: int = 1 << 40, gc_records: int = GC_MIN_RECORDS
    ) -> None:
        """Start a search in workspace `w` (start token + epsilon closure); back-pointer records
        are garbage-collected when there are more than max(`gc_records`, 4x the live ones)."""
        self.ensure_compiled()
        w.stats[:] = 0
        w.arrays = search_init(
            self.states, self.arcs, self.start, boost, self._slot(), int(eps_limit), w.lattice,
            w.arrays, w.ctr, w.stats, int(gc_records),
        )  # fmt: skip

    def advance(
        self,
        w: Workspace,
        ac: np.ndarray,
        beam: float,
        max_active: int,
        min_active: int,
        beam_delta: float,
        boost: np.ndarray,
        eps_limit: int = 1 << 40,
        lattice_beam: float = 8.0,
        prune_interval: int = 25,
    ) -> None:
        """Decode the frames of ac (float32 [T, V] acoustic costs) in workspace `w` (lattices, if
        the workspace keeps them, pruned at `lattice_beam` every `prune_interval` frames)."""
        ac = np.ascontiguousarray(ac, dtype=np.float32)
        if ac.ndim != 2:
            raise ValueError(f"acoustic costs must be [T, V], got {ac.shape}")
        if ac.shape[1] == 0:
            ac = np.zeros((ac.shape[0], 1), np.float32)
        w.arrays = search_advance(
            self.states, self.arcs, ac, np.float32(beam), int(min(max_active, 2**31 - 1)), int(min_active),
            np.float32(beam_delta), boost, self._slot(), int(eps_limit), w.lattice, w.arrays, w.ctr, w.stats,
            float(lattice_beam), int(prune_interval), self._slot(2),
        )  # fmt: skip

    def best(self, w: Workspace, use_final: bool = True) -> CompiledPath:
        """The best path of workspace `w` (with final costs unless use_final is False)."""
        arcs, frames, total, reached, found = search_best(self.states, w.arrays, w.ctr, use_final)
        stats = w.stats.copy()
        stats[STAT_RECORDS] = w.ctr[C_RECORDS]
        return CompiledPath(arcs, frames, float(total), bool(reached), bool(found), stats)

    def decode_one(
        self,
        ac: np.ndarray,
        beam: float,
        max_active: int,
        min_active: int,
        beam_delta: float,
        boost: np.ndarray | None = None,
        eps_limit: int = 1 << 40,
        lattice: bool = False,
        gc_records: int = GC_MIN_RECORDS,
        lattice_beam: float = 8.0,
        prune_interval: int = 25,
    ) -> CompiledPath:
        """1-best (and lattice data) of one utterance; ac: float32 [T, V] acoustic costs."""
        w = self._workspace()
        w.lattice = lattice
        boost = boost if boost is not None else np.zeros(0, np.float32)
        self.begin(w, boost, eps_limit, gc_records)
        self.advance(
            w, ac, beam, max_active, min_active, beam_delta, boost, eps_limit, lattice_beam, prune_interval
        )
        path = self.best(w)
        if lattice:
            path.lattice_arcs, path.lattice_nodes = w.lattice_data()
        return path

    def decode_batch(
        self,
        acs: list[np.ndarray],
        boosts: list[np.ndarray | None],
        beam: float,
        max_active: int,
        min_active: int,
        beam_delta: float,
        eps_limit: int = 1 << 40,
        threads: int | None = None,
        lattice: bool = False,
        lattice_beam: float = 8.0,
        prune_interval: int = 25,
    ) -> list[CompiledPath]:
        """Decode utterances on `threads` workers (default: the search's), longest first."""
        self.ensure_compiled()
        threads = threads or self.threads
        args = (beam, max_active, min_active, beam_delta)
        lat = {"lattice": lattice, "lattice_beam": lattice_beam, "prune_interval": prune_interval}
        if threads <= 1 or len(acs) <= 1:
            return [self.decode_one(a, *args, b, eps_limit, **lat) for a, b in zip(acs, boosts, strict=True)]
        if self._pool is None or self._pool._max_workers != threads:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wfst-compiled")
        order = sorted(range(len(acs)), key=lambda i: -acs[i].shape[0])
        futures = {
            i: self._pool.submit(self.decode_one, acs[i], *args, boosts[i], eps_limit, **lat) for i in order
        }
        return [futures[i].result() for i in range(len(acs))]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
