"""Batched frame-synchronous token passing over a DeviceGraph: the core shared by WFST decoders.

This is the search of paper 001 (sec. 3: ExpandArcs → Prune → D2H copy per frame, built on the
Kaldi CUDA decoder, prior-art D.1) written as plain torch tensor code that runs on any device.
A *token* is (utterance, graph state, cost, record id). All utterances of a batch live in one
fixed-capacity `TokenBuffer` sorted by key ``utt * num_states + state``: live tokens first, empty
slots (key ``SENT``, utterance ``num_utts``, cost inf) after them. Every per-frame tensor has a
size fixed by the capacities (tokens N, emitting arcs A, epsilon arcs E), never by the data, so
the frame is a fixed sequence of kernels (capturable with CUDA graphs, ``cuda_graphs``) with
masked updates instead of boolean indexing.

Per frame (`TokenPassing.step`), with the pruning rules of Kaldi's FasterDecoder so that results
are comparable token for token:

1. **Cutoff** (Kaldi ``GetCutoff``) per utterance: ``best + beam``; if the utterance has more than
   ``max_active`` tokens and the ``max_active+1``-th best cost is tighter, that value; ``min_active``
   widens it the same way. The k-th best of every utterance comes from one fixed-size sort of
   (utterance, order-preserving cost bits). The *adaptive beam* (``cutoff - best + beam_delta``
   when max/min-active decided) prunes the new tokens of this frame.
2. **Parallel arc expansion** (paper 000, Alg. 3): per surviving token the number of emitting arcs
   ``split[s] - offsets[s]``, an inclusive prefix sum, and for every slot j of the A-slot arc array
   ``searchsorted(prefix, j)`` gives its source token (slots past the total are masked).
   ``cost = token cost + arc weight + acoustic cost`` where the acoustic cost is
   ``-acoustic_scale * logprob[b, t, ilabel-1]`` (precomputed per frame by the caller), plus an
   optional per-utterance word boost on the arc's olabel (paper 001 sec. 3.2, fig. 5). With
   ``kernel: triton`` one fused kernel does this step (`kernels.py`).
3. **Prune** new arcs at ``best_new + adaptive_beam`` per utterance.
4. **Recombination** (paper 000, Alg. 4, as a fixed-size sort table instead of a hash table): a
   stable sort of the keys (pruned arcs get ``SENT``), segment ids by a prefix sum over key
   changes, ``scatter_reduce(amin)`` for the best cost of each segment and then the first index
   holding it (ties to the earliest arc, as before). Memory ∝ capacities, not graph size.
5. **Epsilon closure** (Kaldi ``ProcessNonemitting``) as Bellman-Ford passes over the epsilon-input
   arcs of the *frontier* (new or improved tokens): recombine the candidates, look them up among
   the existing tokens (``searchsorted``), improve in place (an existing token wins ties) or insert
   (merge by one sort of N + E keys). The passes run in batches of K without looking at the data
   (an empty frontier makes a pass a no-op); K adapts to the passes the previous frame needed.

Host synchronisations: one small read per batch of passes (normally one per frame) returns the
sizes the frame needed, the frontier size and the record count. If a size exceeded its capacity
(*overflow*) the frame is discarded and rerun with larger buffers, so results never depend on the
capacities; capacities also shrink when far too large (they are powers of two, so few shapes occur
and a CUDA graph per shape is reused). Counted in ``stats["syncs"]``; see the README for the list.

**LM states** (`wfst-otf`, paper 000): with a `TokenLM` (``lm=``), a token's state is the pair
(graph state, LM state) folded into one int ``graph_state * lm.num_states + lm_state`` (so the key,
the sort-based recombination and everything downstream are unchanged and recombine by the pair,
paper 000 Alg. 4); the graph tables are read at ``state // lm.num_states``. An arc with a word
olabel adds ``lm.step(lm_state, word)`` (cost, next LM state) to the expansion's cost, before the
beam's best is taken (emitting and epsilon arcs); final costs add ``lm.final_cost``. The LM sees
every arc slot (word 0 where a slot crosses no word): `DifferenceLM` looks them all up (fixed
shapes, no host reads), `lm.host_lookup.HostLookupLM` deduplicates them and reads its host tables
(paper 000 sec. 2.3); lattices are not kept with an LM.

Every kept token gets a *record* (predecessor record, arc index, frame, cost) in `Backpointers`, a
double-buffered device arena written by masked ``index_copy_`` at ids from a device counter and
copied to host memory in one batched copy every ``host_copy_frames`` frames (pinned, non-blocking
with ``pinned_copies`` on CUDA), so the device holds only the recent frames. On the host, records
no live token leads back to are garbage-collected (`TokenPassing.maybe_collect`), so memory is
bounded on long utterances and streams. Lattice arcs and nodes (`LatticeArcs`) take the same
route and are pruned at ``lattice_beam`` every ``prune_interval`` frames.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from asrdecode.decoders.wfst.lattice import LatticeStore
from asrdecode.graph.format import DeviceGraph

INF = float("inf")
SENT = torch.iinfo(torch.int64).max  # key of an empty token slot (sorts after every real key)
_BITS = 2**32


def _take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """1-D gather; `index_select` is about twice as fast as advanced indexing on CPU."""
    return x.index_select(0, index)


_CONSTANTS: dict[tuple[Any, torch.dtype, torch.device], torch.Tensor] = {}


def _const(value: float | int | bool, like: torch.Tensor) -> torch.Tensor:
    """A cached 0-dim device tensor (a Python scalar in torch.where costs an extra op each time)."""
    key = (value, like.dtype, like.device)
    t = _CONSTANTS.get(key)
    if t is None:
        t = _CONSTANTS[key] = torch.tensor(value, dtype=like.dtype, device=like.device)
    return t


def _where(cond: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    """torch.where with Python scalars taken from the constant cache."""
    if not isinstance(b, torch.Tensor):
        b = _const(b, a)
    elif not isinstance(a, torch.Tensor):
        a = _const(a, b)
    return torch.where(cond, a, b)


def _pow2(n: int, floor: int = 16) -> int:
    return max(floor, 1 << max(int(n) - 1, 0).bit_length())


def _bucket(n: int, floor: int = 16) -> int:
    """Smallest capacity >= n among floor * 2**(k/4): few distinct shapes (CUDA graphs are
    captured per shape) with at most 19% slack."""
    if n <= floor:
        return floor
    k = math.ceil(4 * math.log2(n / floor))
    while math.ceil(floor * 2 ** (k / 4)) < n:
        k += 1
    return math.ceil(floor * 2 ** (k / 4))


def _fit(x: torch.Tensor, n: int, fill: float | int) -> torch.Tensor:
    """x cut or padded (with `fill`) to length n (sizes known on the host)."""
    if len(x) >= n:
        return x[:n]
    return torch.cat([x, x.new_full((n - len(x),), fill)])


def ordered_bits(cost: torch.Tensor) -> torch.Tensor:
    """float32 -> int64 in [0, 2**32) with the same order (for sorting costs inside an int key)."""
    bits = cost.contiguous().view(torch.int32).long()
    return _where(bits >= 0, bits, -(bits & 0x7FFFFFFF)) + 2**31


@dataclass
class PruningOptions:
    """The pruning of every WFST search, with Kaldi's (FasterDecoder / CudaDecoder) names and
    meaning: beam, max_active, min_active, beam_delta (the adaptive beam's margin) and the cap
    on epsilon-closure passes per frame; and word_beam (0 = off), a tighter beam for arcs that
    output a word (pocketsphinx's wbeam, which Kaldi's decoders lack): an emitting arc with a
    word is followed only if its cost is below ``word_cut = pre + word_beam``, where ``pre`` is
    the cheapest arc of the frame's best tokens (those at the frame's lowest cost, known before
    the frame's other arcs), and an epsilon arc with a word only if its cost is at most the
    frame's best new cost + word_beam. Word arcs are where new words (and, on the fly, their LM
    costs) enter; the rest of the search is unchanged. history_beam (0 = off; the on-the-fly
    decoders, where one graph state holds tokens of several LM histories): before a frame's
    cutoff, a token more than history_beam above the cheapest token at its graph state is
    dropped (pocketsphinx keeps one history per lexicon-tree node, the best predecessor's);
    history_max (0 = off; `wfst-otf`): then all but the history_max cheapest tokens at each graph
    state are dropped (`let`'s groups have their own bound, group_capacity)."""

    beam: float = 16.0
    max_active: int = 10000
    min_active: int = 200
    beam_delta: float = 0.5
    max_epsilon_passes: int = 64
    word_beam: float = 0.0
    history_beam: float = 0.0
    history_max: int = 0

    @property
    def word_beam_or_inf(self) -> float:
        """word_beam, with 0 (off) as +inf."""
        return self.word_beam if self.word_beam > 0 else math.inf

    @property
    def history_beam_or_inf(self) -> float:
        """history_beam, with 0 (off) as +inf."""
        return self.history_beam if self.history_beam > 0 else math.inf


@dataclass
class SearchOptions(PruningOptions):
    """The torch search's options: the pruning and the device switches: cuda_graphs,
    pinned_copies (CUDA only), kernel (torch | triton | fused) and sync_frames (fused)."""

    host_copy_frames: int = 32
    cuda_graphs: bool = False
    pinned_copies: bool = False
    kernel: str = "torch"
    sync_frames: int = 64  # kernel fused: frames per host synchronisation (fused.FusedSearch)
    gc_records: int = 1 << 20  # back-pointer records before the first garbage collection
    prune_interval: int = 25  # lattices: window pruning every this many frames (Kaldi's name; 0 = never)


@dataclass
class Tokens:
    """A compact token list for a batch, sorted by (utt, state).

    utt, state, rec: int64 [N]; cost: float32 [N] (total cost so far, lower is better).
    """

    utt: torch.Tensor
    state: torch.Tensor
    cost: torch.Tensor
    rec: torch.Tensor

    def __len__(self) -> int:
        return int(self.utt.shape[0])

    def select(self, index: torch.Tensor) -> Tokens:
        """Tokens at `index` (int64 positions; a bool mask is converted with one sync)."""
        if index.dtype == torch.bool:
            index = torch.nonzero(index).squeeze(1)
        return Tokens(*(_take(getattr(self, f), index) for f in ("utt", "state", "cost", "rec")))

    @staticmethod
    def cat(parts: list[Tokens]) -> Tokens:
        return Tokens(*(torch.cat([getattr(p, f) for p in parts]) for f in ("utt", "state", "cost", "rec")))

    @staticmethod
    def empty(device: torch.device) -> Tokens:
        z = torch.zeros(0, dtype=torch.int64, device=device)
        return Tokens(z, z.clone(), torch.zeros(0, dtype=torch.float32, device=device), z.clone())


@dataclass
class TokenBuffer:
    """Fixed-capacity tokens of `num_utts` utterances sorted by key ``utt * num_states + state``;
    the first `count` slots are live (count is exact on the host after every step), the rest are
    empty (key SENT, cost inf, rec -1). Utterance and state are derived from the key (fewer
    arrays to move when tokens are merged). `per_utt` is an upper bound (exact after a step) of
    the live tokens of one utterance: the width of the cutoff's selection matrix."""

    key: torch.Tensor
    cost: torch.Tensor
    rec: torch.Tensor
    num_utts: int
    num_states: int
    count: int
    per_utt: int = 0

    FIELDS = ("key", "cost", "rec")

    @property
    def capacity(self) -> int:
        return int(self.key.shape[0])

    @property
    def utt(self) -> torch.Tensor:
        """Utterance of each slot (num_utts for empty slots)."""
        return _where(self.key != SENT, self.key // self.num_states, self.num_utts)

    @property
    def state(self) -> torch.Tensor:
        """Graph state of each slot (0 for empty slots)."""
        return _where(self.key != SENT, self.key % self.num_states, 0)

    def __len__(self) -> int:
        return self.count

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f) for f in self.FIELDS)

    def compact(self) -> Tokens:
        """The live tokens as a compact `Tokens` (copies; no sync: the count is known)."""
        n = self.count
        return Tokens(*(getattr(self, f)[:n].clone() for f in ("utt", "state", "cost", "rec")))

    @staticmethod
    def from_tokens(
        tok: Tokens, num_utts: int, num_states: int, capacity: int, per_utt: int | None = None
    ) -> TokenBuffer:
        """Pad compact tokens (any order) into a key-sorted buffer of at least `capacity` slots.
        per_utt: most tokens of one utterance if known (else counted: one host read)."""
        n = len(tok)
        cap = max(capacity, _pow2(n))
        key = tok.utt * num_states + tok.state
        order = torch.argsort(key, stable=True)
        if per_utt is None:
            per_utt = int(torch.bincount(tok.utt).max()) if n else 0
        return TokenBuffer(
            _fit(_take(key, order), cap, SENT),
            _fit(_take(tok.cost, order), cap, INF),
            _fit(_take(tok.rec, order), cap, -1),
            num_utts,
            num_states,
            n,
            per_utt,
        )


class Backpointers:
    """Append-only arena of token records: prev record (-1 = root), arc index (-1 = start), frame, cost.

    Records are written on the device by `add` (masked; ids from the device counter `count`, so no
    sync) into one of two preallocated arenas, each one int64 tensor [4, capacity + 1] (the cost
    stored as its float32 bits) so that `flush` moves a whole batch of frames to host memory in
    one copy (pinned + non_blocking when `pinned`), then switches to the other arena; the copy is
    finished (converted to numpy) at the next flush: double buffering. `size` is the number of
    committed records (set by the search after each sync; `count` may run ahead inside a frame
    and is rolled back when a frame is redone). `on_sync` is called for each blocking copy.

    On the host the records go into one growable array (capacity doubles, so appending is
    amortised O(new records), never a re-join of all of them). `collect` drops the records no
    live token leads back to (Kaldi frees such tokens by reference counting; the compiled backend
    collects the same way), so host memory stays bounded on long utterances and streams.
    """

    DTYPE = np.dtype([("prev", "<i8"), ("arc", "<i8"), ("frame", "<i8"), ("cost", "<f4")])

    def __init__(
        self,
        device: torch.device | str = "cpu",
        capacity: int = 4096,
        pinned: bool = False,
        on_sync: Callable[[], None] | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.pinned = pinned and self.device.type == "cuda"
        self.on_sync = on_sync
        self.size = 0
        self.count = torch.zeros((), dtype=torch.int64, device=self.device)
        self.base = torch.zeros((), dtype=torch.int64, device=self.device)  # record id of arena slot 0
        self._base = 0
        self._cur = 0
        self._alloc(capacity)
        self._copying: tuple[torch.Tensor, Any, int] | None = None
        self._store = np.empty(0, dtype=self.DTYPE)  # host records [0, _stored), capacity doubles
        self._stored = 0

    def _alloc(self, capacity: int) -> None:
        self.capacity = capacity
        self._arenas = [
            torch.full((4, capacity + 1), -1, dtype=torch.int64, device=self.device) for _ in range(2)
        ]  # last column: dump slot for masked entries
        self._pinned_bufs = (
            [torch.empty((4, capacity), dtype=torch.int64, pin_memory=True) for _ in range(2)]
            if self.pinned
            else None
        )

    @property
    def arena_key(self) -> tuple[int, int]:
        """Identifies the arena the next records go to (part of a captured graph's key)."""
        return self._cur, self.capacity

    def add(
        self,
        valid: torch.Tensor,
        prev: torch.Tensor,
        arc: torch.Tensor,
        frame: torch.Tensor,
        cost: torch.Tensor,
    ) -> torch.Tensor:
        """Record the entries where `valid`; returns their ids (-1 elsewhere). Fixed-size, no sync."""
        rank = torch.cumsum(valid, 0) - 1
        ids = _where(valid, self.count + rank, -1)
        pos = _where(valid, ids - self.base, self.capacity).clamp_(max=self.capacity)
        bits = cost.float().contiguous().view(torch.int32).long()
        self._arenas[self._cur].index_copy_(1, pos, torch.stack([prev, arc, frame.long(), bits]))
        self.count.add_(valid.sum())
        return ids

    def free(self) -> int:
        return self.capacity - (self.size - self._base)

    def reserve(self, n: int) -> None:
        """Make room for `n` more records in the current arena (flush and/or grow; frame boundary)."""
        if self.free() >= n:
            return
        self.flush()
        if n > self.capacity:
            self._finish()
            self._alloc(_pow2(n + n // 2))

    def rollback(self) -> None:
        """Forget records added since the last commit (a frame that is redone)."""
        self.count.fill_(self.size)

    def flush(self) -> None:
        """Start copying the committed records of the current arena to the host; switch arenas."""
        n = self.size - self._base
        if n == 0:
            return
        self._finish()
        cols = self._arenas[self._cur][:, :n]
        if self._pinned_bufs is not None:
            host = self._pinned_bufs[self._cur][:, :n]
            host.copy_(cols, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            host, event = cols.to("cpu", copy=True), None
            if self.on_sync is not None:
                self.on_sync()
        self._copying = (host, event, n)
        self._cur ^= 1
        self._base = self.size
        self.base.fill_(self._base)

    def _finish(self) -> None:
        if self._copying is None:
            return
        host, event, n = self._copying
        self._copying = None
        if event is not None:
            event.synchronize()
        self.append_host(host.numpy())

    def append_host(self, cols: np.ndarray) -> None:
        """Append records given as int64 columns [4, n] (prev, arc, frame, cost bits) to the host
        store (the fused search's window copies come this way)."""
        n = cols.shape[1]
        k = self._stored
        if k + n > len(self._store):
            grown = np.empty(max(2 * len(self._store), k + n, 1024), dtype=self.DTYPE)
            grown[:k] = self._store[:k]
            self._store = grown
        chunk = self._store[k : k + n]
        chunk["prev"], chunk["arc"], chunk["frame"] = cols[0], cols[1], cols[2]
        chunk["cost"] = cols[3].astype(np.int32).view(np.float32)
        self._stored = k + n

    def host(self) -> np.ndarray:
        """All committed records as one structured numpy array (index = record id; a view that
        is valid until the next flush)."""
        self.flush()
        self._finish()
        return self._store[: self._stored]

    def collect(self, live: np.ndarray) -> np.ndarray | None:
        """Keep only the records the record ids `live` lead back to (order kept, so a record's
        predecessor still comes first); returns old id -> new id (-1 = dropped), or None when
        nothing was dropped. Frame boundary only (every committed record is on the host after it)."""
        data = self.host()
        n = len(data)
        alive = np.zeros(n, dtype=bool)
        front = np.unique(live[live >= 0])
        prev = data["prev"]
        while len(front):  # walk all paths back at once, a step per round
            alive[front] = True
            up = prev[front]
            up = up[up >= 0]
            front = np.unique(up[~alive[up]])
        kept = int(alive.sum())
        if kept == n:
            return None
        new_id = np.cumsum(alive) - 1
        new_id[~alive] = -1
        data = data[alive]
        data["prev"] = np.where(data["prev"] >= 0, new_id[np.maximum(data["prev"], 0)], -1)
        self._store[:kept] = data
        self._stored = kept
        self.size = self._base = kept
        self.base.fill_(kept)
        self.count.fill_(kept)
        return new_id

    def trace(self, rec: int) -> list[int]:
        """Record ids from the root to `rec` (inclusive)."""
        data = self.host()
        prev = data["prev"]
        path = []
        while rec >= 0:
            path.append(rec)
            rec = int(prev[rec])
        path.reverse()
        return path


@dataclass
class BoostTable:
    """Per-utterance word boosts as a sorted key table (key = utt * num_words + word id).

    Lookup by `searchsorted`, the tensor analogue of the per-utterance hash map of paper 001
    sec. 3.2; `cost` holds the cost *added* on an arc whose olabel is the word (negative = boost).
    """

    keys: torch.Tensor
    cost: torch.Tensor
    num_words: int

    def lookup(self, utt: torch.Tensor, olabel: torch.Tensor) -> torch.Tensor:
        key = utt * self.num_words + olabel
        pos = torch.searchsorted(self.keys, key).clamp_(max=max(int(self.keys.shape[0]) - 1, 0))
        hit = (self.keys[pos] == key) & (olabel > 0)
        return _where(hit, self.cost[pos], torch.zeros_like(self.cost[pos]))


class TokenLM(Protocol):
    """What the search needs of an on-the-fly LM (`lm.difference.DifferenceLM`): states
    0..num_states-1, START where utterances begin, batched ``step(states, words) -> (added cost
    float32, next states)`` and ``final_cost(states)``, all device tensors."""

    START: int

    @property
    def num_states(self) -> int: ...

    def step(self, states: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def final_cost(self, states: torch.Tensor) -> torch.Tensor: ...


class SearchGraph:
    """The graph tensors in the dtypes the search indexes with (int64 indices), built once per device."""

    def __init__(self, graph: DeviceGraph) -> None:
        self.graph = graph
        self.device = graph.device
        self.num_states = graph.num_states
        self.start = graph.start
        offsets = graph.offsets.long()
        self.split = graph.split.long()
        self.first_emit = offsets[:-1]
        self.n_emit = self.split - offsets[:-1]
        self.n_eps = offsets[1:] - self.split
        self.column = graph.ilabel.long() - 1  # model column read by the arc (-1 = epsilon)
        self.olabel = graph.olabel.long()
        self.nextstate = graph.nextstate.long()
        self.weight = graph.weight.float()
        self.final = graph.final.float()
        n_eps = self.n_eps.cpu()
        self.has_epsilons = bool(n_eps.sum() > 0)
        self.max_out_degree = int(max(self.n_emit.max().item(), n_eps.max().item())) if self.num_states else 0


class LatticeArcs:
    """Lattice data of the torch search: every arc that survived the search beam (utterance,
    frame of the destination node, src state, dst state, arc index, acoustic cost; an emitting
    arc goes from node (frame-1, src) to (frame, dst), an epsilon arc stays in its frame) and
    every frame's token set (utterance, frame, state, forward cost), collected on the device as
    fixed-size tensors with a keep mask and copied to the host in batches (the mask is applied
    there). On the host they go to one `lattice.LatticeStore` per utterance (or stream: `keys`
    maps the search's utterance positions to store keys) and are pruned there with the compiled
    backend's kernel (`lattice.prune_window`, Kaldi's PruneForwardLinks) every `prune_interval`
    frames, so host memory follows the lattice, not the search. The exact final pruning is
    `lattice.build_lattice`."""

    def __init__(
        self,
        graph: SearchGraph,
        beam: float,
        on_sync: Callable[[int], None] | None = None,
    ) -> None:
        self.g = graph
        self.beam = beam
        self.on_sync = on_sync  # called with the number of blocking copies of a flush
        self._arcs: list[tuple[torch.Tensor, ...]] = []
        self._nodes: list[tuple[torch.Tensor, ...]] = []
        self.keys: np.ndarray | None = None  # utterance position -> store key (None: the position)
        self.stores: dict[int, LatticeStore] = {}
        self.boosts: dict[int, np.ndarray] = {}  # store key -> word id -> boost cost (dense)
        self._records: np.ndarray | None = None
        self._slots = np.zeros((2, 0), dtype=np.int32)  # state -> node scratch maps of the pruning

    def add_arcs(self, keep: torch.Tensor, *cols: torch.Tensor) -> None:
        self._arcs.append((keep, *cols))

    def add_nodes(self, keep: torch.Tensor, *cols: torch.Tensor) -> None:
        self._nodes.append((keep, *cols))

    def mark(self) -> tuple[int, int]:
        return len(self._arcs), len(self._nodes)

    def truncate(self, mark: tuple[int, int]) -> None:
        del self._arcs[mark[0] :], self._nodes[mark[1] :]

    def flush(self) -> None:
        """Copy the pending arcs and nodes to the host stores (one copy per column)."""
        for pending, nodes in ((self._arcs, False), (self._nodes, True)):
            if not pending:
                continue
            cols = [
                torch.cat([p[i] for p in pending]).to("cpu", copy=True).numpy()
                for i in range(len(pending[0]))
            ]
            if self.on_sync is not None:
                self.on_sync(len(cols))
            pending.clear()
            keep = cols[0]
            self.add_host(cols[1][keep], [c[keep] for c in cols[2:]], nodes)

    def add_host(self, utt: np.ndarray, rest: list[np.ndarray], nodes: bool) -> None:
        """Host arcs (frame, src, dst, arc, acoustic cost) or nodes (frame, state, cost) of the
        utterance positions `utt`, in frame order within each utterance, into their stores (the
        fused search's window copies come this way)."""
        order = np.argsort(utt, kind="stable")  # keeps the frame order within an utterance
        utt, rest = utt[order], [c[order] for c in rest]
        bounds = np.flatnonzero(np.diff(utt)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(utt)], strict=True):
            if hi <= lo:
                continue
            u = int(utt[lo])
            key = int(self.keys[u]) if self.keys is not None else u
            store = self.stores.setdefault(key, LatticeStore())
            part = [c[lo:hi] for c in rest]
            if nodes:
                store.add_nodes(part)
            else:
                store.add_arcs(part)

    def prune(self) -> None:
        """Window-prune every store (after a flush, at a frame boundary)."""
        if self._records is None:
            from asrdecode.graph.format import graph_records

            self._records = graph_records(self.g.graph)[1]
            self._slots = np.full((2, max(self.g.num_states, 1)), -1, dtype=np.int32)
        empty = np.zeros(0, np.float32)
        for key, store in self.stores.items():
            store.prune(self._records, self.boosts.get(key, empty), self.beam, self._slots)

    def take(self, key: int) -> tuple[np.recarray | None, np.recarray | None]:
        """The arcs and nodes of one store (removed); (None, None) if it has none."""
        self.flush()
        store = self.stores.pop(key, None)
        self.boosts.pop(key, None)
        return store.data() if store is not None else (None, None)


class CapturedStep:
    """Runs a frame function over static input buffers; with CUDA graphs enabled (CUDA only) the
    function is captured once per key (capacities, batch, arena) and replayed.

    Without graphs (CPU, or switch off) the function runs eagerly on its inputs: the same tensor
    code, the same buffers. The functions never read device values on the host, so they are
    capturable; their only side effects are the masked writes into the record arena at positions
    past the committed records (harmless when a warm-up or replay is discarded).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._graphs: dict[Any, tuple[tuple[torch.Tensor, ...], Any, Any]] = {}

    def run(self, key: Any, fn: Callable[..., tuple[torch.Tensor, ...]], inputs: tuple[torch.Tensor, ...]):
        if not self.enabled:
            return fn(*inputs)
        entry = self._graphs.get(key)
        if entry is None:
            static = tuple(x.clone() for x in inputs)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up run, as torch.cuda.graphs requires
                fn(*static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fn(*static)
            entry = self._graphs[key] = (static, graph, out)
        static, graph, out = entry
        for s, x in zip(static, inputs, strict=True):
            s.copy_(x)
        graph.replay()
        return out


# info vector read once per batch of passes
_NEED_TOK, _NEED_ARC, _NEED_KEEP, _NEED_EPS, _NEED_FRONT, _NEED_EPS1, _NEED_FRONT1 = range(7)
_ARCS, _PASSES, _FRONT, _RECS, _COUNT, _PER_UTT = range(7, 13)
_INFO = 13
# info[i] = what the frame needed of CAPACITIES[i]; eps1/front1: the first epsilon pass after the
# emitting step (every new token is in its frontier), eps/front: the others (small frontiers)
CAPACITIES = (
    "tok",
    "arc",
    "keep",
    "eps",
    "front",
    "eps1",
    "front1",
)  # info[i] = what the frame needed of CAPACITIES[i]


class _Info:
    """Per-batch counters kept as lists of device scalars and stacked once into the info vector
    (fewer small ops than updating a vector in place)."""

    def __init__(self, count: torch.Tensor) -> None:
        self.count = count  # live tokens (device scalar)
        self.values: dict[int, list[torch.Tensor]] = {}

    def put(self, index: int, value: torch.Tensor) -> None:
        self.values.setdefault(index, []).append(value)

    def vector(self, front: torch.Tensor, records: torch.Tensor, per_utt: torch.Tensor) -> torch.Tensor:
        out = [self.count.new_zeros(())] * _INFO
        for i, vals in self.values.items():
            v = torch.stack(vals)
            out[i] = v.sum() if i in (_ARCS, _PASSES) else v.amax()
        out[_FRONT], out[_RECS], out[_COUNT] = front.sum(), records.clone(), self.count
        out[_PER_UTT] = per_utt
        return torch.stack(out)


class TokenPassing:
    """The batched search over one graph (see the module docstring); holds the record arena,
    optional lattice arcs, the capacities and statistics of the current batch (or stream set)."""

    def __init__(
        self,
        graph: DeviceGraph | SearchGraph,
        options: SearchOptions | None = None,
        lattice_beam: float | None = None,
        lm: TokenLM | None = None,
    ) -> None:
        self.g = graph if isinstance(graph, SearchGraph) else SearchGraph(graph)
        self.options = o = options or SearchOptions()
        self.device = self.g.device
        self.lm = lm
        self.lm_states = int(lm.num_states) if lm is not None else 1
        self.num_states = self.g.num_states * self.lm_states  # token states: (graph state, LM state)
        if lm is not None and lattice_beam is not None:
            raise ValueError("TokenPassing: lattices are not kept with an LM")
        if self.num_states >= 2**62 // (1 << 20):
            raise ValueError("TokenPassing: graph states x LM states too large for int64 token keys")
        self.lattice_beam = lattice_beam
        cuda = self.device.type == "cuda"
        self.backpointers = Backpointers(self.device, pinned=o.pinned_copies and cuda, on_sync=self._sync)
        self.lattice: LatticeArcs | None = (
            LatticeArcs(self.g, lattice_beam, self._sync) if lattice_beam is not None else None
        )
        # lattices append per-frame tensors on the host side: those frames run eagerly
        self.runner = CapturedStep(o.cuda_graphs and cuda and self.lattice is None)
        self.kernel = "triton" if o.kernel == "fused" else o.kernel  # where the fused search does not apply
        self.stats = {
            "frames": 0,
            "syncs": 0,
            "epsilon_passes": 0,
            "epsilon_limit_hit": 0,
            "arcs": 0,
            "redone_frames": 0,
            "epsilon_passes_run": 0,  # including passes on an empty frontier (batches of K)
            "gc_runs": 0,  # back-pointer garbage collections
        }
        self.capacity = dict.fromkeys(CAPACITIES, 64)
        self.peak = dict(self.capacity)  # largest capacities used (what the next batch starts from)
        self._low = dict.fromkeys(CAPACITIES, 0)  # frames in a row with a capacity 4x too large
        self._passes_per_sync = 1 if self.g.has_epsilons else 0
        self._frames_since_flush = 0
        self._frames_since_prune = 0
        self._reserve_passes = 4  # epsilon passes' worth of records reserved per frame (doubles on need)
        self._aranges: dict[int, torch.Tensor] = {}
        self._bounds: dict[tuple[int, int], torch.Tensor] = {}
        self._gc_at = o.gc_records

    @property
    def final(self) -> torch.Tensor:
        return self.g.final

    def tuning(self) -> dict[str, Any]:
        """What `inherit` needs: capacities and epsilon passes per sync at the end of this search."""
        return {"graph": self.g, "capacity": dict(self.peak), "passes": self._passes_per_sync}

    def inherit(self, tuning: dict[str, Any] | None) -> TokenPassing:
        """Start from the capacities (the largest a previous search used) and passes per sync of
        a previous search on the same graph: fewer overflow reruns on the first frames."""
        if tuning is not None and tuning["graph"] is self.g:
            self.capacity = dict(tuning["capacity"])
            self._passes_per_sync = tuning["passes"]
        return self

    def _sync(self, n: int = 1) -> None:
        self.stats["syncs"] += n

    def _read(self, info: torch.Tensor) -> list[int]:
        """The one host read of a batch of passes (a blocking copy: a sync on a GPU)."""
        self._sync()
        return info.to("cpu", copy=True).tolist()

    def _arange(self, n: int) -> torch.Tensor:
        if n not in self._aranges:
            self._aranges[n] = torch.arange(n, device=self.device)
        return self._aranges[n]

    def graph_state(self, state: torch.Tensor) -> torch.Tensor:
        """Graph state of token states (the state itself without an LM)."""
        return state if self.lm is None else state // self.lm_states

    def _lm_arcs(
        self, state: torch.Tensor, arc: torch.Tensor, cost: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token states `state` crossing graph arcs `arc` (slots with `valid` false are empty): (cost
        + LM cost on word arcs, destination token states). Without an LM: (cost, the arcs' next
        states). The LM is asked word 0 for slots that cross no word (it may skip those)."""
        dst = _take(self.g.nextstate, arc)
        if self.lm is None:
            return cost, dst
        lm_state = state % self.lm_states
        word = _take(self.g.olabel, arc)
        is_word = (word > 0) & valid
        added, nxt = self.lm.step(lm_state, _where(is_word, word, 0))
        cost = _where(is_word, cost + added, cost)
        return cost, dst * self.lm_states + _where(is_word, nxt, lm_state)

    # ------------------------------------------------------------------ building blocks
    def _expand(
        self, n_arcs: torch.Tensor, first_arc: torch.Tensor, cap: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Paper 000 Alg. 3 into `cap` slots: (source token, arc, valid, total) per slot.

        n_arcs: arcs to expand per token (0 for pruned tokens); first_arc: their first arc.
        """
        end = torch.cumsum(n_arcs, 0)  # inclusive prefix sum: end of each token's slice
        total = end[-1]
        start = end - n_arcs
        j = self._arange(cap)
        # each token with arcs marks the slot where its slice starts; a running max spreads it
        tid = self._arange(len(n_arcs))
        mark = torch.zeros(cap + 1, dtype=torch.int64, device=self.device)
        mark.index_copy_(0, _where(n_arcs > 0, start, cap).clamp_(max=cap), tid)
        src = torch.cummax(mark[:cap], 0).values
        valid = j < total
        arc = _take(first_arc - start, src) + j
        return src, _where(valid, arc, 0), valid, total

    def _compact(self, mask: torch.Tensor, cap: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Positions of the true entries of `mask` in order, in `cap` slots: (index, valid, count)."""
        rank = torch.cumsum(mask, 0) - 1
        idx = torch.zeros(cap + 1, dtype=torch.int64, device=self.device)
        idx.index_copy_(0, _where(mask, rank, cap).clamp_(max=cap), self._arange(len(mask)))
        count = mask.sum()
        return idx[:cap], self._arange(cap) < count, count

    def _recombine(self, key: torch.Tensor, cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Paper 000 Alg. 4 as a fixed-size sort table: (segment keys, index of the best entry).

        key: SENT for entries that take no part. Segment i holds the i-th smallest distinct key
        (SENT after the last one); ties in cost go to the lowest index, so callers put existing
        tokens before new candidates.
        """
        m = len(key)
        skey, perm = torch.sort(key, stable=True)
        first = torch.ones(m, dtype=torch.int64, device=self.device)
        first[1:] = (skey[1:] != skey[:-1]).long()
        seg = torch.cumsum(first, 0) - 1
        scost = _take(cost, perm)
        best = torch.full((m,), INF, dtype=cost.dtype, device=self.device)
        best.scatter_reduce_(0, seg, scost, reduce="amin")
        arg = torch.full((m,), m, dtype=torch.int64, device=self.device)
        arg.scatter_reduce_(0, seg, _where(scost == _take(best, seg), perm, m), reduce="amin")
        seg_key = torch.full((m,), SENT, dtype=torch.int64, device=self.device).scatter_(0, seg, skey)
        return seg_key, arg.clamp_(max=m - 1)

    def _prune_histories(self, utt: torch.Tensor, state: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
        """`PruningOptions.history_beam`: the costs with +inf for tokens more than history_beam
        above the cheapest token of their utterance at their graph state (tokens sorted by key,
        so those of one (utterance, graph state) are adjacent)."""
        group = utt * self.g.num_states + self.graph_state(state)
        first = torch.ones_like(group)
        first[1:] = (group[1:] != group[:-1]).long()
        seg = torch.cumsum(first, 0) - 1
        best = torch.full_like(cost, INF).scatter_reduce_(0, seg, cost, reduce="amin")
        return _where(cost > _take(best, seg) + _const(self.options.history_beam, cost), INF, cost)

    def _cap_histories(self, utt: torch.Tensor, state: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
        """`PruningOptions.history_max`: the costs with +inf for all but the history_max cheapest
        tokens of their utterance at their graph state (equal costs: the first in token order)."""
        group = utt * self.g.num_states + self.graph_state(state)
        pos = self._arange(len(cost))
        order = torch.sort(cost, stable=True).indices
        order = _take(order, torch.sort(_take(group, order), stable=True).indices)
        grouped = _take(group, order)  # by group, cheapest first within each
        first = torch.ones_like(grouped, dtype=torch.bool)
        first[1:] = grouped[1:] != grouped[:-1]
        start = torch.cummax(_where(first, pos, 0), 0).values
        rank = torch.empty_like(pos).scatter_(0, order, pos - start)
        return _where(rank >= self.options.history_max, INF, cost)

    def _segment_min(self, utt: torch.Tensor, cost: torch.Tensor, num_utts: int) -> torch.Tensor:
        out = torch.full((num_utts,), INF, dtype=cost.dtype, device=self.device)
        return out.scatter_reduce_(0, utt, cost, reduce="amin", include_self=True)

    def cutoff(self, tok: Tokens | TokenBuffer, num_utts: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Kaldi FasterDecoder::GetCutoff per utterance: (cutoff [B], adaptive beam [B]).
        Tokens sorted by utterance (a TokenBuffer always is)."""
        per_utt = tok.per_utt if isinstance(tok, TokenBuffer) else None
        if per_utt is None:
            per_utt = int(torch.bincount(tok.utt[tok.utt < num_utts]).max()) if len(tok.utt) else 0
        return self._cutoff(tok.utt, tok.cost, num_utts, per_utt)

    def _selections(self, per_utt: int) -> tuple[bool, bool]:
        """Whether some utterance may have more than max_active / min_active tokens."""
        o = self.options
        return o.max_active + 1 <= per_utt, o.min_active > 0 and o.min_active + 1 <= per_utt

    def _per_utt(self, key: torch.Tensor, B: int) -> torch.Tensor:
        """Most live tokens of one utterance in a key-sorted buffer (a device scalar, no sync)."""
        bounds = self._bounds.get((B, self.num_states))
        if bounds is None:
            bounds = self._bounds[(B, self.num_states)] = (
                torch.arange(B + 1, device=self.device) * self.num_states
            )
        pos = torch.searchsorted(key, bounds)
        return (pos[1:] - pos[:-1]).amax()

    def _cutoff(
        self, utt: torch.Tensor, cost: torch.Tensor, num_utts: int, per_utt: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """GetCutoff on fixed-size tensors; utt == num_utts marks empty slots (cost inf); the
        live tokens are sorted by utterance, at most `per_utt` (a host int) per utterance.

        The k-th best cost of each utterance is found by *selection*, not a sort: the costs go
        into a [B, W] matrix (row = utterance, W = `per_utt` rounded up to a bucket, padding
        inf) and ``torch.kthvalue`` selects along the rows (quickselect on a CPU, radix select on
        a GPU). An utterance with fewer than k tokens meets the padding: inf, exactly Kaldi's "no
        max-active cut" (``tmp_array_.size() > max_active`` fails). When no utterance can have
        k tokens (W < k), nothing is selected at all."""
        o = self.options
        B, n = num_utts, len(cost)
        best = self._segment_min(utt, cost, B + 1)[:B]
        beam_cut = best + o.beam
        beam = torch.full_like(best, o.beam)
        if not n or (o.max_active >= 2**31 - 1 and o.min_active <= 0):
            return beam_cut, beam
        counts = torch.zeros(B + 1, dtype=torch.int64, device=self.device)
        counts = counts.scatter_add_(0, utt, torch.ones_like(utt))
        inf = torch.full_like(best, INF)
        max_cut, min_cut = inf, inf
        W = _bucket(per_utt)
        need_max, need_min = self._selections(per_utt)
        if need_max or need_min:
            # rank of each token within its utterance (tokens are sorted by utterance)
            first = torch.cumsum(counts, 0) - counts
            rank = self._arange(n) - _take(first, utt)
            slot = _where((utt < B) & (rank < W), utt * W + rank, B * W)
            mat = cost.new_full((B * W + 1,), INF).index_copy_(0, slot, cost)[: B * W].view(B, W)
            if need_max:
                max_cut = torch.kthvalue(mat, o.max_active + 1, dim=1).values
            if need_min:
                min_cut = torch.kthvalue(mat, o.min_active + 1, dim=1).values
        counts = counts[:B]
        if o.min_active <= 0:
            min_cut = _where(counts > 0, best, inf)
        use_max = max_cut < beam_cut
        use_min = ~use_max & (min_cut > beam_cut)
        cut = _where(use_max, max_cut, _where(use_min, min_cut, beam_cut))
        adaptive = _where(
            use_max,
            max_cut - best + o.beam_delta,
            _where(use_min, min_cut - best + o.beam_delta, beam),
        )
        adaptive = _where(counts > 0, adaptive, beam)
        return cut, adaptive

    # ------------------------------------------------------------------ device bodies (no syncs)
    def _emitting(self, tok, ac, frames_ext, boost, B: int, caps: dict[str, int], info: _Info, per_utt: int):
        """Cutoff, emitting expansion, beam pruning, recombination into N slots, records."""
        N, A = caps["tok"], caps["arc"]
        g, S = self.g, self.num_states
        key, cost, rec = tok
        live = key != SENT
        utt = _where(live, key // S, B)
        state = _where(live, key % S, 0)
        V = ac.shape[1]
        if self.lm is not None and self.options.history_beam_or_inf < INF:
            cost = self._prune_histories(utt, state, cost)
        if self.lm is not None and self.options.history_max > 0:
            cost = self._cap_histories(utt, state, cost)
        cut, adaptive = self._cutoff(utt, cost, B, per_utt)
        neg = cut.new_full((1,), -INF)
        alive = cost < _take(torch.cat([cut, neg]), utt)
        gstate = self.graph_state(state)
        n = _where(alive, _take(g.n_emit, gstate), 0)
        from asrdecode.decoders.wfst.kernels import emitting_arcs

        kernel = "triton" if self.kernel == "triton" and self.lm is None else "torch"
        src, arc, valid, u, c, best, total = emitting_arcs(
            self, n, _take(g.first_emit, gstate), utt, cost, ac.reshape(-1), V, B, A, boost, kernel
        )
        if self.lm is not None:  # the LM cost of word arcs counts for the beam's best
            c, lm_dst = self._lm_arcs(_take(state, src), arc, c, valid)
            c = _where(valid, c, INF)
            best = self._segment_min(u, c, B + 1)
        next_cut = torch.cat([best[:B] + adaptive, neg])
        keep = c < _take(next_cut, u)  # u == B (invalid slot) meets -inf
        word_beam = self.options.word_beam_or_inf
        if word_beam < INF:  # word arcs: below the cheapest arc of the best tokens + word_beam
            tok_best = self._segment_min(utt, _where(alive, cost, INF), B + 1)
            src_cost = _take(cost, src)
            from_best = valid & (src_cost == _take(tok_best, u))
            pre = self._segment_min(u, _where(from_best, c, INF), B + 1)
            is_word = valid & (_take(g.olabel, arc) > 0)
            keep = keep & (~is_word | (c < _take(pre + word_beam, u)))
        next_cut = torch.cat([next_cut, best[:B] + word_beam, neg])  # + the closure's word cut
        # the survivors, in order, into the `keep` slots (beam pruning removes most arcs)
        kidx, kvalid, kcount = self._compact(keep, caps["keep"])
        src, arc, c = _take(src, kidx), _take(arc, kidx), _take(c, kidx)
        ug = _take(u, kidx).clamp_(max=B - 1)
        dst = _take(g.nextstate, arc) if self.lm is None else _take(lm_dst, kidx)
        if self.lattice is not None:  # every arc that survived the search beam (see LatticeArcs)
            ac_v = _take(ac.reshape(-1), (ug * V + _take(g.column, arc)).clamp_(min=0))
            self.lattice.add_arcs(kvalid, ug, _take(frames_ext, ug), _take(state, src), dst, arc, ac_v)
        seg_key, win = self._recombine(_where(kvalid, ug * S + dst, SENT), c)
        o_key = _fit(seg_key, N, SENT)
        w = _fit(win, N, 0)
        ok = o_key != SENT
        o_src, o_arc = _take(src, w), _take(arc, w)
        o_utt = _where(ok, _take(ug, w), B)
        o_cost = _where(ok, _take(c, w), INF)
        o_rec = self.backpointers.add(ok, _take(rec, o_src), o_arc, _take(frames_ext, o_utt), o_cost)
        m = (seg_key != SENT).sum()
        info.put(_NEED_TOK, m)
        info.put(_NEED_ARC, total)
        info.put(_NEED_KEEP, kcount)
        info.put(_ARCS, total)
        info.count = m.clamp(max=N)
        return (o_key, o_cost, o_rec), ok, next_cut

    def _epsilon_pass(
        self,
        tok,
        front,
        cut,
        frames_ext,
        boost,
        B: int,
        caps: dict[str, int],
        info: _Info,
        first: bool,
    ):
        """One Bellman-Ford pass over the epsilon arcs of the frontier (Kaldi ProcessNonemitting)."""
        g, S = self.g, self.num_states
        key, cost, rec = tok
        N = len(key)
        info.put(_PASSES, front.any().long())
        # the frontier tokens, in order, into the `front` slots; those under the cut expand
        F, E = (caps["front1"], caps["eps1"]) if first else (caps["front"], caps["eps"])
        fidx, fvalid, fcount = self._compact(front, F)
        f_key = _take(key, fidx)
        f_utt = _where(fvalid, f_key // S, B)
        f_state = _where(fvalid, f_key % S, 0)
        f_ok = fvalid & (_take(cost, fidx) <= _take(cut, f_utt))
        f_graph = self.graph_state(f_state)
        n = _where(f_ok, _take(g.n_eps, f_graph), 0)
        src_f, arc, valid, total = self._expand(n, _take(g.split, f_graph), E)
        src = _take(fidx, src_f)
        u = _take(f_utt, src_f).clamp_(max=B - 1)
        c = _take(cost, src) + _take(g.weight, arc)
        if boost is not None:
            c = c + boost.lookup(u, _take(g.olabel, arc))
        c, dst = self._lm_arcs(_take(f_state, src_f), arc, c, valid)
        keep = valid & (c <= _take(cut, u))
        if self.options.word_beam_or_inf < INF:  # word arcs: at most the frame's best + word_beam
            word_cut = cut[B + 1 :]
            keep = keep & ((_take(g.olabel, arc) <= 0) | (c <= _take(word_cut, u)))
        if self.lattice is not None:
            self.lattice.add_arcs(
                keep, u, _take(frames_ext, u), _take(f_state, src_f), dst, arc, torch.zeros_like(c)
            )
        seg_key, win = self._recombine(_where(keep, u * S + dst, SENT), c)
        cand = seg_key != SENT
        c_src, c_arc, c_u, c_cost = (_take(x, win) for x in (src, arc, u, c))
        # look the candidates up among the existing tokens
        smaller = torch.searchsorted(key, seg_key)  # existing keys below each candidate
        pos = smaller.clamp(max=N - 1)
        found = cand & (_take(key, pos) == seg_key)
        better = found & (c_cost < _take(cost, pos))
        ins = cand & ~found
        c_rec = self.backpointers.add(better | ins, _take(rec, c_src), c_arc, _take(frames_ext, c_u), c_cost)
        # merge the two sorted key lists by scatter: an existing token moves right by the number
        # of inserts sorting before it; an insert lands at (existing keys below it) + (inserts
        # before it); an improvement overwrites its token at the token's new place. Everything
        # else (empty slots, overflow past N) goes to a dump slot N.
        before = torch.zeros(N + 1, dtype=torch.int64, device=self.device)
        before.scatter_add_(0, _where(ins, smaller, N), ins.long())
        old_to = _where(key != SENT, self._arange(N) + torch.cumsum(before[:N], 0), N).clamp_(max=N)
        ins_to = _where(ins, smaller + torch.cumsum(ins, 0) - 1, N).clamp_(max=N)
        imp_to = _where(better, _take(old_to, pos), N)

        def merged(old: torch.Tensor, cand: torch.Tensor, fill: float | int, improve: bool) -> torch.Tensor:
            out = old.new_full((N + 1,), fill).index_copy_(0, old_to, old).index_copy_(0, ins_to, cand)
            return (out.index_copy_(0, imp_to, cand) if improve else out)[:N]

        new = (
            merged(key, seg_key, SENT, False),
            merged(cost, c_cost, INF, True),
            merged(rec, c_rec, -1, True),
        )
        front = torch.zeros(N + 1, dtype=torch.bool, device=self.device)
        front = front.index_fill_(0, ins_to, True).index_fill_(0, imp_to, True)[:N]
        count = info.count + ins.sum()
        info.put(_NEED_TOK, count)
        need_eps, need_front = (_NEED_EPS1, _NEED_FRONT1) if first else (_NEED_EPS, _NEED_FRONT)
        info.put(need_eps, total)
        info.put(need_front, fcount)
        info.put(_ARCS, total)
        info.count = count.clamp(max=N)
        return new, front

    def _frame_fn(
        self, B: int, caps: dict[str, int], K: int, boost: BoostTable | None, per_utt: int
    ) -> Callable:
        def frame(key, cost, rec, ac, frames_ext):
            info = _Info(self.backpointers.count.new_zeros(()))
            tok, front, cut = self._emitting((key, cost, rec), ac, frames_ext, boost, B, caps, info, per_utt)
            for k in range(K):
                tok, front = self._epsilon_pass(tok, front, cut, frames_ext, boost, B, caps, info, k == 0)
            return (*tok, front, cut, info.vector(front, self.backpointers.count, self._per_utt(tok[0], B)))

        return frame

    def _passes_fn(self, B: int, caps: dict[str, int], K: int, boost: BoostTable | None) -> Callable:
        def passes(key, cost, rec, front, cut, frames_ext, count):
            info = _Info(count)
            tok = (key, cost, rec)
            for _ in range(K):
                tok, front = self._epsilon_pass(tok, front, cut, frames_ext, boost, B, caps, info, False)
            return (*tok, front, cut, info.vector(front, self.backpointers.count, self._per_utt(tok[0], B)))

        return passes

    # ------------------------------------------------------------------ host driver
    def _drive(self, first: Callable[[dict[str, int], int], tuple], B: int, frames_ext, boost):
        """Run a frame (emitting part + epsilon passes) with the host loop around it: one read per
        batch of passes, redo with larger capacities on overflow. `first(caps, K)` runs the first
        batch and returns its outputs; returns (the new TokenBuffer, the cut used)."""
        o = self.options
        bp = self.backpointers
        lat_mark = self.lattice.mark() if self.lattice is not None else None
        max_passes = o.max_epsilon_passes if self.g.has_epsilons else 0
        while True:
            caps = dict(self.capacity)
            N, E = caps["tok"], max(caps["eps"], caps["eps1"])
            K = min(self._passes_per_sync, max_passes)
            bp.reserve(N + max(self._reserve_passes, 2 * K) * E)
            out = first(caps, K)
            info = self._read(out[-1])
            needs = info[: len(CAPACITIES)]
            arcs, npass, done, arena_full = info[_ARCS], info[_PASSES], K, False
            while info[_FRONT] > 0 and done < max_passes and self._fits(needs, caps):
                k = min(max(K // 2, 1), max_passes - done)
                if bp.capacity - (info[_RECS] - bp._base) < k * E:
                    arena_full = True  # redo the frame after a flush
                    break
                count = torch.tensor(info[_COUNT], device=self.device)
                fn = self._passes_fn(B, caps, k, boost)
                key = ("passes", B, *caps.values(), k, id(boost), bp.arena_key)
                out = self.runner.run(key, fn, (*out[:-1], frames_ext, count))
                info = self._read(out[-1])
                needs = [max(a, b) for a, b in zip(needs, info[: len(CAPACITIES)], strict=True)]
                arcs, npass, done = arcs + info[_ARCS], npass + info[_PASSES], done + k
            if self._fits(needs, caps) and not arena_full:
                break
            # overflow: forget this attempt, grow what was too small, run the frame again
            self.stats["redone_frames"] += 1
            bp.rollback()
            if self.lattice is not None:
                self.lattice.truncate(lat_mark)
            if arena_full:
                self._reserve_passes = min(2 * self._reserve_passes, max(max_passes, 1))
            for name, need in zip(CAPACITIES, needs, strict=True):
                if need > caps[name]:
                    self.capacity[name] = _bucket(need + need // 4)
        bp.size = info[_RECS]
        self.stats["arcs"] += arcs
        self.stats["epsilon_passes"] += npass
        self.stats["epsilon_passes_run"] += done
        if info[_FRONT] > 0:
            self.stats["epsilon_limit_hit"] += 1
        self._adapt(needs, npass)
        key, cost, rec = out[:3]
        return TokenBuffer(key, cost, rec, B, self.num_states, info[_COUNT], info[_PER_UTT]), out[4]

    @staticmethod
    def _fits(needs: list[int], caps: dict[str, int]) -> bool:
        return all(need <= caps[name] for name, need in zip(CAPACITIES, needs, strict=True))

    def _adapt(self, needs: list[int], passes: int) -> None:
        """Next frame's capacities (25% headroom over what this frame used; grown when the use
        passes 9/10, shrunk after 16 frames below 1/4) and epsilon passes per sync (what this
        frame needed)."""
        for name, need in zip(CAPACITIES, needs, strict=True):
            cap = self.capacity[name]
            self._low[name] = self._low[name] + 1 if need * 4 < cap else 0
            if self._low[name] >= 16 or need * 10 > cap * 9:
                self.capacity[name] = _bucket(need + need // 4)
                self._low[name] = 0
            self.peak[name] = max(self.peak[name], self.capacity[name])
        if self.g.has_epsilons:
            self._passes_per_sync = max(1, passes)

    def init(
        self, num_utts: int, frames: torch.Tensor | None = None, boost: BoostTable | None = None
    ) -> TokenBuffer:
        """One start token per utterance (record with no predecessor), then the epsilon closure."""
        dev = self.device
        B = num_utts
        if frames is None:
            frames = torch.full((B,), -1, dtype=torch.int64, device=dev)
        frames_ext = torch.cat([frames, frames.new_full((1,), -1)])
        ones = torch.ones(B, dtype=torch.bool, device=dev)
        neg = torch.full((B,), -1, dtype=torch.int64, device=dev)
        cost0 = torch.zeros(B, dtype=torch.float32, device=dev)
        self.backpointers.reserve(B)
        rec = self.backpointers.add(ones, neg, neg, frames, cost0)
        self.backpointers.size += B
        utt = torch.arange(B, device=dev)
        start_state = self.g.start * self.lm_states + (self.lm.START if self.lm is not None else 0)
        state = torch.full((B,), start_state, dtype=torch.int64, device=dev)
        start = Tokens(utt, state, cost0, rec)
        cut = torch.cat([torch.full((B,), INF, device=dev), torch.full((1,), -INF, device=dev)])
        cut = torch.cat([cut, cut])  # the beam's cut and the word arcs' cut (see _emitting)
        self.capacity["tok"] = max(self.capacity["tok"], _pow2(2 * B))

        def first(caps: dict[str, int], K: int) -> tuple:
            buf = TokenBuffer.from_tokens(start, B, self.num_states, caps["tok"], 1)
            front = buf.key != SENT
            count = torch.tensor(B, device=dev)
            fn = self._passes_fn(B, caps, K, boost)
            return fn(*buf.tensors(), front, cut, frames_ext, count)

        if not self.g.has_epsilons:
            tok = TokenBuffer.from_tokens(start, B, self.num_states, self.capacity["tok"], 1)
        else:
            tok, _ = self._drive(first, B, frames_ext, boost)
        self._record_nodes(tok, frames_ext)
        return tok

    def _record_nodes(self, tok: TokenBuffer, frames_ext: torch.Tensor) -> None:
        if self.lattice is not None:
            self.lattice.add_nodes(tok.key != SENT, tok.utt, _take(frames_ext, tok.utt), tok.state, tok.cost)

    def step(
        self,
        tok: TokenBuffer,
        ac_cost: torch.Tensor,
        frames: torch.Tensor,
        boost: BoostTable | None = None,
    ) -> TokenBuffer:
        """Advance every utterance in `tok` by one frame.

        ac_cost: [B, V] acoustic costs of this frame (``-acoustic_scale * logprob``, blank penalty
        applied); frames: [B] int64 frame index of each utterance (for the records).
        """
        B = tok.num_utts
        self.stats["frames"] += 1
        if not tok.count:
            return tok
        if self._frames_since_flush >= self.options.host_copy_frames:
            self.flush()
        frames_ext = torch.cat([frames, frames.new_full((1,), -1)])
        bp = self.backpointers

        # the cutoff's selection shape: one captured graph serves every per_utt with the same one
        sel = (_bucket(tok.per_utt), *self._selections(tok.per_utt))

        def first(caps: dict[str, int], K: int) -> tuple:
            fn = self._frame_fn(B, caps, K, boost, tok.per_utt)
            key = ("frame", B, tok.capacity, *caps.values(), K, id(boost), bp.arena_key, sel)
            return self.runner.run(key, fn, (*tok.tensors(), ac_cost, frames_ext))

        new, _ = self._drive(first, B, frames_ext, boost)
        self._record_nodes(new, frames_ext)
        self._frames_since_flush += 1
        if self.lattice is not None and self.options.prune_interval > 0:
            self._frames_since_prune += 1
            if self._frames_since_prune >= self.options.prune_interval:
                self.flush()
                self.lattice.prune()
                self._frames_since_prune = 0
        return new

    def retire(self, tok: TokenBuffer, utts: list[int]) -> tuple[Tokens, TokenBuffer]:
        """Take the tokens of utterances `utts` out of the buffer (they have no more frames):
        (their compact tokens, the buffer without them). One sync (the count taken out)."""
        ids = torch.tensor(utts, dtype=torch.int64, device=self.device)
        gone = torch.isin(tok.utt, ids)
        out = tok.compact().select(gone[: tok.count])
        self._sync()
        order = torch.argsort(_where(gone, SENT, tok.key), stable=True)
        keep = ~_take(gone, order)
        B = tok.num_utts
        new = TokenBuffer(
            _where(keep, _take(tok.key, order), SENT),
            _where(keep, _take(tok.cost, order), INF),
            _where(keep, _take(tok.rec, order), -1),
            B,
            tok.num_states,
            tok.count - len(out),
            tok.per_utt,
        )
        return out, new

    def maybe_collect(self, holders: list[Tokens | TokenBuffer]) -> bool:
        """Garbage-collect the back-pointer records (`Backpointers.collect`) once there are more
        than max(`gc_records`, 4x the records kept by the last collection). `holders` are all the
        tokens still alive (current buffer, retired or parked tokens); their record ids are
        renumbered in place. Frame boundary only; one host read of the live record ids."""
        bp = self.backpointers
        if bp.size <= self._gc_at:
            return False
        recs = [h.rec[: h.count] if isinstance(h, TokenBuffer) else h.rec for h in holders]
        live = torch.cat(recs).to("cpu", copy=True).numpy() if recs else np.zeros(0, np.int64)
        self._sync()
        new_id = bp.collect(live)
        self.stats["gc_runs"] += 1
        if new_id is not None:
            table = torch.from_numpy(new_id).to(self.device)
            for h in holders:
                h.rec = _where(h.rec >= 0, _take(table, h.rec.clamp(min=0)), -1)
        self._gc_at = max(self.options.gc_records, 4 * bp.size)
        return True

    def load(self, tok: Tokens, num_utts: int) -> TokenBuffer:
        """Compact tokens (e.g. a stream state) into a buffer for `step`."""
        return TokenBuffer.from_tokens(tok, num_utts, self.num_states, self.capacity["tok"])

    def flush(self) -> None:
        """Copy pending back-pointers (and lattice arcs) to host memory in one batch."""
        self.backpointers.flush()
        if self.lattice is not None:
            self.lattice.flush()
        self._frames_since_flush = 0

    def best_final(
        self, tok: Tokens, num_utts: int, use_final: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per utterance: (best record id or -1, total cost, reached_final flag).

        Like Kaldi's GetBestPath: the best token after adding final costs if any token is in a
        final state, otherwise the best token without final costs (flagged as not final).
        With use_final=False (partial hypotheses) final costs are ignored.
        """
        dev = self.device
        if not len(tok):
            return (
                torch.full((num_utts,), -1, dtype=torch.int64, device=dev),
                torch.full((num_utts,), INF, device=dev),
                torch.zeros(num_utts, dtype=torch.bool, device=dev),
            )
        if use_final:
            fin = tok.cost + _take(self.g.final, self.graph_state(tok.state))
            if self.lm is not None:
                fin = fin + self.lm.final_cost(tok.state % self.lm_states)
            reached = torch.isfinite(self._segment_min(tok.utt, fin, num_utts))
            score = _where(_take(reached, tok.utt), fin, tok.cost)
        else:
            reached = torch.zeros(num_utts, dtype=torch.bool, device=dev)
            score = tok.cost
        best = self._segment_min(tok.utt, score, num_utts)
        idx = torch.arange(len(tok), device=dev)
        arg = torch.full((num_utts,), len(tok), dtype=torch.int64, device=dev)
        arg.scatter_reduce_(0, tok.utt, _where(score == _take(best, tok.utt), idx, len(tok)), "amin")
        has = arg < len(tok)
        rec = _where(has, _take(tok.rec, arg.clamp(max=len(tok) - 1)), -1)
        return rec, best, reached & has
