"""Compiled CPU backend of `wfst-otf`: the `wfst` numba search with a difference-LM state per token.

The search is `asrdecode.decoders.wfst.compiled` (Kaldi FasterDecoder pruning, best-token-first
running bound, LIFO epsilon closure, back-pointer records and their garbage collection, the same
cutoff, arc counting, record tracing and thread pool: imported, not copied). What changes is the
token: (graph state, difference-LM state `u`, cost, record) (`difference.DifferenceLM`), so

* crossing an arc with a word olabel ``w`` (emitting or epsilon-input) adds ``lm_step(u, w)``
  (``lm_scale * (cost_large - cost_small)``) and moves ``u`` (paper 000 Alg. 2, Kaldi biglm);
* **recombination** keys on the pair (graph state, u) (paper 000 Alg. 4): an open-addressing hash
  table (int64 key ``state * U + u``, linear probing) sized to twice the tokens a step can make,
  cleared per frame only at the slots that were used, so its memory follows the live tokens, not
  graph states x LM states;
* **LM lookups are memoised** in a direct-mapped cache keyed by (u, w), kept for the whole
  utterance: the same (history, word) pair met again (other graph states, later frames) costs one
  probe instead of three backoff walks (paper 000 Alg. 1-2 deduplicate lookups per frame);
* the final cost adds the ``</s>`` difference of ``u``.

Lattices are not kept by this backend (see the decoder).
"""

from __future__ import annotations

import numba
import numpy as np

from asrdecode.decoders.wfst.compiled import (
    C_GC_AT,
    C_GC_MIN,
    C_NEXT_FRAME,
    C_RECORDS,
    C_TOKENS,
    GC_MIN_RECORDS,
    NUM_COUNTERS,
    NUM_STATS,
    STAT_ARCS,
    STAT_EPS_LIMIT,
    STAT_EPS_POPS,
    STAT_FRAMES,
    STAT_RECORDS,
    STAT_TOKENS,
    CompiledPath,
    CompiledSearch,
    _collect_records,
    _emitting_arcs,
    _grow,
    _seed_queue,
    get_cutoff,
    trace_records,
)
from asrdecode.graph.format import DeviceGraph
from asrdecode.lm.difference import DifferenceLM, lm_final, lm_step
from asrdecode.numba_status import announce_first_compile, configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)

_F32_INF = np.float32(np.inf)
START_STATE = DifferenceLM.START  # union state of <s>
_INIT = 1024
MEMO_BITS = 16  # LM lookup cache: 65536 (u, w) entries (1 MiB per worker thread)
STAT_LM_LOOKUPS = 7  # stats slot (past the `wfst` ones): LM lookups that missed the cache
NUM_OTF_STATS = max(NUM_STATS, STAT_LM_LOOKUPS + 1)

# workspace arrays
(W_CUR_G, W_CUR_U, W_CUR_COST, W_CUR_REC, W_CUR_POS,
 W_NXT_G, W_NXT_U, W_NXT_COST, W_NXT_REC, W_NXT_ARC, W_NXT_POS,
 W_QUEUE, W_SCRATCH, W_REC_PREV, W_REC_ARC, W_REC_FRAME,
 W_HTAB, W_MEMO) = range(18)  # fmt: skip
WORKSPACE_DTYPES = (
    (np.int32, np.int32, np.float32, np.int64, np.int64)
    + (np.int32, np.int32, np.float32, np.int64, np.int32, np.int64)
    + (np.int32, np.float32, np.int64, np.int32, np.int32)
    + (np.int64,)
)
MEMO_DTYPE = np.dtype([("key", np.int64), ("cost", np.float32), ("next", np.int32)], align=True)


@numba.njit(nogil=True, cache=True, inline="always")
def _slot_of(htab: np.ndarray, key: int) -> int:
    """Index of `key` in the open-addressing table (pairs key, token at ``2p``, ``2p + 1``: one
    cache line per probe), or of the empty pair (key -1) where it goes."""
    mask = (htab.shape[0] >> 1) - 1
    h = key * np.int64(-7046029254386353131)
    p = (h ^ (h >> 29)) & mask
    while htab[2 * p] != key and htab[2 * p] != -1:
        p = (p + 1) & mask
    return 2 * p


@numba.njit(nogil=True, cache=True)
def _clear(htab: np.ndarray, pos: np.ndarray, n: int) -> None:
    for i in range(n):
        htab[pos[i]] = -1


@numba.njit(nogil=True, cache=True)
def _insert_all(htab, g, u, pos, n: int, U: int) -> None:
    """Put tokens 0..n-1 into the (empty) table."""
    for i in range(n):
        key = np.int64(g[i]) * U + u[i]
        p = _slot_of(htab, key)
        htab[p] = key
        htab[p + 1] = i
        pos[i] = p


@numba.njit(nogil=True, cache=True)
def _table(htab: np.ndarray, need: int) -> np.ndarray:
    """The table with room for `need` keys at load <= 1/2 (a new empty one if grown)."""
    cap = htab.shape[0] >> 1
    if 2 * need <= cap:
        return htab
    while 2 * need > cap:
        cap *= 2
    return np.full(2 * cap, -1, np.int64)


@numba.njit(nogil=True, cache=True, inline="always")
def _lm(lm, memo, stats, u: int, w: int, V: int) -> tuple[np.float32, int]:
    """`lm_step` through the direct-mapped memo (one 16-byte record per entry: one cache line)."""
    key = np.int64(u) * V + w
    h = key * np.int64(-7046029254386353131)
    e = memo[(h ^ (h >> 31)) & (memo.shape[0] - 1)]
    if e.key == key:
        return e.cost, np.int64(e.next)
    c, nxt = lm_step(lm, u, w)
    e.key = key
    e.cost = c
    e.next = nxt
    stats[STAT_LM_LOOKUPS] += 1
    return c, np.int64(nxt)


@numba.njit(nogil=True, cache=True)
def _emit(
    states, arcs, acrow, boost, lm, U, V, cut, adaptive, htab, memo, stats,
    cur_g, cur_u, cur_cost, cur_rec, n, nxt_g, nxt_u, nxt_cost, nxt_rec, nxt_arc, nxt_pos,
):  # fmt: skip
    """Emitting arcs of the tokens below ``cut`` (as `wfst.compiled._emit`, best token first for
    the running bound), with the LM difference on word arcs and (state, u) recombination.
    Returns (new tokens, best new cost)."""
    n_boost = boost.shape[0]
    best_i = -1
    best_c = _F32_INF
    for i in range(n):
        if cur_cost[i] < best_c:
            best_c = cur_cost[i]
            best_i = i
    best_new = _F32_INF
    bound = _F32_INF
    if best_i >= 0 and best_c < cut:
        s = cur_g[best_i]
        for a in range(states[s].first, states[s].split):
            arc = arcs[a]
            c = best_c + arc.weight + acrow[arc.column]
            ol = arc.olabel
            if ol > 0:
                if ol < n_boost:
                    c = c + boost[ol]
                dc, _ = _lm(lm, memo, stats, cur_u[best_i], ol, V)
                c = c + dc
            if c + adaptive < bound:
                bound = c + adaptive
    m = 0
    for i in range(n):
        c0 = cur_cost[i]
        if not (c0 < cut):
            continue
        s = cur_g[i]
        u0 = cur_u[i]
        r0 = cur_rec[i]
        for a in range(states[s].first, states[s].split):
            arc = arcs[a]
            c = c0 + arc.weight + acrow[arc.column]
            ol = arc.olabel
            u = u0
            if ol > 0:
                if ol < n_boost:
                    c = c + boost[ol]
                dc, u = _lm(lm, memo, stats, u0, ol, V)
                c = c + dc
            if c < best_new:
                best_new = c
            if not (c < bound):
                continue
            if c + adaptive < bound:
                bound = c + adaptive
            d = arc.nextstate
            key = np.int64(d) * U + u
            p = _slot_of(htab, key)
            if htab[p] == -1:
                j = m
                m += 1
                htab[p] = key
                htab[p + 1] = j
                nxt_g[j] = d
                nxt_u[j] = u
                nxt_pos[j] = p
            else:
                j = htab[p + 1]
                if not (c < nxt_cost[j]):
                    continue
            nxt_cost[j] = c
            nxt_rec[j] = r0
            nxt_arc[j] = a
    return m, best_new


@numba.njit(nogil=True, cache=True)
def _keep(cut, frame, m, nxt_g, nxt_u, nxt_cost, nxt_rec, nxt_arc, rec_prev, rec_arc, rec_frame, nrec):
    """Keep the new tokens below the frame's final bound (a record each); returns (tokens, records)."""
    k = 0
    for j in range(m):
        c = nxt_cost[j]
        if c < cut:
            rec_prev[nrec] = nxt_rec[j]
            rec_arc[nrec] = nxt_arc[j]
            rec_frame[nrec] = frame
            nxt_g[k] = nxt_g[j]
            nxt_u[k] = nxt_u[j]
            nxt_cost[k] = c
            nxt_rec[k] = nrec
            nrec += 1
            k += 1
    return k, nrec


@numba.njit(nogil=True, cache=True)
def _closure(
    states, arcs, boost, lm, U, V, cut, frame, htab, memo, eps_limit,
    cur_g, cur_u, cur_cost, cur_rec, cur_pos, queue, rec_prev, rec_arc, rec_frame, io, stats,
) -> bool:  # fmt: skip
    """Epsilon closure (Kaldi ProcessNonemitting, as `wfst.compiled._closure`) with the LM
    difference on word arcs. io: [tokens, records, queue length, pops]. Returns False when an
    array or the table is too small for the next token's arcs (the caller grows them)."""
    n, nrec, nq, pops = io[0], io[1], io[2], io[3]
    n_boost = boost.shape[0]
    while nq > 0:
        i = queue[nq - 1]
        s = cur_g[i]
        a0 = states[s].split
        a1 = states[s].end
        k = a1 - a0
        if (
            n + k > cur_g.shape[0]
            or 2 * (n + k) > htab.shape[0] >> 1
            or nrec + k > rec_prev.shape[0]
            or nq - 1 + k > queue.shape[0]
        ):
            io[0], io[1], io[2], io[3] = n, nrec, nq, pops
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
        u0 = cur_u[i]
        for a in range(a0, a1):
            arc = arcs[a]
            c = c0 + arc.weight
            ol = arc.olabel
            u = u0
            if ol > 0:
                if ol < n_boost:
                    c = c + boost[ol]
                dc, u = _lm(lm, memo, stats, u0, ol, V)
                c = c + dc
            if c > cut:
                continue
            d = arc.nextstate
            key = np.int64(d) * U + u
            p = _slot_of(htab, key)
            if htab[p] == -1:
                j = n
                n += 1
                htab[p] = key
                htab[p + 1] = j
                cur_g[j] = d
                cur_u[j] = u
                cur_pos[j] = p
            else:
                j = htab[p + 1]
                if not (c < cur_cost[j]):
                    continue
            cur_cost[j] = c
            rec_prev[nrec] = cur_rec[i]
            rec_arc[nrec] = a
            rec_frame[nrec] = frame
            cur_rec[j] = nrec
            nrec += 1
            queue[nq] = j
            nq += 1
    io[0], io[1], io[2], io[3] = n, nrec, nq, pops
    return True


@numba.njit(nogil=True, cache=True)
def _close_frame(states, arcs, boost, lm, U, V, cut, frame, eps_limit, ws, ctr, stats):
    """Epsilon closure of the current tokens (which are in the table), growing arrays as needed;
    then the table is emptied. Returns the workspace."""
    n = ctr[C_TOKENS]
    queue = _grow(ws[W_QUEUE], n)
    _seed_queue(queue, n)
    io = np.empty(4, np.int64)
    io[0], io[1], io[2], io[3] = n, ctr[C_RECORDS], n, 0
    cur_g, cur_u, cur_cost, cur_rec, cur_pos = (
        ws[W_CUR_G],
        ws[W_CUR_U],
        ws[W_CUR_COST],
        ws[W_CUR_REC],
        ws[W_CUR_POS],
    )
    rec_prev, rec_arc, rec_frame = ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME]
    htab = ws[W_HTAB]
    memo = ws[W_MEMO]
    while not _closure(
        states, arcs, boost, lm, U, V, cut, frame, htab, memo, eps_limit,
        cur_g, cur_u, cur_cost, cur_rec, cur_pos, queue, rec_prev, rec_arc, rec_frame, io, stats,
    ):  # fmt: skip
        top = cur_g[queue[io[2] - 1]]
        need = states[top].end - states[top].split + 1
        cur_g = _grow(cur_g, io[0] + need)
        cur_u = _grow(cur_u, cur_g.shape[0])
        cur_cost = _grow(cur_cost, cur_g.shape[0])
        cur_rec = _grow(cur_rec, cur_g.shape[0])
        cur_pos = _grow(cur_pos, cur_g.shape[0])
        rec_prev = _grow(rec_prev, io[1] + need)
        rec_arc = _grow(rec_arc, rec_prev.shape[0])
        rec_frame = _grow(rec_frame, rec_prev.shape[0])
        queue = _grow(queue, io[2] + need)
        if 2 * (io[0] + need) > htab.shape[0] >> 1:
            _clear(htab, cur_pos, io[0])
            htab = _table(htab, io[0] + need)
            _insert_all(htab, cur_g, cur_u, cur_pos, io[0], U)
    n = io[0]
    stats[STAT_EPS_POPS] += io[3]
    stats[STAT_TOKENS] += n
    _clear(htab, cur_pos, n)
    ctr[C_TOKENS], ctr[C_RECORDS] = n, io[1]
    return (
        cur_g, cur_u, cur_cost, cur_rec, cur_pos,
        ws[W_NXT_G], ws[W_NXT_U], ws[W_NXT_COST], ws[W_NXT_REC], ws[W_NXT_ARC], ws[W_NXT_POS],
        queue, ws[W_SCRATCH], rec_prev, rec_arc, rec_frame,
        htab, memo,
    )  # fmt: skip


@numba.njit(nogil=True, cache=True)
def otf_init(states, arcs, start, boost, lm, U, V, eps_limit, ws, ctr, stats, gc_at):
    """Start a search: the start token (graph start, LM state <s>) and its epsilon closure."""
    rec_prev, rec_arc, rec_frame = ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME]
    rec_prev[0] = -1
    rec_arc[0] = -1
    rec_frame[0] = -1
    ctr[C_RECORDS] = 1
    ctr[C_TOKENS] = 0
    ctr[C_NEXT_FRAME] = 0
    ctr[C_GC_AT] = gc_at
    ctr[C_GC_MIN] = gc_at
    memo = ws[W_MEMO]
    for i in range(memo.shape[0]):
        memo[i].key = -1
    if start >= 0:
        ws[W_CUR_G][0] = start
        ws[W_CUR_U][0] = START_STATE
        ws[W_CUR_COST][0] = np.float32(0.0)
        ws[W_CUR_REC][0] = 0
        ctr[C_TOKENS] = 1
        _insert_all(ws[W_HTAB], ws[W_CUR_G], ws[W_CUR_U], ws[W_CUR_POS], 1, U)
    return _close_frame(states, arcs, boost, lm, U, V, _F32_INF, -1, eps_limit, ws, ctr, stats)


@numba.njit(nogil=True, cache=True)
def otf_advance(
    states, arcs, ac, beam, max_active, min_active, beam_delta, boost, lm, U, V, eps_limit, ws, ctr, stats
):
    """Advance a started search by the frames of ac (float32 [T, V] acoustic costs). Returns the workspace."""
    for t in range(ac.shape[0]):
        frame = ctr[C_NEXT_FRAME]
        ctr[C_NEXT_FRAME] = frame + 1
        n = ctr[C_TOKENS]
        if n == 0:
            continue
        stats[STAT_FRAMES] += 1
        cur_g, cur_u, cur_cost, cur_rec = ws[W_CUR_G], ws[W_CUR_U], ws[W_CUR_COST], ws[W_CUR_REC]
        scratch = _grow(ws[W_SCRATCH], n)
        cut, adaptive = get_cutoff(cur_cost, n, scratch, beam, max_active, min_active, beam_delta)
        n_arcs = _emitting_arcs(states, cur_cost, cur_g, n, cut)
        stats[STAT_ARCS] += n_arcs
        nxt_g = _grow(ws[W_NXT_G], n_arcs)
        nxt_u = _grow(ws[W_NXT_U], n_arcs)
        nxt_cost = _grow(ws[W_NXT_COST], n_arcs)
        nxt_rec = _grow(ws[W_NXT_REC], n_arcs)
        nxt_arc = _grow(ws[W_NXT_ARC], n_arcs)
        nxt_pos = _grow(ws[W_NXT_POS], n_arcs)
        nrec = ctr[C_RECORDS]
        rec_prev = _grow(ws[W_REC_PREV], nrec + n_arcs)
        rec_arc = _grow(ws[W_REC_ARC], rec_prev.shape[0])
        rec_frame = _grow(ws[W_REC_FRAME], rec_prev.shape[0])
        htab = _table(ws[W_HTAB], n_arcs)
        m, best_new = _emit(
            states, arcs, ac[t], boost, lm, U, V, cut, adaptive, htab,
            ws[W_MEMO], stats,
            cur_g, cur_u, cur_cost, cur_rec, n, nxt_g, nxt_u, nxt_cost, nxt_rec, nxt_arc, nxt_pos,
        )  # fmt: skip
        _clear(htab, nxt_pos, m)
        cut = best_new + adaptive
        k, nrec = _keep(
            cut, frame, m, nxt_g, nxt_u, nxt_cost, nxt_rec, nxt_arc, rec_prev, rec_arc, rec_frame, nrec
        )
        ctr[C_TOKENS], ctr[C_RECORDS] = k, nrec
        _insert_all(htab, nxt_g, nxt_u, nxt_pos, k, U)
        ws = (
            nxt_g, nxt_u, nxt_cost, nxt_rec, nxt_pos,
            cur_g, cur_u, cur_cost, cur_rec, nxt_arc, ws[W_CUR_POS],
            ws[W_QUEUE], scratch, rec_prev, rec_arc, rec_frame,
            htab, ws[W_MEMO],
        )  # fmt: skip
        ws = _close_frame(states, arcs, boost, lm, U, V, cut, frame, eps_limit, ws, ctr, stats)
        if ctr[C_RECORDS] > ctr[C_GC_AT]:
            kept = _collect_records(
                ws[W_CUR_REC], ctr[C_TOKENS], ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME], ctr[C_RECORDS]
            )
            ctr[C_RECORDS] = kept
            ctr[C_GC_AT] = max(ctr[C_GC_MIN], 4 * kept)
    return ws


@numba.njit(nogil=True, cache=True)
def otf_best(states, lm, ws, ctr, use_final):
    """Best token (Kaldi GetBestPath) with final costs = graph final + </s> difference when some
    token can end (and use_final), else without, flagged; traced back. Returns (arcs, frames,
    total, reached, found, union state of the best token)."""
    cur_g, cur_u, cur_cost, cur_rec = ws[W_CUR_G], ws[W_CUR_U], ws[W_CUR_COST], ws[W_CUR_REC]
    n = ctr[C_TOKENS]
    reached = False
    if use_final:
        for i in range(n):
            fin = states[cur_g[i]].final
            if fin < _F32_INF and cur_cost[i] + fin + lm_final(lm, cur_u[i]) < _F32_INF:
                reached = True
                break
    best_i = -1
    total = _F32_INF
    for i in range(n):
        sc = cur_cost[i]
        if reached:
            sc = sc + states[cur_g[i]].final + lm_final(lm, cur_u[i])
        tie = sc == total and (
            cur_g[i] < cur_g[best_i] or (cur_g[i] == cur_g[best_i] and cur_u[i] < cur_u[best_i])
        )
        if best_i < 0 or sc < total or tie:
            best_i = i
            total = sc
    if best_i < 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), _F32_INF, False, False, -1
    path_arcs, path_frames = trace_records(ws[W_REC_PREV], ws[W_REC_ARC], ws[W_REC_FRAME], cur_rec[best_i])
    return path_arcs, path_frames, total, reached, True, cur_u[best_i]


class OtfWorkspace:
    """The arrays and counters of one `wfst-otf` search (a worker thread's, reused)."""

    def __init__(self) -> None:
        arrays = [np.empty(_INIT, dtype=dt) for dt in WORKSPACE_DTYPES]
        arrays[W_HTAB] = np.full(4 * _INIT, -1, np.int64)
        memo = np.zeros(1 << MEMO_BITS, MEMO_DTYPE)
        memo["key"] = -1
        arrays.append(memo)
        self.arrays = tuple(arrays)
        self.ctr = np.zeros(NUM_COUNTERS, dtype=np.int64)
        self.stats = np.zeros(NUM_OTF_STATS, dtype=np.int64)


class OtfCompiledSearch(CompiledSearch):
    """`CompiledSearch` (graph records, thread pool, batch driver) with the difference LM."""

    def __init__(self, graph: DeviceGraph, lm: DifferenceLM, threads: int = 0) -> None:
        super().__init__(graph, threads)
        self.lm = lm.arrays()
        self.U = int(lm.num_states)
        self.V = int(lm.large.vocab_size)
        if self.arcs.shape[0] and int(self.arcs["olabel"].max()) >= self.V:
            raise ValueError("wfst-otf: a graph olabel is outside the LM vocabulary")

    def ensure_compiled(self) -> None:
        with self._compile_lock():
            if getattr(otf_advance, "signatures", True):
                return
            announce_first_compile("wfst-otf: decoder", otf_advance, otf_init)
            w = OtfWorkspace()
            boost = np.zeros(0, np.float32)
            f32 = np.float32
            w.arrays = otf_init(self.states, self.arcs, self.start, boost, self.lm, self.U, self.V, 100,
                                w.arrays, w.ctr, w.stats, 1)  # fmt: skip
            ac = np.zeros((1, 1), f32)
            w.arrays = otf_advance(self.states, self.arcs, ac, f32(1.0), 10, 1, f32(0.5), boost, self.lm,
                                   self.U, self.V, 100, w.arrays, w.ctr, w.stats)  # fmt: skip
            otf_best(self.states, self.lm, w.arrays, w.ctr, True)

    @staticmethod
    def _compile_lock():
        from asrdecode.decoders.wfst.compiled import _compile_lock

        return _compile_lock

    def _otf_workspace(self) -> OtfWorkspace:
        w = getattr(self._local, "otf_workspace", None)
        if w is None:
            w = self._local.otf_workspace = OtfWorkspace()
        return w

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
        """1-best of one utterance; ac: float32 [T, V] acoustic costs. (No lattices.)"""
        if lattice:
            raise ValueError("wfst-otf: the compiled backend keeps no lattices")
        self.ensure_compiled()
        w = self._otf_workspace()
        boost = boost if boost is not None else np.zeros(0, np.float32)
        ac = np.ascontiguousarray(ac, dtype=np.float32)
        if ac.shape[1] == 0:
            ac = np.zeros((ac.shape[0], 1), np.float32)
        w.stats[:] = 0
        w.arrays = otf_init(self.states, self.arcs, self.start, boost, self.lm, self.U, self.V,
                            int(eps_limit), w.arrays, w.ctr, w.stats, int(gc_records))  # fmt: skip
        w.arrays = otf_advance(
            self.states, self.arcs, ac, np.float32(beam), int(min(max_active, 2**31 - 1)), int(min_active),
            np.float32(beam_delta), boost, self.lm, self.U, self.V, int(eps_limit), w.arrays, w.ctr, w.stats,
        )  # fmt: skip
        arcs, frames, total, reached, found, _ = otf_best(self.states, self.lm, w.arrays, w.ctr, True)
        stats = w.stats.copy()
        stats[STAT_RECORDS] = w.ctr[C_RECORDS]
        return CompiledPath(arcs, frames, float(total), bool(reached), bool(found), stats)


__all__ = ["STAT_LM_LOOKUPS", "OtfCompiledSearch", "OtfWorkspace", "STAT_TOKENS"]
