"""Batched frame-synchronous token passing over a DeviceGraph: the core shared by WFST decoders.

This is the search of paper 001 (sec. 3: ExpandArcs → Prune → D2H copy per frame, built on the
Kaldi CUDA decoder, prior-art D.1) written as plain torch tensor code that runs on any device.
A *token* is (utterance, graph state, cost, record id); all utterances of a batch live in one
flat token list, kept sorted by (utterance, state) after every recombination.

Per frame (`TokenPassing.step`), with the pruning rules of Kaldi's FasterDecoder so that results
are comparable token for token:

1. **Cutoff** (Kaldi ``GetCutoff``) per utterance: ``best + beam``; if the utterance has more than
   ``max_active`` tokens and the ``max_active+1``-th best cost is tighter, that value (found by
   selection, ``torch.kthvalue`` on a [B, max tokens] view, never a full sort); ``min_active``
   widens it the same way. The *adaptive beam* (``cutoff - best + beam_delta`` when max/min-active
   decided) prunes the new tokens of this frame.
2. **Parallel arc expansion** (paper 000, Alg. 3): per surviving token the number of emitting arcs
   ``split[s] - offsets[s]``; a prefix sum gives each token's slice of the output array, and
   ``repeat_interleave`` + ``arange`` give (source token, arc) for every expanded arc.
   ``cost = token cost + arc weight + acoustic cost`` where the acoustic cost is
   ``-acoustic_scale * logprob[b, t, ilabel-1]`` (precomputed per frame by the caller), plus an
   optional per-utterance word boost on the arc's olabel (paper 001 sec. 3.2, fig. 5).
3. **Prune** new arcs at ``best_new + adaptive_beam`` per utterance.
4. **Recombination** (paper 000, Alg. 4, sort-based instead of a hash table): key
   ``utt * num_states + state``; ``torch.unique`` groups equal keys, ``scatter_reduce(amin)`` picks
   the best cost and then the first index holding it. Memory is proportional to live tokens.
5. **Epsilon closure** (Kaldi ``ProcessNonemitting``): repeatedly expand the epsilon-input arcs
   (``split[s]:offsets[s+1]``) of tokens that are new or improved, drop arcs above the cutoff of
   step 3, recombine with the existing tokens (an existing token wins ties), until no token
   improves (Bellman-Ford; at most ``max_epsilon_passes`` passes).

Every kept token gets a *record* (predecessor record, arc index, frame, cost) in `Backpointers`;
records are collected per frame as device tensors and copied to host memory in one batched copy
every ``host_copy_frames`` frames, so the device holds only the current frame's tokens.

Host synchronisations per frame (counted in ``stats["syncs"]``; free on CPU, each one a stall
on a GPU): data-dependent sizes need the host to know a count. Per frame:
``max tokens`` .item() for max/min-active (1, skipped when both are off), the emitting arc count
.item() (1), the beam-pruning nonzero (1), the recombination ``unique`` (1); then per epsilon
pass: arc count (1), pruning nonzero (1), ``unique`` (1), improved-or-new nonzero (1), inserted
count (1), next frontier nonzero (1) - the last pass stops after 1-2. Measured on a BPE TLG with
a bigram LM: 28-30 syncs per frame (about 4 epsilon passes). Improvements are scattered through
a dummy slot instead of a nonzero. Fixed-capacity buffers (paper 001 sec. 3, CUDA graphs) would
remove them; not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from asrdecode.graph.format import DeviceGraph

INF = float("inf")


def _take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """1-D gather; `index_select` is about twice as fast as advanced indexing on CPU."""
    return x.index_select(0, index)


@dataclass
class SearchOptions:
    """Pruning options with Kaldi's (FasterDecoder / CudaDecoder) names and meaning."""

    beam: float = 16.0
    max_active: int = 10000
    min_active: int = 200
    beam_delta: float = 0.5
    max_epsilon_passes: int = 64
    host_copy_frames: int = 32


@dataclass
class Tokens:
    """A flat token list for a batch, sorted by (utt, state) after recombination.

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


class Backpointers:
    """Append-only arena of token records: prev record (-1 = root), arc index (-1 = start), frame, cost.

    `add` takes device tensors and returns their global ids; pending device chunks are moved to
    host memory in one concatenated copy by `flush` (called by the search every few frames).
    """

    def __init__(self) -> None:
        self.size = 0
        self._pending: list[tuple[torch.Tensor, ...]] = []
        self._host: list[np.ndarray] = []  # structured chunks
        self._merged: np.ndarray | None = None

    DTYPE = np.dtype([("prev", "<i8"), ("arc", "<i8"), ("frame", "<i8"), ("cost", "<f4")])

    def add(
        self, prev: torch.Tensor, arc: torch.Tensor, frame: torch.Tensor, cost: torch.Tensor
    ) -> torch.Tensor:
        n = int(prev.shape[0])
        ids = torch.arange(self.size, self.size + n, dtype=torch.int64, device=prev.device)
        self.size += n
        if n:
            self._pending.append((prev, arc, frame, cost))
        return ids

    def flush(self) -> None:
        if not self._pending:
            return
        cols = [torch.cat([p[i] for p in self._pending]) for i in range(4)]
        self._pending = []
        prev, arc, frame = (c.to("cpu", torch.int64).numpy() for c in cols[:3])
        cost = cols[3].to("cpu", torch.float32).numpy()
        chunk = np.empty(len(prev), dtype=self.DTYPE)
        chunk["prev"], chunk["arc"], chunk["frame"], chunk["cost"] = prev, arc, frame, cost
        self._host.append(chunk)
        self._merged = None

    def host(self) -> np.ndarray:
        """All records as one structured numpy array (index = record id)."""
        self.flush()
        if self._merged is None or len(self._merged) != self.size:
            self._merged = np.concatenate(self._host) if self._host else np.empty(0, dtype=self.DTYPE)
            self._host = [self._merged]
        return self._merged

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
        return torch.where(hit, self.cost[pos], torch.zeros_like(self.cost[pos]))


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


class LatticeArcs:
    """Arcs kept for lattice generation and the token set of every frame (node costs), collected
    as device tensors and copied to host in batches.

    Every arc that survives the *search* beam is kept: a path within `lattice_beam` of the best
    at the end may be far from the best at some frame, so lattice-beam pruning needs backward
    costs and happens on the host at the end (lattice.build_lattice), like Kaldi's
    PruneForwardLinks. (Periodic backward pruning during the search is not implemented: memory
    grows with the number of expanded arcs of the utterance.)

    arcs: utt, frame (of the destination node), src state, dst state, arc index, acoustic cost;
    an emitting arc goes from node (frame-1, src) to (frame, dst), an epsilon arc stays in frame.
    nodes: utt, frame, state, cost (forward cost = best path cost to the node).
    """

    ARC_FIELDS = ("utt", "frame", "src", "dst", "arc", "ac")
    NODE_FIELDS = ("utt", "frame", "state", "cost")

    def __init__(self) -> None:
        self._arcs: list[tuple[torch.Tensor, ...]] = []
        self._nodes: list[tuple[torch.Tensor, ...]] = []
        self._host: dict[str, list[np.ndarray]] = {"arcs": [], "nodes": []}

    def add_arcs(self, *cols: torch.Tensor) -> None:
        if len(cols[0]):
            self._arcs.append(cols)

    def add_nodes(self, *cols: torch.Tensor) -> None:
        if len(cols[0]):
            self._nodes.append(cols)

    def flush(self) -> None:
        for name, pending, fields in (
            ("arcs", self._arcs, self.ARC_FIELDS),
            ("nodes", self._nodes, self.NODE_FIELDS),
        ):
            if pending:
                cols = [torch.cat([p[i] for p in pending]).cpu().numpy() for i in range(len(fields))]
                self._host[name].append(np.rec.fromarrays(cols, names=list(fields)))
                pending.clear()

    def host(self) -> tuple[np.recarray | None, np.recarray | None]:
        self.flush()
        out = []
        for name in ("arcs", "nodes"):
            chunks = self._host[name]
            if len(chunks) > 1:
                chunks[:] = [np.concatenate(chunks).view(np.recarray)]
            out.append(chunks[0] if chunks else None)
        return out[0], out[1]


class TokenPassing:
    """The batched search over one graph (see the module docstring); holds the record arena,
    optional lattice arcs and statistics of the current batch (or stream set)."""

    def __init__(
        self,
        graph: DeviceGraph | SearchGraph,
        options: SearchOptions | None = None,
        lattice_beam: float | None = None,
    ) -> None:
        self.g = graph if isinstance(graph, SearchGraph) else SearchGraph(graph)
        self.options = options or SearchOptions()
        self.device = self.g.device
        self.num_states = self.g.num_states
        self.lattice_beam = lattice_beam
        self.backpointers = Backpointers()
        self.lattice: LatticeArcs | None = LatticeArcs() if lattice_beam is not None else None
        self.stats = {"frames": 0, "syncs": 0, "epsilon_passes": 0, "epsilon_limit_hit": 0, "arcs": 0}
        self._frames_since_flush = 0

    @property
    def final(self) -> torch.Tensor:
        return self.g.final

    def _sync(self, n: int = 1) -> None:
        self.stats["syncs"] += n

    # ------------------------------------------------------------------ building blocks
    def _expand(self, n_arcs: torch.Tensor, first_arc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Paper 000 Alg. 3: (source token index, arc index) of every arc of every token.

        n_arcs: arcs to expand per token (0 for pruned tokens); first_arc: their first arc.
        """
        total = int(n_arcs.sum().item())
        self._sync()
        if total == 0:
            z = torch.zeros(0, dtype=torch.int64, device=self.device)
            return z, z
        src = torch.repeat_interleave(
            torch.arange(len(n_arcs), device=self.device), n_arcs, output_size=total
        )
        start = torch.cumsum(n_arcs, 0) - n_arcs  # exclusive prefix sum = output offset of each token
        arc = _take(first_arc - start, src) + torch.arange(total, device=self.device)
        self.stats["arcs"] += total
        return src, arc

    def _recombine(self, key: torch.Tensor, cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Paper 000 Alg. 4 (sort-based): (sorted unique keys, index of the best entry of each).

        Ties go to the lowest index, so callers put existing tokens before new candidates.
        """
        uniq, inv = torch.unique(key, sorted=True, return_inverse=True)
        self._sync()
        m = len(uniq)
        best = torch.full((m,), INF, dtype=cost.dtype, device=self.device)
        best.scatter_reduce_(0, inv, cost, reduce="amin", include_self=True)
        idx = torch.arange(len(key), device=self.device)
        arg = torch.full((m,), len(key), dtype=torch.int64, device=self.device)
        is_best = cost == _take(best, inv)
        arg.scatter_reduce_(0, inv, torch.where(is_best, idx, len(key)), reduce="amin", include_self=True)
        return uniq, arg

    def _segment_min(self, utt: torch.Tensor, cost: torch.Tensor, num_utts: int) -> torch.Tensor:
        out = torch.full((num_utts,), INF, dtype=cost.dtype, device=self.device)
        return out.scatter_reduce_(0, utt, cost, reduce="amin", include_self=True)

    def cutoff(self, tok: Tokens, num_utts: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Kaldi FasterDecoder::GetCutoff per utterance: (cutoff [B], adaptive beam [B])."""
        o = self.options
        best = self._segment_min(tok.utt, tok.cost, num_utts)
        beam_cut = best + o.beam
        beam = torch.full_like(best, o.beam)
        if not len(tok) or (o.max_active >= 2**31 - 1 and o.min_active <= 0):
            return beam_cut, beam
        counts = torch.bincount(tok.utt, minlength=num_utts)
        max_n = int(counts.max().item())
        self._sync()
        inf = torch.full_like(best, INF)
        max_cut, min_cut = inf, inf
        if max_n > min(o.max_active, max(o.min_active, 0)):
            dense = torch.full((num_utts, max_n), INF, dtype=tok.cost.dtype, device=self.device)
            first = torch.cumsum(counts, 0) - counts
            pos = torch.arange(len(tok), device=self.device) - _take(first, tok.utt)
            dense[tok.utt, pos] = tok.cost  # tokens are sorted by utt
            if max_n > o.max_active:
                max_cut = dense.kthvalue(o.max_active + 1, dim=1).values
            if o.min_active > 0 and max_n > o.min_active:
                min_cut = dense.kthvalue(o.min_active + 1, dim=1).values
        if o.min_active <= 0:
            min_cut = torch.where(counts > 0, best, inf)
        use_max = max_cut < beam_cut
        use_min = ~use_max & (min_cut > beam_cut)
        cut = torch.where(use_max, max_cut, torch.where(use_min, min_cut, beam_cut))
        adaptive = torch.where(
            use_max,
            max_cut - best + o.beam_delta,
            torch.where(use_min, min_cut - best + o.beam_delta, beam),
        )
        adaptive = torch.where(counts > 0, adaptive, beam)
        return cut, adaptive

    # ------------------------------------------------------------------ search
    def init(
        self, num_utts: int, frames: torch.Tensor | None = None, boost: BoostTable | None = None
    ) -> Tokens:
        """One start token per utterance (record with no predecessor), then the epsilon closure."""
        dev = self.device
        utt = torch.arange(num_utts, device=dev)
        state = torch.full((num_utts,), self.g.start, dtype=torch.int64, device=dev)
        cost = torch.zeros(num_utts, dtype=torch.float32, device=dev)
        if frames is None:
            frames = torch.full((num_utts,), -1, dtype=torch.int64, device=dev)
        neg = torch.full((num_utts,), -1, dtype=torch.int64, device=dev)
        rec = self.backpointers.add(neg, neg, frames, cost)
        tok = Tokens(utt, state, cost, rec)
        cut = torch.full((num_utts,), INF, device=dev)
        tok = self.closure(tok, cut, frames, boost, torch.zeros(num_utts, device=dev))
        self._record_nodes(tok, frames)
        return tok

    def _record_nodes(self, tok: Tokens, frames: torch.Tensor) -> None:
        if self.lattice is not None:
            self.lattice.add_nodes(tok.utt, _take(frames, tok.utt), tok.state, tok.cost)

    def step(
        self,
        tok: Tokens,
        ac_cost: torch.Tensor,
        frames: torch.Tensor,
        boost: BoostTable | None = None,
    ) -> Tokens:
        """Advance every utterance in `tok` by one frame.

        ac_cost: [B, V] acoustic costs of this frame (``-acoustic_scale * logprob``, blank penalty
        applied); frames: [B] int64 frame index of each utterance (for the records).
        """
        g = self.g
        num_utts, V = ac_cost.shape
        self.stats["frames"] += 1
        if not len(tok):
            return tok
        cut, adaptive = self.cutoff(tok, num_utts)
        alive = tok.cost < _take(cut, tok.utt)
        n = torch.where(alive, _take(g.n_emit, tok.state), 0)
        src, arc = self._expand(n, _take(g.first_emit, tok.state))
        if not len(arc):
            return Tokens.empty(self.device)
        u = _take(tok.utt, src)
        ac = _take(ac_cost.reshape(-1), u * V + _take(g.column, arc))
        cost = _take(tok.cost, src) + _take(g.weight, arc) + ac
        if boost is not None:
            cost = cost + boost.lookup(u, _take(g.olabel, arc))
        best = self._segment_min(u, cost, num_utts)
        next_cut = best + adaptive
        keep = torch.nonzero(cost < _take(next_cut, u)).squeeze(1)
        self._sync()
        k_arc, k_u, k_cost = (_take(x, keep) for x in (arc, u, cost))
        k_dst = _take(g.nextstate, k_arc)
        if self.lattice is not None:  # every arc that survived the search beam (see LatticeArcs)
            k_src = _take(src, keep)
            self.lattice.add_arcs(
                k_u, _take(frames, k_u), _take(tok.state, k_src), k_dst, k_arc, _take(ac, keep)
            )
        _, win = self._recombine(k_u * self.num_states + k_dst, k_cost)
        src = _take(src, _take(keep, win))
        arc, u, cost, dst = (_take(x, win) for x in (k_arc, k_u, k_cost, k_dst))
        rec = self.backpointers.add(_take(tok.rec, src), arc, _take(frames, u), cost)
        new = Tokens(u, dst, cost, rec)
        new = self.closure(new, next_cut, frames, boost, best)
        self._record_nodes(new, frames)
        self._frames_since_flush += 1
        if self._frames_since_flush >= self.options.host_copy_frames:
            self.flush()
        return new

    def flush(self) -> None:
        """Copy pending back-pointers (and lattice arcs) to host memory in one batch."""
        self.backpointers.flush()
        if self.lattice is not None:
            self.lattice.flush()
        self._frames_since_flush = 0

    def closure(
        self,
        tok: Tokens,
        cut: torch.Tensor,
        frames: torch.Tensor,
        boost: BoostTable | None = None,
        best: torch.Tensor | None = None,
    ) -> Tokens:
        """Kaldi ProcessNonemitting as Bellman-Ford passes over epsilon-input arcs.

        Each pass expands the epsilon arcs of the tokens that are new or improved (the frontier),
        drops arcs above `cut`, recombines the candidates among themselves (unique), and looks
        them up in the sorted key list of the existing tokens (searchsorted): a candidate that
        improves a token replaces its cost and record in place; one for a new state is inserted.
        `tok` must be sorted by key; the result is too.
        """
        g = self.g
        S = self.num_states
        key = tok.utt * S + tok.state
        frontier = torch.arange(len(tok), device=self.device)
        for _ in range(self.options.max_epsilon_passes):
            if not len(frontier):
                return tok
            self.stats["epsilon_passes"] += 1
            f_utt, f_state, f_cost = (_take(x, frontier) for x in (tok.utt, tok.state, tok.cost))
            f_rec = _take(tok.rec, frontier)
            n = torch.where(f_cost <= _take(cut, f_utt), _take(g.n_eps, f_state), 0)
            src, arc = self._expand(n, _take(g.split, f_state))
            if not len(arc):
                return tok
            u = _take(f_utt, src)
            cost = _take(f_cost, src) + _take(g.weight, arc)
            if boost is not None:
                cost = cost + boost.lookup(u, _take(g.olabel, arc))
            keep = torch.nonzero(cost <= _take(cut, u)).squeeze(1)
            self._sync()
            if not len(keep):
                return tok
            src, arc, u, cost = (_take(x, keep) for x in (src, arc, u, cost))
            dst = _take(g.nextstate, arc)
            if self.lattice is not None:
                self.lattice.add_arcs(
                    u, _take(frames, u), _take(f_state, src), dst, arc, torch.zeros_like(cost)
                )
            ckey, win = self._recombine(u * S + dst, cost)
            src, arc, u, cost, dst = (_take(x, win) for x in (src, arc, u, cost, dst))
            # look the candidates up among the existing tokens
            pos = torch.searchsorted(key, ckey)
            pos_c = pos.clamp(max=max(len(key) - 1, 0))
            found = (
                (pos < len(key)) & (_take(key, pos_c) == ckey)
                if len(key)
                else torch.zeros_like(ckey, dtype=torch.bool)
            )
            better = found & (cost < _take(tok.cost, pos_c)) if len(key) else found
            take = torch.nonzero(better | ~found).squeeze(1)
            self._sync()
            if not len(take):
                return tok
            src, arc, u, cost, dst, found, pos_c, ckey = (
                _take(x, take) for x in (src, arc, u, cost, dst, found, pos_c, ckey)
            )
            rec = self.backpointers.add(_take(f_rec, src), arc, _take(frames, u), cost)
            # in-place improvements
            # improvements scatter into their slot; inserts go to a dummy slot N (no sync)
            N = len(tok)
            slot = torch.where(found, pos_c, N)
            t_cost = torch.cat([tok.cost, tok.cost.new_zeros(1)]).index_copy_(0, slot, cost)[:N]
            t_rec = torch.cat([tok.rec, tok.rec.new_zeros(1)]).index_copy_(0, slot, rec)[:N]
            is_front = torch.zeros(N + 1, dtype=torch.bool, device=self.device)
            is_front[slot] = True
            is_front = is_front[:N]
            ins = torch.nonzero(~found).squeeze(1)
            self._sync()
            if len(ins):
                all_key = torch.cat([key, _take(ckey, ins)])
                order = torch.argsort(all_key)
                key = _take(all_key, order)
                tok = Tokens(
                    _take(torch.cat([tok.utt, _take(u, ins)]), order),
                    _take(torch.cat([tok.state, _take(dst, ins)]), order),
                    _take(torch.cat([t_cost, _take(cost, ins)]), order),
                    _take(torch.cat([t_rec, _take(rec, ins)]), order),
                )
                is_front = _take(
                    torch.cat([is_front, torch.ones(len(ins), dtype=torch.bool, device=self.device)]), order
                )
            else:
                tok = Tokens(tok.utt, tok.state, t_cost, t_rec)
            frontier = torch.nonzero(is_front).squeeze(1)
            self._sync()
        self.stats["epsilon_limit_hit"] += 1
        return tok

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
            fin = tok.cost + _take(self.g.final, tok.state)
            reached = torch.isfinite(self._segment_min(tok.utt, fin, num_utts))
            score = torch.where(_take(reached, tok.utt), fin, tok.cost)
        else:
            reached = torch.zeros(num_utts, dtype=torch.bool, device=dev)
            score = tok.cost
        best = self._segment_min(tok.utt, score, num_utts)
        idx = torch.arange(len(tok), device=dev)
        arg = torch.full((num_utts,), len(tok), dtype=torch.int64, device=dev)
        arg.scatter_reduce_(0, tok.utt, torch.where(score == _take(best, tok.utt), idx, len(tok)), "amin")
        has = arg < len(tok)
        rec = torch.where(has, _take(tok.rec, arg.clamp(max=len(tok) - 1)), -1)
        return rec, best, reached & has
