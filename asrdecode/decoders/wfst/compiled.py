"""Compiled CPU backend of the `wfst` decoder: token passing for one utterance in numba (issue 7).

The torch core (`asrdecode.decoders.wfst.core`) is built for a GPU: one flat token list for the
whole batch, sort-based recombination, prefix sums for arc expansion. On a CPU every one of those
torch operations costs microseconds of dispatch, so here the same search is written as scalar
loops, compiled with ``numba.njit(nogil=True, cache=True)``, one utterance per call; a batch is
spread over a thread pool (the compiled function releases the GIL). The data structures are the
ones a CPU decoder uses (Kaldi's FasterDecoder, prior-art D; paper 000 sec. 2):

* **tokens** of the current and the next frame in flat, growable arrays (state, cost, record);
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
  and every epsilon improvement (paper 001 sec. 3, "D2H copy of back-pointers" becomes a no-op);
  the 1-best is traced back in the compiled code and returned as (arc, frame) arrays, which the
  decoder turns into words, word times and scores exactly as for the torch path;
* **final costs**: the best token after adding final costs if some token is in a final state,
  else the best token without final costs, flagged (Kaldi ``GetBestPath`` / ``ReachedFinal``).

Costs are float32 and added in the same order as the torch path, so both backends give the same
costs bit for bit on the same path (Kaldi accumulates in double: equal within float rounding).
Not (yet) compiled: n-best, lattices and streaming; the decoder runs those on the torch path.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from asrdecode.graph.format import DeviceGraph

log = logging.getLogger("asrdecode.decoders.wfst")

_F32_INF = np.float32(np.inf)
_INIT_CAPACITY = 1024

# stats slots returned by decode_utterance
STAT_FRAMES, STAT_ARCS, STAT_TOKENS, STAT_EPS_POPS, STAT_EPS_LIMIT, STAT_RECORDS = range(6)
NUM_STATS = 6


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


@numba.njit(nogil=True, cache=True)
def decode_utterance(
    states: np.ndarray,
    arcs: np.ndarray,
    start: int,
    ac: np.ndarray,
    beam: np.float32,
    max_active: int,
    min_active: int,
    beam_delta: np.float32,
    boost: np.ndarray,
    slot: np.ndarray,
    eps_limit: int,
):
    """1-best token passing of one utterance; see the module docstring.

    Graph: `STATE_DTYPE` / `ARC_DTYPE` records (the DeviceGraph CSR as arrays of structs, see
    `CompiledSearch`). ac: float32 [T, V] acoustic costs (``ilabel i`` reads column i-1).
    boost: float32 [W] cost added on arcs with olabel w (empty = no boosts). slot: int32 [S],
    all -1 on entry and on return. eps_limit: queue pops per frame before the epsilon closure
    gives up (flagged in the stats).

    Returns (arcs, frames, total, reached, found, stats): the arc index and frame of every arc
    of the best path, its total cost, whether it ends in a final state, whether any token
    survived, and int64 counters (see STAT_*).
    """
    T = ac.shape[0]
    stats = np.zeros(NUM_STATS, dtype=np.int64)
    has_boost = boost.shape[0] > 0
    n_boost = boost.shape[0]
    # back-pointer records
    rec_prev = np.empty(_INIT_CAPACITY * 4, dtype=np.int64)
    rec_arc = np.empty(_INIT_CAPACITY * 4, dtype=np.int64)
    rec_frame = np.empty(_INIT_CAPACITY * 4, dtype=np.int32)
    nrec = 0
    # tokens of the current frame and the next one
    cur_state = np.empty(_INIT_CAPACITY, dtype=np.int32)
    cur_cost = np.empty(_INIT_CAPACITY, dtype=np.float32)
    cur_rec = np.empty(_INIT_CAPACITY, dtype=np.int64)
    nxt_state = np.empty(_INIT_CAPACITY, dtype=np.int32)
    nxt_cost = np.empty(_INIT_CAPACITY, dtype=np.float32)
    nxt_rec = np.empty(_INIT_CAPACITY, dtype=np.int64)
    nxt_arc = np.empty(_INIT_CAPACITY, dtype=np.int64)
    scratch = np.empty(_INIT_CAPACITY, dtype=np.float32)
    queue = np.empty(_INIT_CAPACITY, dtype=np.int32)

    # start token (a record with no predecessor) at frame -1
    rec_prev[0] = -1
    rec_arc[0] = -1
    rec_frame[0] = -1
    nrec = 1
    n = 0
    if start >= 0:
        cur_state[0] = start
        cur_cost[0] = np.float32(0.0)
        cur_rec[0] = 0
        slot[start] = 0
        n = 1
    cut = _F32_INF
    frame = -1
    t = -1
    while True:
        # ---------------------------------------------- epsilon closure of cur (ProcessNonemitting)
        if n > queue.shape[0]:
            queue = _grow(queue, n)
        nq = 0
        for i in range(n - 1, -1, -1):  # pop in token order
            queue[nq] = i
            nq += 1
        pops = 0
        while nq > 0:
            nq -= 1
            i = queue[nq]
            pops += 1
            if pops > eps_limit:
                stats[STAT_EPS_LIMIT] += 1
                break
            c0 = cur_cost[i]
            if c0 > cut:
                continue
            s = cur_state[i]
            for a in range(states[s].split, states[s].end):
                arc = arcs[a]
                c = c0 + arc.weight
                if has_boost:
                    ol = arc.olabel
                    if ol > 0 and ol < n_boost:
                        c = c + boost[ol]
                if c > cut:
                    continue
                d = arc.nextstate
                j = slot[d]
                if j < 0:
                    j = n
                    n += 1
                    if n > cur_state.shape[0]:
                        cur_state = _grow(cur_state, n)
                        cur_cost = _grow(cur_cost, n)
                        cur_rec = _grow(cur_rec, n)
                    cur_state[j] = d
                    slot[d] = j
                elif not (c < cur_cost[j]):
                    continue
                cur_cost[j] = c
                if nrec >= rec_prev.shape[0]:
                    rec_prev = _grow(rec_prev, nrec + 1)
                    rec_arc = _grow(rec_arc, nrec + 1)
                    rec_frame = _grow(rec_frame, nrec + 1)
                rec_prev[nrec] = cur_rec[i]
                rec_arc[nrec] = a
                rec_frame[nrec] = frame
                cur_rec[j] = nrec
                nrec += 1
                if nq >= queue.shape[0]:
                    queue = _grow(queue, nq + 1)
                queue[nq] = j
                nq += 1
        stats[STAT_EPS_POPS] += pops
        # the scratch map is only valid within a frame
        for i in range(n):
            slot[cur_state[i]] = -1
        stats[STAT_TOKENS] += n
        t += 1
        if t >= T or n == 0:
            break
        frame = t
        stats[STAT_FRAMES] += 1
        # ---------------------------------------------- cutoff (GetCutoff) of the current tokens
        if n > scratch.shape[0]:
            scratch = _grow(scratch, n)
        cut, adaptive = get_cutoff(cur_cost, n, scratch, beam, max_active, min_active, beam_delta)
        # ---------------------------------------------- emitting arcs (ProcessEmitting)
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
                c = best_c + arc.weight + ac[t, arc.column]
                if has_boost:
                    ol = arc.olabel
                    if ol > 0 and ol < n_boost:
                        c = c + boost[ol]
                if c + adaptive < bound:
                    bound = c + adaptive
        m = 0
        n_arcs = 0
        for i in range(n):
            c0 = cur_cost[i]
            if not (c0 < cut):
                continue
            s = cur_state[i]
            a0 = states[s].first
            a1 = states[s].split
            n_arcs += a1 - a0
            for a in range(a0, a1):
                arc = arcs[a]
                c = c0 + arc.weight + ac[t, arc.column]
                if has_boost:
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
                j = slot[d]
                if j < 0:
                    j = m
                    m += 1
                    if m > nxt_state.shape[0] or m > nxt_arc.shape[0]:  # nxt_arc is not swapped
                        nxt_state = _grow(nxt_state, m)
                        nxt_cost = _grow(nxt_cost, m)
                        nxt_rec = _grow(nxt_rec, m)
                        nxt_arc = _grow(nxt_arc, m)
                    nxt_state[j] = d
                    slot[d] = j
                elif not (c < nxt_cost[j]):
                    continue
                nxt_cost[j] = c
                nxt_rec[j] = cur_rec[i]
                nxt_arc[j] = a
        stats[STAT_ARCS] += n_arcs
        # final bound of this frame (as the torch path: best new cost + adaptive beam); keep below it
        cut = best_new + adaptive
        k = 0
        for j in range(m):
            d = nxt_state[j]
            c = nxt_cost[j]
            if c < cut:
                if nrec >= rec_prev.shape[0]:
                    rec_prev = _grow(rec_prev, nrec + 1)
                    rec_arc = _grow(rec_arc, nrec + 1)
                    rec_frame = _grow(rec_frame, nrec + 1)
                rec_prev[nrec] = nxt_rec[j]
                rec_arc[nrec] = nxt_arc[j]
                rec_frame[nrec] = t
                nxt_state[k] = d
                nxt_cost[k] = c
                nxt_rec[k] = nrec
                nrec += 1
                slot[d] = k
                k += 1
            else:
                slot[d] = -1
        # swap: the kept new tokens become the current ones
        cur_state, nxt_state = nxt_state, cur_state
        cur_cost, nxt_cost = nxt_cost, cur_cost
        cur_rec, nxt_rec = nxt_rec, cur_rec
        n = k
    stats[STAT_RECORDS] = nrec
    # ---------------------------------------------- best token with final costs (GetBestPath)
    reached = False
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
        return np.empty(0, np.int64), np.empty(0, np.int64), _F32_INF, False, False, stats
    # ---------------------------------------------- trace back
    r = cur_rec[best_i]
    length = 0
    while r >= 0:
        if rec_arc[r] >= 0:
            length += 1
        r = rec_prev[r]
    path_arcs = np.empty(length, dtype=np.int64)
    path_frames = np.empty(length, dtype=np.int64)
    r = cur_rec[best_i]
    p = length
    while r >= 0:
        if rec_arc[r] >= 0:
            p -= 1
            path_arcs[p] = rec_arc[r]
            path_frames[p] = rec_frame[r]
        r = rec_prev[r]
    return path_arcs, path_frames, total, reached, True, stats


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
class CompiledPath:
    """The 1-best of one utterance from the compiled search."""

    arcs: np.ndarray  # int64 arc indices, in path order (epsilon arcs included)
    frames: np.ndarray  # int64 frame of each arc (-1 = before the first frame)
    total: float  # total cost (float32 value), inf when nothing survived
    reached_final: bool
    found: bool  # some token survived to the end
    stats: np.ndarray


def default_threads() -> int:
    """Cores this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def _cache_present() -> bool:
    """Whether numba's on-disk cache of `decode_utterance` exists (so no compile will be needed)."""
    try:
        index = Path(decode_utterance._cache._cache_file._index_path)  # numba internals
    except AttributeError:
        return False
    return index.is_file()


_compile_lock = threading.Lock()


class CompiledSearch:
    """The compiled search over one graph: graph arrays in the compiled function's dtypes, a scratch
    ``slot`` array per worker thread and a thread pool (one utterance per task, GIL released)."""

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
            if getattr(decode_utterance, "signatures", True):  # (plain function under NUMBA_DISABLE_JIT)
                return
            if not _cache_present():
                log.warning("wfst: compiling decoder (first run only)")
            # a one-state graph with one self-loop, two frames: fixes the signature
            i32, f32 = np.int32, np.float32
            states = np.zeros(1, STATE_DTYPE)
            states[0] = (0, 1, 1, 0.0)
            arcs = np.zeros(1, ARC_DTYPE)
            arcs[0] = (0, 0, 0, 0.0)
            decode_utterance(
                states,
                arcs,
                0,
                np.zeros((2, 1), f32),
                f32(1.0),
                10,
                1,
                f32(0.5),
                np.zeros(0, f32),
                np.full(1, -1, i32),
                100,
            )

    def _slot(self) -> np.ndarray:
        s = getattr(self._local, "slot", None)
        if s is None:
            s = np.full(self.num_states, -1, dtype=np.int32)
            self._local.slot = s
        return s

    def boost_array(self, table: dict[int, float]) -> np.ndarray:
        """word id -> cost table as a dense float32 array (empty when there are no boosts)."""
        if not table:
            return np.zeros(0, dtype=np.float32)
        arr = np.zeros(max(table) + 1, dtype=np.float32)
        for wid, c in table.items():
            arr[wid] = c
        return arr

    # ---------------------------------------------------------------- search
    def decode_one(
        self,
        ac: np.ndarray,
        beam: float,
        max_active: int,
        min_active: int,
        beam_delta: float,
        boost: np.ndarray | None = None,
        eps_limit: int = 1 << 40,
    ) -> CompiledPath:
        """1-best of one utterance; ac: float32 [T, V] acoustic costs."""
        self.ensure_compiled()
        ac = np.ascontiguousarray(ac, dtype=np.float32)
        if ac.ndim != 2:
            raise ValueError(f"acoustic costs must be [T, V], got {ac.shape}")
        if ac.shape[1] == 0:
            ac = np.zeros((ac.shape[0], 1), np.float32)
        arcs, frames, total, reached, found, stats = decode_utterance(
            self.states,
            self.arcs,
            self.start,
            ac,
            np.float32(beam),
            int(min(max_active, 2**31 - 1)),
            int(min_active),
            np.float32(beam_delta),
            boost if boost is not None else np.zeros(0, np.float32),
            self._slot(),
            int(eps_limit),
        )
        return CompiledPath(arcs, frames, float(total), bool(reached), bool(found), stats)

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
    ) -> list[CompiledPath]:
        """Decode utterances on `threads` workers (default: the search's), longest first."""
        self.ensure_compiled()
        threads = threads or self.threads
        args = (beam, max_active, min_active, beam_delta)
        if threads <= 1 or len(acs) <= 1:
            return [self.decode_one(a, *args, b, eps_limit) for a, b in zip(acs, boosts, strict=True)]
        if self._pool is None or self._pool._max_workers != threads:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wfst-compiled")
        order = sorted(range(len(acs)), key=lambda i: -acs[i].shape[0])
        futures = {i: self._pool.submit(self.decode_one, acs[i], *args, boosts[i], eps_limit) for i in order}
        return [futures[i].result() for i in range(len(acs))]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
