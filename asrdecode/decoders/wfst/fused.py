"""The `wfst` search as a few fused Triton kernels per frame, with the frame loop on the device.

``decoder.kernel: fused`` (torch backend). Paper 001 (sec. 3) runs each frame as ExpandArcs →
Prune → D2H copy, built on the Kaldi CUDA decoder (its ref. [4]); paper 000 (Alg. 3, Alg. 4) gives
the prefix-sum arc expansion and the recombination by atomicMin. This module is that design with
the data layout of the CUDA decoder: every utterance ("lane") owns fixed-capacity regions (tokens,
a hash table, arc slots), so a frame is a fixed sequence of launches with grids fixed by the
capacities, never by the data:

1. ``prep`` (one program per utterance): Kaldi's GetCutoff without a sort. The beam cut
   ``best + beam`` decides alone unless more than max_active tokens lie under it (or fewer than
   min_active do); only then is the (k+1)-th best cost selected exactly, by a radix select over
   the order-preserving integer image of the costs: four passes of a 256-bin cost histogram
   (`tl.histogram`), each keeping the bin that holds the k-th cost. The adaptive beam follows.
   Then the surviving tokens' emitting-arc counts and their inclusive prefix sum (paper 000
   Alg. 3), and the utterance's hash table is cleared.
2. ``emit`` (programs over the arc slots of every utterance; the grid covers the arc capacity, and a
   program past its utterance's arcs returns at once, as in ``insert`` and ``commit``): slot j finds
   its token by binary search in the prefix sum, its arc, ``cost + weight + acoustic cost`` (the
   same float32 additions as the torch path) and the frame's best new cost by an atomic min.
3. ``insert``: the arcs under ``best + adaptive beam`` go into the utterance's hash table
   (open addressing keyed by the destination state, claimed by compare-and-swap; a claim takes the
   next token slot from an atomic counter) and are recombined by an atomic min on a packed 64-bit
   key ``(order-preserving cost bits << 32) | arc id`` (paper 000 Alg. 4; the CUDA decoder's
   packed cost/index atomicMin). The arc id breaks ties, so the result does not depend on the
   order in which the GPU runs the candidates.
4. ``commit``: the one candidate whose packed key is its slot's minimum writes the new token
   (state, cost, predecessor record, arc).
5. ``epsilon`` (one program per utterance, the CUDA decoder's one-block closure): Bellman-Ford
   passes over the epsilon arcs of a frontier (Kaldi ProcessNonemitting), each pass the same
   claim / atomic-min / unique-winner steps, a winner that strictly improves its token (an existing
   token wins ties, as in the torch path) joining the next frontier; at most max_epsilon_passes.
6. ``finalize`` (one program per utterance): the frame's tokens become back-pointer records at
   consecutive ids (utterance by utterance), written into the window's record arena; tokens
   reached within the frame point at their predecessor's new id. Finished utterances (frame past
   their length) keep their tokens unchanged.

**Lattices** (``lattice_beam``; Kaldi's exact lattice generation, lattice.py) take no launch of
their own: ``insert`` writes every emitting arc under the frame's final cut and ``epsilon`` every
epsilon arc it takes (cost within the cut, an improved token's arcs again), exactly the arcs the
torch path's `core.LatticeArcs.add_arcs` receives, into a per-window lattice-arc arena (utterance,
frame, source state, arc, acoustic cost) at positions from an atomic counter (one atomic add per
program and step); ``finalize`` writes each record's state and utterance beside it, so the frame's
tokens are the lattice nodes. At the window's end the arena travels to the host with the records
and goes into the torch path's `lattice.LatticeStore` per utterance in a canonical order (so
nothing depends on the order the GPU wrote it in), window-pruned every ``prune_interval`` frames
(at window ends) and finished by `lattice.build_lattice`, as there.

**An on-the-fly LM** (`wfst-otf`, its tables on the device: ``lm_on_host: false``; paper 000
Alg. 2, Alg. 4) adds no launch either. A token's state is the pair (graph state, LM state) folded
into one int64 ``graph_state * lm_states + lm_state`` (as `core.TokenPassing` keys it), which is
also the hash table's 64-bit key, so recombination is per pair; graph tables are read at
``state // lm_states``. ``emit`` and ``epsilon`` look up the difference LM of each word arc inside
the kernel (`_lm_step`: both LMs' backoff walks over the same device tables as
`DifferenceLM.step`, with its float32 additions, so costs equal the per-frame search's bit for
bit) before the beam's best is taken, and write the destination pair beside the candidate. Ties
of the atomic min go to the candidate first in the per-frame search's order (source graph state,
source LM state, arc: `_tie`, which needs graph arcs x LM states below 2^31). ``_final`` adds the
``</s>`` difference (`DifferenceLM.final_cost`).

Capacities (tokens per utterance, hash slots, arc slots, epsilon candidates per pass; records and
lattice arcs per frame step, the arenas holding a window's steps) are preallocated. A kernel that
would pass one writes nothing out of bounds, records what it needed in a device array (`NEED_*`) and
raises its overflow flag, after which the window's kernels do no work; nothing is read on the host
inside a window of ``sync_frames`` frames (default 64), so a window is one capturable CUDA graph
(``decoder.cuda_graphs``). At the window's end one blocking read returns the needs, the record count
and (last window) each utterance's best final token; the window's records (and lattice arcs) travel
to host memory by non-blocking copies queued before it. If a need exceeded its capacity, the window
is run again from its saved input tokens with larger capacities (so results never depend on
capacities); the capacities a batch ended with are where the next batch starts.

The per-frame torch path (`core.TokenPassing`) stays the reference and is what runs where this
path does not apply: word boosts, word_beam and streams; of `wfst-otf`, host LM lookups
(``lm_on_host``) and graph arcs x LM states past 2^31 (its lattices are the compiled backend's).
Every kernel runs on the CPU under ``TRITON_INTERPRET=1`` (tests/decoders/test_wfst_fused.py); loops
over a bound loaded from memory are written as ``while`` loops, which the interpreter can run.
"""

from __future__ import annotations

import inspect
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import _disable_current_modes

from asrdecode.decoders.wfst.core import Backpointers, CapturedStep, LatticeArcs, SearchGraph, SearchOptions

if TYPE_CHECKING:
    from asrdecode.lm.difference import DifferenceLM

INF = float("inf")
EMPTY64 = torch.iinfo(torch.int64).max

# what a window needed of each capacity (device int32 array, atomic max; NEED_LAT is the lattice
# arena's atomic counter itself), then statistics
NEED_TOK, NEED_ARC, NEED_HASH, NEED_EPS, NEED_REC, NEED_LAT = range(6)
STAT_ARCS, STAT_PASSES, STAT_EPS_LIMIT = range(6, 9)
OVERFLOW = 9  # set by the first overflow: the window's later work is skipped (it is rerun)
STEPS_DONE = 10  # the window's steps whose finalize ran (the record and lattice needs cover them)
NUM_NEEDS = 11
CAPS = ("tok", "arc", "hash", "eps", "rec", "lat")
CAP_NEEDS = (NEED_TOK, NEED_ARC, NEED_HASH, NEED_EPS, NEED_REC, NEED_LAT)  # the need of each of CAPS
PER_STEP = ("rec", "lat")  # capacities per frame step of a window (the arenas hold a whole window)
LAT_ROWS = 5  # lattice-arc arena (int32): utterance, frame, source state, arc, acoustic cost bits
REC_ROWS = 4  # record arena (int64): predecessor, arc, frame, cost bits; + state, utterance (nodes)

# the same indices as constexpr globals, which jitted code may read
_TOK, _ARC, _HASH, _EPS, _REC, _LAT = (tl.constexpr(i) for i in range(6))
_S_ARCS, _S_PASSES, _S_EPS_LIMIT, _OVER, _DONE = (tl.constexpr(i) for i in range(6, 11))

LAUNCHES = [0]  # Triton launches so far (`asrdecode bench wfst-ops` counts them with the torch ops)


# ---------------------------------------------------------------------------------- device helpers
def _key32(c):
    """float32 -> int32 with the same order."""
    b = c.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF)


def _unkey32(k):
    return tl.where(k >= 0, k, k ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


def _pack(c, arc):
    """(order-preserving cost bits << 32) | arc: an int64 whose minimum is the cheapest candidate,
    ties to the lowest arc id."""
    return (_key32(c).to(tl.int64) << 32) | arc.to(tl.int64)


def _first_above(ends_ptr, n, j, valid, STEPS: tl.constexpr):
    """Per lane, the first i < n with ``ends[i] > j`` (binary search over an inclusive prefix sum:
    the token, or frontier lane, whose arcs hold arc slot j)."""
    lo = j * 0
    hi = j * 0 + n
    for _ in tl.static_range(STEPS):
        active = lo < hi
        mid = (lo + hi) // 2
        e = tl.load(ends_ptr + mid, mask=valid & active, other=0)
        right = e <= j
        lo = tl.where(active & right, mid + 1, lo)
        hi = tl.where(active & ~right, mid, hi)
    return lo


def _arc_block(total_ptr, AU, BLOCK: tl.constexpr):
    """An arc kernel's program: its utterance b, its arc slots j, which of them hold an arc, and
    whether none does (the grid covers the arc capacity: such a program returns at once)."""
    b = tl.program_id(0).to(tl.int64)
    j0 = tl.program_id(1).to(tl.int64) * BLOCK
    total = tl.minimum(tl.load(total_ptr + b), AU)
    j = j0 + tl.arange(0, BLOCK)
    return b, j, j < total, j0 >= total


def _hash_insert(hkey_ptr, table, trash, key, want, H, need_ptr, BLOCK: tl.constexpr):
    """Open addressing with linear probing in the table at offset `table` (H slots, a power of
    two) of `hkey_ptr` (int64 keys: token states, with an LM (graph state, LM state) folded into
    one int); `trash` is a slot no lookup reads. Returns (slot, claimed, found): lanes with `want`
    find or claim the slot of their key; a lane left without a slot after H probes sets _HASH."""
    key64 = key.to(tl.int64)
    slot = (key * 2654435761) & (H - 1)
    active = want
    claimed = want & False
    found = want & False
    probes = 0
    while (tl.max(active.to(tl.int32), 0) > 0) & (probes < H):
        off = tl.where(active, table + slot, trash)
        prev = tl.atomic_cas(hkey_ptr + off, tl.where(active, -1, -2).to(tl.int64), key64)
        new = active & (prev == -1)
        hit = active & (prev == key64)
        claimed = claimed | new
        found = found | new | hit
        active = active & ~(new | hit)
        slot = tl.where(active, (slot + 1) & (H - 1), slot)
        probes += 1
    zero = tl.zeros([BLOCK], tl.int32)
    tl.atomic_max(need_ptr + _HASH + zero, zero + 2 * H, mask=active)
    tl.atomic_max(need_ptr + _OVER + zero, zero + 1, mask=active)
    return slot, claimed, found


def _lattice_arcs(lat_ptr, need_ptr, L, keep, b, t, src_state, arc, ac, BLOCK: tl.constexpr):
    """Append the lanes `keep` (arcs of utterance b into frame t) to the window's lattice-arc arena
    (`LAT_ROWS` int32 rows of L + 1 columns): positions from one atomic add on the counter
    NEED_LAT per call, in lane order; past L nothing is written and the overflow flag is set."""
    k = keep.to(tl.int32)
    n = tl.sum(k, 0)
    base = tl.atomic_add(need_ptr + _LAT, n)
    pos = base + tl.cumsum(k, 0) - 1
    w = keep & (pos < L)
    zero = tl.zeros([BLOCK], tl.int32)
    tl.store(lat_ptr + pos, zero + b.to(tl.int32), mask=w)
    tl.store(lat_ptr + (L + 1) + pos, zero + t.to(tl.int32), mask=w)
    tl.store(lat_ptr + 2 * (L + 1) + pos, src_state.to(tl.int32), mask=w)
    tl.store(lat_ptr + 3 * (L + 1) + pos, arc.to(tl.int32), mask=w)
    tl.store(lat_ptr + 4 * (L + 1) + pos, ac.to(tl.int32, bitcast=True), mask=w)
    tl.atomic_max(need_ptr + _OVER, (base + n > L).to(tl.int32))


def _ngram_score(
    off_ptr, tok_ptr, nxt_ptr, wt_ptr, rw_ptr, rn_ptr, bs_ptr, bw_ptr, s, w, m, NM1, STEPS, LAST
):
    """ln p(w | s) and the next state of one LM per lane (lanes `m`): `BatchedNgramLM.score`'s
    walk over the same tables with the same float32 additions: NM1 (order - 1) backoff steps,
    each a binary search of STEPS halvings in the state's sorted arcs (LAST: the last arc, -1 for
    none), the first hit taking the backoff weights above it; no hit, the root row."""
    logp = tl.zeros(w.shape, tl.float32)
    above = tl.zeros(w.shape, tl.float32)
    nxt = w * 0
    found = m & False
    cur = s
    srch = m & (LAST >= 0)
    k = 0
    while k < NM1:
        lo = tl.load(off_ptr + cur, mask=m, other=0)
        end = tl.load(off_ptr + cur + 1, mask=m, other=0)
        hi = end
        i = 0
        while i < STEPS:
            mid = (lo + hi) // 2
            t = tl.load(tok_ptr + tl.minimum(mid, LAST), mask=srch, other=0).to(tl.int64)
            right = (mid < hi) & (t < w)
            lo = tl.where(right, mid + 1, lo)
            hi = tl.where(right, hi, mid)
            i += 1
        pos = tl.minimum(lo, LAST)
        t = tl.load(tok_ptr + pos, mask=srch, other=0).to(tl.int64)
        hit = srch & ~found & (lo < end) & (t == w)
        logp = tl.where(hit, above + tl.load(wt_ptr + pos, mask=hit, other=0.0), logp)
        nxt = tl.where(hit, tl.load(nxt_ptr + pos, mask=hit, other=0).to(tl.int64), nxt)
        found = found | hit
        above = above + tl.load(bw_ptr + cur, mask=m, other=0.0)
        cur = tl.load(bs_ptr + cur, mask=m, other=0)
        k += 1
    logp = tl.where(found, logp, above + tl.load(rw_ptr + w, mask=m, other=0.0))
    nxt = tl.where(found, nxt, tl.load(rn_ptr + w, mask=m, other=0))
    return logp, nxt


def _lm_step(
    lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr, lg_bw_ptr,
    sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr, sm_bs_ptr, sm_bw_ptr,
    large_of_ptr, small_of_ptr, u_large_ptr, u_small_ptr, u_order_ptr,
    u, w, m, lm_scale, lg_n, lg_steps, lg_last, sm_n, sm_steps, sm_last,
):  # fmt: skip
    """`DifferenceLM.step` per lane (lanes `m`: word arcs): (``lm_scale * (small - large)`` ln p,
    float32, and the next union state) of word w from union state u, both LMs walked in place."""
    lp_l, n_l = _ngram_score(
        lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr, lg_bw_ptr,
        tl.load(large_of_ptr + u, mask=m, other=0), w, m, lg_n, lg_steps, lg_last,
    )  # fmt: skip
    lp_s, n_s = _ngram_score(
        sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr, sm_bs_ptr, sm_bw_ptr,
        tl.load(small_of_ptr + u, mask=m, other=0), w, m, sm_n, sm_steps, sm_last,
    )  # fmt: skip
    u_l = tl.load(u_large_ptr + n_l, mask=m, other=0)
    u_s = tl.load(u_small_ptr + n_s, mask=m, other=0)
    longer = tl.load(u_order_ptr + u_l, mask=m, other=0) >= tl.load(u_order_ptr + u_s, mask=m, other=0)
    return (lp_s - lp_l) * lm_scale, tl.where(longer, u_l, u_s)


def _lm_arcs(
    lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr, lg_bw_ptr,
    sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr, sm_bs_ptr, sm_bw_ptr,
    large_of_ptr, small_of_ptr, u_large_ptr, u_small_ptr, u_order_ptr,
    olabel_ptr, nextstate_ptr, arc, u, c, valid, lm_scale, LMS,
    lg_n, lg_steps, lg_last, sm_n, sm_steps, sm_last,
):  # fmt: skip
    """`core.TokenPassing._lm_arcs` per lane: tokens in LM state u crossing graph arcs `arc`
    (lanes `valid`) -> (cost + the LM difference on word arcs, destination token states
    ``nextstate * LMS + LM state``)."""
    word = tl.load(olabel_ptr + arc, mask=valid, other=0)
    is_word = valid & (word > 0)
    added, nxt = _lm_step(
        lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr, lg_bw_ptr,
        sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr, sm_bs_ptr, sm_bw_ptr,
        large_of_ptr, small_of_ptr, u_large_ptr, u_small_ptr, u_order_ptr,
        u, tl.where(is_word, word, 0), is_word, lm_scale, lg_n, lg_steps, lg_last, sm_n, sm_steps, sm_last,
    )  # fmt: skip
    c = tl.where(is_word, c + added, c)
    dst = tl.load(nextstate_ptr + arc, mask=valid, other=0) * LMS + tl.where(is_word, nxt, u)
    return c, dst


def _slot_arc(tok_state_ptr, end, count_ptr, first_ptr, j, valid, LM: tl.constexpr, LMS):
    """Arc slot j's arc (paper 000 Alg. 3): its token's state (at ``tok_state_ptr``; with an LM
    ``graph state * LMS + LM state``, `core.TokenPassing`'s packing), whose arcs of the kind
    (``count_ptr``: per graph state, from ``first_ptr``: emitting or epsilon) end at slot ``end``
    of the inclusive prefix sum. Returns (graph state, LM state, first arc, arc count, arc)."""
    s = tl.load(tok_state_ptr, mask=valid, other=0)
    u = s * 0
    if LM:
        u = s % LMS
        s = s // LMS
    n = tl.load(count_ptr + s, mask=valid, other=0)
    first = tl.load(first_ptr + s, mask=valid, other=0)
    return s, u, first, n, tl.where(valid, first + j - (end - n), 0)


def _tie(first, n, arc, u, LMS):
    """The tie rank of a candidate with an LM: its place in (source graph state, source LM state,
    arc) order, the order of the per-frame search's candidates, whose recombination keeps the
    first of equal costs (`first`, `n`: the source graph state's first arc and arc count of the
    kind; ranks are unique below num_arcs * LMS). Without an LM the arc id is that order."""
    return first * LMS + u * n + (arc - first)


# ---------------------------------------------------------------------------------- frame kernels
def _history_key(state_ptr, cost_ptr, slot_ptr, cur, i, m, LMS, BLOCK: tl.constexpr):
    """A block of tokens' hash-table slots (bit 40 set once selected) and their history keys
    ``(cost bits << 32) | LM state`` (`_history_pruning`)."""
    offs = tl.arange(0, BLOCK)
    slot = tl.load(slot_ptr + i + offs, mask=m, other=1 << 40)
    s = tl.load(state_ptr + cur + i + offs, mask=m, other=0)
    c = tl.load(cost_ptr + cur + i + offs, mask=m, other=float("inf"))
    return slot, _pack(c, s % LMS)


def _history_pruning(
    state_ptr, cost_ptr, slot_ptr, hkey_ptr, hval_ptr, need_ptr, cur, b, cnt, B, H, LMS,
    hist_beam, hist_max, BLOCK: tl.constexpr,
):  # fmt: skip
    """history_beam / history_max on an utterance's tokens before the cutoff (`wfst-otf`,
    `core.TokenPassing._prune_histories` and `_cap_histories`): the tokens' costs set to +inf in
    place. The utterance's hash table (free until the frame's inserts; cleared here and after)
    is keyed by graph state: an atomic min of ``(cost bits << 32) | LM state`` gives each graph
    state's cheapest token (history_beam drops tokens more than it above); then history_max rounds,
    each selecting the cheapest unselected token of every graph state the same way (equal costs: the
    lower LM state first, as the per-frame search's key order), and the unselected rest dropped.
    `slot_ptr` (the prefix-sum array, written after this) holds each token's table slot, and
    bit 40 once it is selected."""
    offs = tl.arange(0, BLOCK)
    empty = tl.full([BLOCK], 9223372036854775807, tl.int64)
    dropped = tl.full([BLOCK], float("inf"), tl.float32)
    clear = tl.where(cnt > 0, H, 0)
    i = cnt * 0
    while i < clear:  # the table keyed by graph state
        m = i + offs < clear
        tl.store(hkey_ptr + b * H + i + offs, tl.full([BLOCK], -1, tl.int64), mask=m)
        tl.store(hval_ptr + b * H + i + offs, empty, mask=m)
        i += BLOCK
    tl.debug_barrier()
    i = cnt * 0
    while i < cnt:
        m = i + offs < cnt
        s = tl.load(state_ptr + cur + i + offs, mask=m, other=0)
        c = tl.load(cost_ptr + cur + i + offs, mask=m, other=float("inf"))
        slot, _, found = _hash_insert(hkey_ptr, b * H, B * H, s // LMS, m, H, need_ptr, BLOCK)
        tl.store(slot_ptr + i + offs, slot.to(tl.int64), mask=m)
        tl.atomic_min(hval_ptr + b * H + slot, _pack(c, s % LMS), mask=found)
        i += BLOCK
    tl.debug_barrier()
    beamed = tl.where(hist_beam < float("inf"), cnt, 0)  # history_beam (+inf when off)
    i = cnt * 0
    while i < beamed:
        m = i + offs < beamed
        slot = tl.load(slot_ptr + i + offs, mask=m, other=0)
        c = tl.load(cost_ptr + cur + i + offs, mask=m, other=float("inf"))
        best = _unkey32((tl.load(hval_ptr + b * H + slot, mask=m, other=0) >> 32).to(tl.int32))
        tl.store(cost_ptr + cur + i + offs, dropped, mask=m & (c > best + hist_beam))
        i += BLOCK
    selected = 1 << 40
    low_bits = selected - 1
    r = cnt * 0
    while r < hist_max:  # history_max (0 when off): one token of every graph state per round
        tl.debug_barrier()
        i = cnt * 0
        while i < cnt:
            m = i + offs < cnt
            slot = tl.load(slot_ptr + i + offs, mask=m, other=0) & low_bits
            tl.store(hval_ptr + b * H + slot, empty, mask=m)
            i += BLOCK
        for pick in tl.static_range(2):  # each graph state's least unselected key, then its token
            tl.debug_barrier()
            i = cnt * 0
            while i < cnt:
                m = i + offs < cnt
                slot, key = _history_key(state_ptr, cost_ptr, slot_ptr, cur, i, m, LMS, BLOCK)
                free = m & (slot < selected)
                if pick == 0:
                    tl.atomic_min(hval_ptr + b * H + (slot & low_bits), key, mask=free)
                else:
                    least = tl.load(hval_ptr + b * H + (slot & low_bits), mask=m, other=0)
                    tl.store(slot_ptr + i + offs, slot | selected, mask=free & (least == key))
                i += BLOCK
        r += 1
    tl.debug_barrier()
    capped = tl.where(hist_max > 0, cnt, 0)  # the tokens no round selected are dropped
    i = cnt * 0
    while i < capped:
        m = i + offs < capped
        slot = tl.load(slot_ptr + i + offs, mask=m, other=selected)
        tl.store(cost_ptr + cur + i + offs, dropped, mask=m & (slot < selected))
        i += BLOCK
    tl.debug_barrier()


def _prep_kernel(
    state_ptr, cost_ptr, count_ptr, len_ptr, t0_ptr, n_emit_ptr, ends_ptr, total_ptr,
    best_ptr, adapt_ptr, hkey_ptr, hval_ptr, need_ptr,
    K, P, B, NU, H, AU, beam, beam_delta, max_active, min_active, LMS, hist_beam, hist_max,
    LM: tl.constexpr, HIST: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """History pruning (`HIST`), cutoff (GetCutoff by histogram select), arc counts' prefix sum,
    hash table cleared."""
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    t = tl.load(t0_ptr) + K
    active = (t < tl.load(len_ptr + b)) & (tl.load(need_ptr + _OVER) == 0)  # no work after an overflow
    cur = (P * B + b) * NU
    cnt = tl.where(active, tl.load(count_ptr + P * B + b), 0)
    if HIST:
        _history_pruning(
            state_ptr, cost_ptr, ends_ptr + b * NU, hkey_ptr, hval_ptr, need_ptr, cur, b, cnt, B, H, LMS,
            hist_beam, hist_max, BLOCK,
        )  # fmt: skip
    best = tl.min(tl.full([BLOCK], float("inf"), tl.float32), 0)
    i = cnt * 0
    while i < cnt:
        c = tl.load(cost_ptr + cur + i + offs, mask=i + offs < cnt, other=float("inf"))
        best = tl.minimum(best, tl.min(c, 0))
        i += BLOCK
    beam_cut = best + beam
    below = cnt * 0
    within = cnt * 0
    i = cnt * 0
    while i < cnt:
        c = tl.load(cost_ptr + cur + i + offs, mask=i + offs < cnt, other=float("inf"))
        below += tl.sum((c < beam_cut).to(tl.int32), 0)
        within += tl.sum((c <= beam_cut).to(tl.int32), 0)
        i += BLOCK
    # Kaldi GetCutoff: max_active binds iff its (k+1)-th best is under the beam cut; min_active
    # iff fewer than min_active+1 tokens lie within it (all of them: +inf)
    use_max = (cnt > max_active) & (below >= max_active + 1)
    few = (min_active > 0) & (cnt <= min_active) & (cnt > 0)
    use_min = (~use_max) & (min_active > 0) & (cnt > min_active) & (within < min_active + 1)
    kk = tl.where(use_max, max_active + 1, min_active + 1)
    nsel = tl.where(use_max | use_min, cnt, 0)
    prefix = tl.sum(tl.zeros([BLOCK], tl.int64), 0)
    bins = tl.arange(0, 256)
    for d in tl.static_range(4):  # radix select of the kk-th cost, a byte per pass
        shift = 24 - 8 * d
        hist = tl.zeros([256], tl.int32)
        i = nsel * 0
        while i < nsel:
            m = i + offs < nsel
            c = tl.load(cost_ptr + cur + i + offs, mask=m, other=0.0)
            u = _key32(c).to(tl.int64) + 2147483648
            m = m & ((u >> (shift + 8)) == (prefix >> (shift + 8)))
            hist += tl.histogram(((u >> shift) & 255).to(tl.int32), 256, mask=m)
            i += BLOCK
        cum = tl.cumsum(hist, 0)
        sel = tl.min(tl.where(cum >= kk, bins, 255), 0)
        kk = kk - tl.sum(tl.where(bins < sel, hist, 0), 0)
        prefix = prefix | (sel.to(tl.int64) << shift)
    kth = _unkey32((prefix - 2147483648).to(tl.int32))
    cut = tl.where(use_max | use_min, kth, tl.where(few, float("inf"), beam_cut))
    adaptive = tl.where(use_max | use_min, kth - best + beam_delta, tl.where(few, float("inf"), beam))
    adaptive = tl.where(cnt > 0, adaptive, beam)
    carry = tl.sum(tl.zeros([BLOCK], tl.int64), 0)
    i = cnt * 0
    while i < cnt:
        m = i + offs < cnt
        c = tl.load(cost_ptr + cur + i + offs, mask=m, other=float("inf"))
        s = tl.load(state_ptr + cur + i + offs, mask=m, other=0)
        if LM:  # token state = graph state * LMS + LM state
            s = s // LMS
        n = tl.where(m & (c < cut), tl.load(n_emit_ptr + s, mask=m, other=0), 0)
        tl.store(ends_ptr + b * NU + i + offs, tl.cumsum(n, 0) + carry, mask=m)
        carry += tl.sum(n, 0)
        i += BLOCK
    tl.store(total_ptr + b, carry)
    tl.atomic_max(need_ptr + _ARC, carry.to(tl.int32))
    tl.atomic_max(need_ptr + _OVER, (carry > AU).to(tl.int32))
    tl.atomic_add(need_ptr + _S_ARCS, carry.to(tl.int32))
    clear = tl.where(active, H, 0)
    i = clear * 0
    while i < clear:
        m = i + offs < clear
        tl.store(hkey_ptr + b * H + i + offs, tl.full([BLOCK], -1, tl.int64), mask=m)
        tl.store(hval_ptr + b * H + i + offs, tl.full([BLOCK], 9223372036854775807, tl.int64), mask=m)
        i += BLOCK
    new = (1 - P) * B + b
    tl.store(count_ptr + new, tl.where(active, 0, tl.load(count_ptr + new)))
    tl.store(best_ptr + b, float("inf"))
    tl.store(adapt_ptr + b, adaptive)


def _emit_kernel(
    state_ptr, cost_ptr, count_ptr, ends_ptr, total_ptr, n_emit_ptr, first_ptr, weight_ptr,
    column_ptr, ac_ptr, csrc_ptr, carc_ptr, ccost_ptr, best_ptr, nextstate_ptr, cdst_ptr, ctie_ptr,
    olabel_ptr, lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr,
    lg_bw_ptr, sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr, sm_bs_ptr,
    sm_bw_ptr, large_of_ptr, small_of_ptr, u_large_ptr, u_small_ptr, u_order_ptr,
    lm_scale, LMS, lg_n, lg_steps, lg_last, sm_n, sm_steps, sm_last,
    K, P, B, NU, AU, V, KWIN,
    STEPS: tl.constexpr, LM: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Emitting arcs of the surviving tokens into the arc slots; best new cost by atomic min.
    With `LM` a word arc adds the LM difference (`_lm_step`) before the best is taken, and each
    slot writes its destination token state and its tie rank (`_tie`)."""
    b, j, valid, idle = _arc_block(total_ptr, AU, BLOCK)
    if idle:
        return
    cnt = tl.load(count_ptr + P * B + b).to(tl.int64)
    cur = (P * B + b) * NU
    lo = _first_above(ends_ptr + b * NU, cnt, j, valid, STEPS)
    src = tl.maximum(tl.minimum(lo, cnt - 1), 0)
    e = tl.load(ends_ptr + b * NU + src, mask=valid, other=0)
    s, u, first, n, arc = _slot_arc(state_ptr + cur + src, e, n_emit_ptr, first_ptr, j, valid, LM, LMS)
    col = tl.load(column_ptr + arc, mask=valid, other=0)
    ac = tl.load(ac_ptr + (b * KWIN + K) * V + col, mask=valid, other=0.0)
    c = tl.load(cost_ptr + cur + src, mask=valid, other=0.0)
    c = c + tl.load(weight_ptr + arc, mask=valid, other=0.0)
    c = tl.where(valid, c + ac, float("inf"))
    inside = j < AU
    if LM:
        c, dst = _lm_arcs(
            lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr, lg_bw_ptr,
            sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr, sm_bs_ptr, sm_bw_ptr,
            large_of_ptr, small_of_ptr, u_large_ptr, u_small_ptr, u_order_ptr,
            olabel_ptr, nextstate_ptr, arc, u, c, valid, lm_scale, LMS,
            lg_n, lg_steps, lg_last, sm_n, sm_steps, sm_last,
        )  # fmt: skip
        tl.store(cdst_ptr + b * AU + j, dst, mask=inside)
        tl.store(ctie_ptr + b * AU + j, _tie(first, n, arc, u, LMS), mask=inside)
    tl.store(csrc_ptr + b * AU + j, src, mask=inside)
    tl.store(carc_ptr + b * AU + j, arc, mask=inside)
    tl.store(ccost_ptr + b * AU + j, c, mask=inside)
    tl.atomic_min(best_ptr + b + tl.zeros([BLOCK], tl.int64), c, mask=valid)


def _insert_kernel(
    ccost_ptr, carc_ptr, cslot_ptr, total_ptr, best_ptr, adapt_ptr, nextstate_ptr,
    hkey_ptr, hval_ptr, hidx_ptr, count_ptr, need_ptr,
    csrc_ptr, state_ptr, column_ptr, ac_ptr, t0_ptr, lat_ptr, cdst_ptr, ctie_ptr,
    K, P, B, NU, H, AU, V, KWIN, L,
    LAT: tl.constexpr, LM: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Beam-pruned arcs into the hash table: claim or find the destination, atomic min. With
    `LAT` every arc under the beam is also a lattice arc (the torch path's emitting `add_arcs`)."""
    b, j, valid, idle = _arc_block(total_ptr, AU, BLOCK)
    if idle:
        return
    c = tl.load(ccost_ptr + b * AU + j, mask=valid, other=float("inf"))
    arc = tl.load(carc_ptr + b * AU + j, mask=valid, other=0)
    keep = valid & (c < tl.load(best_ptr + b) + tl.load(adapt_ptr + b))
    if LM:
        dst = tl.load(cdst_ptr + b * AU + j, mask=keep, other=0)
        tie = tl.load(ctie_ptr + b * AU + j, mask=keep, other=0)
    else:
        dst = tl.load(nextstate_ptr + arc, mask=keep, other=0)
        tie = arc
    slot, claimed, found = _hash_insert(hkey_ptr, b * H, B * H, dst, keep, H, need_ptr, BLOCK)
    ones = tl.full([BLOCK], 1, tl.int32)
    idx = tl.atomic_add(count_ptr + (1 - P) * B + b + tl.zeros([BLOCK], tl.int64), ones, mask=claimed)
    tl.store(hidx_ptr + b * H + slot, idx, mask=claimed)
    zero = tl.zeros([BLOCK], tl.int32)
    tl.atomic_max(need_ptr + _TOK + zero, idx + 1, mask=claimed)
    tl.atomic_max(need_ptr + _OVER + zero, (idx >= NU).to(tl.int32), mask=claimed)
    tl.atomic_min(hval_ptr + b * H + slot, _pack(c, tie), mask=found)
    tl.store(cslot_ptr + b * AU + j, tl.where(found, slot, -1), mask=j < AU)
    if LAT:
        src = tl.load(csrc_ptr + b * AU + j, mask=keep, other=0)
        s = tl.load(state_ptr + (P * B + b) * NU + src, mask=keep, other=0)
        col = tl.load(column_ptr + arc, mask=keep, other=0)
        ac = tl.load(ac_ptr + (b * KWIN + K) * V + col, mask=keep, other=0.0)
        _lattice_arcs(lat_ptr, need_ptr, L, keep, b, tl.load(t0_ptr) + K, s, arc, ac, BLOCK)


def _commit_kernel(
    ccost_ptr, carc_ptr, csrc_ptr, cslot_ptr, total_ptr, hval_ptr, hidx_ptr, nextstate_ptr,
    state_ptr, cost_ptr, rec_ptr, arcb_ptr, cdst_ptr, ctie_ptr,
    P, B, NU, H, AU,
    LM: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """The winner of each hash slot (its packed key is the slot's minimum) writes the new token."""
    b, j, valid, idle = _arc_block(total_ptr, AU, BLOCK)
    if idle:
        return
    slot = tl.load(cslot_ptr + b * AU + j, mask=valid, other=-1)
    ok = valid & (slot >= 0)
    c = tl.load(ccost_ptr + b * AU + j, mask=ok, other=float("inf"))
    arc = tl.load(carc_ptr + b * AU + j, mask=ok, other=0)
    if LM:
        tie = tl.load(ctie_ptr + b * AU + j, mask=ok, other=0)
    else:
        tie = arc
    win = ok & (tl.load(hval_ptr + b * H + slot, mask=ok, other=0) == _pack(c, tie))
    idx = tl.load(hidx_ptr + b * H + slot, mask=win, other=-1).to(tl.int64)
    win = win & (idx >= 0) & (idx < NU)
    src = tl.load(csrc_ptr + b * AU + j, mask=win, other=0)
    prev = tl.load(rec_ptr + (P * B + b) * NU + src, mask=win, other=-1)
    at = ((1 - P) * B + b) * NU + idx
    if LM:
        dst = tl.load(cdst_ptr + b * AU + j, mask=win, other=0)
    else:
        dst = tl.load(nextstate_ptr + arc, mask=win, other=0)
    tl.store(state_ptr + at, dst, mask=win)
    tl.store(cost_ptr + at, c, mask=win)
    tl.store(rec_ptr + at, prev, mask=win)
    tl.store(arcb_ptr + b * NU + idx, arc, mask=win)


def _epsilon_kernel(
    state_ptr, cost_ptr, rec_ptr, arcb_ptr, count_ptr, len_ptr, t0_ptr, best_ptr, adapt_ptr,
    split_ptr, n_eps_ptr, weight_ptr, nextstate_ptr, hkey_ptr, hval_ptr, hidx_ptr,
    front_ptr, ecum_ptr, eslot_ptr, esrc_ptr, earc_ptr, ecost_ptr, need_ptr, lat_ptr, etie_ptr,
    olabel_ptr, lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr,
    lg_bw_ptr, sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr, sm_bs_ptr,
    sm_bw_ptr, large_of_ptr, small_of_ptr, u_large_ptr, u_small_ptr, u_order_ptr,
    lm_scale, LMS, lg_n, lg_steps, lg_last, sm_n, sm_steps, sm_last,
    K, PN, B, NU, H, ECAP, max_passes, L,
    CH: tl.constexpr, STEPS: tl.constexpr, LAT: tl.constexpr, LM: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """The epsilon closure of one utterance's new tokens: Bellman-Ford passes over a frontier.
    With `LAT` every epsilon arc taken (under the cut) is also a lattice arc, as in the torch
    path's passes (an improved token's arcs again)."""
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    lanes = tl.arange(0, CH)
    t = tl.load(t0_ptr) + K
    active = (t < tl.load(len_ptr + b)) & (tl.load(need_ptr + _OVER) == 0)  # no work after an overflow
    cut = tl.load(best_ptr + b) + tl.load(adapt_ptr + b)
    nb = (PN * B + b) * NU
    cnt = tl.where(active, tl.minimum(tl.load(count_ptr + PN * B + b), NU), 0)
    fbase = b * 2 * NU
    i = cnt * 0  # the first frontier: every new token
    while i < cnt:
        tl.store(front_ptr + fbase + i + offs, i + offs, mask=i + offs < cnt)
        i += BLOCK
    nf = cnt
    side = cnt * 0
    passes = cnt * 0
    while (nf > 0) & (passes < max_passes):
        cur = fbase + side * NU
        nxt = fbase + (1 - side) * NU
        ne = cnt * 0
        i = nf * 0  # expand the frontier CH tokens at a time
        while i < nf:
            m = i + lanes < nf
            tid = tl.load(front_ptr + cur + i + lanes, mask=m, other=0)
            s = tl.load(state_ptr + nb + tid, mask=m, other=0)
            if LM:
                s = s // LMS
            c = tl.load(cost_ptr + nb + tid, mask=m, other=float("inf"))
            n = tl.where(m & (c <= cut), tl.load(n_eps_ptr + s, mask=m, other=0), 0)
            tl.store(ecum_ptr + b * CH + lanes, tl.cumsum(n, 0))
            tot = tl.sum(n, 0).to(tl.int32)
            tl.debug_barrier()
            a = tot * 0
            while a < tot:
                jj = a + offs
                v = jj < tot
                lane = tl.minimum(_first_above(ecum_ptr + b * CH, CH, jj, v, STEPS), CH - 1)
                src = tl.load(front_ptr + cur + i + lane, mask=v, other=0)
                el = tl.load(ecum_ptr + b * CH + lane, mask=v, other=0)
                sl, ul, fl, nl, arc = _slot_arc(
                    state_ptr + nb + src, el, n_eps_ptr, split_ptr, jj, v, LM, LMS
                )
                c2 = tl.load(cost_ptr + nb + src, mask=v, other=0.0)
                c2 = c2 + tl.load(weight_ptr + arc, mask=v, other=0.0)
                if LM:
                    c2, dst = _lm_arcs(
                        lg_off_ptr, lg_tok_ptr, lg_nxt_ptr, lg_wt_ptr, lg_rw_ptr, lg_rn_ptr, lg_bs_ptr,
                        lg_bw_ptr, sm_off_ptr, sm_tok_ptr, sm_nxt_ptr, sm_wt_ptr, sm_rw_ptr, sm_rn_ptr,
                        sm_bs_ptr, sm_bw_ptr, large_of_ptr, small_of_ptr, u_large_ptr, u_small_ptr,
                        u_order_ptr, olabel_ptr, nextstate_ptr, arc, ul, c2, v, lm_scale, LMS,
                        lg_n, lg_steps, lg_last, sm_n, sm_steps, sm_last,
                    )  # fmt: skip
                    tie = _tie(fl, nl, arc, ul, LMS)
                else:
                    tie = arc
                keep = v & (c2 <= cut)
                if LAT:  # acoustic cost 0
                    _lattice_arcs(lat_ptr, need_ptr, L, keep, b, t, sl, arc, tl.zeros_like(c2), BLOCK)
                if not LM:
                    dst = tl.load(nextstate_ptr + arc, mask=keep, other=0)
                slot, claimed, found = _hash_insert(hkey_ptr, b * H, B * H, dst, keep, H, need_ptr, BLOCK)
                ones = tl.full([BLOCK], 1, tl.int32)
                idx = tl.atomic_add(count_ptr + PN * B + b + tl.zeros([BLOCK], tl.int64), ones, mask=claimed)
                tl.store(hidx_ptr + b * H + slot, idx, mask=claimed)
                zero = tl.zeros([BLOCK], tl.int32)
                tl.atomic_max(need_ptr + _TOK + zero, idx + 1, mask=claimed)
                tl.atomic_max(need_ptr + _OVER + zero, (idx >= NU).to(tl.int32), mask=claimed)
                fresh = claimed & (idx < NU)
                tl.store(cost_ptr + nb + idx, tl.full([BLOCK], float("inf"), tl.float32), mask=fresh)
                tl.store(state_ptr + nb + idx, dst, mask=fresh)
                tl.atomic_min(hval_ptr + b * H + slot, _pack(c2, tie), mask=found)
                pos = ne + jj
                into = v & (pos < ECAP)
                tl.store(eslot_ptr + b * ECAP + pos, tl.where(found, slot, -1).to(tl.int32), mask=into)
                tl.store(esrc_ptr + b * ECAP + pos, src, mask=into)
                tl.store(earc_ptr + b * ECAP + pos, arc, mask=into)
                tl.store(ecost_ptr + b * ECAP + pos, c2, mask=into)
                if LM:
                    tl.store(etie_ptr + b * ECAP + pos, tie, mask=into)
                a += BLOCK
            ne += tot
            tl.debug_barrier()
            i += CH
        tl.atomic_max(need_ptr + _EPS, ne)
        tl.atomic_max(need_ptr + _OVER, (ne > ECAP).to(tl.int32))
        ncand = tl.minimum(ne, ECAP)
        no = cnt * 0
        i = ncand * 0  # the winners that improve their token
        while i < ncand:
            m = i + offs < ncand
            slot = tl.load(eslot_ptr + b * ECAP + i + offs, mask=m, other=-1).to(tl.int64)
            ok = m & (slot >= 0)
            c2 = tl.load(ecost_ptr + b * ECAP + i + offs, mask=ok, other=float("inf"))
            arc = tl.load(earc_ptr + b * ECAP + i + offs, mask=ok, other=0)
            if LM:
                tie = tl.load(etie_ptr + b * ECAP + i + offs, mask=ok, other=0)
            else:
                tie = arc
            win = ok & (tl.load(hval_ptr + b * H + slot, mask=ok, other=0) == _pack(c2, tie))
            idx = tl.load(hidx_ptr + b * H + slot, mask=win, other=-1).to(tl.int64)
            win = win & (idx >= 0) & (idx < NU)
            win = win & (c2 < tl.load(cost_ptr + nb + idx, mask=win, other=float("-inf")))
            src = tl.load(esrc_ptr + b * ECAP + i + offs, mask=win, other=0)
            tl.store(cost_ptr + nb + idx, c2, mask=win)
            tl.store(rec_ptr + nb + idx, -(src.to(tl.int64) + 2), mask=win)  # same-frame predecessor
            tl.store(arcb_ptr + b * NU + idx, arc, mask=win)
            w = win.to(tl.int32)
            tl.store(front_ptr + nxt + no + tl.cumsum(w, 0) - 1, idx, mask=win)
            no += tl.sum(w, 0)
            i += BLOCK
        tl.debug_barrier()
        nf = no
        side = 1 - side
        passes += 1
    tl.atomic_add(need_ptr + _S_PASSES, passes)
    tl.atomic_add(need_ptr + _S_EPS_LIMIT, (nf > 0).to(tl.int32))


def _finalize_kernel(
    state_ptr, cost_ptr, rec_ptr, arcb_ptr, count_ptr, len_ptr, t0_ptr, recc_ptr, arena_ptr,
    base_ptr, need_ptr,
    K, STEP, P, B, NU, R,
    BP2: tl.constexpr, LAT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """The frame's tokens become records (ids consecutive per utterance); finished utterances
    keep their tokens. With `LAT` a record is also the token's lattice node: two more rows,
    state and utterance (frame and cost are the record's)."""
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    t = tl.load(t0_ptr) + K
    bb = tl.arange(0, BP2)
    lens = tl.load(len_ptr + bb, mask=bb < B, other=0)
    raw = tl.load(count_ptr + (1 - P) * B + bb, mask=bb < B, other=0)
    cnts = tl.where((bb < B) & (t < lens), tl.minimum(raw, NU), 0)
    offset = tl.sum(tl.where(bb < b, cnts, 0), 0).to(tl.int64)
    base = tl.load(recc_ptr + STEP)
    tl.store(recc_ptr + STEP + 1, base + tl.sum(cnts, 0).to(tl.int64), mask=b == 0)
    arena0 = tl.load(base_ptr)
    active = (t < tl.load(len_ptr + b)) & (tl.load(need_ptr + _OVER) == 0)  # no work after an overflow
    nb = ((1 - P) * B + b) * NU
    ob = (P * B + b) * NU
    cnt = tl.where(active, tl.minimum(tl.load(count_ptr + (1 - P) * B + b), NU), 0)
    tl.atomic_max(need_ptr + _DONE, tl.where(active, STEP + 1, 0).to(tl.int32))
    first = base + offset
    i = cnt * 0
    while i < cnt:
        m = i + offs < cnt
        p = tl.load(rec_ptr + nb + i + offs, mask=m, other=-1)
        p = tl.where(p <= -2, first + (-p - 2), p)
        rid = first + i + offs
        pos = rid - arena0
        w = m & (pos < R)
        tl.store(arena_ptr + pos, p, mask=w)
        tl.store(arena_ptr + (R + 1) + pos, tl.load(arcb_ptr + b * NU + i + offs, mask=m, other=-1), mask=w)
        tl.store(arena_ptr + 2 * (R + 1) + pos, tl.zeros([BLOCK], tl.int64) + t, mask=w)
        c = tl.load(cost_ptr + nb + i + offs, mask=m, other=0.0)
        tl.store(arena_ptr + 3 * (R + 1) + pos, c.to(tl.int32, bitcast=True).to(tl.int64), mask=w)
        if LAT:
            s = tl.load(state_ptr + nb + i + offs, mask=m, other=0)
            tl.store(arena_ptr + 4 * (R + 1) + pos, s, mask=w)
            tl.store(arena_ptr + 5 * (R + 1) + pos, tl.zeros([BLOCK], tl.int64) + b, mask=w)
        tl.store(rec_ptr + nb + i + offs, rid, mask=m)
        zero = tl.zeros([BLOCK], tl.int32)
        tl.atomic_max(need_ptr + _REC + zero, (pos + 1).to(tl.int32), mask=m)
        tl.atomic_max(need_ptr + _OVER + zero, (pos >= R).to(tl.int32), mask=m)
        i += BLOCK
    keep = tl.where(active, 0, tl.load(count_ptr + P * B + b))
    i = keep * 0  # a finished utterance: its tokens stay as they are
    while i < keep:
        m = i + offs < keep
        tl.store(state_ptr + nb + i + offs, tl.load(state_ptr + ob + i + offs, mask=m), mask=m)
        tl.store(cost_ptr + nb + i + offs, tl.load(cost_ptr + ob + i + offs, mask=m), mask=m)
        tl.store(rec_ptr + nb + i + offs, tl.load(rec_ptr + ob + i + offs, mask=m), mask=m)
        i += BLOCK
    tl.store(count_ptr + (1 - P) * B + b, tl.where(active, cnt, keep))


# ---------------------------------------------------------------------------------- host side
_HELPERS = (
    "_key32", "_unkey32", "_pack", "_first_above", "_arc_block", "_hash_insert", "_lattice_arcs",
    "_ngram_score", "_lm_step", "_lm_arcs", "_slot_arc", "_tie", "_history_key", "_history_pruning",
)  # fmt: skip
KERNELS = (
    "_prep_kernel",
    "_emit_kernel",
    "_insert_kernel",
    "_commit_kernel",
    "_epsilon_kernel",
    "_finalize_kernel",
)
_JITTED: dict[str, Any] = {}


def jitted(name: str) -> Any:
    """The jitted kernel `name`. Everything is jitted at the first use, so TRITON_INTERPRET set
    before that use applies (as `kernels._kernel`); the helpers become jitted functions in this
    module's namespace, where the kernels find them. No scalar argument is specialised
    (`scalar_arguments`)."""
    if not _JITTED:
        module = globals()
        for helper in _HELPERS:
            module[helper] = triton.jit(module[helper])
        signatures = kernel_signatures()
        _JITTED.update(
            {k: triton.jit(module[k], do_not_specialize=scalar_arguments(signatures[k][0])) for k in KERNELS}
        )
    return _JITTED[name]


def scalar_arguments(types: dict[str, str]) -> list[str]:
    """The scalar (not pointer, not constexpr) arguments of a kernel whose argument types are
    `types`, which it is jitted not to specialise on: Triton compiles a kernel anew for each
    pattern of its integer arguments (equal to 1, divisible by 16), and the frame index, buffer
    parity, batch size, window length and capacities change from launch to launch, so that
    specialising would compile each kernel a dozen times or more over a decode (the kernels
    gather, their loads gain nothing from a divisibility hint). One compilation per kernel and set
    of constexpr values."""
    return [arg for arg, t in types.items() if not t.startswith("*") and t != "constexpr"]


def kernel_signatures() -> dict[str, tuple[dict[str, str], dict[str, int]]]:
    """Each kernel's argument types as Triton names them (pointers ``*i64``, scalars ``i32``,
    constexprs) and typical constexpr values: what compiling a kernel ahead of time for a CUDA
    target needs (tests/decoders/test_wfst_fused.py does, without a GPU)."""
    dtypes = {
        "cost_ptr": "*fp32", "best_ptr": "*fp32", "adapt_ptr": "*fp32", "weight_ptr": "*fp32",
        "ac_ptr": "*fp32", "ccost_ptr": "*fp32", "ecost_ptr": "*fp32", "count_ptr": "*i32",
        "hidx_ptr": "*i32", "need_ptr": "*i32", "eslot_ptr": "*i32", "lat_ptr": "*i32",
        "beam": "fp32", "beam_delta": "fp32", "lm_scale": "fp32", "hist_beam": "fp32",
    }  # fmt: skip
    for lm in ("lg", "sm"):  # the LM tables' types (`BatchedNgramLM`)
        dtypes.update({f"{lm}_{t}_ptr": "*i32" for t in ("tok", "nxt")})
        dtypes.update({f"{lm}_{t}_ptr": "*fp32" for t in ("wt", "rw", "bw")})
    constants = {
        "_prep_kernel": {"LM": 1, "HIST": 1, "BLOCK": 256},
        "_emit_kernel": {"STEPS": 8, "LM": 1, "BLOCK": 128},
        "_insert_kernel": {"LAT": 1, "LM": 1, "BLOCK": 128},
        "_commit_kernel": {"LM": 1, "BLOCK": 128},
        "_epsilon_kernel": {"CH": 128, "STEPS": 9, "LAT": 1, "LM": 1, "BLOCK": 128},
        "_finalize_kernel": {"BP2": 32, "LAT": 1, "BLOCK": 128},
    }
    out = {}
    for name in KERNELS:
        types = {}
        for arg in inspect.signature(globals()[name]).parameters:
            if arg in constants[name]:
                types[arg] = "constexpr"
            else:
                types[arg] = dtypes.get(arg, "*i64" if arg.endswith("_ptr") else "i32")
        out[name] = (types, constants[name])
    return out


def _launch(name: str, grid: tuple[int, ...], *args: Any, **meta: Any) -> None:
    """Launch a kernel (counted in `LAUNCHES`); outside any torch dispatch mode, so the
    interpreter's own tensor copies are not counted as the search's operations."""
    fn = jitted(name)
    LAUNCHES[0] += 1
    with _disable_current_modes():
        fn[grid](*args, **meta)


def _pow2(n: int, floor: int) -> int:
    return max(floor, 1 << max(int(n) - 1, 0).bit_length())


class FusedSearch:
    """The device-side search of one graph (module docstring): `decode` runs a whole batch in
    windows of `sync_frames` frames, one host read per window; `capacity` carries over from batch
    to batch. Records end in `backpointers` (host store only); with `lattice_beam` the lattice
    arcs and nodes end in `lattice` (the torch path's `LatticeArcs` stores, window-pruned every
    ``prune_interval`` frames at window ends; `LatticeArcs.take` per utterance)."""

    BLOCK = 128  # arc slots per program
    CH = 128  # frontier tokens per chunk of the epsilon closure
    PREP_BLOCK = 256  # tokens per step of the cutoff's loops
    INTERPRETED = 1024  # all three under the interpreter (fewer, wider programs; the same results)
    START_CAPACITY = {"tok": 64, "arc": 256, "hash": 128, "eps": 256, "rec": 256, "lat": 256}

    def __init__(
        self,
        graph: SearchGraph,
        options: SearchOptions,
        lattice_beam: float | None = None,
        lm: DifferenceLM | None = None,
    ) -> None:
        """`lm`: the on-the-fly LM (`wfst-otf`), its tables on the search's device; not with
        lattices."""
        if lm is not None and lattice_beam is not None:
            raise ValueError("FusedSearch: lattices are not kept with an LM")
        self.g = graph
        self.device = graph.device
        self.lm = lm
        self.lm_states = int(lm.num_states) if lm is not None else 1
        if graph.nextstate.numel() * self.lm_states >= 1 << 31:
            raise ValueError("FusedSearch: graph arcs x LM states too large for the tie ranks")
        self._lm_args = self._lm_arguments()
        self.options = options
        self.lattice_beam = lattice_beam
        self.lattice = LatticeArcs(graph, lattice_beam) if lattice_beam is not None else None
        self._nextstate = graph.nextstate.cpu().numpy() if lattice_beam is not None else None
        self._since_prune = 0
        self.sync_frames = max(1, int(options.sync_frames))
        self.capacity = dict(self.START_CAPACITY)
        self.runner = CapturedStep(options.cuda_graphs and self.device.type == "cuda")
        if self.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") == "1":
            self.BLOCK = self.CH = self.PREP_BLOCK = self.INTERPRETED
        self.backpointers = Backpointers("cpu", capacity=1)
        self.stats: dict[str, int] = {}
        self._bufs: dict[str, torch.Tensor] = {}
        self._shape: tuple | None = None
        self._graphs: dict[Any, tuple[torch.Tensor, torch.Tensor, Any]] = {}

    def _lm_arguments(self) -> tuple:
        """The LM arguments of the emit and epsilon kernels (`_lm_arcs`): the graph's olabels,
        both LMs' tables and the union-state maps (`DifferenceLM.lookup_tables`), the scale, the
        LM state count and the walks' bounds; without an LM, one-element stand-ins."""
        if self.lm is None:
            dev = self.device
            i64, i32, f32 = (
                torch.zeros(1, dtype=d, device=dev) for d in (torch.int64, torch.int32, torch.float32)
            )
            lm_tables = [i64, i32, i32, f32, f32, i64, i64, f32] * 2
            return (self.g.olabel, *lm_tables, *[i64] * 5, 0.0, 1, 0, 1, -1, 0, 1, -1)
        tables, bounds = self.lm.lookup_tables()
        return (self.g.olabel, *tables, float(self.lm.lm_scale), self.lm_states, *bounds)

    def tuning(self) -> dict[str, Any]:
        return {"graph": self.g, "fused": dict(self.capacity)}

    def inherit(self, tuning: dict[str, Any] | None) -> FusedSearch:
        if tuning is not None and tuning.get("graph") is self.g and "fused" in tuning:
            self.capacity = {**self.START_CAPACITY, **tuning["fused"]}
        return self

    # ------------------------------------------------------------------ buffers
    def _alloc(self, B: int, V: int) -> None:
        caps = self.capacity
        caps["hash"] = max(caps["hash"], _pow2(2 * caps["tok"], 16))
        shape = (B, V, self.sync_frames, *caps.values())
        if shape == self._shape:
            return
        self._shape = shape
        dev, NU, H, AU, E = self.device, caps["tok"], caps["hash"], caps["arc"], caps["eps"]
        R, lat_arcs = self._arena_sizes()
        i64, i32, f32 = torch.int64, torch.int32, torch.float32
        lat = self.lattice is not None
        rows = REC_ROWS + 2 * lat  # records; lattice nodes add state and utterance
        L = LAT_ROWS * (lat_arcs + 1) if lat else 1
        LM = self.lm is not None  # candidates' destination states and tie ranks (`_tie`)
        z = {
            "state": (2 * B * NU, i64), "cost": (2 * B * NU, f32), "rec": (2 * B * NU, i64),
            "arcb": (B * NU, i64), "count": (2 * B, i32), "ends": (B * NU, i64), "total": (B, i64),
            "best": (B, f32), "adapt": (B, f32), "hkey": (B * H + 1, i64), "hval": (B * H, i64),
            "hidx": (B * H, i32), "csrc": (B * AU, i64), "carc": (B * AU, i64), "ccost": (B * AU, f32),
            "cslot": (B * AU, i64), "front": (B * 2 * NU, i64), "ecum": (B * self.CH, i64),
            "eslot": (B * E, i32), "esrc": (B * E, i64), "earc": (B * E, i64), "ecost": (B * E, f32),
            "need": (NUM_NEEDS, i32), "arena": (rows * (R + 1), i64), "base": (1, i64),
            "t0": (1, i64), "recc": (self.sync_frames + 2, i64), "lat": (L, i32),
            "cdst": (B * AU if LM else 1, i64), "ctie": (B * AU if LM else 1, i64),
            "etie": (B * E if LM else 1, i64),
        }  # fmt: skip
        self._graphs.clear()  # captured with the old buffers
        self._bufs = {k: torch.zeros(n, dtype=d, device=dev) for k, (n, d) in z.items()}
        self._bufs["hkey"].fill_(-1)
        pinned = self.device.type == "cuda"
        self._host_arena = torch.empty(rows * (R + 1), dtype=i64, pin_memory=pinned)
        self._host_lat = torch.empty(L, dtype=i32, pin_memory=pinned)

    # ------------------------------------------------------------------ one window
    def _window(self, ac: torch.Tensor, lengths: torch.Tensor, frames: int, init: bool) -> int:
        """Launch a window's kernels (frames frames, after the start step if `init`); returns the
        parity of the buffer that holds its last tokens."""
        o, g, c, x = self.options, self.g, self.capacity, self._bufs
        B, NU, H, AU, E = len(lengths), c["tok"], c["hash"], c["arc"], c["eps"]
        R, L = self._arena_sizes()
        LAT = int(self.lattice is not None)
        V = ac.shape[2] if ac.dim() == 3 else 1
        KWIN = ac.shape[1] if ac.dim() == 3 else 1
        BLOCK, CH = self.BLOCK, self.CH
        grid_arcs = (B, triton.cdiv(AU, BLOCK))
        steps = 4 * math.ceil((math.log2(NU + 1) + 1) / 4)  # few distinct values: few compilations
        ch_steps = max(1, math.ceil(math.log2(CH + 1)) + 1)
        bp2 = _pow2(B, 2)
        eps = g.has_epsilons
        LM, LMS, lm = int(self.lm is not None), self.lm_states, self._lm_args
        hist_beam, hist_max = float(o.history_beam_or_inf), o.history_max if LM else 0
        hist = int(LM and (hist_beam < INF or hist_max > 0))
        step = 0

        def epsilon(K: int, PN: int) -> None:
            _launch(
                "_epsilon_kernel", (B,),
                x["state"], x["cost"], x["rec"], x["arcb"], x["count"], lengths, x["t0"], x["best"],
                x["adapt"], g.split, g.n_eps, g.weight, g.nextstate, x["hkey"], x["hval"], x["hidx"],
                x["front"], x["ecum"], x["eslot"], x["esrc"], x["earc"], x["ecost"], x["need"], x["lat"],
                x["etie"], *lm, K, PN, B, NU, H, E, o.max_epsilon_passes, L,
                CH=CH, STEPS=ch_steps, LAT=LAT, LM=LM, BLOCK=BLOCK,
            )  # fmt: skip

        def finalize(K: int, P: int) -> None:
            _launch(
                "_finalize_kernel", (B,),
                x["state"], x["cost"], x["rec"], x["arcb"], x["count"], lengths, x["t0"], x["recc"],
                x["arena"], x["base"], x["need"], K, step, P, B, NU, R, BP2=bp2, LAT=LAT, BLOCK=BLOCK,
            )  # fmt: skip

        P = 0
        if init:  # frame -1: the start tokens (new tokens at parity 0) and their epsilon closure
            self._start_tokens(B)
            if eps:
                epsilon(-1, 0)
            finalize(-1, 1)
            step += 1
        for k in range(frames):
            _launch(
                "_prep_kernel", (B,),
                x["state"], x["cost"], x["count"], lengths, x["t0"], g.n_emit, x["ends"], x["total"],
                x["best"], x["adapt"], x["hkey"], x["hval"], x["need"],
                k, P, B, NU, H, AU, float(o.beam), float(o.beam_delta), min(o.max_active, 1 << 30),
                min(o.min_active, 1 << 30), LMS, hist_beam, hist_max, LM=LM, HIST=hist,
                BLOCK=self.PREP_BLOCK,
            )  # fmt: skip
            _launch(
                "_emit_kernel", grid_arcs,
                x["state"], x["cost"], x["count"], x["ends"], x["total"], g.n_emit, g.first_emit,
                g.weight, g.column, ac, x["csrc"], x["carc"], x["ccost"], x["best"], g.nextstate,
                x["cdst"], x["ctie"], *lm, k, P, B, NU, AU, V, KWIN, STEPS=steps, LM=LM, BLOCK=BLOCK,
            )  # fmt: skip
            _launch(
                "_insert_kernel", grid_arcs,
                x["ccost"], x["carc"], x["cslot"], x["total"], x["best"], x["adapt"], g.nextstate,
                x["hkey"], x["hval"], x["hidx"], x["count"], x["need"], x["csrc"], x["state"], g.column,
                ac, x["t0"], x["lat"], x["cdst"], x["ctie"], k, P, B, NU, H, AU, V, KWIN, L,
                LAT=LAT, LM=LM, BLOCK=BLOCK,
            )  # fmt: skip
            _launch(
                "_commit_kernel", grid_arcs,
                x["ccost"], x["carc"], x["csrc"], x["cslot"], x["total"], x["hval"], x["hidx"],
                g.nextstate, x["state"], x["cost"], x["rec"], x["arcb"], x["cdst"], x["ctie"],
                P, B, NU, H, AU, LM=LM, BLOCK=BLOCK,
            )  # fmt: skip
            if eps:
                epsilon(k, 1 - P)
            finalize(k, P)
            step += 1
            P = 1 - P
        return P

    def _start_tokens(self, B: int) -> None:
        """One token per utterance at the start state, cost 0, no predecessor: the new tokens (parity
        0) of frame -1, whose `finalize` reads parity 1 as the old ones; best 0 and an infinite beam
        for their closure."""
        x, NU = self._bufs, self.capacity["tok"]
        at = torch.arange(B, device=self.device) * NU
        start = self.g.start * self.lm_states + (self.lm.START if self.lm is not None else 0)
        x["state"].index_fill_(0, at, start)
        x["cost"].index_fill_(0, at, 0.0)
        x["rec"].index_fill_(0, at, -1)
        x["arcb"].index_fill_(0, at, -1)
        x["count"][:B].fill_(1)
        x["best"].fill_(0.0)
        x["adapt"].fill_(INF)
        x["hkey"].fill_(-1)
        x["hval"].fill_(EMPTY64)

    def _final(self, P: int, B: int) -> torch.Tensor:
        """Per utterance (Kaldi GetBestPath, as `TokenPassing.best_final`): the best token's
        record, its cost (float32 bits) and whether it is in a final state; int64 [3, B]."""
        x, NU = self._bufs, self.capacity["tok"]
        lo = P * B * NU
        state = x["state"][lo : lo + B * NU].view(B, NU)
        cost = x["cost"][lo : lo + B * NU].view(B, NU)
        rec = x["rec"][lo : lo + B * NU].view(B, NU)
        live = torch.arange(NU, device=self.device) < x["count"][P * B : P * B + B, None]
        state = torch.where(live, state, 0)
        fin = cost + self.g.final[state // self.lm_states]
        if self.lm is not None:  # the </s> difference (`TokenPassing.best_final`)
            fin = fin + self.lm.final_cost(state % self.lm_states)
        fin = torch.where(live, fin, INF)
        reached = torch.isfinite(fin).any(1)
        score = torch.where(reached[:, None], fin, torch.where(live, cost, INF))
        best = score.min(1).values
        tie = (score == best[:, None]) & live
        low = torch.where(tie, state, EMPTY64).min(1).values
        pick = (tie & (state == low[:, None])).to(torch.int8).argmax(1)
        has = live.any(1)
        rec = torch.where(has, rec.gather(1, pick[:, None])[:, 0], -1)
        bits = best.view(torch.int32).long()
        return torch.stack([rec, bits, (reached & has).long()])

    # ------------------------------------------------------------------ the batch
    def decode(self, ac: torch.Tensor, lengths: torch.Tensor) -> tuple[list[int], list[float], list[bool]]:
        """Decode a batch: ac [B, T, V] acoustic costs, lengths [B] int64 (on the device). Returns
        per utterance the best token's record id (-1: none), its total cost and whether it
        reached a final state."""
        B, T, V = ac.shape
        lengths = lengths.to(self.device, torch.int64).clamp(max=T)
        self.stats = {"frames": T, "syncs": 0, "windows": 0, "redone_windows": 0, "redone_frames": 0}
        self.stats.update(arcs=0, epsilon_passes=0, epsilon_limit_hit=0)
        if self.lattice is not None:
            self.stats["lattice_arcs"] = 0
        launches0 = LAUNCHES[0]
        bp = self.backpointers
        if self.lattice is not None:  # a batch's stores start empty (`take` empties them)
            self.lattice.stores.clear()
            self._since_prune = 0
        saved: tuple[torch.Tensor, ...] | None = None  # the window's input tokens (for a rerun)
        t0 = 0
        final = None
        while final is None:
            frames = min(self.sync_frames, T - t0)
            last = t0 + frames >= T
            while True:
                self._alloc(B, V)
                x, NU = self._bufs, self.capacity["tok"]
                if saved is not None:
                    self._restore(saved, B)
                x["need"].zero_()
                x["t0"].fill_(t0)
                x["recc"][0].fill_(bp.size)
                x["base"].fill_(bp.size)
                acw = ac[:, t0 : t0 + max(frames, 1)].contiguous()
                P = self._run_window(acw, lengths, frames, saved is None and t0 == 0)
                if P == 1:  # the next window starts from parity 0
                    for k in ("state", "cost", "rec"):
                        x[k][: B * NU].copy_(x[k][B * NU :])
                    x["count"][:B].copy_(x["count"][B:])
                init = saved is None and t0 == 0
                parts = [x["need"].long(), x["recc"][frames + init :][:1]]
                if last:
                    parts.append(self._final(0, B).reshape(-1))
                R = self._arena_sizes()[0]
                self._host_arena.copy_(x["arena"], non_blocking=True)
                if self.lattice is not None:
                    self._host_lat.copy_(x["lat"], non_blocking=True)
                info = torch.cat(parts).to("cpu", copy=True).tolist()
                self.stats["syncs"] += 1
                if self._grow(info):
                    self.stats["redone_windows"] += 1
                    self.stats["redone_frames"] += frames
                    saved = self._relayout(saved, B)  # None: rerun from the start tokens
                    continue
                break
            n = int(info[NUM_NEEDS]) - bp.size
            cols = self._host_arena.view(-1, R + 1)[:, :n].numpy()
            bp.append_host(cols[:REC_ROWS])
            if self.lattice is not None:
                self._lattice_window(cols, int(info[NEED_LAT]), frames)
            bp.size = bp._base = bp._stored
            self.stats["windows"] += 1
            self.stats["arcs"] += int(info[STAT_ARCS])
            self.stats["epsilon_passes"] += int(info[STAT_PASSES])
            self.stats["epsilon_limit_hit"] += int(info[STAT_EPS_LIMIT])
            t0 += frames
            if last:
                final = info[NUM_NEEDS + 1 :]
            else:
                saved = tuple(t.clone() for t in self._window_input(B))
        self.stats["launches"] = LAUNCHES[0] - launches0
        rec, bits, reached = final[:B], final[B : 2 * B], final[2 * B :]
        cost = np.asarray(bits, dtype=np.int64).astype(np.int32).view(np.float32).tolist()
        return [int(r) for r in rec], cost, [bool(r) for r in reached]

    def _lattice_window(self, cols: np.ndarray, n_arcs: int, frames: int) -> None:
        """A window's lattice arcs (the arena's first `n_arcs`) and nodes (its records `cols`) into
        the lattice stores, in a canonical order (utterance, frame, source state, arc; nodes by
        utterance, frame, state), so nothing depends on the order the GPU wrote them in; then the
        window pruning every ``prune_interval`` frames."""
        assert self.lattice is not None and self._nextstate is not None
        L = self._arena_sizes()[1]
        a = self._host_lat.view(LAT_ROWS, L + 1)[:, :n_arcs].numpy()
        a = a[:, np.lexsort((a[3], a[2], a[1], a[0]))]
        self.stats["lattice_arcs"] += n_arcs
        ac = np.ascontiguousarray(a[4]).view(np.float32)
        self.lattice.add_host(a[0], [a[1], a[2], self._nextstate[a[3]], a[3], ac], nodes=False)
        utt, frame, state = cols[REC_ROWS + 1], cols[2], cols[REC_ROWS]
        order = np.lexsort((state, frame, utt))
        cost = cols[3][order].astype(np.int32).view(np.float32)
        self.lattice.add_host(utt[order], [frame[order], state[order], cost], nodes=True)
        interval = self.options.prune_interval
        self._since_prune += frames
        if interval > 0 and self._since_prune >= interval:
            self.lattice.prune()
            self._since_prune = 0

    def _run_window(self, acw: torch.Tensor, lengths: torch.Tensor, frames: int, init: bool) -> int:
        """The window's launches, eagerly or (``cuda_graphs`` on CUDA) as one CUDA graph: a new
        shape runs eagerly once (compiling the kernels) and is captured for its next windows."""
        if not self.runner.enabled:
            return self._window(acw, lengths, frames, init)
        key = (self._shape, tuple(acw.shape), frames, init)
        entry = self._graphs.get(key)
        if entry is None:
            ac_s, len_s = acw.contiguous().clone(), lengths.clone()
            parity = self._window(ac_s, len_s, frames, init)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._window(ac_s, len_s, frames, init)
            self._graphs[key] = (ac_s, len_s, graph)
            return parity
        ac_s, len_s, graph = entry
        ac_s.copy_(acw)
        len_s.copy_(lengths)
        graph.replay()
        return frames % 2

    def _window_input(self, B: int) -> tuple[torch.Tensor, ...]:
        x, NU = self._bufs, self.capacity["tok"]
        return x["state"][: B * NU], x["cost"][: B * NU], x["rec"][: B * NU], x["count"][:B]

    def _restore(self, saved: tuple[torch.Tensor, ...], B: int) -> None:
        for dst, src in zip(self._window_input(B), saved, strict=True):
            dst.copy_(src)

    def _relayout(self, saved: tuple[torch.Tensor, ...] | None, B: int) -> tuple[torch.Tensor, ...] | None:
        """The saved window input in the (grown) token capacity's layout."""
        if saved is None:
            return None
        NU = self.capacity["tok"]
        old = saved[0].numel() // B
        if old == NU:
            return saved
        out = []
        for t, fill in zip(saved[:3], (0, INF, -1), strict=True):
            new = t.new_full((B, NU), fill)
            new[:, : min(old, NU)] = t.view(B, old)[:, : min(old, NU)]
            out.append(new.reshape(-1))
        return (*out, saved[3])

    def _arena_sizes(self) -> tuple[int, int]:
        """Records and lattice arcs a window's arenas hold: the per-step capacities times a
        window's steps (its frames and the start step), so they scale with the window's length."""
        steps = self.sync_frames + 1
        return self.capacity["rec"] * steps, self.capacity["lat"] * steps

    def _grow(self, info: list[int]) -> bool:
        """Grow every capacity a window needed more of; whether any did (then rerun it). The
        record and lattice needs cover the steps done before an overflow stopped the window:
        their capacities grow to the need per step done."""
        c = self.capacity
        grown = False
        steps = max(1, int(info[STEPS_DONE]))
        have = dict(zip(PER_STEP, self._arena_sizes(), strict=True))
        for name, idx in zip(CAPS, CAP_NEEDS, strict=True):
            need = int(info[idx])
            if need > have.get(name, c[name]):
                if name in PER_STEP:
                    need = -(-need // steps)
                # at least doubled: after an overflow, later frames' needs run low
                c[name] = max(_pow2(need + need // 4, 16), 2 * c[name])
                grown = True
        if grown:
            c["hash"] = max(c["hash"], _pow2(2 * c["tok"], 16))
        return grown
