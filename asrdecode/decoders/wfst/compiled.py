"""Compiled CPU backend of `wfst` and `wfst-otf`: token passing for one utterance in numba.

One kernel family serves both decoders: the functions below take an `lm` argument that is `None`
for `wfst` and `DifferenceLM.arrays()` for `wfst-otf` (paper 000), and numba compiles one version
for each, pruning the `lm is None` branches. With an LM a token is (graph state, LM state u, cost,
record): crossing an arc with a word olabel adds ``lm_step(u, w)`` through a memo of (u, w) lookups
(`lm.difference.memo_get`; paper 000 Alg. 1-2) and moves u; recombination keys on the pair
through an open-addressing table (paper 000 Alg. 4); the final cost adds the ``</s>`` difference.
`let` (paper 002) keeps its group kernel in `let/search.py` on the same pieces.

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
  cost is found by selection (quickselect, what ``std::nth_element`` does, among the costs in the
  slice of the beam that holds it), never a sort; an exact value is needed for parity with Kaldi
  and the torch path, so the approximate bucket cut-off of paper 002 is not used;
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
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from asrdecode.decoders.wfst.core import PruningOptions
from asrdecode.decoders.wfst.lattice import compact_arcs, prune_window
from asrdecode.decoders.wfst.paths import BestPath, CostChunks, cost_parts
from asrdecode.decoders.workspace import (
    INIT_CAPACITY,
    WorkspaceLayout,
    grow,
    grow_fields,
    lattice_records,
    prefetch,
)
from asrdecode.graph.format import DeviceGraph, graph_records
from asrdecode.huge_pages import in_huge_pages
from asrdecode.lm.difference import DifferenceLM, lm_final, memo_fill, memo_get, memo_slot, new_memo
from asrdecode.machine import l2_cache_bytes
from asrdecode.numba_status import announce_first_compile, configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)

log = logging.getLogger("asrdecode.decoders.wfst")

_F32_INF = np.float32(np.inf)
LM_START_STATE = DifferenceLM.START  # the LM state of a search's start token (<s>)

# stats slots of a search
STAT_FRAMES, STAT_ARCS, STAT_TOKENS, STAT_EPS_POPS, STAT_EPS_LIMIT, STAT_RECORDS = range(6)
STAT_PRUNE_FRAMES = 6  # frames taken back by the lattice window pruning, over all its calls
STAT_LM_LOOKUPS = 7  # with an LM: LM lookups that missed the memo
STAT_HISTORY_PRUNED = 8  # with an LM: tokens dropped by the history beam or cap
NUM_STATS = 9


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


CUTOFF_BUCKETS = 256  # slices of the beam `get_cutoff` counts costs in before it selects


@numba.njit(nogil=True, cache=True, inline="always")
def _cutoff_bucket(c: np.float32, best: np.float32, per_bucket: np.float32) -> int:
    """The slice of the beam cost ``c`` falls in (`get_cutoff`): monotone in ``c``, the last one
    also taking costs that round onto the beam's end."""
    return min(int((c - best) * per_bucket), CUTOFF_BUCKETS)


@numba.njit(nogil=True, cache=True)
def beam_cutoff(cost: np.ndarray, n: int, beam: np.float32, max_active: int, min_active: int):
    """GetCutoff's best cost over ``cost[:n]``, its beam cut ``best + beam`` and whether that is the
    cutoff without more: no tokens, or neither a max_active nor a min_active limit."""
    best = best_token(cost, n)[1]
    return best, best + beam, n == 0 or (max_active >= 2147483647 and min_active <= 0)


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
    """Kaldi FasterDecoder::GetCutoff on ``cost[:n]``: (cutoff, adaptive beam), float32 as the torch path.

    The k-th smallest cost decides only when more than k costs lie below ``best + beam``, and
    then it is the k-th smallest of those: the costs below the beam cut are gathered and counted
    in `CUTOFF_BUCKETS` equal slices of the beam, and the selection runs only on the slice that
    holds the k-th (the whole list only for `min_active` when fewer than
    `min_active` lie below the beam cut). The result is the same as selecting over all costs."""
    best, beam_cut, beam_decides = beam_cutoff(cost, n, beam, max_active, min_active)
    if beam_decides:
        return beam_cut, beam
    below = 0  # the costs below the beam cut, gathered into scratch
    for i in range(n):
        if cost[i] < beam_cut:
            scratch[below] = cost[i]
            below += 1
    if below > max_active:  # else the max_active-th smallest is >= beam_cut: no tighter cut
        # the bucket holding it (buckets are monotone in the cost: every cost of a lower bucket is
        # smaller), then the selection among that bucket's costs only
        per_bucket = np.float32(CUTOFF_BUCKETS) / beam
        count = np.zeros(CUTOFF_BUCKETS + 1, np.int64)
        for i in range(below):
            count[_cutoff_bucket(scratch[i], best, per_bucket)] += 1
        k = max_active
        b = 0
        while count[b] <= k:
            k -= count[b]
            b += 1
        m = 0
        for i in range(below):
            c = scratch[i]
            if _cutoff_bucket(c, best, per_bucket) == b:
                scratch[m] = c
                m += 1
        max_cut = kth_smallest(scratch, m, k)
        if max_cut < beam_cut:
            return max_cut, max_cut - best + beam_delta
    min_cut = _F32_INF
    if min_active <= 0 or below > min_active:  # the min_active-th smallest is below beam_cut
        min_cut = best
    elif n > min_active:
        scratch[:n] = cost[:n]
        min_cut = kth_smallest(scratch, n, min_active)
    if min_cut > beam_cut:
        return min_cut, min_cut - best + beam_delta
    return beam_cut, beam


# ---------------------------------------------------------------------------------------------
# Workspace: the arrays of one search (a worker thread's, reused across utterances, or a stream's),
# one field table (`workspace.WorkspaceLayout`; fields grown together are adjacent and keep equal
# capacities, so the driver checks one of them before growing; a tuple passed to a helper costs
# two atomic reference counts per array, so the check is written at the call site). The LM fields
# (token LM state, hash positions, pair hash table) are used by `wfst-otf` only; the lattice
# fields only with lattices, the lattice pair fields (an utterance's (graph state, LM state) pairs
# as lattice states: their table, states, LM states and the pruning's pair-indexed maps) only by
# `wfst-otf` with lattices.
WORKSPACE = WorkspaceLayout(
    ("cur_state", np.int32), ("cur_cost", np.float32), ("cur_rec", np.int64),
    ("cur_u", np.int32), ("cur_pos", np.int64),
    ("nxt_state", np.int32), ("nxt_cost", np.float32), ("nxt_rec", np.int64), ("nxt_arc", np.int32),
    ("nxt_u", np.int32), ("nxt_pos", np.int64),
    ("queue", np.int32), ("scratch", np.float32),
    ("rec_prev", np.int64), ("rec_arc", np.int32), ("rec_frame", np.int32),
    ("lat_frame", np.int32), ("lat_src", np.int32), ("lat_dst", np.int32), ("lat_arc", np.int32),
    ("lat_ac", np.float32), ("lat_lm", np.float32), ("lat_cost", np.float32),
    ("node_frame", np.int32), ("node_state", np.int32), ("node_cost", np.float32), ("node_extra", np.float32),
    ("htab", np.int32),
    ("pair_state", np.int32), ("pair_u", np.int32), ("pair_slot", np.int32), ("pair_slot2", np.int32),
    ("pair_tab", np.int64),
)  # fmt: skip
W_QUEUE, W_SCRATCH, W_HTAB = WORKSPACE.indices("queue", "scratch", "htab")
# the groups of fields the frame driver unpacks at once (layout order)
CURRENT = WORKSPACE.span("cur_state", "cur_pos")
NEXT = WORKSPACE.span("nxt_state", "nxt_pos")
RECORDS = WORKSPACE.span("rec_prev", "rec_frame")
LATTICE_ARCS = WORKSPACE.span("lat_frame", "lat_cost")
LATTICE_NODES = WORKSPACE.span("node_frame", "node_extra")
LATTICE_PAIRS = WORKSPACE.span("pair_state", "pair_tab")
# counters of a workspace (int64 array); C_CLOSE: the current tokens still need their closure
C_TOKENS, C_RECORDS, C_LAT_ARCS, C_NODES, C_NEXT_FRAME, C_GC_AT, C_GC_MIN, C_PAIRS, C_CLOSE = range(9)
NUM_COUNTERS = 9
GC_MIN_RECORDS = 1 << 20  # back-pointer records before the first garbage collection

# The pruning settings of one search, one record for the compiled code (`search_settings`).
SETTINGS_DTYPE = np.dtype(
    [
        ("beam", np.float32), ("beam_delta", np.float32), ("max_active", np.int64), ("min_active", np.int64),
        ("eps_limit", np.int64), ("lattice_beam", np.float64), ("prune_interval", np.int64),
        ("bucket_width", np.float32), ("capacity", np.int64), ("gc_records", np.int64),
        ("word_beam", np.float32), ("history_beam", np.float32), ("history_max", np.int64),
        ("l2_bytes", np.int64),
    ],
    align=True,
)  # fmt: skip


def search_settings(
    pruning: PruningOptions,
    num_states: int,
    lattice_beam: float = 8.0,
    prune_interval: int = 25,
    bucket_width: float = 0.0,
    capacity: int = 16,
    gc_records: int = GC_MIN_RECORDS,
) -> np.record:
    """The settings record the compiled searches read: the pruning (Kaldi's beam, max/min
    active, adaptive-beam delta; the epsilon closure's pop limit, `max_epsilon_passes` x the
    graph's states, at least 1024), the lattice beam and pruning interval, `let`'s bucket width
    and group capacity, the back-pointer garbage-collection threshold, the word beam, the
    history beam (inf = off) and cap, and this machine's per-core L2 cache (`prefetch_pays`)."""
    rec = np.rec.array(np.zeros(1, SETTINGS_DTYPE))[0]  # a record: fields as attributes
    rec["beam"], rec["beam_delta"] = pruning.beam, pruning.beam_delta
    rec["max_active"], rec["min_active"] = min(int(pruning.max_active), 2**31 - 1), int(pruning.min_active)
    rec["eps_limit"] = max(pruning.max_epsilon_passes, 1) * max(num_states, 1024)
    rec["lattice_beam"], rec["prune_interval"] = lattice_beam, int(prune_interval)
    rec["bucket_width"], rec["capacity"], rec["gc_records"] = bucket_width, int(capacity), int(gc_records)
    rec["word_beam"] = pruning.word_beam_or_inf
    rec["history_beam"] = pruning.history_beam_or_inf
    rec["history_max"] = pruning.history_max
    rec["l2_bytes"] = l2_cache_bytes()
    return rec


@numba.njit(nogil=True, cache=True)
def collect_records(roots, n, rec_prev, rec_arc, rec_frame, nrec) -> int:
    """Drop the back-pointer records none of ``roots[:n]`` leads back to (Kaldi frees such tokens
    by reference counting); compacts the chain (``rec_prev``) and its payload (``rec_arc``,
    ``rec_frame``; give one array twice for a single payload) in place, keeps the order (a
    record's predecessor comes first), renumbers the roots (-1 = none). Returns the records kept."""
    new_id = np.full(nrec, -1, np.int64)
    for i in range(n):
        r = roots[i]
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
        if roots[i] >= 0:
            roots[i] = new_id[roots[i]]
    return k


@numba.njit(nogil=True, cache=True)
def emitting_arcs(states, cost: np.ndarray, state: np.ndarray, n: int, cut: np.float32) -> int:
    """Emitting arcs of the tokens below the cutoff (an upper bound of the new tokens)."""
    total = 0
    for i in range(n):
        if cost[i] < cut:
            s = state[i]
            total += states[s].split - states[s].first
    return total


# ------------------------------------------------------------------ the (graph state, LM state) map
# `wfst` recombines tokens by graph state through ``slot[state] -> token`` (-1 = none); `wfst-otf`
# by the pair (graph state, LM state u) through an open-addressing map (paper 000 Alg. 4) of int32
# token indices (`_token_slot`: hashed on ``state * U + u``, linear probing, a probe compares the
# token's own state and LM state), sized for the tokens a frame starts with (`_frame_table`) and
# grown at half load, cleared only at the entries used. The lattice pair table keeps (key, id)
# pairs (`_hash_slot`). `lm is None` selects the first at compile time (numba prunes the branch by
# the argument's type).
MAP_SLACK = 2  # the frame map's capacity in keys per token at the frame's start
PREFETCH_STATES, PREFETCH_ARCS = 8, 4  # how many tokens ahead `_emit` prefetches their graph records
PREFETCH_WORDS = 2  # and, with an LM, the memo sets of their word arcs (`prefetch_pays`)


@numba.njit(nogil=True, cache=True, inline="always")
def prefetch_frame(ac: np.ndarray, t: int) -> None:
    """Prefetch frame t's acoustic costs (one hint per cache line of the row), a frame before the
    emitting step reads them at the columns of the arcs it crosses: a long utterance's costs are
    larger than the caches, and those reads are random."""
    if t < ac.shape[0]:
        row = ac[t]
        for col in range(0, row.shape[0], 16):
            prefetch(row, col)


@numba.njit(nogil=True, cache=True, inline="always")
def prefetch_pays(table: np.ndarray, l2_bytes: int) -> bool:
    """Whether the searches prefetch the entries of a lookup table (the LM memo, `let`'s word-block
    cache) they will probe for the word arcs of tokens ahead: only for a table larger than the
    per-core L2 cache (``l2_bytes``, 0 = unknown). Finding the entries means walking those tokens'
    arcs early, which costs more than it hides when the table is in L2 anyway (real-speech.md,
    "What was tried and rejected")."""
    return table.nbytes > l2_bytes


@numba.njit(nogil=True, cache=True, inline="always")
def prefetch_word_sets(arcs, memo, V: int, u: int, first: int, end: int) -> None:
    """Prefetch the LM memo sets that `memo_get` will probe for the words of ``arcs[first:end]``
    from LM state ``u`` (a memo larger than L2; only a hint, results unchanged)."""
    for a in range(first, end):
        w = arcs[a].olabel
        if w > 0:
            prefetch(memo, memo_slot(u, w, V, memo.shape[0])[1])


@numba.njit(nogil=True, cache=True, inline="always")
def _first_probe(key: int, mask: int) -> int:
    """Where the probe for `key` starts in a table of ``mask + 1`` entries (multiplicative hashing,
    high bits folded in)."""
    h = key * np.int64(-7046029254386353131)
    return (h ^ (h >> 29)) & mask


@numba.njit(nogil=True, cache=True, inline="always")
def _hash_slot(htab: np.ndarray, key: int) -> int:
    """Index of `key` in the table, or of the empty pair (key -1) where it goes."""
    mask = (htab.shape[0] >> 1) - 1
    p = _first_probe(key, mask)
    while htab[2 * p] != key and htab[2 * p] != -1:
        p = (p + 1) & mask
    return 2 * p


@numba.njit(nogil=True, cache=True)
def _hash_clear(htab: np.ndarray, pos: np.ndarray, n: int) -> None:
    for i in range(n):
        htab[pos[i]] = -1


@numba.njit(nogil=True, cache=True, inline="always")
def _capacity(keys: int) -> int:
    """The smallest power of two >= `keys`, at least 512: a table's capacity."""
    cap = 512
    while cap < keys:
        cap *= 2
    return cap


@numba.njit(nogil=True, cache=True)
def _new_table(keys: int) -> np.ndarray:
    """An empty (key, value) table of `_capacity` (keys) pairs."""
    return np.full(2 * _capacity(keys), -1, np.int64)


@numba.njit(nogil=True, cache=True)
def _hash_table(htab: np.ndarray, need: int) -> np.ndarray:
    """The table with room for `need` keys at load <= 1/2 (a new empty one if grown)."""
    if 2 * need <= htab.shape[0] >> 1:
        return htab
    return _new_table(2 * need)


@numba.njit(nogil=True, cache=True)
def _frame_table(htab: np.ndarray, n: int) -> np.ndarray:
    """The (empty) map for a frame that starts with n tokens: the current one if its capacity is
    between ``MAP_SLACK * n`` keys and four times that, else a new one of that capacity rounded up
    to a power of two. The map follows the live tokens, not the frame's arcs: a map sized for the
    arcs spreads a frame's few tokens over megabytes (a cache miss per probe); the frame driver
    doubles it when the next token's arcs could fill more than half of it (`_emit` stops there)."""
    want = MAP_SLACK * max(n, 256)
    if want <= htab.shape[0] <= 4 * want:
        return htab
    return _new_token_map(want)


@numba.njit(nogil=True, cache=True)
def _new_token_map(keys: int) -> np.ndarray:
    """An empty token map (`_token_slot`) of `_capacity` (keys) entries."""
    return np.full(_capacity(keys), -1, np.int32)


@numba.njit(nogil=True, cache=True, inline="always")
def _token_slot(htab: np.ndarray, d: int, u: int, U: int, tok_state: np.ndarray, tok_u: np.ndarray) -> int:
    """Index in the token map `htab` of the token of (graph state d, LM state u), or of the empty
    entry (-1) where it goes. The map holds token indices only (4 bytes an entry, as Kaldi's
    HashList holds pointers): a probe compares the token's own state and LM state."""
    mask = htab.shape[0] - 1
    p = _first_probe(np.int64(d) * U + u, mask)
    while True:
        j = htab[p]
        if j == -1 or (tok_state[j] == d and tok_u[j] == u):
            return p
        p = (p + 1) & mask


@numba.njit(nogil=True, cache=True)
def _find(slot, htab, lm, U, d, u, tok_state, tok_u):
    """(token of graph state d with LM state u in the frame's map, or -1; its map position)."""
    if lm is None:
        return slot[d], np.int64(0)
    p = _token_slot(htab, d, u, U, tok_state, tok_u)
    return np.int64(htab[p]), p


@numba.njit(nogil=True, cache=True)
def pair_id(pair_tab, pair_state, pair_u, npair, d, u, U):
    """The lattice state of the pair (graph state d, LM state u) in `wfst-otf`'s lattices: its id
    in the utterance's pair table, a new one (`npair`) when first seen. Returns (id, pairs); the
    caller made room (`pairs_room`)."""
    key = np.int64(d) * U + u
    p = _hash_slot(pair_tab, key)
    if pair_tab[p] == -1:
        pair_tab[p] = key
        pair_tab[p + 1] = npair
        pair_state[npair] = d
        pair_u[npair] = u
        return np.int64(npair), npair + 1
    return pair_tab[p + 1], npair


@numba.njit(nogil=True, cache=True, inline="always")
def find_pair(pair_tab, d, u, U):
    """The lattice state of the pair (graph state d, LM state u), or -1 if not seen yet."""
    key = np.int64(d) * U + u
    p = _hash_slot(pair_tab, key)
    if pair_tab[p] == -1:
        return np.int64(-1)
    return pair_tab[p + 1]


@numba.njit(nogil=True, cache=True)
def clear_pairs(pair_tab, pair_state, pair_u, npair, U) -> None:
    """Empty the pair table at the `npair` pairs of the previous search only (it may have grown
    large), newest first: an entry's probe chain runs only through older entries, kept till then."""
    for i in range(npair - 1, -1, -1):
        pair_tab[_hash_slot(pair_tab, np.int64(pair_state[i]) * U + pair_u[i])] = -1


@numba.njit(nogil=True, cache=True)
def prune_pair_window(
    arcs, boost, frame, beam, node_frame, node_state, node_cost, node_extra, n_nodes,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, n_arcs, pair_slot, pair_slot2, npair,
):  # fmt: skip
    """`lattice.prune_window` of an on-the-fly search, whose lattice states are its `npair` pair
    ids: the pair-indexed maps grown to them first (all -1). Returns (nodes kept, arcs kept, frames
    taken, pair_slot, pair_slot2)."""
    if pair_slot.shape[0] < npair:
        pair_slot, pair_slot2 = grow_fields((pair_slot, pair_slot2), 0, 1, npair)
        pair_slot[:] = -1
        pair_slot2[:] = -1
    kept_nodes, kept_arcs, taken = prune_window(
        arcs, boost, frame, beam, node_frame, node_state, node_cost, node_extra, n_nodes,
        lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, n_arcs, pair_slot, pair_slot2,
    )  # fmt: skip
    return kept_nodes, kept_arcs, taken, pair_slot, pair_slot2


@numba.njit(nogil=True, cache=True)
def pairs_room(pair_state, pair_u, pair_tab, U, npair, need):
    """(pair states, pair LM states, pair table) with room for `need` more lattice pairs (arrays
    grown; the table rebuilt larger from the pairs' states when it would pass load 1/2)."""
    if pair_state.shape[0] < npair + need:
        pair_state, pair_u = grow_fields((pair_state, pair_u), 0, 1, npair + need)
    if 2 * (npair + need) > pair_tab.shape[0] >> 1:
        pair_tab = _hash_table(pair_tab, npair + need)
        for i in range(npair):
            key = np.int64(pair_state[i]) * U + pair_u[i]
            p = _hash_slot(pair_tab, key)
            pair_tab[p] = key
            pair_tab[p + 1] = i
    return pair_state, pair_u, pair_tab


@numba.njit(nogil=True, cache=True)
def _add(slot, htab, lm, U, d, u, p, j, tok_state, tok_u, tok_pos) -> None:
    """Token j is (d, u): written and entered in the map (`_find`'s position p)."""
    tok_state[j] = d
    if lm is None:
        slot[d] = j
    else:
        htab[p] = j
        tok_u[j] = u
        tok_pos[j] = p


@numba.njit(nogil=True, cache=True, inline="always")
def queue_pop(nq: int, pops: int, eps_limit: int) -> tuple[int, int, bool]:
    """One pop of an epsilon closure's LIFO queue (Kaldi ProcessNonemitting) under its limit on
    pops (a negative-cost epsilon cycle would loop): (queue length, pops, whether to stop).
    Scalars only: inlined into the loop (an array argument would add reference counts there)."""
    pops += 1
    if pops > eps_limit:
        return 0, pops, True
    return nq - 1, pops, False


@numba.njit(nogil=True, cache=True, inline="always")
def add_record(records, nrec: int, prev: int, arc: int, frame: int) -> int:
    """Back-pointer record ``nrec`` (previous record, arc, frame) into ``records``, the (previous
    record, arc, frame) arrays (the torch path's `core.Backpointers`). Returns the records."""
    rec_prev, rec_arc, rec_frame = records
    rec_prev[nrec] = prev
    rec_arc[nrec] = arc
    rec_frame[nrec] = frame
    return nrec + 1


@numba.njit(nogil=True, cache=True)
def closure_queue(states, tok_state: np.ndarray, n: int, queue: np.ndarray) -> int:
    """Queue the tokens 0..n-1 whose state has epsilon arcs for the epsilon closure, so that they
    pop in token order (LIFO); returns the queue length. A token without epsilon arcs would pop
    and do nothing (Kaldi ProcessNonemitting queues every token)."""
    nq = 0
    for i in range(n - 1, -1, -1):
        s = tok_state[i]
        if states[s].end > states[s].split:
            queue[nq] = i
            nq += 1
    return nq


@numba.njit(nogil=True, cache=True)
def best_token(cost: np.ndarray, n: int) -> tuple[int, np.float32]:
    """(index, cost) of the cheapest of tokens 0..n-1 (the first on ties; -1 when n == 0)."""
    best_i = -1
    best_c = _F32_INF
    for i in range(n):
        if cost[i] < best_c:
            best_c = cost[i]
            best_i = i
    return best_i, best_c


@numba.njit(nogil=True, cache=True, inline="always")
def running_bound(c, best_new, bound, adaptive):
    """Kaldi ProcessEmitting's running bound for a candidate of cost c: (best new cost, bound
    ``min(cost + adaptive beam)`` so far, whether c is below the bound and so kept)."""
    if c < best_new:
        best_new = c
    if not (c < bound):
        return best_new, bound, False
    if c + adaptive < bound:
        bound = c + adaptive
    return best_new, bound, True


@numba.njit(nogil=True, cache=True)
def _map_tokens(slot, htab, lm, U, tok_state, tok_u, tok_pos, n) -> None:
    """Enter tokens 0..n-1 in the (empty) map."""
    for j in range(n):
        d = tok_state[j]
        u = 0
        if lm is not None:
            u = tok_u[j]
        _, p = _find(slot, htab, lm, U, d, u, tok_state, tok_u)
        _add(slot, htab, lm, U, d, u, p, j, tok_state, tok_u, tok_pos)


@numba.njit(nogil=True, cache=True)
def _unmap_tokens(slot, htab, lm, tok_state, tok_pos, n) -> None:
    """Empty the map at tokens 0..n-1 (only the entries used: memory follows the live tokens)."""
    if lm is None:
        for i in range(n):
            slot[tok_state[i]] = -1
    else:
        _hash_clear(htab, tok_pos, n)


# ------------------------------------------------------------------ the frame steps
@numba.njit(nogil=True, cache=True)
def _closure(
    states, arcs, boost, lm, memo, prefetch_words, U, V, cut, word_cut, frame, slot, htab, eps_limit, lattice,
    cur_state, cur_u, cur_cost, cur_rec, cur_pos, queue, rec_prev, rec_arc, rec_frame,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, pair_tab, pair_state, pair_u, io, stats,
) -> bool:  # fmt: skip
    """Epsilon closure (Kaldi ProcessNonemitting) of the queued tokens: a LIFO queue, tokens and
    candidates above ``cut`` are not expanded (``<=`` keeps), nor word arcs above ``word_cut``
    (`PruningOptions.word_beam`), an improved token is queued again.

    io: [tokens, records, lattice arcs, queue length, pops, lattice pairs]. Returns False (with io
    updated) when an array or a hash table is too small for the next token's epsilon arcs: the
    caller grows it and calls again. Lattice arcs connect graph states, or with an LM the
    (graph state, LM state) pairs (`pair_id`) and carry the LM's share of the arc (`lat_lm`).
    """
    n, nrec, nlat, nq, pops, npair = io[0], io[1], io[2], io[3], io[4], io[5]
    num_states = slot.shape[0]
    n_boost = boost.shape[0]
    while nq > 0:
        i = queue[nq - 1]
        # with an LM (many more tokens than graph states) the records of the tokens popped next if
        # nothing is queued meanwhile, as in `_emit` (their words' memo sets: `prefetch_pays`)
        if lm is not None:
            if nq > 3:
                prefetch(states, cur_state[queue[nq - 4]])
            if nq > 2:
                prefetch(arcs, states[cur_state[queue[nq - 3]]].split)
            if prefetch_words and nq > 1:
                s2 = cur_state[queue[nq - 2]]
                prefetch_word_sets(arcs, memo, V, cur_u[queue[nq - 2]], states[s2].split, states[s2].end)
        s = cur_state[i]
        a0 = states[s].split
        a1 = states[s].end
        k = a1 - a0
        tokens = n + k
        if lm is None:
            tokens = min(tokens, num_states)
        elif 2 * (n + k) > htab.shape[0]:
            tokens = cur_state.shape[0] + 1  # the map is too small: grow
        if (
            tokens > cur_state.shape[0]
            or nrec + k > rec_prev.shape[0]
            or nq - 1 + k > queue.shape[0]
            or (lattice and nlat + k > lat_frame.shape[0])
            or (
                lattice
                and lm is not None
                and (npair + 2 * k > pair_state.shape[0] or 2 * (npair + 2 * k) > pair_tab.shape[0] >> 1)
            )
        ):
            io[0], io[1], io[2], io[3], io[4], io[5] = n, nrec, nlat, nq, pops, npair
            return False
        nq, pops, stop = queue_pop(nq, pops, eps_limit)
        if stop:
            stats[STAT_EPS_LIMIT] += 1
            break
        c0 = cur_cost[i]
        if c0 > cut:
            continue
        u0 = 0
        ps = np.int64(-1)  # the lattice state of (s, u0), with an LM
        if lm is not None:
            u0 = cur_u[i]
            if lattice:
                ps, npair = pair_id(pair_tab, pair_state, pair_u, npair, s, u0, U)
        for a in range(a0, a1):
            arc = arcs[a]
            # the arc's word: its boost and (wfst-otf) LM difference (paper 000 Alg. 2, Kaldi biglm)
            c = c0 + arc.weight
            ol = arc.olabel
            u = u0
            lmc = np.float32(0.0)
            if ol > 0:
                if ol < n_boost:
                    c = c + boost[ol]
                if lm is not None:
                    lmc, u, hit = memo_get(memo, u0, ol, V)
                    if not hit:
                        lmc, u = memo_fill(lm, memo, u0, ol, V)
                        stats[STAT_LM_LOOKUPS] += 1
                    c = c + lmc
            if c > cut or (ol > 0 and c > word_cut):
                continue
            d = arc.nextstate
            if lattice:
                lat_frame[nlat] = frame
                lat_arc[nlat] = a
                lat_ac[nlat] = 0.0
                if lm is None:
                    lat_src[nlat] = s
                    lat_dst[nlat] = d
                else:
                    lat_src[nlat] = ps
                    lat_dst[nlat], npair = pair_id(pair_tab, pair_state, pair_u, npair, d, u, U)
                    lat_lm[nlat] = lmc
                nlat += 1
            # recombination: one token per graph state (wfst) or per (graph state, LM state)
            if lm is None:
                j = slot[d]
                if j < 0:
                    j = n
                    n += 1
                    cur_state[j] = d
                    slot[d] = j
                elif not (c < cur_cost[j]):
                    continue
            else:
                p = _token_slot(htab, d, u, U, cur_state, cur_u)
                if htab[p] == -1:
                    j = n
                    n += 1
                    htab[p] = j
                    cur_state[j] = d
                    cur_u[j] = u
                    cur_pos[j] = p
                else:
                    j = htab[p]
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
    io[0], io[1], io[2], io[3], io[4], io[5] = n, nrec, nlat, nq, pops, npair
    return True


@numba.njit(nogil=True, cache=True)
def _emit_start(states, arcs, acrow, boost, lm, memo, V, cut, stats, cur_state, cur_u, cur_cost, n):
    """The cheapest emitting arc of the tokens at the frame's best cost (Kaldi ProcessEmitting
    expands the best token first): the start of `_emit`'s running bound ``pre + adaptive`` and of
    the word cut ``pre + word_beam``."""
    n_boost = boost.shape[0]
    best_i, best_c = best_token(cur_cost, n)
    # the word's cost written out as in `_closure` and `_emit`: a shared helper taking the LM tuple
    # adds reference counts of its arrays on every word arc (numba)
    pre = _F32_INF
    if best_i >= 0 and best_c < cut:
        for i in range(best_i, n):
            if cur_cost[i] != best_c:
                continue
            s = cur_state[i]
            u0 = 0
            if lm is not None:
                u0 = cur_u[i]
            for a in range(states[s].first, states[s].split):
                arc = arcs[a]
                c = best_c + arc.weight + acrow[arc.column]
                ol = arc.olabel
                if ol > 0:
                    if ol < n_boost:
                        c = c + boost[ol]
                    if lm is not None:
                        dc, _, hit = memo_get(memo, u0, ol, V)
                        if not hit:
                            dc, _ = memo_fill(lm, memo, u0, ol, V)
                            stats[STAT_LM_LOOKUPS] += 1
                        c = c + dc
                if c < pre:
                    pre = c
    return pre


@numba.njit(nogil=True, cache=True)
def _emit(
    states, arcs, acrow, boost, lm, memo, prefetch_words, U, V, cut, adaptive, word_cut, slot, htab, lattice,
    frame, stats, cur_state, cur_u, cur_cost, cur_rec, n, nxt_state, nxt_u, nxt_cost, nxt_rec, nxt_arc,
    nxt_pos,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost, nlat, pair_tab, pair_state, pair_u, npair,
    i0, m, best_new, bound,
):  # fmt: skip
    """Emitting arcs (Kaldi ProcessEmitting) of the tokens ``i0..n`` below ``cut`` into the nxt
    arrays (capacity checked by the caller), with the running bound ``bound`` (``min(cost +
    adaptive)`` so far, from `_emit_start`'s ``pre + adaptive``) and the best new cost so far;
    the candidates above the bound are skipped early. Returns (next token, new tokens, best new
    cost, bound, lattice arcs, lattice pairs). With an LM it stops before a token whose arcs could
    fill more than half of the map ``htab``: the caller grows the map and calls again from that
    token (an array reassigned inside this loop would cost numba's atomic reference counts on every
    arc). With lattices, every candidate below the running bound is kept with its cost (filtered
    with the frame's final bound by `_keep`)."""
    n_boost = boost.shape[0]
    for i in range(i0, n):
        # the state record and the first arc of tokens ahead, with an LM the memo sets of their word
        # arcs (`memo_get`'s probe) if that pays (`prefetch_pays`): their loads would stall
        if i + PREFETCH_STATES < n:
            prefetch(states, cur_state[i + PREFETCH_STATES])
        if i + PREFETCH_ARCS < n:
            prefetch(arcs, states[cur_state[i + PREFETCH_ARCS]].first)
        ahead = i + PREFETCH_WORDS
        # `lm is not None` first: without an LM numba drops the branch (memo is None there)
        if lm is not None and prefetch_words and ahead < n and cur_cost[ahead] < cut:
            s2 = cur_state[ahead]
            prefetch_word_sets(arcs, memo, V, cur_u[ahead], states[s2].first, states[s2].split)
        c0 = cur_cost[i]
        if not (c0 < cut):
            continue
        s = cur_state[i]
        if lm is not None and 2 * (m + states[s].split - states[s].first) > htab.shape[0]:
            return i, m, best_new, bound, nlat, npair  # the map: grown by the caller
        r0 = cur_rec[i]
        u0 = 0
        ps = np.int64(-1)  # the lattice state of (s, u0), with an LM
        if lm is not None:
            u0 = cur_u[i]
            if lattice:
                ps, npair = pair_id(pair_tab, pair_state, pair_u, npair, s, u0, U)
        for a in range(states[s].first, states[s].split):
            arc = arcs[a]
            ac = acrow[arc.column]
            # the arc's word: its boost and (wfst-otf) LM difference, as in `_closure`
            c = c0 + arc.weight + ac
            ol = arc.olabel
            u = u0
            lmc = np.float32(0.0)
            if ol > 0:
                if ol < n_boost:
                    c = c + boost[ol]
                if lm is not None:
                    lmc, u, hit = memo_get(memo, u0, ol, V)
                    if not hit:
                        lmc, u = memo_fill(lm, memo, u0, ol, V)
                        stats[STAT_LM_LOOKUPS] += 1
                    c = c + lmc
            best_new, bound, below = running_bound(c, best_new, bound, adaptive)
            if not below or (ol > 0 and not (c < word_cut)):
                continue
            d = arc.nextstate
            if lattice:
                lat_frame[nlat] = frame
                if lm is None:
                    lat_src[nlat] = s
                    lat_dst[nlat] = d
                else:
                    lat_src[nlat] = ps
                    lat_dst[nlat], npair = pair_id(pair_tab, pair_state, pair_u, npair, d, u, U)
                    lat_lm[nlat] = lmc
                lat_arc[nlat] = a
                lat_ac[nlat] = ac
                lat_cost[nlat] = c
                nlat += 1
            # recombination, as in `_closure`
            if lm is None:
                j = slot[d]
                if j < 0:
                    j = m
                    m += 1
                    nxt_state[j] = d
                    slot[d] = j
                elif not (c < nxt_cost[j]):
                    continue
            else:
                p = _token_slot(htab, d, u, U, nxt_state, nxt_u)
                if htab[p] == -1:
                    j = m
                    m += 1
                    htab[p] = j
                    nxt_state[j] = d
                    nxt_u[j] = u
                    nxt_pos[j] = p
                else:
                    j = htab[p]
                    if not (c < nxt_cost[j]):
                        continue
            nxt_cost[j] = c
            nxt_rec[j] = r0
            nxt_arc[j] = a
    return n, m, best_new, bound, nlat, npair


@numba.njit(nogil=True, cache=True)
def _keep_in_place(cut, frame, m, nxt_cost, nxt_rec, nxt_arc, rec_prev, rec_arc, rec_frame, nrec) -> int:
    """The new tokens below the frame's final bound get a record each; the others (few: `_emit`'s
    running bound is close to the final one from the start) stay in place, dead (+inf cost, no
    record), so the map `_emit` filled serves the frame's epsilon closure as it is (an arc there
    may revive a dead token: it is then a new one). Returns the records."""
    for j in range(m):
        if nxt_cost[j] < cut:
            rec_prev[nrec] = nxt_rec[j]
            rec_arc[nrec] = nxt_arc[j]
            rec_frame[nrec] = frame
            nxt_rec[j] = nrec
            nrec += 1
        else:
            nxt_cost[j] = _F32_INF
            nxt_rec[j] = -1
    return nrec


@numba.njit(nogil=True, cache=True)
def _keep(
    cut, frame, slot, htab, lm, U, m, nxt_state, nxt_u, nxt_cost, nxt_rec, nxt_arc, nxt_pos,
    rec_prev, rec_arc, rec_frame, nrec,
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost, lat0, nlat,
):  # fmt: skip
    """With lattices: keep the new tokens below the frame's final bound (a record each), in order
    and mapped for the frame's epsilon closure (the pair table arrives empty); the same for the
    frame's lattice candidates. Returns (tokens, records, lattice arcs)."""
    records = (rec_prev, rec_arc, rec_frame)
    k = 0
    for j in range(m):
        d = nxt_state[j]
        c = nxt_cost[j]
        if c < cut:
            r = nrec
            nrec = add_record(records, nrec, nxt_rec[j], nxt_arc[j], frame)
            nxt_cost[k] = c
            nxt_rec[k] = r
            nxt_state[k] = d
            if lm is None:
                slot[d] = k
            else:  # the pair table is empty here: the kept tokens enter it in order
                u = nxt_u[j]
                nxt_u[k] = u
                p = _token_slot(htab, d, u, U, nxt_state, nxt_u)
                htab[p] = k
                nxt_pos[k] = p
            k += 1
        elif lm is None:
            slot[d] = -1
    if lm is None:
        q = compact_arcs(lat_frame, lat_src, lat_dst, lat_arc, lat_ac, None, lat_cost, cut, lat0, nlat)
    else:
        q = compact_arcs(lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost, cut, lat0, nlat)
    return k, nrec, q


@numba.njit(nogil=True, cache=True)
def _record_nodes(
    frame, cur_state, cur_cost, n, node_frame, node_state, node_cost, node_extra, k,
    lm, U, cur_u, pair_tab, pair_state, pair_u, npair,
):  # fmt: skip
    """The lattice nodes of a frame's tokens (extra cost NaN: not pruned yet); their states are
    the graph states, or with an LM the pair ids. Returns the lattice pairs."""
    for i in range(n):
        node_frame[k + i] = frame
        if lm is None:
            node_state[k + i] = cur_state[i]
        else:
            pid, npair = pair_id(pair_tab, pair_state, pair_u, npair, cur_state[i], cur_u[i], U)
            node_state[k + i] = pid
        node_cost[k + i] = cur_cost[i]
        node_extra[k + i] = np.nan
    return npair


@numba.njit(nogil=True, cache=True)
def live_tokens(cost: np.ndarray, n: int) -> int:
    """The tokens of ``cost[:n]`` below +inf (dead ones: `_keep_in_place`, `prune_histories`)."""
    live = 0
    for i in range(n):
        live += cost[i] < _F32_INF
    return live


@numba.njit(nogil=True, cache=True)
def prune_histories(state, cost, n, best_at, history_beam) -> int:
    """`PruningOptions.history_beam`: the costs of tokens more than ``history_beam`` above the
    cheapest token at their graph state set to +inf (not expanded); ``best_at`` (float32, one
    entry per graph state, +inf between calls) holds the cheapest cost per state meanwhile.
    Returns the tokens dropped."""
    for i in range(n):
        s = state[i]
        if cost[i] < best_at[s]:
            best_at[s] = cost[i]
    dropped = 0
    for i in range(n):
        if cost[i] > best_at[state[i]] + history_beam and cost[i] < _F32_INF:
            cost[i] = _F32_INF
            dropped += 1
    for i in range(n):
        best_at[state[i]] = _F32_INF
    return dropped


@numba.njit(nogil=True, cache=True)
def cap_histories(state, cost, n, count, cap) -> int:
    """`PruningOptions.history_max`: the costs of all but the ``cap`` cheapest tokens at each graph
    state set to +inf (equal costs: the first in token order kept). ``count``: int32, one entry per
    graph state, all -1 between calls (with an LM the search's `slot`, which it does not use
    otherwise). The tokens of the states over the cap are gathered by state (a counting sort) and
    each group's cap-th cost selected (`kth_smallest`). Returns the tokens dropped."""
    for i in range(n):
        if cost[i] < _F32_INF:
            count[state[i]] += 1  # tokens - 1
    m = 0
    groups = 0
    start = np.empty(n + 1, np.int64)
    for i in range(n):  # a state over the cap, first seen: its range of the gathered costs
        s = state[i]
        c = count[s]
        if c >= cap and cost[i] < _F32_INF:
            count[s] = -2 - m  # from here: -2 - (where its next token goes)
            start[groups] = m
            groups += 1
            m += c + 1
    start[groups] = m
    select = np.empty(m, np.float32)  # the gathered costs (reordered by the selection)
    token = np.empty(m, np.int64)  # their tokens, in token order within each state
    for i in range(n):
        c = count[state[i]]
        if c <= -2 and cost[i] < _F32_INF:
            select[-2 - c] = cost[i]
            token[-2 - c] = i
            count[state[i]] = c - 1
    dropped = 0
    for g in range(groups):
        a, b = start[g], start[g + 1]
        limit = kth_smallest(select[a:b], b - a, cap - 1)
        below = 0
        for q in range(a, b):
            below += cost[token[q]] < limit
        for q in range(a, b):  # below the limit, then the first ones at it
            c = cost[token[q]]
            if c < limit or (c == limit and below < cap):
                below += c == limit
                continue
            cost[token[q]] = _F32_INF
            dropped += 1
    for i in range(n):
        count[state[i]] = -1
    return dropped


@numba.njit(nogil=True, cache=True)
def search_init(states, arcs, start, boost, lm, memo, U, V, slot, settings, lattice, ws, ctr, stats):
    """Start a search: one start token (graph start, LM state <s>; a record with no predecessor,
    frame -1) and its epsilon closure (`search_advance` over no frames). Returns the workspace."""
    rec_prev, rec_arc, rec_frame = ws[RECORDS]
    rec_prev[0] = -1
    rec_arc[0] = -1
    rec_frame[0] = -1
    ctr[C_RECORDS] = 1
    ctr[C_TOKENS] = 0
    ctr[C_LAT_ARCS] = 0
    ctr[C_NODES] = 0
    ctr[C_NEXT_FRAME] = 0
    ctr[C_GC_AT] = settings.gc_records
    ctr[C_GC_MIN] = settings.gc_records
    if lm is not None:
        for i in range(memo.shape[0]):
            memo[i].key = -1
        pair_state, pair_u, _, _, pair_tab = ws[LATTICE_PAIRS]
        clear_pairs(pair_tab, pair_state, pair_u, ctr[C_PAIRS], U)
    ctr[C_PAIRS] = 0
    if start >= 0:
        cur_state, cur_cost, cur_rec, cur_u, cur_pos = ws[CURRENT]
        cur_cost[0] = np.float32(0.0)
        cur_rec[0] = 0
        _, p = _find(slot, ws[W_HTAB], lm, U, start, LM_START_STATE, cur_state, cur_u)
        _add(slot, ws[W_HTAB], lm, U, start, LM_START_STATE, p, 0, cur_state, cur_u, cur_pos)
        ctr[C_TOKENS] = 1
    ctr[C_CLOSE] = 1
    no_frames = np.empty((0, 1), np.float32)
    no_states = np.empty(0, np.float32)
    return search_advance(
        states, arcs, no_frames, boost, lm, memo, U, V, slot, slot, no_states, settings, lattice, ws, ctr,
        stats,
    )  # fmt: skip


@numba.njit(nogil=True, cache=True)
def search_advance(
    states, arcs, ac, boost, lm, memo, U, V, slot, slot2, best_at, settings, lattice, ws, ctr, stats
):
    """Advance a started search by the frames of ac (float32 [T, V] acoustic costs; frame numbers
    continue from the previous call), first closing the start token if `search_init` left it
    open. Per frame: cutoff, emitting arcs, the kept tokens, their epsilon closure (growing arrays
    as needed) and lattice nodes, garbage collection of the records. With lattices, the kept arcs
    and nodes are pruned with `lattice.prune_window` at the settings' lattice beam after every
    `prune_interval`-th frame (0 = never); it maps states to nodes with `slot` (all -1 between
    frames) and `slot2` (all -1); with an LM and a history beam, `best_at` is `prune_histories`'
    per-state scratch. Returns the workspace (arrays may have been grown).

    The workspace tuple is unpacked once per call and rebuilt once at the end: the frame loop
    works on the arrays (a tuple passed or rebuilt per frame costs reference counts and copies of
    every field)."""
    num_states = slot.shape[0]
    beam, max_active, min_active = settings.beam, settings.max_active, settings.min_active
    beam_delta, eps_limit = settings.beam_delta, settings.eps_limit
    cur_state, cur_cost, cur_rec, cur_u, cur_pos = ws[CURRENT]
    nxt_state, nxt_cost, nxt_rec, nxt_arc, nxt_u, nxt_pos = ws[NEXT]
    queue, scratch = ws[W_QUEUE], ws[W_SCRATCH]
    rec_prev, rec_arc, rec_frame = ws[RECORDS]
    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost = ws[LATTICE_ARCS]
    node_frame, node_state, node_cost, node_extra = ws[LATTICE_NODES]
    htab = ws[W_HTAB]
    pair_state, pair_u, pair_slot, pair_slot2, pair_tab = ws[LATTICE_PAIRS]
    io = np.empty(6, np.int64)
    prefetch_words = False
    if lm is not None:
        prefetch_words = prefetch_pays(memo, settings.l2_bytes)
    for t in range(-ctr[C_CLOSE], ac.shape[0]):
        if t < 0:  # search_init's start token: only its closure
            frame = np.int64(-1)
            cut = _F32_INF
            word_cut = _F32_INF
            ctr[C_CLOSE] = 0
        else:
            frame = ctr[C_NEXT_FRAME]
            ctr[C_NEXT_FRAME] = frame + 1
            n = ctr[C_TOKENS]
            if n == 0:
                continue
            stats[STAT_FRAMES] += 1
            if lm is not None and settings.history_beam < _F32_INF:
                stats[STAT_HISTORY_PRUNED] += prune_histories(
                    cur_state, cur_cost, n, best_at, settings.history_beam
                )
            if lm is not None and settings.history_max > 0:
                cap = settings.history_max
                stats[STAT_HISTORY_PRUNED] += cap_histories(cur_state, cur_cost, n, slot, cap)
            # -------------------------------------- cutoff (GetCutoff) of the current tokens
            if scratch.shape[0] < n:
                scratch = grow(scratch, n)
            cut, adaptive = get_cutoff(cur_cost, n, scratch, beam, max_active, min_active, beam_delta)
            # -------------------------------------- capacities, then emitting arcs
            n_arcs = emitting_arcs(states, cur_cost, cur_state, n, cut)
            stats[STAT_ARCS] += n_arcs
            bound = n_arcs
            if lm is None:
                bound = min(n_arcs, num_states)
            if nxt_state.shape[0] < bound or nxt_arc.shape[0] < bound:
                nxt_state, nxt_cost, nxt_rec, nxt_arc = grow_fields(
                    (nxt_state, nxt_cost, nxt_rec, nxt_arc), 0, 3, bound
                )
            if lm is not None:
                if nxt_u.shape[0] < bound:
                    nxt_u, nxt_pos = grow_fields((nxt_u, nxt_pos), 0, 1, bound)
                htab = _frame_table(htab, n)
            nrec = ctr[C_RECORDS]
            if rec_prev.shape[0] < nrec + bound:
                rec_prev, rec_arc, rec_frame = grow_fields((rec_prev, rec_arc, rec_frame), 0, 2, nrec + bound)
            lat0 = ctr[C_LAT_ARCS]
            if lattice and lat_frame.shape[0] < lat0 + n_arcs:
                lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost = grow_fields(
                    (lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost), 0, 6, lat0 + n_arcs
                )
            if lattice and lm is not None:
                npair, room = ctr[C_PAIRS], n + n_arcs
                pair_state, pair_u, pair_tab = pairs_room(pair_state, pair_u, pair_tab, U, npair, room)
            acrow = ac[t]
            prefetch_frame(ac, t + 1)
            pre = _emit_start(
                states, arcs, acrow, boost, lm, memo, V, cut, stats, cur_state, cur_u, cur_cost, n
            )
            k, m, best_new, running, nlat = 0, 0, _F32_INF, pre + adaptive, lat0
            while True:
                k, m, best_new, running, nlat, ctr[C_PAIRS] = _emit(
                    states, arcs, acrow, boost, lm, memo, prefetch_words, U, V, cut, adaptive,
                    pre + settings.word_beam, slot, htab, lattice, frame, stats,
                    cur_state, cur_u, cur_cost, cur_rec, n,
                    nxt_state, nxt_u, nxt_cost, nxt_rec, nxt_arc, nxt_pos,
                    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost, nlat,
                    pair_tab, pair_state, pair_u, ctr[C_PAIRS], k, m, best_new, running,
                )  # fmt: skip
                if k >= n:
                    break
                # with an LM: a map twice as large (load 1/2 reached), the new tokens mapped again
                top = cur_state[k]
                size = 2 * htab.shape[0]
                while 2 * (m + states[top].split - states[top].first) > size:
                    size *= 2
                htab = _new_token_map(size)
                _map_tokens(slot, htab, lm, U, nxt_state, nxt_u, nxt_pos, m)
            # final bound of this frame (as the torch path: best new cost + adaptive beam); keep below it
            cut = best_new + adaptive
            word_cut = best_new + settings.word_beam
            if lattice:  # lattice nodes are numbered by token: the kept tokens compacted, mapped again
                if lm is not None:
                    _hash_clear(htab, nxt_pos, m)
                k, nrec, nlat = _keep(
                    cut, frame, slot, htab, lm, U, m, nxt_state, nxt_u, nxt_cost, nxt_rec, nxt_arc, nxt_pos,
                    rec_prev, rec_arc, rec_frame, nrec,
                    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost, lat0, nlat,
                )  # fmt: skip
            else:
                k = m
                nrec = _keep_in_place(
                    cut, frame, m, nxt_cost, nxt_rec, nxt_arc, rec_prev, rec_arc, rec_frame, nrec
                )
            ctr[C_TOKENS], ctr[C_RECORDS], ctr[C_LAT_ARCS] = k, nrec, nlat
            # the kept new tokens become the current ones
            cur_state, nxt_state = nxt_state, cur_state
            cur_cost, nxt_cost = nxt_cost, cur_cost
            cur_rec, nxt_rec = nxt_rec, cur_rec
            if lm is not None:
                cur_u, nxt_u = nxt_u, cur_u
                cur_pos, nxt_pos = nxt_pos, cur_pos
        # ------------------------------------------ epsilon closure of the current tokens (mapped)
        n = ctr[C_TOKENS]
        if queue.shape[0] < n:
            queue = grow(queue, n)
        nq = closure_queue(states, cur_state, n, queue)
        io[0], io[1], io[2], io[3], io[4], io[5] = n, ctr[C_RECORDS], ctr[C_LAT_ARCS], nq, 0, ctr[C_PAIRS]
        while not _closure(
            states, arcs, boost, lm, memo, prefetch_words, U, V, cut, word_cut, frame, slot, htab, eps_limit,
            lattice, cur_state, cur_u, cur_cost, cur_rec, cur_pos, queue, rec_prev, rec_arc, rec_frame,
            lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, pair_tab, pair_state, pair_u, io, stats,
        ):  # fmt: skip
            top = cur_state[queue[io[3] - 1]]
            need = states[top].end - states[top].split + 1
            tokens = io[0] + need
            if lm is None:
                tokens = min(tokens, num_states)
            cur_state, cur_cost, cur_rec = grow_fields((cur_state, cur_cost, cur_rec), 0, 2, tokens)
            rec_prev, rec_arc, rec_frame = grow_fields((rec_prev, rec_arc, rec_frame), 0, 2, io[1] + need)
            queue = grow(queue, io[3] + need)
            if lattice:
                lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost = grow_fields(
                    (lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost), 0, 6, io[2] + need
                )
            if lm is not None:
                cur_u, cur_pos = grow_fields((cur_u, cur_pos), 0, 1, tokens)
                if lattice:
                    room = 2 * need
                    pair_state, pair_u, pair_tab = pairs_room(pair_state, pair_u, pair_tab, U, io[5], room)
                if 2 * (io[0] + need) > htab.shape[0]:
                    htab = _new_token_map(2 * (io[0] + need))
                    _map_tokens(slot, htab, lm, U, cur_state, cur_u, cur_pos, io[0])
        n = io[0]
        stats[STAT_EPS_POPS] += io[4]
        stats[STAT_TOKENS] += live_tokens(cur_cost, n)
        if lattice:
            k = ctr[C_NODES]
            if node_frame.shape[0] < k + n:
                node_frame, node_state, node_cost, node_extra = grow_fields(
                    (node_frame, node_state, node_cost, node_extra), 0, 3, k + n
                )
            if lm is not None:
                pair_state, pair_u, pair_tab = pairs_room(pair_state, pair_u, pair_tab, U, io[5], n)
            io[5] = _record_nodes(
                frame, cur_state, cur_cost, n, node_frame, node_state, node_cost, node_extra, k,
                lm, U, cur_u, pair_tab, pair_state, pair_u, io[5],
            )  # fmt: skip
            ctr[C_NODES] = k + n
        _unmap_tokens(slot, htab, lm, cur_state, cur_pos, n)
        ctr[C_TOKENS], ctr[C_RECORDS], ctr[C_LAT_ARCS], ctr[C_PAIRS] = n, io[1], io[2], io[5]
        if ctr[C_RECORDS] > ctr[C_GC_AT]:  # memory: keep only the records live tokens lead back to
            kept = collect_records(cur_rec, n, rec_prev, rec_arc, rec_frame, ctr[C_RECORDS])
            ctr[C_RECORDS] = kept
            ctr[C_GC_AT] = max(ctr[C_GC_MIN], 4 * kept)
        interval = settings.prune_interval
        if lattice and frame >= 0 and interval > 0 and (frame + 1) % interval == 0:
            if lm is None:
                ctr[C_NODES], ctr[C_LAT_ARCS], taken = prune_window(
                    arcs, boost, frame, settings.lattice_beam,
                    node_frame, node_state, node_cost, node_extra, ctr[C_NODES],
                    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, None, ctr[C_LAT_ARCS], slot, slot2,
                )  # fmt: skip
            else:  # lattice states are pairs: maps indexed by pair id
                ctr[C_NODES], ctr[C_LAT_ARCS], taken, pair_slot, pair_slot2 = prune_pair_window(
                    arcs, boost, frame, settings.lattice_beam,
                    node_frame, node_state, node_cost, node_extra, ctr[C_NODES],
                    lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, ctr[C_LAT_ARCS],
                    pair_slot, pair_slot2, ctr[C_PAIRS],
                )  # fmt: skip
            stats[STAT_PRUNE_FRAMES] += taken
    return (
        cur_state, cur_cost, cur_rec, cur_u, cur_pos,
        nxt_state, nxt_cost, nxt_rec, nxt_arc, nxt_u, nxt_pos,
        queue, scratch, rec_prev, rec_arc, rec_frame,
        lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, lat_cost,
        node_frame, node_state, node_cost, node_extra, htab,
        pair_state, pair_u, pair_slot, pair_slot2, pair_tab,
    )  # fmt: skip


@numba.njit(nogil=True, cache=True)
def search_best(states, lm, ws, ctr, use_final):
    """Best token (Kaldi GetBestPath): after adding final costs (graph final, plus the </s> LM
    difference with an LM) if some token can end (and use_final), else without, flagged.
    Returns (arcs, frames, total, reached, found, LM state): the arc index and frame of every arc
    of the best path (epsilon arcs included) and the best token's LM state (-1 without an LM)."""
    cur_state, cur_cost, cur_rec, cur_u, _ = ws[CURRENT]
    n = ctr[C_TOKENS]
    reached = False
    if use_final:
        for i in range(n):
            fin = states[cur_state[i]].final
            if fin < _F32_INF:
                fc = cur_cost[i] + fin
                if lm is not None:
                    fc = fc + lm_final(lm, cur_u[i])
                if fc < _F32_INF:
                    reached = True
                    break
    best_i = -1
    total = _F32_INF
    for i in range(n):
        sc = cur_cost[i]
        if reached:
            sc = sc + states[cur_state[i]].final
            if lm is not None:
                sc = sc + lm_final(lm, cur_u[i])
        # ties: the lower state (then LM state), as the torch path (its tokens are sorted by key)
        tie = False
        if best_i >= 0 and sc == total:
            tie = cur_state[i] < cur_state[best_i]
            if lm is not None and cur_state[i] == cur_state[best_i]:
                tie = cur_u[i] < cur_u[best_i]
        if best_i < 0 or sc < total or tie:
            best_i = i
            total = sc
    if best_i < 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), _F32_INF, False, False, -1
    rec_prev, rec_arc, rec_frame = ws[RECORDS]
    path_arcs, path_frames = trace_records(rec_prev, rec_arc, rec_frame, cur_rec[best_i])
    best_u = -1
    if lm is not None:
        best_u = cur_u[best_i]
    return path_arcs, path_frames, total, reached, True, best_u


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


@dataclass
class CompiledPath(BestPath):
    """The 1-best of one utterance from a compiled search (`BestPath`: int64 arcs and frames, frame
    -1 = before the first frame; total inf when nothing survived) and its lattice data, if kept."""

    found: bool  # some token survived to the end
    stats: np.ndarray
    # (arcs, nodes[, pairs]) as `Workspace.lattice_data`, if kept
    lattice: tuple[np.recarray, ...] | None = None
    lm_state: int = -1  # the best token's LM state (searches with an LM)


def default_threads() -> int:
    """Cores this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def dense_boost(table: dict[int, float]) -> np.ndarray:
    """word id -> cost table as a dense float32 array (empty when there are no boosts)."""
    if not table:
        return np.zeros(0, dtype=np.float32)
    arr = np.zeros(max(table) + 1, dtype=np.float32)
    for wid, c in table.items():
        arr[wid] = c
    return arr


def as_costs(ac: np.ndarray) -> np.ndarray:
    """Acoustic costs as the compiled searches read them: C-contiguous float32 [T, V], V >= 1."""
    ac = np.ascontiguousarray(ac, dtype=np.float32)
    if ac.ndim != 2:
        raise ValueError(f"acoustic costs must be [T, V], got {ac.shape}")
    if ac.shape[1] == 0:
        ac = np.zeros((ac.shape[0], 1), np.float32)
    return ac


_compile_lock = threading.Lock()
_NO_COSTS = np.empty(0, np.float32)
_warm: set[str] = set()


class PendingBatch:
    """A batch of utterances submitted to a runner's workers (`CompiledRunner.submit_batch`):
    `result` waits for their results (in input order), `cancel` drops those not started."""

    def __init__(self, futures: list[Future] | None = None, done: list | None = None) -> None:
        self.futures = futures or []
        self.done = done

    def result(self) -> list:
        if self.done is None:
            self.done = [f.result() for f in self.futures]
        return self.done

    def cancel(self) -> None:
        for f in self.futures:
            f.cancel()


class CompiledRunner(ABC):
    """The host side every compiled search shares (`wfst`, `wfst-otf`, `let`): the graph as
    records, per-thread scratch (state maps, a workspace reused from utterance to utterance),
    compiling once under a lock with a status line, and a thread pool decoding one utterance per
    task (the kernels release the GIL), longest first."""

    label = "search"  # status lines and thread names

    def __init__(self, graph: DeviceGraph, threads: int = 0) -> None:
        g = graph.to("cpu")
        self.num_states = g.num_states
        self.start = int(g.start)
        self.columns = g.max_ilabel  # model columns the arcs read
        self.states, self.arcs = (in_huge_pages(a) for a in graph_records(g))
        self.threads = threads if threads > 0 else default_threads()
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None

    @abstractmethod
    def warm_up(self) -> None:
        """Run a tiny search, so that numba compiles (or loads) the kernels on this thread."""

    def warm_up_costs(self, frames: int) -> np.ndarray:
        """Zero acoustic costs of `frames` frames for `warm_up`, with a column for every
        emitting arc's (the search reads them unchecked)."""
        return np.zeros((frames, max(self.columns, 1)), np.float32)

    @abstractmethod
    def kernels(self) -> tuple:
        """The compiled entry points (for the first-compile status line)."""

    def ensure_compiled(self) -> None:
        """Compile (or load from numba's disk cache) once per process, on the calling thread."""
        with _compile_lock:
            if self.label in _warm:
                return
            announce_first_compile(f"{self.label}: decoder", *self.kernels())
            self.warm_up()
            _warm.add(self.label)

    def state_map(self, name: str, size: int) -> np.ndarray:
        """A thread's int32 scratch map of `size` entries, all -1 between uses."""
        return self._scratch(name, size, -1, np.int32)

    def state_costs(self, name: str, size: int) -> np.ndarray:
        """A thread's float32 scratch of `size` entries, all +inf between uses."""
        return self._scratch(name, size, np.inf, np.float32)

    def _scratch(self, name: str, size: int, fill: float, dtype: type) -> np.ndarray:
        maps = self._local.__dict__.setdefault("maps", {})
        if name not in maps:
            maps[name] = np.full(size, fill, dtype=dtype)
        return maps[name]

    def score_buffer(self, size: int) -> np.ndarray:
        """A thread's float32 buffer of at least `size` entries (uninitialised), kept and grown: an
        utterance's deferred scores, made by the worker that searches it."""
        buf = getattr(self._local, "scores", None)
        if buf is None or buf.shape[0] < size:
            buf = self._local.scores = np.empty(size, np.float32)
        return buf

    def thread_workspace(self, make: Callable[[], Any]) -> Any:
        """This thread's workspace (made by `make` on first use)."""
        w = getattr(self._local, "workspace", None)
        if w is None:
            w = self._local.workspace = make()
        return w

    def submit_batch(
        self,
        decode_one: Callable[..., Any],
        acs: list,
        *per_item: list,
        threads: int = 0,
        prepare: Callable[[Any], np.ndarray] | None = None,
        finish: Callable[[Any, int], None] | None = None,
    ) -> PendingBatch:
        """``decode_one(ac, *items)`` for each utterance on `threads` workers (default: the
        search's), longest first, queued behind the utterances of any batch submitted before (a
        worker that finishes its last utterance of one batch takes the next batch's first);
        `PendingBatch.result` waits for them and gives them in input order. With one worker the
        batch is decoded here, now. With `prepare`, `acs` are its inputs (anything with a shape,
        frames first) and each worker makes its utterance's costs. With `finish`, the worker then
        calls ``finish(result, index)`` (e.g. building the utterance's word lattice while the
        other workers search)."""
        self.ensure_compiled()
        threads = threads or self.threads
        rows = list(zip(acs, *per_item, strict=True)) if per_item else [(a,) for a in acs]

        def task(i: int) -> Any:
            ac, *items = rows[i]
            result = decode_one(prepare(ac) if prepare is not None else ac, *items)
            if finish is not None:
                finish(result, i)
            return result

        if threads <= 1 or len(acs) <= 1:
            return PendingBatch(done=[task(i) for i in range(len(rows))])
        if self._pool is None or self._pool._max_workers != threads:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=self.label)
        order = sorted(range(len(acs)), key=lambda i: -acs[i].shape[0])
        futures = {i: self._pool.submit(task, i) for i in order}
        return PendingBatch(futures=[futures[i] for i in range(len(acs))])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class Workspace:
    """The arrays and counters of one search: a worker thread's (reused from utterance to
    utterance, so steady-state decoding allocates nothing) or one stream's (carried between
    chunks). Arrays grow by doubling and never shrink. With an LM, the LM lookup memo."""

    def __init__(self, lattice: bool = False, lm: bool = False) -> None:
        self.arrays = WORKSPACE.allocate(
            htab=np.full(2 * INIT_CAPACITY, -1, np.int32),
            pair_tab=np.full(4 * INIT_CAPACITY, -1, np.int64),
            pair_slot=np.full(INIT_CAPACITY, -1, np.int32),
            pair_slot2=np.full(INIT_CAPACITY, -1, np.int32),
        )
        self.memo = new_memo() if lm else None
        self.has_lm = lm
        self.ctr = np.zeros(NUM_COUNTERS, dtype=np.int64)
        self.stats = np.zeros(NUM_STATS, dtype=np.int64)
        self.lattice = lattice

    @property
    def frames(self) -> int:
        """Frames decoded since `begin`."""
        return int(self.ctr[C_NEXT_FRAME])

    def lattice_data(self) -> tuple[np.recarray, ...]:
        """Copies of the kept lattice arcs and nodes (the fields of the torch path's
        `lattice.LatticeStore.data`). With an LM the arcs also carry the LM's share (``lm``), the
        lattice states are the utterance's (graph state, LM state) pairs, and a third record
        array gives each pair id's ``state`` and ``lm_state``."""
        pairs = int(self.ctr[C_PAIRS]) if self.has_lm else None
        return lattice_records(
            WORKSPACE, self.arrays, int(self.ctr[C_LAT_ARCS]), int(self.ctr[C_NODES]), pairs
        )


class CompiledSearch(CompiledRunner):
    """The compiled token-passing search over one graph (`wfst`), or with a difference LM
    composed on the fly (`wfst-otf`: ``lm`` given; paper 000)."""

    def __init__(self, graph: DeviceGraph, threads: int = 0, lm: DifferenceLM | None = None) -> None:
        super().__init__(graph, threads)
        self.lm = lm.arrays() if lm is not None else None
        self.U = int(lm.num_states) if lm is not None else 0
        self.V = int(lm.large.vocab_size) if lm is not None else 0
        self.label = "wfst-otf" if lm is not None else "wfst"
        if lm is not None and self.arcs.shape[0] and int(self.arcs["olabel"].max()) >= self.V:
            raise ValueError("wfst-otf: a graph olabel is outside the LM vocabulary")

    def kernels(self) -> tuple:
        return (search_advance, search_init)

    def warm_up(self) -> None:
        w = self.new_workspace(lattice=True)
        boost = np.zeros(0, np.float32)
        settings = search_settings(PruningOptions(1.0, 10, 1, 0.5, 1), 1, prune_interval=1)
        self._begin(w, boost, settings)
        self._advance(w, self.warm_up_costs(2), boost, settings)
        self.best(w)

    def new_workspace(self, lattice: bool = False) -> Workspace:
        return Workspace(lattice, lm=self.lm is not None)

    # ---------------------------------------------------------------- search
    def _begin(self, w: Workspace, boost: np.ndarray, settings: np.record) -> None:
        w.stats[:] = 0
        w.arrays = search_init(
            self.states, self.arcs, self.start, boost, self.lm, w.memo, self.U, self.V,
            self.state_map("slot", self.num_states), settings, w.lattice, w.arrays, w.ctr, w.stats,
        )  # fmt: skip

    def _advance(self, w: Workspace, ac: np.ndarray, boost: np.ndarray, settings: np.record) -> None:
        w.arrays = search_advance(
            self.states, self.arcs, as_costs(ac), boost, self.lm, w.memo, self.U, self.V,
            self.state_map("slot", self.num_states), self.state_map("slot2", self.num_states),
            self._best_at(settings), settings, w.lattice, w.arrays, w.ctr, w.stats,
        )  # fmt: skip

    def _best_at(self, settings: np.record) -> np.ndarray:
        """`prune_histories`' per-state scratch (empty when it does not run)."""
        if self.lm is None or not settings.history_beam < np.inf:
            return _NO_COSTS
        return self.state_costs("best_at", self.num_states)

    def begin(self, w: Workspace, boost: np.ndarray, settings: np.record) -> None:
        """Start a search in workspace `w` (start token + epsilon closure)."""
        self.ensure_compiled()
        self._begin(w, boost, settings)

    def advance(self, w: Workspace, ac: np.ndarray, boost: np.ndarray, settings: np.record) -> None:
        """Decode the frames of ac (float32 [T, V] acoustic costs) in workspace `w` (lattices, if
        the workspace keeps them, pruned at the settings' lattice beam and interval)."""
        self.ensure_compiled()
        self._advance(w, ac, boost, settings)

    def best(self, w: Workspace, use_final: bool = True) -> CompiledPath:
        """The best path of workspace `w` (with final costs unless use_final is False)."""
        arcs, frames, total, reached, found, u = search_best(self.states, self.lm, w.arrays, w.ctr, use_final)
        stats = w.stats.copy()
        stats[STAT_RECORDS] = w.ctr[C_RECORDS]
        return CompiledPath(arcs, frames, float(total), bool(reached), bool(found), stats, lm_state=int(u))

    def decode_one(
        self,
        ac: np.ndarray | CostChunks,
        boost: np.ndarray | None,
        settings: np.record,
        lattice: bool = False,
    ) -> CompiledPath:
        """1-best (and lattice data) of one utterance; ac: float32 [T, V] acoustic costs, or
        `CostChunks` made part by part as the search goes."""
        w = self.thread_workspace(lambda: self.new_workspace())
        w.lattice = lattice
        boost = boost if boost is not None else np.zeros(0, np.float32)
        self.begin(w, boost, settings)
        for part in cost_parts(ac):
            self._advance(w, part, boost, settings)
        path = self.best(w)
        if lattice:
            path.lattice = w.lattice_data()
        return path

    def submit(
        self,
        acs: list[np.ndarray],
        boosts: list[np.ndarray | None],
        settings: np.record,
        lattice: bool = False,
        threads: int = 0,
        prepare: Callable[[Any], np.ndarray] | None = None,
        finish: Callable[[Any, int], None] | None = None,
    ) -> PendingBatch:
        """Decode utterances on `threads` workers (default: the search's), longest first, queued
        behind any batch submitted before (`prepare`, `finish`: as `submit_batch`); the paths from
        ``.result()``."""
        return self.submit_batch(
            lambda ac, boost: self.decode_one(ac, boost, settings, lattice),
            acs,
            boosts,
            threads=threads,
            prepare=prepare,
            finish=finish,
        )
