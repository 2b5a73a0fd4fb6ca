"""The LET search for one utterance, compiled with numba for CPUs (paper 002; prior-art D.3).

Search space: the base WFST B (a TLG/HCLG built with a small LM G_s) composed on the fly with the
incremental LM D = G_l "minus" G_s (`asrdecode.lm.difference.DifferenceLM`, shared
with `wfst-otf`): a D state is a state of the union of both LMs' histories, and a word w costs
``lm_scale * (-ln p_l(w | h) + ln p_s(w | h))`` on top of B's arc weight (``</s>`` the same at the
end, on top of B's final cost; `lm_step` / `lm_final`). A token-per-(B state, D state)
decoder (Kaldi's ``lattice-biglm-faster-decoder``) repeats B's work for every D state that reaches
a B state; LET groups them (paper 002 sec. I contributions 1-2, "LET-decoder in brief" 1-3):

* **token groups**: one token per B state per frame (its *group*) with the group's best cost; the
  group's members are a *block* of at most ``capacity`` (D state, cost offset from the group's
  best, member back-pointer) entries (the best has offset 0);
* **lazy evaluation**: an arc without a word shifts every member by the same cost, so a group
  reached over such arcs *shares its source's block* (a block id and the group cost; no member
  is touched). Members are evaluated only (a) when a word arc is crossed: every member advances
  its D state on the word and adds D's weight (a new block, recombined by D state, cut to
  ``capacity``), and (b) when different blocks meet in one B state (a union, recombined by D
  state: the min over members with equal D state is what a per-pair decoder keeps, so with a
  wide beam and enough capacity the search is exact). Two arrivals carrying the *same* block
  only keep the cheaper arrival (all members shift alike), which is the common case in a CTC
  graph (self-loop + forward arc inside a word). A union whose kept members are one arrival's
  whole block at its own offsets (the other arrivals added nothing) shares that block as a
  single arrival would, instead of copying it under a new id: ids then stay the same along an
  HMM's states, so that later arrivals meet the same block and the word-block cache hits
  (exact: the same members and costs; on real speech a third of the unions);
* **pruning** on group costs: Kaldi's GetCutoff (beam, max_active, min_active, adaptive beam)
  with the max/min-active cut either exact (quickselect) or from a *bucket queue* (paper 002
  contribution 2): costs binned in ``bucket_width`` bins above the best, the cut at the lower
  edge of the bin holding the ``max_active``-th group (no selection, no sort). Members of a
  block above the frame's cut are dropped whenever the block is rebuilt (lazily);
* **back-pointers**: a group's record chain (previous record, arc, frame) runs back to where
  its block was made; each member carries a *member record* (previous member record, the
  record chain tail of its route into the block), so the path of any member is exact
  (paper 002 contribution "exact lattice", per-member back-pointers). Unreferenced records,
  member records and blocks are garbage-collected when they pass max(1M, 4x the live ones).

Costs are float32 as in the `wfst` compiled backend; LM log-probs are looked up in the
`BatchedNgramLM` tables by `wfst-otf`'s numba lookups, so both decoders add the same costs.
"""

from __future__ import annotations

import numba
import numpy as np

from asrdecode.decoders.wfst.compiled import (
    PREFETCH_ARCS,
    PREFETCH_STATES,
    PREFETCH_WORDS,
    add_record,
    beam_cutoff,
    best_token,
    clear_pairs,
    closure_queue,
    collect_records,
    emitting_arcs,
    find_pair,
    get_cutoff,
    kth_smallest,
    pair_id,
    pairs_room,
    prefetch_frame,
    prefetch_pays,
    prune_pair_window,
    queue_pop,
    running_bound,
)
from asrdecode.decoders.workspace import WorkspaceLayout, borrowed, grow, grow_fields, prefetch, swap_spans
from asrdecode.lm.difference import MEMO_DTYPE, lm_final, memo_fill, memo_get
from asrdecode.numba_status import configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)

_INF32 = np.float32(np.inf)
WORD_CACHE_BITS = 16  # word-block cache: 65536 (block, word) entries, direct-mapped
# a word-block cache entry: key (block << 32 | word), the word block, its cost shift, and the
# largest member offset it was made from (a group needing more members makes it again); 32 bytes,
# so that an entry is one load of one cache line
WORD_CACHE_DTYPE = np.dtype(
    [("key", np.int64), ("blk", np.int64), ("delta", np.float32), ("lim", np.float32), ("pad", np.int64)],
    align=True,
)

# a candidate member of a block being made: its D state, cost, member record, record tail (-1:
# none), whether kept, whether new (one record, so that helpers take one array, not six: numba
# counts a reference per array argument and call)
CANDIDATE_DTYPE = np.dtype(
    [("lm", np.int32), ("cost", np.float32), ("mrec", np.int64), ("tail", np.int64), ("keep", np.int32),
     ("new", np.int32)],
    align=True,
)  # fmt: skip
# workspace: one field table (fields grown together are adjacent)
WORKSPACE = WorkspaceLayout(
    ("cur_state", np.int32), ("cur_cost", np.float32), ("cur_blk", np.int64), ("cur_rec", np.int64),
    ("nxt_state", np.int32), ("nxt_cost", np.float32), ("nxt_blk", np.int64), ("nxt_rec", np.int64),
    ("nxt_head", np.int32), ("queue", np.int32),  # groups
    ("it_blk", np.int64), ("it_cost", np.float32), ("it_prev", np.int64), ("it_arc", np.int32),
    ("it_next", np.int32),  # items: arrivals of distinct blocks in a group
    ("blk_start", np.int64), ("blk_len", np.int32),  # blocks
    ("m_lm", np.int32), ("m_off", np.float32), ("m_mrec", np.int64),  # members
    ("mr_prev", np.int64), ("mr_tail", np.int64),  # member records
    ("r_prev", np.int64), ("r_arc", np.int32), ("r_frame", np.int32),  # records
    ("ba_src", np.int32), ("ba_dst", np.int32), ("ba_arc", np.int32), ("ba_ac", np.float32),
    ("ba_lim", np.float32),  # block arcs
    ("cand", CANDIDATE_DTYPE),  # candidates of a block being made
    ("scratch", np.float32),
    ("wcache", WORD_CACHE_DTYPE),  # the word-block cache
    ("memo", MEMO_DTYPE),
)  # fmt: skip
(
    W_CUR_STATE, W_CUR_COST, W_CUR_BLK, W_CUR_REC,
    W_NXT_STATE, W_NXT_COST, W_NXT_BLK, W_NXT_REC, W_NXT_HEAD, W_QUEUE,
    W_IT_BLK, W_IT_COST, W_IT_PREV, W_IT_ARC, W_IT_NEXT,
    W_BLK_START, W_BLK_LEN,
    W_M_LM, W_M_OFF, W_M_MREC,
    W_MR_PREV, W_MR_TAIL,
    W_R_PREV, W_R_ARC, W_R_FRAME,
    W_BA_SRC, W_BA_LIM,
    W_CAND,
    W_SCRATCH, W_WCACHE, W_MEMO,
) = WORKSPACE.indices(
    "cur_state", "cur_cost", "cur_blk", "cur_rec",
    "nxt_state", "nxt_cost", "nxt_blk", "nxt_rec", "nxt_head", "queue",
    "it_blk", "it_cost", "it_prev", "it_arc", "it_next",
    "blk_start", "blk_len",
    "m_lm", "m_off", "m_mrec",
    "mr_prev", "mr_tail",
    "r_prev", "r_arc", "r_frame",
    "ba_src", "ba_lim",
    "cand",
    "scratch", "wcache", "memo",
)  # fmt: skip
GROUPS = WORKSPACE.span("cur_state", "cur_rec")
ITEMS = WORKSPACE.span("it_blk", "it_next")
BLOCKS = WORKSPACE.span("blk_start", "mr_tail")  # blocks, their members, the member records
RECORDS = WORKSPACE.span("r_prev", "r_frame")
BLOCK_ARCS = WORKSPACE.span("ba_src", "ba_lim")
PREVIOUS = WORKSPACE.span("nxt_state", "nxt_blk")  # after the swap: the previous frame's groups
# lattices (a second tuple, used only with lattices): the member-level lattice arcs and nodes of
# `wfst`'s lattices, a lattice state being a (graph state, D state) pair of the utterance (as in
# `wfst-otf`'s: the pair table, each pair's states, the last frame it was a node, the pruning's maps)
LATTICE = WorkspaceLayout(
    ("lat_frame", np.int32), ("lat_src", np.int32), ("lat_dst", np.int32), ("lat_arc", np.int32),
    ("lat_ac", np.float32), ("lat_lm", np.float32),
    ("node_frame", np.int32), ("node_state", np.int32), ("node_cost", np.float32), ("node_extra", np.float32),
    ("pair_state", np.int32), ("pair_u", np.int32), ("pair_frame", np.int32), ("pair_slot", np.int32),
    ("pair_slot2", np.int32), ("pair_tab", np.int64),
)  # fmt: skip
LAT_PAIR_STATE, LAT_PAIR_U, LAT_PAIR_TAB = LATTICE.indices("pair_state", "pair_u", "pair_tab")
# counters; C_BA: block arcs of the frame (lattices)
(
    C_TOK, C_REC, C_MREC, C_BLK, C_MEM, C_NEXT_FRAME, C_GC_AT, C_GC_MIN, C_VOCAB, C_BA, C_LAT_ARCS,
    C_NODES, C_PAIRS,
) = range(13)  # fmt: skip
NUM_COUNTERS = 13
# stats, by the names `LetDecoder.last_info["stats"]` reports them under
STAT_NAMES = (
    "frames", "arcs", "groups", "epsilon_pops", "epsilon_limit_hit", "word_members", "unions", "shared",
    "union_members", "records", "word_block_hits", "lattice_prune_frames", "unions_shared", "lm_lookups",
)  # fmt: skip
(
    S_FRAMES, S_ARCS, S_GROUPS, S_EPS_POPS, S_EPS_LIMIT, S_WORD_MEMBERS, S_UNIONS, S_SHARED,
    S_UNION_MEMBERS, S_RECORDS, S_WORD_HITS, S_PRUNE_FRAMES, S_UNIONS_SHARED, S_LM_LOOKUPS,
) = range(len(STAT_NAMES))  # fmt: skip
NUM_STATS = len(STAT_NAMES)
GC_MIN = 1 << 20


# ------------------------------------------------------------------------------ blocks
@numba.njit(nogil=True, cache=True)
def _select(n, cap, cut, history_beam, cand, slot_lm, scratch):
    """Recombine candidates [0, n) by D state (the cheaper wins, the first on ties), drop those
    at or above `cut` and those more than `history_beam` above the cheapest (inf = off;
    `PruningOptions.history_beam`), keep the `cap` cheapest. The kept ones end in [0, k) with
    `keep` 1. Returns (k, best cost, kept candidates with `new` 1)."""
    k = 0
    for i in range(n):
        c = cand[i].cost
        if not (c < cut):
            continue
        u = cand[i].lm
        j = slot_lm[u]
        if j >= 0:
            if c < cand[j].cost:
                cand[j].cost = c
                cand[j].mrec = cand[i].mrec
                cand[j].tail = cand[i].tail
                cand[j].new = cand[i].new
            continue
        cand[k].lm = u
        cand[k].cost = c
        cand[k].mrec = cand[i].mrec
        cand[k].tail = cand[i].tail
        cand[k].new = cand[i].new
        slot_lm[u] = k
        k += 1
    for i in range(k):
        slot_lm[cand[i].lm] = -1
    if history_beam < _INF32 and k > 1:
        lim = cand[0].cost
        for i in range(1, k):
            if cand[i].cost < lim:
                lim = cand[i].cost
        lim += history_beam
        j = 0
        for i in range(k):
            if not (cand[i].cost > lim):
                if j != i:
                    cand[j] = cand[i]
                j += 1
        k = j
    best = _INF32
    new_kept = 0
    if k > cap:
        for i in range(k):
            scratch[i] = cand[i].cost
        thr = kth_smallest(scratch, k, cap - 1)
        below = 0
        for i in range(k):
            if cand[i].cost < thr:
                below += 1
        ties = cap - below
        for i in range(k):
            c = cand[i].cost
            keep = c < thr
            if not keep and c == thr and ties > 0:
                keep = True
                ties -= 1
            cand[i].keep = 1 if keep else 0
    else:
        for i in range(k):
            cand[i].keep = 1
    for i in range(k):
        if cand[i].keep == 1:
            if cand[i].cost < best:
                best = cand[i].cost
            new_kept += cand[i].new
    return k, best, new_kept


@numba.njit(nogil=True, cache=True, inline="always")
def _write_block(
    k, best, cand, blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail,
    ctr,
):  # fmt: skip
    """Write the kept candidates [0, k) as a new block (offsets from `best`); a member whose route
    has a record tail gets a member record (previous member record, tail). Capacities are the
    caller's. Returns the block id. Takes the arrays it uses, not the workspace tuple: passing a
    tuple to a helper costs two atomic reference counts per array in it (36 here)."""
    b = ctr[C_BLK]
    top = ctr[C_MEM]
    nm = ctr[C_MREC]
    start = top
    for i in range(k):
        if cand[i].keep != 1:
            continue
        m_lm[top] = cand[i].lm
        m_off[top] = cand[i].cost - best
        if cand[i].tail >= 0:
            mr_prev[nm] = cand[i].mrec
            mr_tail[nm] = cand[i].tail
            m_mrec[top] = nm
            nm += 1
        else:
            m_mrec[top] = cand[i].mrec
        top += 1
    blk_start[b] = start
    blk_len[b] = top - start
    ctr[C_BLK] = b + 1
    ctr[C_MEM] = top
    ctr[C_MREC] = nm
    return b


@numba.njit(nogil=True, cache=True, inline="always")
def _sole_tail(k, cand):
    """(the record tail every kept candidate of [0, k) came with, or -1 if they came with
    several; the number kept)."""
    tail = np.int64(-2)
    kept = 0
    for i in range(k):
        if cand[i].keep == 1:
            kept += 1
            if tail == -2:
                tail = cand[i].tail
            elif cand[i].tail != tail:
                return np.int64(-1), kept
    return (tail if tail >= 0 else np.int64(-1)), kept


@numba.njit(nogil=True, cache=True, inline="always")
def _add_members(blk, c, tail, new, n, blk_start, blk_len, m_lm, m_off, m_mrec, cand):
    """Append the members of block `blk` as candidates at cost c + offset; returns the new count."""
    st = blk_start[blk]
    for q in range(st, st + blk_len[blk]):
        cand[n].lm = m_lm[q]
        cand[n].cost = c + m_off[q]
        cand[n].mrec = m_mrec[q]
        cand[n].tail = tail
        cand[n].new = new
        n += 1
    return n


@numba.njit(nogil=True, cache=True, inline="always")
def _word_slot(blk, word, mask):
    """The word-block cache entry of (blk, word) in a cache of ``mask + 1`` entries."""
    return ((blk * 1000003) ^ (word * 7919)) & mask


@numba.njit(nogil=True, cache=True)
def _clear_word_cache(wcache):
    """Void every word-block cache entry (block ids renumbered or a new search)."""
    for h in range(wcache.shape[0]):
        wcache[h].key = -1


@numba.njit(nogil=True, cache=True, inline="always")
def _word_probe(blk, word, lim, wcache):
    """The word-block cache entry of (blk, word) made from at least the members at offsets up to
    `lim`: (slot, key, cached block or -1, its cost shift, the member offsets it was made from).
    No workspace tuple here: passing one costs an atomic reference count per array."""
    key = (blk << 32) | word
    h = _word_slot(blk, word, wcache.shape[0] - 1)
    e = wcache[h]
    if e.key == key and e.lim >= lim:
        return h, key, e.blk, e.delta, e.lim
    return h, key, -1, _INF32, lim


@numba.njit(nogil=True, cache=True, inline="always")
def _prefetch_word_blocks(arcs, states, s, blk, wcache):
    """Prefetch the word-block cache entries `_word_probe` will read for the word arcs of state
    `s` from block `blk` (when `prefetch_pays`; only a hint)."""
    mask = wcache.shape[0] - 1
    for a in range(states[s].first, states[s].split):
        w = arcs[a].olabel
        if w > 0:
            prefetch(wcache, _word_slot(blk, w, mask))


@numba.njit(nogil=True, cache=True, inline="always")
def _make_word_block(
    blk, word, lim, key, h, cap, beam, lm, slot_lm, wcache, blk_start, blk_len, m_lm, m_off,
    m_mrec, mr_prev, mr_tail, cand, scratch, memo, ctr, stats,
):  # fmt: skip
    """The block of the members of `blk` at offsets up to `lim` after crossing `word` and its cost
    shift: each member advances its D state and adds D's weight, recombined by D state, members
    more than `beam` above the best dropped, at most `cap` kept; a member keeps its source's
    member record (the group's record chain runs on through the word arc). The members above
    `lim` are those the frame's cut prunes in the group crossing the arc (`lim` = cut - its
    cost): a token-per-pair search does not expand them either. It depends only on (blk, word,
    lim), so it is cached (direct-mapped, cleared when blocks are renumbered; a group needing a
    larger `lim` makes it again): called on a miss of `_word_probe`, makes the block, caches it and
    returns (block, cost shift). Takes arrays, not the workspace tuple."""
    vocab = ctr[C_VOCAB]
    st = blk_start[blk]
    n = 0
    best = _INF32
    for q in range(st, st + blk_len[blk]):
        if m_off[q] > lim:  # above the cut: not expanded (the best member, offset 0, always is)
            continue
        # D's weight through the memo of (D state, word) lookups; the LM tuple only on a miss
        u = m_lm[q]
        d, nu, hit = memo_get(memo, u, word, vocab)
        if not hit:
            d, nu = memo_fill(lm, memo, u, word, vocab)
            stats[S_LM_LOOKUPS] += 1
        cost = m_off[q] + d
        cand[n].lm = nu
        cand[n].cost = cost
        cand[n].mrec = m_mrec[q]
        cand[n].tail = -1
        cand[n].new = 1
        if cost < best:
            best = cost
        n += 1
    stats[S_WORD_MEMBERS] += n
    k, best, _ = _select(n, cap, best + beam, _INF32, cand, slot_lm, scratch)
    nb = _write_block(
        k, best, cand, blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev,
        mr_tail, ctr,
    )  # fmt: skip
    e = wcache[h]
    e.key = key
    e.blk = nb
    e.delta = best
    e.lim = lim
    return nb, best


# ------------------------------------------------------------------------------ emitting arcs
@numba.njit(nogil=True, cache=True)
def _emit(
    states, arcs, acrow, cut, adaptive, beam, word_beam, slot, slot_lm, frame, cap, lm, n, lattice, ws, ctr,
    stats, prefetch_words,
):  # fmt: skip
    """Emitting arcs of the groups below `cut` (Kaldi ProcessEmitting on groups; capacities are the
    caller's). Arcs without a word carry the source block along (lazy); word arcs carry the
    source block's (cached) word block. As Kaldi, the best groups go first for a tight bound
    (their cheapest arc also sets the word arcs' cut, `PruningOptions.word_beam`). With lattices
    every arc below the running bound is kept as a block arc (`_lattice_frame`). Returns (next
    groups, items, best new cost)."""
    # the arrays held by the caller for the whole call, without reference counts (`borrowed`)
    states, arcs, acrow, slot, slot_lm, lm, ctr, stats = borrowed(
        (states, arcs, acrow, slot, slot_lm, lm, ctr, stats)
    )
    cur_state, cur_cost, cur_blk, cur_rec = borrowed(ws[GROUPS])
    nxt_state, nxt_cost, nxt_head = borrowed((ws[W_NXT_STATE], ws[W_NXT_COST], ws[W_NXT_HEAD]))
    it_blk, it_cost, it_prev, it_arc, it_next = borrowed(ws[ITEMS])
    wcache = borrowed(ws[W_WCACHE])
    blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail = borrowed(ws[BLOCKS])
    cand = borrowed(ws[W_CAND])
    scratch, memo = borrowed((ws[W_SCRATCH], ws[W_MEMO]))
    ba_src, ba_dst, ba_arc, ba_ac, ba_lim = borrowed(ws[BLOCK_ARCS])
    nba = ctr[C_BA]
    best_i, best_c = best_token(cur_cost, n)
    pre = _INF32  # the cheapest arc of the groups at the best cost
    if best_i >= 0 and best_c < cut:
        for i in range(best_i, n):
            if cur_cost[i] != best_c:
                continue
            s = cur_state[i]
            for a in range(states[s].first, states[s].split):
                arc = arcs[a]
                c = best_c + arc.weight + acrow[arc.column]
                if arc.olabel > 0:
                    _, delta, _, _ = _word_block(
                        cur_blk[i], arc.olabel, cut - best_c, cap, beam, lm, slot_lm, wcache, blk_start,
                        blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail, cand, scratch, memo, ctr, stats,
                    )  # fmt: skip
                    c = c + delta
                if c < pre:
                    pre = c
    bound = pre + adaptive
    word_cut = pre + word_beam
    best_new = _INF32
    m = 0
    nit = 0
    hits = 0
    for i in range(n):
        # as `wfst`'s emitting step: the state record and first arc of groups ahead, and the
        # word-block cache entries of their word arcs (`_word_probe`'s load) if that pays
        # (`prefetch_pays`), are prefetched
        if i + PREFETCH_STATES < n:
            prefetch(states, cur_state[i + PREFETCH_STATES])
        if i + PREFETCH_ARCS < n:
            prefetch(arcs, states[cur_state[i + PREFETCH_ARCS]].first)
        if prefetch_words and i + PREFETCH_WORDS < n and cur_cost[i + PREFETCH_WORDS] < cut:
            j = i + PREFETCH_WORDS
            _prefetch_word_blocks(arcs, states, cur_state[j], cur_blk[j], wcache)
        c0 = cur_cost[i]
        if not (c0 < cut):
            continue
        s = cur_state[i]
        blk = cur_blk[i]
        r0 = cur_rec[i]
        lim = cut - c0  # the members below the cut (`_make_word_block`)
        for a in range(states[s].first, states[s].split):
            arc = arcs[a]
            c = c0 + arc.weight + acrow[arc.column]
            ol = arc.olabel
            nb = blk
            blim = lim  # the member offsets the word block was made from
            if ol > 0:
                nb, delta, blim, hit = _word_block(
                    blk, ol, lim, cap, beam, lm, slot_lm, wcache, blk_start, blk_len, m_lm, m_off, m_mrec,
                    mr_prev, mr_tail, cand, scratch, memo, ctr, stats,
                )  # fmt: skip
                c = c + delta
                hits += hit
            best_new, bound, below = running_bound(c, best_new, bound, adaptive)
            if not below or (ol > 0 and not (c < word_cut)):
                continue
            if lattice:
                ba_src[nba] = i
                ba_dst[nba] = arc.nextstate
                ba_arc[nba] = a
                ba_ac[nba] = acrow[arc.column]
                ba_lim[nba] = blim
                nba += 1
            # the arrival: same block as an earlier arrival -> the cheaper route; else one more item
            d = arc.nextstate
            j = slot[d]
            if j < 0:
                j = m
                m += 1
                slot[d] = j
                nxt_state[j] = d
                nxt_cost[j] = c
                nxt_head[j] = -1
            elif c < nxt_cost[j]:
                nxt_cost[j] = c
            q = nxt_head[j]
            while q >= 0:
                if it_blk[q] == nb:
                    if c < it_cost[q]:
                        it_cost[q] = c
                        it_prev[q] = r0
                        it_arc[q] = a
                    break
                q = it_next[q]
            if q < 0:
                it_blk[nit] = nb
                it_cost[nit] = c
                it_prev[nit] = r0
                it_arc[nit] = a
                it_next[nit] = nxt_head[j]
                nxt_head[j] = nit
                nit += 1
    stats[S_WORD_HITS] += hits
    ctr[C_BA] = nba
    return m, nit, best_new


@numba.njit(nogil=True, cache=True, inline="always")
def _word_block(
    blk, word, lim, cap, beam, lm, slot_lm, wcache, blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail,
    cand, scratch, memo, ctr, stats,
):  # fmt: skip
    """The word block of (block `blk`, `word`) made from at least the members at offsets up to
    `lim`: the cached one (`_word_probe`) or, on a miss, a new one (`_make_word_block`). Returns
    (block, cost shift, the member offsets it was made from, whether the cache had it). Inlined
    into the frame steps, whose arrays are `borrowed`."""
    h, key, nb, delta, made_lim = _word_probe(blk, word, lim, wcache)
    if nb >= 0:
        return nb, delta, made_lim, 1
    nb, delta = _make_word_block(
        blk, word, lim, key, h, cap, beam, lm, slot_lm, wcache, blk_start, blk_len, m_lm, m_off, m_mrec,
        mr_prev, mr_tail, cand, scratch, memo, ctr, stats,
    )  # fmt: skip
    return nb, delta, lim, 0


@numba.njit(nogil=True, cache=True)
def _max_items(m, ws):
    nxt_head, it_next = ws[W_NXT_HEAD], ws[W_IT_NEXT]
    most = 0
    for j in range(m):
        c = 0
        q = nxt_head[j]
        while q >= 0:
            c += 1
            q = it_next[q]
        if c > most:
            most = c
    return most


@numba.njit(nogil=True, cache=True)
def _keep(cut, frame, cap, history_beam, m, slot, slot_lm, ws, ctr, stats):
    """The next groups below the frame's final bound: one item left -> the group shares that block
    (with a record for its arc); several -> their union (recombined by D state, members below
    the bound and within `history_beam` of the best, at most `cap`). Writes the kept groups to
    the nxt arrays; returns their number."""
    # the arrays held by the caller for the whole call, without reference counts (`borrowed`)
    slot, slot_lm, ctr, stats = borrowed((slot, slot_lm, ctr, stats))
    nxt_state, nxt_cost, nxt_blk, nxt_rec, nxt_head = borrowed(
        (ws[W_NXT_STATE], ws[W_NXT_COST], ws[W_NXT_BLK], ws[W_NXT_REC], ws[W_NXT_HEAD])
    )  # fmt: skip
    it_blk, it_cost, it_prev, it_arc, it_next = borrowed(ws[ITEMS])
    records = borrowed(ws[RECORDS])
    blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail = borrowed(ws[BLOCKS])
    cand = borrowed(ws[W_CAND])
    scratch = borrowed(ws[W_SCRATCH])
    k = 0
    for j in range(m):
        d = nxt_state[j]
        c = nxt_cost[j]
        head = nxt_head[j]
        if not (c < cut):
            slot[d] = -1
            continue
        cnt = 0
        one = -1
        q = head
        while q >= 0:
            if it_cost[q] < cut:
                cnt += 1
                one = q
            q = it_next[q]
        if cnt == 1:
            blk = it_blk[one]
            rec = ctr[C_REC]
            ctr[C_REC] = add_record(records, rec, it_prev[one], it_arc[one], frame)
            stats[S_SHARED] += 1
        else:
            n = 0
            first_tail = ctr[C_REC]
            q = head
            while q >= 0:
                if it_cost[q] < cut:
                    tail = ctr[C_REC]  # the item's record
                    ctr[C_REC] = add_record(records, tail, it_prev[q], it_arc[q], frame)
                    n = _add_members(
                        it_blk[q], it_cost[q], tail, 0, n, blk_start, blk_len, m_lm, m_off, m_mrec, cand,
                    )  # fmt: skip
                q = it_next[q]
            kk, best, _ = _select(n, cap, cut, history_beam, cand, slot_lm, scratch)
            stats[S_UNION_MEMBERS] += n
            tail, kept = _sole_tail(kk, cand)
            q = head
            while tail >= 0 and q >= 0:  # the item whose record is that tail (items in record order)
                if it_cost[q] < cut:
                    if tail == first_tail:
                        break
                    first_tail += 1
                q = it_next[q]
            if tail >= 0 and kept == blk_len[it_blk[q]] and best == it_cost[q]:
                # the union is one item's block, whole and with the same offsets: the group shares
                # it as a single arrival would (its record: that item's record)
                blk = it_blk[q]
                rec = tail
                stats[S_SHARED] += 1
                stats[S_UNIONS_SHARED] += 1
            else:
                blk = _write_block(
                    kk, best, cand, blk_start, blk_len, m_lm, m_off, m_mrec,
                    mr_prev, mr_tail, ctr,
                )  # fmt: skip
                rec = -1
                stats[S_UNIONS] += 1
        nxt_state[k] = d
        nxt_cost[k] = c
        nxt_blk[k] = blk
        nxt_rec[k] = rec
        slot[d] = k
        k += 1
    return k


# ------------------------------------------------------------------------------ epsilon closure
@numba.njit(nogil=True, cache=True)
def _closure(
    states, arcs, cut, word_cut, beam, history_beam, frame, cap, slot, slot_lm, eps_limit, lm, lattice, ws,
    ctr, stats, io,
):  # fmt: skip
    """Epsilon closure of the queued groups (Kaldi ProcessNonemitting on groups): LIFO queue,
    groups and candidates above `cut` are not expanded; a group whose cost or block changed is
    queued again. With lattices every arc at or below `cut` is kept as a block arc. io: [queue
    length, pops]. Returns False when an array may be too small for the next group's arcs (the
    caller grows them and calls again)."""
    # the arrays held by the caller for the whole call, without reference counts (`borrowed`)
    states, arcs, slot, slot_lm, lm, ctr, stats, io = borrowed(
        (states, arcs, slot, slot_lm, lm, ctr, stats, io)
    )
    cur_state, cur_cost, cur_blk, cur_rec = borrowed(ws[GROUPS])
    queue = borrowed(ws[W_QUEUE])
    records = borrowed(ws[RECORDS])
    wcache = borrowed(ws[W_WCACHE])
    blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail = borrowed(ws[BLOCKS])
    cand = borrowed(ws[W_CAND])
    scratch, memo = borrowed((ws[W_SCRATCH], ws[W_MEMO]))
    ba_src, ba_dst, ba_arc, ba_ac, ba_lim = borrowed(ws[BLOCK_ARCS])
    nq, pops = io[0], io[1]
    num_states = slot.shape[0]
    # capacities (arrays are not replaced inside this call)
    cap_rec, cap_blk = ws[W_R_PREV].shape[0], ws[W_BLK_START].shape[0]
    cap_mem, cap_mrec, cap_cand = ws[W_M_LM].shape[0], ws[W_MR_PREV].shape[0], ws[W_CAND].shape[0]
    while nq > 0:
        i = queue[nq - 1]
        s = cur_state[i]
        a0 = states[s].split
        a1 = states[s].end
        k = a1 - a0
        n = ctr[C_TOK]
        if (
            min(n + k, num_states) > cur_state.shape[0]
            or nq - 1 + k > queue.shape[0]
            or ctr[C_REC] + 2 * k > cap_rec
            or ctr[C_BLK] + 2 * k > cap_blk
            or ctr[C_MEM] + 2 * k * cap > cap_mem
            or ctr[C_MREC] + 4 * k * cap > cap_mrec
            or 2 * cap > cap_cand
            or (lattice and ctr[C_BA] + k > ba_src.shape[0])
        ):
            io[0], io[1] = nq, pops
            return False
        nq, pops, stop = queue_pop(nq, pops, eps_limit)
        if stop:
            stats[S_EPS_LIMIT] += 1
            break
        c0 = cur_cost[i]
        if c0 > cut:
            continue
        for a in range(a0, a1):
            arc = arcs[a]
            c = c0 + arc.weight
            d = arc.nextstate
            ol = arc.olabel
            blk = cur_blk[i]
            lim = _INF32  # over a word: the member offsets its block was made from
            if ol > 0:  # the members at or below the cut
                blk, delta, lim, hit = _word_block(
                    blk, ol, cut - c0, cap, beam, lm, slot_lm, wcache, blk_start, blk_len, m_lm, m_off,
                    m_mrec, mr_prev, mr_tail, cand, scratch, memo, ctr, stats,
                )  # fmt: skip
                c = c + delta
                stats[S_WORD_HITS] += hit
            if c > cut or (ol > 0 and c > word_cut):
                continue
            if lattice:
                p = ctr[C_BA]
                ba_src[p] = i
                ba_dst[p] = d
                ba_arc[p] = a
                ba_ac[p] = 0.0
                ba_lim[p] = lim
                ctr[C_BA] = p + 1
            j = slot[d]
            if j >= 0 and blk == cur_blk[j] and not (c < cur_cost[j]):
                continue
            rec = ctr[C_REC]  # the arrival's record
            ctr[C_REC] = add_record(records, rec, cur_rec[i], a, frame)
            if j < 0:
                j = ctr[C_TOK]
                ctr[C_TOK] = j + 1
                cur_state[j] = d
                slot[d] = j
                cur_cost[j] = c
                cur_blk[j] = blk
                cur_rec[j] = rec
            elif blk == cur_blk[j]:
                cur_cost[j] = c
                cur_rec[j] = rec
            else:
                tail = rec
                nc = _add_members(
                    cur_blk[j], cur_cost[j], cur_rec[j], 0, 0, blk_start, blk_len, m_lm, m_off, m_mrec, cand,
                )  # fmt: skip
                nc = _add_members(
                    blk, c, tail, 1, nc, blk_start, blk_len, m_lm, m_off, m_mrec, cand,
                )  # fmt: skip
                kk, best, new_kept = _select(
                    nc, cap, np.nextafter(cut, _INF32), history_beam, cand, slot_lm,
                    scratch,
                )  # fmt: skip
                if new_kept == 0:
                    ctr[C_REC] -= 1  # the tail record is the last one made
                    continue
                stats[S_UNION_MEMBERS] += nc
                sole, kept = _sole_tail(kk, cand)
                if sole == tail and kept == blk_len[blk] and best == c:
                    # the union is the arriving block, whole: the group takes it as an arrival
                    cur_blk[j] = blk
                    cur_cost[j] = c
                    cur_rec[j] = tail
                    stats[S_UNIONS_SHARED] += 1
                else:
                    stats[S_UNIONS] += 1
                    cur_blk[j] = _write_block(
                        kk, best, cand, blk_start, blk_len, m_lm, m_off, m_mrec,
                        mr_prev, mr_tail, ctr,
                    )  # fmt: skip
                    if c < cur_cost[j]:
                        cur_cost[j] = c
                    cur_rec[j] = -1
            queue[nq] = j
            nq += 1
    io[0], io[1] = nq, pops
    return True


@numba.njit(nogil=True, cache=True)
def _grow_all(ws, ctr, need):
    """The workspace with every array at least as large as asked (others unchanged). need: int64
    [tokens, items, records, blocks, members, member records, candidates, block arcs] (records,
    blocks, members, member records and block arcs beyond the ones made; an array, so one compiled
    version serves all calls)."""
    tokens, items, records, blocks, members, mrecs, cands, block_arcs = (
        need[0], need[1], need[2], need[3], need[4], need[5], need[6], need[7]
    )  # fmt: skip
    # a tuple is rebuilt only for a short span (one field checked: a span grows as one)
    if ws[W_CUR_STATE].shape[0] < tokens:
        ws = grow_fields(ws, W_CUR_STATE, W_QUEUE, tokens)
    if ws[W_IT_BLK].shape[0] < items:
        ws = grow_fields(ws, W_IT_BLK, W_IT_NEXT, items)
    if ws[W_BLK_START].shape[0] < ctr[C_BLK] + blocks:
        ws = grow_fields(ws, W_BLK_START, W_BLK_LEN, ctr[C_BLK] + blocks)
    if ws[W_M_LM].shape[0] < ctr[C_MEM] + members:
        ws = grow_fields(ws, W_M_LM, W_M_MREC, ctr[C_MEM] + members)
    if ws[W_MR_PREV].shape[0] < ctr[C_MREC] + mrecs:
        ws = grow_fields(ws, W_MR_PREV, W_MR_TAIL, ctr[C_MREC] + mrecs)
    if ws[W_R_PREV].shape[0] < ctr[C_REC] + records:
        ws = grow_fields(ws, W_R_PREV, W_R_FRAME, ctr[C_REC] + records)
    if ws[W_BA_SRC].shape[0] < ctr[C_BA] + block_arcs:
        ws = grow_fields(ws, W_BA_SRC, W_BA_LIM, ctr[C_BA] + block_arcs)
    if ws[W_CAND].shape[0] < cands:
        ws = grow_fields(ws, W_CAND, W_CAND, cands)
    if ws[W_SCRATCH].shape[0] < max(tokens, cands):
        ws = grow_fields(ws, W_SCRATCH, W_SCRATCH, max(tokens, cands))
    return ws


@numba.njit(nogil=True, cache=True)
def _close_frame(
    states, arcs, cut, word_cut, beam, history_beam, frame, cap, slot, slot_lm, eps_limit, lm, lattice, ws,
    ctr, stats,
):  # fmt: skip
    """Epsilon closure of the current groups (growing arrays as needed), then the reset of the
    state map. Returns the workspace."""
    n = ctr[C_TOK]
    ws = _grow_all(ws, ctr, np.array([n, 0, 0, 0, 0, 0, 2 * cap, 0], np.int64))
    io = np.empty(2, np.int64)
    io[0], io[1] = closure_queue(states, ws[W_CUR_STATE], n, ws[W_QUEUE]), 0
    while not _closure(
        states, arcs, cut, word_cut, beam, history_beam, frame, cap, slot, slot_lm, eps_limit, lm, lattice,
        ws, ctr, stats, io,
    ):  # fmt: skip
        i = ws[W_QUEUE][io[0] - 1]
        s = ws[W_CUR_STATE][i]
        k = states[s].end - states[s].split + 1
        tokens = max(min(ctr[C_TOK] + k, slot.shape[0]), io[0] + k)
        ws = _grow_all(
            ws, ctr, np.array([tokens, 0, 2 * k, 2 * k, 2 * k * cap, 4 * k * cap, 2 * cap, k], np.int64)
        )
    stats[S_EPS_POPS] += io[1]
    n = ctr[C_TOK]
    stats[S_GROUPS] += n
    cur_state = ws[W_CUR_STATE]
    for i in range(n):
        slot[cur_state[i]] = -1
    return ws


# ------------------------------------------------------------------------------ garbage collection
@numba.njit(nogil=True, cache=True)
def _collect(ws, ctr):
    """Keep only the blocks the current groups use, the member records their members lead back
    to and the records those and the groups lead back to; compacts in place keeping the order
    (a predecessor comes first) and renumbers."""
    n = ctr[C_TOK]
    cur_blk, cur_rec = ws[W_CUR_BLK], ws[W_CUR_REC]
    blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail = ws[BLOCKS]
    r_prev, r_arc, r_frame = ws[RECORDS]
    nb = ctr[C_BLK]
    bmap = np.full(nb, -1, np.int64)
    for i in range(n):
        bmap[cur_blk[i]] = -2
    newb = 0
    top = 0
    for b in range(nb):  # blocks lie in the arena in id order: in-place copies move left
        if bmap[b] == -2:
            st = blk_start[b]
            ln = blk_len[b]
            for q in range(ln):
                m_lm[top + q] = m_lm[st + q]
                m_off[top + q] = m_off[st + q]
                m_mrec[top + q] = m_mrec[st + q]
            blk_start[newb] = top
            blk_len[newb] = ln
            bmap[b] = newb
            newb += 1
            top += ln
    for i in range(n):
        cur_blk[i] = bmap[cur_blk[i]]
    # member records: those the kept members lead back to
    km = collect_records(m_mrec[:top], top, mr_prev, mr_tail, mr_tail, ctr[C_MREC])
    # records: those the groups and the kept member records lead back to
    roots = np.concatenate((cur_rec[:n], mr_tail[:km]))
    kr = collect_records(roots, n + km, r_prev, r_arc, r_frame, ctr[C_REC])
    cur_rec[:n] = roots[:n]
    mr_tail[:km] = roots[n:]
    ctr[C_BLK], ctr[C_MEM], ctr[C_MREC], ctr[C_REC] = newb, top, km, kr
    _clear_word_cache(ws[W_WCACHE])  # block ids changed: the word-block cache is void


# ------------------------------------------------------------------------------ cutoff
@numba.njit(nogil=True, cache=True)
def bucket_cutoff(cost, n, beam, max_active, min_active, beam_delta, width):
    """GetCutoff with a bucket queue (paper 002 contribution 2): costs binned in `width` bins from
    the best up to the beam; the max-active cut is the lower edge of the bin holding the
    `max_active`-th smallest cost (so at most that many are kept), the min-active cut the upper
    edge of the bin holding the `min_active`-th (so at least that many). No selection, no sort.
    Otherwise Kaldi's rule as `get_cutoff`; returns (cutoff, adaptive beam)."""
    best, beam_cut, beam_decides = beam_cutoff(cost, n, beam, max_active, min_active)
    if beam_decides:
        return beam_cut, beam
    counts = np.zeros(0, np.int64)
    nbins = 0
    if n > max_active or n > min_active > 0:
        nbins = int(beam / width) + 1
        if nbins > 1 << 16:
            nbins = 1 << 16
            width = np.float32(beam / (nbins - 1))
        counts = np.zeros(nbins + 1, np.int64)  # last bin: above the beam
        for i in range(n):
            x = (cost[i] - best) / width
            b = int(x) if x < nbins else nbins
            if b < 0:
                b = nbins
            counts[b] += 1
    if n > max_active:
        acc = 0
        for b in range(nbins):
            acc += counts[b]
            if acc > max_active:
                # the best bin alone holding too many is kept whole (exact selection would keep it too)
                max_cut = best + np.float32(max(b, 1) * width)
                if max_cut < beam_cut:
                    return max_cut, max_cut - best + beam_delta
                break
    # as GetCutoff: with at most min_active costs nothing is cut (inf)
    min_cut = _INF32
    if min_active <= 0:
        min_cut = best
    elif n > min_active:
        acc = 0
        for b in range(nbins):
            acc += counts[b]
            if acc > min_active:
                min_cut = best + np.float32((b + 1) * width)
                break
        if acc <= min_active:  # beyond the last bin (rare): the exact value
            min_cut = kth_smallest(cost[:n].copy(), n, min_active)
    if min_cut > beam_cut:
        return min_cut, min_cut - best + beam_delta
    return beam_cut, beam


@numba.njit(nogil=True, cache=True)
def _swap(ws):
    """The workspace with the current and next group arrays exchanged (the kept next groups
    become the current ones)."""
    return swap_spans(ws, W_CUR_STATE, W_CUR_REC, W_NXT_STATE)


# ------------------------------------------------------------------------------ lattices
@numba.njit(nogil=True, cache=True)
def _lattice_frame(arcs, frame, lm, U, lattice_beam, prune_interval, ws, lat, ctr, stats):
    """The frame's lattice nodes and arcs in the composed search space (paper 002's exact lattices:
    the arcs a token-per-(B state, D state) decoder would keep between the same tokens), from its
    groups and block arcs, once the frame's closure is done: every member of every group is a node
    (its pair (B state, D state), cost group + offset); a block arc stands for one arc per member of
    its source group's block (the previous frame's groups for emitting arcs, this frame's for
    epsilon arcs), to the member with that D state (or, over a word, the D state after the word,
    with D's weight) of the destination group, kept if that member exists (whatever its cost: a
    member of a shared block may lie above the frame's cut, and its arc in must stay). Every
    `prune_interval`-th frame the kept lattice is pruned (`lattice.prune_window`, Kaldi's
    PruneForwardLinks at `lattice_beam`). Returns the lattice tuple (arrays grown as needed)."""
    cur_state, cur_cost, cur_blk, _ = ws[GROUPS]
    prv_state, _, prv_blk = ws[PREVIOUS]
    ba_src, ba_dst, ba_arc, ba_ac, ba_lim = ws[BLOCK_ARCS]
    blk_start, blk_len, m_lm, m_off = ws[W_BLK_START], ws[W_BLK_LEN], ws[W_M_LM], ws[W_M_OFF]
    memo = ws[W_MEMO]
    (
        lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, node_frame, node_state, node_cost, node_extra,
        pair_state, pair_u, pair_frame, pair_slot, pair_slot2, pair_tab,
    ) = lat  # fmt: skip
    vocab = ctr[C_VOCAB]
    n, nba = ctr[C_TOK], ctr[C_BA]
    nn, na, npair = ctr[C_NODES], ctr[C_LAT_ARCS], ctr[C_PAIRS]
    # room: a node per member, an arc per member of each block arc's source block
    members = 0
    for i in range(n):
        members += blk_len[cur_blk[i]]
    most = 0
    for p in range(nba):
        i = ba_src[p]
        most += blk_len[prv_blk[i]] if arcs[ba_arc[p]].column >= 0 else blk_len[cur_blk[i]]
    if node_frame.shape[0] < nn + members:
        node_frame, node_state, node_cost, node_extra = grow_fields(
            (node_frame, node_state, node_cost, node_extra), 0, 3, nn + members
        )
    if lat_frame.shape[0] < na + most:
        lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm = grow_fields(
            (lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm), 0, 5, na + most
        )
    pair_state, pair_u, pair_tab = pairs_room(pair_state, pair_u, pair_tab, U, npair, members)
    pair_frame = grow(pair_frame, pair_state.shape[0])
    # nodes
    for i in range(n):
        st = blk_start[cur_blk[i]]
        for q in range(st, st + blk_len[cur_blk[i]]):
            pid, npair = pair_id(pair_tab, pair_state, pair_u, npair, cur_state[i], m_lm[q], U)
            pair_frame[pid] = frame
            node_frame[nn] = frame
            node_state[nn] = pid
            node_cost[nn] = cur_cost[i] + m_off[q]
            node_extra[nn] = np.nan
            nn += 1
    # arcs
    for p in range(nba):
        a = ba_arc[p]
        arc = arcs[a]
        i = ba_src[p]
        emitting = arc.column >= 0
        if emitting:
            s, b = prv_state[i], prv_blk[i]
        else:
            s, b = cur_state[i], cur_blk[i]
        st = blk_start[b]
        for q in range(st, st + blk_len[b]):
            u = m_lm[q]
            lmc, nu = np.float32(0.0), u
            if arc.olabel > 0:
                if m_off[q] > ba_lim[p]:  # not expanded over the word (`_make_word_block`)
                    continue
                lmc, nu, hit = memo_get(memo, u, arc.olabel, vocab)
                if not hit:
                    lmc, nu = memo_fill(lm, memo, u, arc.olabel, vocab)
            dp = find_pair(pair_tab, ba_dst[p], nu, U)
            if dp < 0 or pair_frame[dp] != frame:
                continue
            lat_frame[na] = frame
            lat_src[na] = find_pair(pair_tab, s, u, U)
            lat_dst[na] = dp
            lat_arc[na] = a
            lat_ac[na] = ba_ac[p]
            lat_lm[na] = lmc
            na += 1
    if frame >= 0 and prune_interval > 0 and (frame + 1) % prune_interval == 0:
        nn, na, taken, pair_slot, pair_slot2 = prune_pair_window(
            arcs, np.zeros(0, np.float32), frame, lattice_beam, node_frame, node_state, node_cost,
            node_extra, nn, lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, na, pair_slot, pair_slot2,
            npair,
        )  # fmt: skip
        stats[S_PRUNE_FRAMES] += taken
    ctr[C_NODES], ctr[C_LAT_ARCS], ctr[C_PAIRS] = nn, na, npair
    return (
        lat_frame, lat_src, lat_dst, lat_arc, lat_ac, lat_lm, node_frame, node_state, node_cost, node_extra,
        pair_state, pair_u, pair_frame, pair_slot, pair_slot2, pair_tab,
    )  # fmt: skip


# ------------------------------------------------------------------------------ drivers
@numba.njit(nogil=True, cache=True)
def search_init(
    states, arcs, start, lm_start, cap, beam, history_beam, slot, slot_lm, eps_limit, lm, U, ws, ctr, stats,
    gc_at, lattice, lattice_beam, prune_interval, lat,
):  # fmt: skip
    """Start a search: the start group with one member (the LMs' <s> states) and its epsilon
    closure (with lattices, its nodes and arcs at frame -1). Returns (workspace, lattice tuple)."""
    if lattice:  # the previous search's lattice pairs leave the table
        clear_pairs(lat[LAT_PAIR_TAB], lat[LAT_PAIR_STATE], lat[LAT_PAIR_U], ctr[C_PAIRS], U)
    vocab = ctr[C_VOCAB]  # set by the caller (the memo's key stride)
    ctr[:] = 0
    ctr[C_VOCAB] = vocab
    ctr[C_GC_AT] = gc_at
    ctr[C_GC_MIN] = gc_at
    ws = _grow_all(ws, ctr, np.array([1, 0, 0, 1, 1, 0, 2 * cap, 0], np.int64))
    _clear_word_cache(ws[W_WCACHE])
    ws[W_BLK_START][0] = 0
    ws[W_BLK_LEN][0] = 1
    ws[W_M_LM][0] = lm_start
    ws[W_M_OFF][0] = 0.0
    ws[W_M_MREC][0] = -1
    ctr[C_BLK] = 1
    ctr[C_MEM] = 1
    if start >= 0:
        ws[W_CUR_STATE][0] = start
        ws[W_CUR_COST][0] = 0.0
        ws[W_CUR_BLK][0] = 0
        ws[W_CUR_REC][0] = -1
        slot[start] = 0
        ctr[C_TOK] = 1
    frame = ctr[C_NEXT_FRAME] - 1  # -1, not a literal: one compiled version of the closure
    member_beam = min(beam, history_beam)  # word blocks: members within it of the best
    ws = _close_frame(
        states, arcs, _INF32, _INF32, member_beam, history_beam, frame, cap, slot, slot_lm, eps_limit, lm,
        lattice, ws, ctr, stats,
    )  # fmt: skip
    if lattice:
        lat = _lattice_frame(arcs, frame, lm, U, lattice_beam, 0, ws, lat, ctr, stats)
    return ws, lat


@numba.njit(nogil=True, cache=True)
def search_advance(
    states, arcs, ac, beam, max_active, min_active, beam_delta, bucket_width, cap, slot, slot_lm, eps_limit,
    lm, U, ws, ctr, stats, lattice, lattice_beam, prune_interval, lat, word_beam, history_beam, l2_bytes,
):  # fmt: skip
    """Advance a started search by the frames of ac (float32 [T, V] acoustic costs); with lattices
    each frame's nodes and arcs are kept (`_lattice_frame`). `history_beam` (inf = off): a block's
    members more than it above the block's best are dropped when the block is made (unions and
    word blocks; offsets do not change while a block is shared, so this is `wfst-otf`'s per-frame
    rule applied once). `l2_bytes`: the per-core L2 cache (`prefetch_pays`). Returns (workspace,
    lattice tuple)."""
    num_states = slot.shape[0]
    prefetch_words = prefetch_pays(ws[W_WCACHE], l2_bytes)
    member_beam = min(beam, history_beam)  # word blocks: members within it of the best
    for t in range(ac.shape[0]):
        frame = ctr[C_NEXT_FRAME]
        ctr[C_NEXT_FRAME] = frame + 1
        n = ctr[C_TOK]
        if n == 0:
            continue
        stats[S_FRAMES] += 1
        ctr[C_BA] = 0
        cur_cost = ws[W_CUR_COST]
        if bucket_width > 0:
            cut, adaptive = bucket_cutoff(cur_cost, n, beam, max_active, min_active, beam_delta, bucket_width)
        else:
            ws = _grow_all(ws, ctr, np.array([n, 0, 0, 0, 0, 0, 0, 0], np.int64))
            cut, adaptive = get_cutoff(
                ws[W_CUR_COST], n, ws[W_SCRATCH], beam, max_active, min_active, beam_delta
            )
        n_arcs = emitting_arcs(states, ws[W_CUR_COST], ws[W_CUR_STATE], n, cut)
        n_words = n_arcs  # an upper bound of the word arcs
        stats[S_ARCS] += n_arcs
        tokens = max(min(n_arcs, num_states), n)
        block_arcs = n_arcs if lattice else 0
        ws = _grow_all(
            ws,
            ctr,
            np.array([tokens, n_arcs, 0, 2 * n_words, 2 * n_words * cap, 0, cap, block_arcs], np.int64),
        )
        prefetch_frame(ac, t + 1)
        m, nit, best_new = _emit(
            states, arcs, ac[t], cut, adaptive, member_beam, word_beam, slot, slot_lm, frame, cap, lm, n,
            lattice, ws, ctr, stats, prefetch_words,
        )  # fmt: skip
        most = _max_items(m, ws)
        ws = _grow_all(
            ws, ctr, np.array([tokens, n_arcs, nit, m, m * cap, m * cap, max(most * cap, cap), 0], np.int64)
        )
        cut = best_new + adaptive
        k = _keep(cut, frame, cap, history_beam, m, slot, slot_lm, ws, ctr, stats)
        ctr[C_TOK] = k
        ws = _swap(ws)
        ws = _close_frame(
            states, arcs, cut, best_new + word_beam, member_beam, history_beam, frame, cap, slot, slot_lm,
            eps_limit, lm,
            lattice, ws, ctr, stats,
        )  # fmt: skip
        if lattice:
            lat = _lattice_frame(arcs, frame, lm, U, lattice_beam, prune_interval, ws, lat, ctr, stats)
        if ctr[C_REC] + ctr[C_MREC] + ctr[C_MEM] > ctr[C_GC_AT]:
            _collect(ws, ctr)
            ctr[C_GC_AT] = max(ctr[C_GC_MIN], 4 * (ctr[C_REC] + ctr[C_MREC] + ctr[C_MEM]))
    return ws, lat


@numba.njit(nogil=True, cache=True)
def search_best(states, lm, ws, ctr, use_final):
    """Best member of any group (Kaldi GetBestPath over the composed states): with final costs
    (B's final + D's final) if some member can end, else without, flagged. Returns (arcs, frames,
    total, reached, found, D state) of its path."""
    cur_state, cur_cost, cur_blk, cur_rec = ws[GROUPS]
    blk_start, blk_len, m_lm, m_off, m_mrec, mr_prev, mr_tail = ws[BLOCKS]
    r_prev, r_arc, r_frame = ws[RECORDS]
    n = ctr[C_TOK]
    best_i = -1
    best_q = -1
    total = _INF32
    reached = False
    for pass_final in (True, False):
        if pass_final and not use_final:
            continue
        for i in range(n):
            s = cur_state[i]
            st = blk_start[cur_blk[i]]
            for q in range(st, st + blk_len[cur_blk[i]]):
                c = cur_cost[i] + m_off[q]
                if pass_final:
                    fb = states[s].final
                    if fb == _INF32:
                        continue
                    c = c + fb + lm_final(lm, m_lm[q])
                    if not (c < _INF32):
                        continue
                if best_i < 0 or c < total or (c == total and s < cur_state[best_i]):
                    best_i = i
                    best_q = q
                    total = c
        if best_i >= 0:
            reached = pass_final
            break
    if best_i < 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), _INF32, False, False, -1
    length = 0
    r = cur_rec[best_i]
    mr = m_mrec[best_q]
    while True:
        while r >= 0:
            length += 1
            r = r_prev[r]
        if mr < 0:
            break
        r = mr_tail[mr]
        mr = mr_prev[mr]
    path_arcs = np.empty(length, np.int64)
    path_frames = np.empty(length, np.int64)
    p = length
    r = cur_rec[best_i]
    mr = m_mrec[best_q]
    while True:
        while r >= 0:
            p -= 1
            path_arcs[p] = r_arc[r]
            path_frames[p] = r_frame[r]
            r = r_prev[r]
        if mr < 0:
            break
        r = mr_tail[mr]
        mr = mr_prev[mr]
    return path_arcs, path_frames, total, reached, True, m_lm[best_q]
