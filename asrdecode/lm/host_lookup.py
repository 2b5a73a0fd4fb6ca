"""`wfst-otf` torch backend with the LM tables in host memory (paper 000 sec. 2.2-2.3, Alg. 1-2).

Paper 000 keeps on the device only what the LM *lookup* needs to find an arc: the arc labels of every
state (sorted, so a binary search finds a word), the position of each state's first label (CSR
offsets) and the backoff states. Weights and next states stay in host memory; per frame the device
computes the positions of the arcs it needs, copies that list to the host, and the host's records
come back. `DeviceLabels` is that device structure for one `BatchedNgramLM` (int32 labels, offsets
and backoff states: no weights, no next states); `HostLookupLM` is the `TokenLM` of the search
(`asrdecode.decoders.wfst.core.TokenPassing`) over a `DifferenceLM` with both LMs split this way.

One lookup call (`HostLookupLM.step`, the emitting step or an epsilon pass of a frame):

1. **Deduplicate** the (difference-LM state, word) pairs of the call: ``torch.unique`` of the packed
   int64 keys ``state * V + word`` with the inverse index that scatters the answers back (the
   sort-based tensor analogue of the per-frame hash table of Alg. 1-2). Slots that cross no word
   (word 0: epsilon olabels, empty arc slots) take no part.
2. **Arc cache** (paper 000 sec. 2.3, last paragraph): a direct-mapped device table keyed by the
   packed pair (a colliding write overwrites, no probing) holding the pair's answer (added cost, next
   state); hits need no host data. ``cache_size`` entries (a power of two; 0 = no cache).
3. For the missed pairs, both LMs' **record positions** are found on the device (`DeviceLabels.
   positions`: the backoff walk of `BatchedNgramLM.score` on labels only): the hit arc (or the
   dense unigram row) and the backoff record of every state crossed. The positions are deduplicated
   again (pairs share backoff records, Alg. 2's label-0 entries), copied to the host, gathered from
   the host record table (weight bits and next state in one int32 pair per record) and copied back;
   the answers are summed in `score`'s order, so costs are bit-identical to the all-on-device
   lookups. With ``staged`` (``decoder.pinned_copies`` on CUDA) the rows pass through a reused pinned buffer
   and a non-blocking copy (the same code on a CPU, without the pinning).

On a CPU "host" and "device" are both CPU tensors and every step above runs the same (the copies
are no-ops): the tested path is the GPU's. The host reads (unique sizes, the position list) make a
lookup call unsuitable for CUDA graph capture, so the decoder runs these frames eagerly.
"""

from __future__ import annotations

import torch

from asrdecode.lm.difference import DifferenceLM
from asrdecode.lm.ngram_tensor import BatchedNgramLM

_HASH = 0x9E3779B97F4A7C15 - (1 << 64)  # odd 64-bit multiplier (Fibonacci hashing), as a signed int64


def _index_dtype(limit: int) -> torch.dtype:
    return torch.int32 if limit < 2**31 else torch.int64


class DeviceLabels:
    """The device part of one n-gram LM (paper 000 sec. 2.2): ``labels`` [A] (arc words, sorted per
    state), ``offsets`` [S+1] (first label of each state) and ``backoff`` [S] (backoff state); int32
    (int64 past 2**31 arcs). Record ids of the host table start at ``base``: arc ``a`` -> ``base + a``,
    unigram row of word ``w`` -> ``base + A + w``, backoff of state ``s`` -> ``base + A + V + s``."""

    def __init__(self, lm: BatchedNgramLM, device: torch.device, base: int, pad: int) -> None:
        self.order, self.vocab_size = lm.order, lm.vocab_size
        self.num_arcs, self.num_states = lm.num_arcs, lm.num_states
        self.steps = max(int(lm.max_degree).bit_length(), 1)  # binary-search depth (widest state)
        self.labels = lm.arc_token.to(device=device, dtype=torch.int32)
        self.offsets = lm.arc_offsets.to(device=device, dtype=_index_dtype(self.num_arcs + 1))
        self.backoff = lm.backoff_state.to(device=device, dtype=_index_dtype(self.num_states))
        self.base, self.pad = base, pad  # pad: the host's zero record (weight 0, next state 0)

    @property
    def num_records(self) -> int:
        return self.num_arcs + self.vocab_size + self.num_states

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.labels, self.offsets, self.backoff))

    @staticmethod
    def host_records(lm: BatchedNgramLM, state_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights float32, next states int32) of this LM's records in `DeviceLabels` order; the
        next states mapped by `state_map` (the difference LM's union state of each LM state)."""
        weight = torch.cat([lm.arc_weight.cpu(), lm.root_weight.cpu(), lm.backoff_weight.cpu()]).float()
        none = torch.zeros(lm.num_states, dtype=torch.int64)  # a backoff record's next state is unused
        nxt = torch.cat([state_map[lm.arc_next.cpu().long()], state_map[lm.root_next.cpu().long()], none])
        return weight, nxt.int()

    def positions(self, states: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        """[M] states, [M] words -> [M, order] host record ids: column 0 the record that gives the
        word's weight and next state (the highest-order arc on the backoff chain, else the unigram
        row), column 1 + l the backoff record of the chain's state at level l when the walk passed
        it without a hit (else the zero record): `BatchedNgramLM.score` on labels only."""
        A, V = self.num_arcs, self.vocab_size
        m = states.shape[0]
        cur = states.long()
        found = torch.zeros(m, dtype=torch.bool, device=states.device)
        hit_rec = self.base + A + words
        cols = [hit_rec]
        last = max(A - 1, 0)
        pad = torch.full_like(hit_rec, self.pad)
        for _ in range(self.order - 1):
            hit = torch.zeros_like(found)
            if A:
                end = self.offsets[cur + 1].long()
                lo, hi = self.offsets[cur].long(), end
                for _ in range(self.steps):
                    mid = (lo + hi) // 2
                    right = (mid < hi) & (self.labels[mid.clamp(max=last)].long() < words)
                    lo = torch.where(right, mid + 1, lo)
                    hi = torch.where(right, hi, mid)
                pos = lo.clamp(max=last)
                hit = ~found & (lo < end) & (self.labels[pos].long() == words)
                cols[0] = torch.where(hit, self.base + pos, cols[0])
            crossed = ~found & ~hit & (cur != BatchedNgramLM.ROOT)  # the root's backoff weight is 0
            cols.append(torch.where(crossed, self.base + A + V + cur, pad))
            found = found | hit
            cur = self.backoff[cur].long()
        return torch.stack(cols, 1)


class HostLookupLM:
    """`TokenLM` of the torch search over a `DifferenceLM` whose tables stay in host memory (module
    docstring). Device: both LMs' `DeviceLabels`, the union states' LM states (int32) and history
    lengths (int8), and the arc cache. Host: the records (weight, next *union* state) of both LMs.
    ``stats`` counts per lookup call, as device scalars (read by `take_stats`): ``pairs`` (word slots
    asked), ``distinct`` (distinct (state, word) pairs), ``cache_hits``, ``looked_up`` (pairs whose
    records were fetched from the host: distinct - cache hits), ``records`` (host records copied)."""

    START = DifferenceLM.START
    STATS = ("calls", "pairs", "distinct", "cache_hits", "looked_up", "records")

    def __init__(
        self, diff: DifferenceLM, device: torch.device | str, cache_size: int = 1 << 16, staged: bool = False
    ) -> None:
        if cache_size < 0 or cache_size & (cache_size - 1):
            raise ValueError(f"lm cache size must be 0 or a power of two, got {cache_size}")
        self.device = device = torch.device(device)
        self.diff, self.lm_scale = diff, diff.lm_scale
        self.vocab_size = diff.large.vocab_size
        large, small = diff.large, diff.small
        n_records = large.num_arcs + large.vocab_size + large.num_states
        n_records += small.num_arcs + small.vocab_size + small.num_states
        self.large = DeviceLabels(large, device, 0, n_records)
        self.small = DeviceLabels(small, device, self.large.num_records, n_records)
        # host memory: one int32 pair (weight bits, next state) per record, then the zero record
        # next states as union states: the maps from each LM's states to the union stay on the host
        w_l, n_l = DeviceLabels.host_records(large, torch.from_numpy(diff.union_of_large))
        w_s, n_s = DeviceLabels.host_records(small, torch.from_numpy(diff.union_of_small))
        weight = torch.cat([w_l, w_s, torch.zeros(1)])
        nxt = torch.cat([n_l, n_s, torch.zeros(1, dtype=torch.int32)])
        self.host_records = torch.stack([weight.view(torch.int32), nxt], 1).contiguous()
        self.host_final = torch.cat([large.final_weight.cpu(), small.final_weight.cpu()]).float()
        self.staged = staged  # decoder.pinned_copies on CUDA
        self._staging: dict[str, torch.Tensor] = {}
        # device: each union state's state in both LMs (where lookups start) and its history length
        # (int8: an n-gram order), which picks the next union state of a word
        self.maps = {
            k: torch.from_numpy(getattr(diff, k)).to(device, torch.int32) for k in ("large_of", "small_of")
        }
        self.maps["union_order"] = torch.from_numpy(diff.union_order).to(device, torch.int8)
        self.cache_size = cache_size
        if cache_size:  # slot cache_size: where writes that lose a slot go
            self.cache_key = torch.full((cache_size + 1,), -1, dtype=torch.int64, device=device)
            self.cache_cost = torch.zeros(cache_size + 1, dtype=torch.float32, device=device)
            self.cache_next = torch.zeros(cache_size + 1, dtype=torch.int32, device=device)
        self.stats = {k: torch.zeros((), dtype=torch.int64, device=device) for k in self.STATS}

    @property
    def num_states(self) -> int:
        return self.diff.num_states

    # ------------------------------------------------------------------ memory
    def device_bytes(self) -> dict[str, int]:
        """Device bytes: ``labels`` (both LMs' `DeviceLabels`, paper 000's structure), ``state_maps``
        (the union states' LM states and history lengths), ``cache`` (the arc cache), ``total``."""
        out = {
            "labels": self.large.nbytes() + self.small.nbytes(),
            "state_maps": sum(t.numel() * t.element_size() for t in self.maps.values()),
            "cache": 0,
        }
        if self.cache_size:
            out["cache"] = sum(
                t.numel() * t.element_size() for t in (self.cache_key, self.cache_cost, self.cache_next)
            )
        out["total"] = sum(out.values())
        return out

    def host_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.host_records, self.host_final))

    def take_stats(self) -> dict[str, int]:
        """The lookup counters since the last call (one host read), then zeroed."""
        values = torch.stack([self.stats[k] for k in self.STATS]).tolist()
        for t in self.stats.values():
            t.zero_()
        return dict(zip(self.STATS, values, strict=True))

    # ------------------------------------------------------------------ host transfers
    def _fetch(self, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Rows `index` (device) of the host `table`: the index list to the host (blocking), the
        gather there, the rows back. ``staged``: gathered into a reused staging buffer (pinned on
        CUDA) and copied back non-blocking; the previous copy out of the buffer was queued before
        this call's blocking index copy, so it is done when the buffer is written again."""
        host_index = index.to("cpu")
        if not self.staged:
            return table.index_select(0, host_index).to(self.device)
        name = f"{table.dtype}{tuple(table.shape[1:])}"
        buf = self._staging.get(name)
        n = host_index.shape[0]
        if buf is None or buf.shape[0] < n:
            size = max(1024, 1 << max(n - 1, 0).bit_length())
            buf = torch.empty((size, *table.shape[1:]), dtype=table.dtype)
            self._staging[name] = buf = buf.pin_memory() if self.device.type == "cuda" else buf
        torch.index_select(table, 0, host_index, out=buf[:n])
        return buf[:n].to(self.device, non_blocking=True, copy=True)

    def _lookup(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Distinct packed keys [m] -> (added cost float32, next union state int64) via the host."""
        V, t = self.vocab_size, self.maps
        u, w = keys // V, keys % V
        recs = torch.cat(
            [self.large.positions(t["large_of"][u], w), self.small.positions(t["small_of"][u], w)], 1
        )
        need, inverse = torch.unique(recs, return_inverse=True)  # each host record copied once
        self.stats["records"] += need.numel()
        rows = self._fetch(self.host_records, need)[inverse]  # [m, order_l + order_s, 2]
        weight, nxt = rows[..., 0].view(torch.float32), rows[..., 1]

        def logp(cols: torch.Tensor) -> torch.Tensor:  # backoffs from the top, then the hit: score's order
            acc = torch.zeros(cols.shape[0], dtype=torch.float32, device=cols.device)
            for j in range(1, cols.shape[1]):
                acc = acc + cols[:, j]
            return acc + cols[:, 0]

        n_l = self.large.order
        lp_l, lp_s = logp(weight[:, :n_l]), logp(weight[:, n_l:])
        u_l, u_s = nxt[:, 0].long(), nxt[:, n_l].long()  # union states (host records, `host_records`)
        order = t["union_order"]
        nxt_u = torch.where(order[u_l] >= order[u_s], u_l, u_s)
        return ((lp_s - lp_l) * self.lm_scale).float(), nxt_u

    # ------------------------------------------------------------------ TokenLM
    def step(self, states: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """states [N] (union), words [N] (0 = no lookup) -> (added cost float32 [N], next states [N]);
        slots with word 0 get (0, their state)."""
        V = self.vocab_size
        ask = words > 0
        key = torch.where(ask, states.long() * V + words.long(), -1)
        keys, inverse = torch.unique(key, return_inverse=True)  # sorted: -1 (no lookup) first
        valid = keys >= 0
        cost = torch.zeros(keys.shape[0], dtype=torch.float32, device=keys.device)
        nxt = keys // V
        miss = valid
        s = self.stats
        s["calls"] += 1
        s["pairs"] += ask.sum()
        s["distinct"] += valid.sum()
        if self.cache_size:
            slot = ((keys * _HASH) >> 32) & (self.cache_size - 1)
            hit = valid & (self.cache_key[slot] == keys)
            cost = torch.where(hit, self.cache_cost[slot], cost)
            nxt = torch.where(hit, self.cache_next[slot].long(), nxt)
            miss = valid & ~hit
            s["cache_hits"] += hit.sum()
        where = miss.nonzero().squeeze(1)  # host read: the number of pairs to look up
        s["looked_up"] += where.numel()
        if where.numel():
            m_cost, m_next = self._lookup(keys[where])
            cost = cost.index_copy(0, where, m_cost)
            nxt = nxt.index_copy(0, where, m_next)
            if self.cache_size:
                self._remember(keys[where], slot[where], m_cost, m_next)
        return cost[inverse], torch.where(ask, nxt[inverse], states.long())

    def _remember(
        self, keys: torch.Tensor, slot: torch.Tensor, cost: torch.Tensor, nxt: torch.Tensor
    ) -> None:
        """Write looked-up pairs into the cache (a colliding entry is overwritten); of several new
        pairs on one slot exactly one writes all three fields."""
        C = self.cache_size
        ids = torch.arange(keys.shape[0], device=keys.device)
        owner = torch.full((C + 1,), -1, dtype=torch.int64, device=keys.device)
        owner.scatter_reduce_(0, slot, ids, reduce="amax")
        dst = torch.where(owner[slot] == ids, slot, C)
        self.cache_key.index_copy_(0, dst, keys)
        self.cache_cost.index_copy_(0, dst, cost)
        self.cache_next.index_copy_(0, dst, nxt.int())

    def final_cost(self, states: torch.Tensor) -> torch.Tensor:
        """The </s> difference per state (float32), the final weights gathered from the host."""
        t = self.maps
        u, inverse = torch.unique(states.long(), return_inverse=True)
        recs = torch.stack([t["large_of"][u].long(), t["small_of"][u].long() + self.large.num_states], 1)
        f = self._fetch(self.host_final, recs.reshape(-1)).view(-1, 2)
        return ((f[:, 1] - f[:, 0]) * self.lm_scale).float()[inverse]
