"""Lattices of the `wfst` decoder: state-level lattices from the search, word lattices, n-best.

During the search (`core.TokenPassing` with ``lattice_beam``) every expanded arc whose cost is
within ``lattice_beam`` of its frame's best is kept with its source and destination *node*
(frame, graph state), together with every frame's final token set (node forward costs). This is
the exact-lattice idea of the Kaldi CUDA decoder (prior-art D.1: tokens are arc instantiations,
recombined tokens keep their extra predecessors) without a per-token linked list.

On the host, per utterance (`build_lattice`):

1. backward costs ``beta`` frame by frame (epsilon arcs of a frame relaxed to a fixed point, then
   the emitting arcs into the frame), final costs at the last frame (if the search reached a
   final state; otherwise every last-frame node ends with cost 0, as Kaldi's fallback);
2. forward-backward pruning: keep arcs with ``alpha[src] + arc + beta[dst] <= best + lattice_beam``
   (Kaldi's lattice-beam pruning);
3. the result is a `StateLattice`: arcs with (ilabel, olabel, graph cost, acoustic cost). Its word
   lattice is the olabel acceptor with total costs, epsilon-removed, determinized and minimized
   with kaldifst (tropical semiring); n-best = n shortest paths of the word lattice.

Writers: Kaldi text lattices (``lat.ark,t`` style, state-level, ``graph,acoustic`` weights) and
OpenFst binary word lattices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class StateLattice:
    """A pruned state-level lattice of one utterance (arcs in topological-ish frame order).

    src, dst: node ids (0 = start); ilabel (graph input label, column + 1, 0 = epsilon), olabel
    (word id, 0 = none); graph, acoustic: costs of each arc; final: node id -> final cost.
    """

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    graph: np.ndarray
    acoustic: np.ndarray
    final: dict[int, float]
    num_frames: int
    words: dict[int, str]
    beam: float = 8.0
    _word: Any = None

    @property
    def num_arcs(self) -> int:
        return int(len(self.src))

    def to_kaldi_text(self, utt_id: str) -> str:
        """Kaldi text lattice (`lattice-copy ... ark,t:` of a state-level Lattice): `utt-id`, then
        `src dst ilabel olabel graph,acoustic` per arc, `state graph,acoustic` per final state."""
        lines = [utt_id]
        for i in range(self.num_arcs):
            lines.append(
                f"{self.src[i]} {self.dst[i]} {self.ilabel[i]} {self.olabel[i]} "
                f"{self.graph[i]:.6g},{self.acoustic[i]:.6g}"
            )
        for s, w in sorted(self.final.items()):
            lines.append(f"{s} {w:.6g},0")
        return "\n".join(lines) + "\n\n"

    def word_fst(self, beam: float | None = None, max_states: int = 200000) -> Any:
        """Word lattice: olabel acceptor with total costs, rmepsilon + pruned determinize + minimize.

        Determinization is pruned at `beam` (default: the lattice beam) over the best path and
        capped at `max_states`, as Kaldi's determinize-lattice-pruned, because determinizing a
        wide lattice can blow up exponentially."""
        if self._word is not None and beam is None:
            return self._word
        import kaldifst

        fst = kaldifst.StdVectorFst()
        for _ in range(max(self.num_nodes, 1)):
            fst.add_state()
        fst.start = 0
        total = self.graph + self.acoustic
        for i in range(self.num_arcs):
            o = int(self.olabel[i])
            fst.add_arc(int(self.src[i]), kaldifst.StdArc(o, o, float(total[i]), int(self.dst[i])))
        for s, w in self.final.items():
            fst.set_final(s, w)
        kaldifst.connect(fst)
        if fst.num_states == 0:
            return fst
        kaldifst.rmepsilon(fst)
        b = self.beam if beam is None else beam
        det = kaldifst.determinize(fst, weight=str(b), nstate=max_states)
        kaldifst.minimize(det)
        if beam is None:
            self._word = det
        return det

    def nbest(self, n: int) -> list[tuple[list[str], float]]:
        """Up to n distinct word sequences with their total cost, best first."""
        import kaldifst

        word = self.word_fst()
        if word.num_states == 0:
            return []
        paths = kaldifst.convert_nbest_to_vector(kaldifst.shortest_path(word, n=n))
        out = []
        for p in paths:
            ok, _, olabels, weight = kaldifst.get_linear_symbol_sequence(p)
            if ok:
                out.append(([self.words.get(o, str(o)) for o in olabels], float(weight.value)))
        out.sort(key=lambda x: x[1])
        return out

    def density(self) -> float:
        """Word-lattice arcs per frame (Kaldi's lattice density)."""
        import kaldifst

        word = self.word_fst()
        arcs = sum(1 for s in range(word.num_states) for _ in kaldifst.ArcIterator(word, s))
        return arcs / max(self.num_frames, 1)


def write_kaldi_text(path: str | Path, lattices: dict[str, StateLattice]) -> None:
    """All lattices of a run into one `lat.ark,t`-style text file."""
    with open(path, "w", encoding="utf-8") as fh:
        for utt, lat in lattices.items():
            fh.write(lat.to_kaldi_text(utt))


def write_word_fst(path: str | Path, lattice: StateLattice) -> None:
    """The determinized word lattice as an OpenFst binary file (`fstprint` reads it)."""
    lattice.word_fst().write(str(path))


def build_lattice(
    arcs: np.recarray,
    nodes: np.recarray,
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
) -> StateLattice | None:
    """One utterance's pruned StateLattice from its search arcs and nodes (see module doc)."""
    if nodes is None or not len(nodes):
        return None
    S = int(len(g_final))
    node_key = (nodes.frame.astype(np.int64) + 1) * S + nodes.state
    order = np.argsort(node_key, kind="stable")
    node_key, alpha = node_key[order], nodes.cost[order].astype(np.float64)
    node_frame = nodes.frame[order].astype(np.int64)
    n_nodes = len(node_key)
    if arcs is None:
        arcs = np.rec.fromarrays(
            [np.zeros(0, np.int64)] * 6, names=["utt", "frame", "src", "dst", "arc", "ac"]
        )
    emitting = g_ilabel[arcs.arc] > 0
    src_frame = arcs.frame.astype(np.int64) - emitting
    skey = (src_frame + 1) * S + arcs.src
    dkey = (arcs.frame.astype(np.int64) + 1) * S + arcs.dst

    def lookup(k: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(node_key, k).clip(max=max(n_nodes - 1, 0))
        return np.where(node_key[pos] == k, pos, -1)

    src, dst = lookup(skey), lookup(dkey)
    ok = (src >= 0) & (dst >= 0)
    # an improved token re-expands its epsilon arcs: keep one copy of each (src, dst, arc)
    if ok.any():
        triple = np.stack([src, dst, arcs.arc.astype(np.int64)], axis=1)
        _, first = np.unique(triple, axis=0, return_index=True)
        dup = np.ones(len(ok), dtype=bool)
        dup[first] = False
        ok &= ~dup
    src, dst, arc_id, ac = src[ok], dst[ok], arcs.arc[ok], arcs.ac[ok].astype(np.float64)
    emitting, frame = emitting[ok], arcs.frame[ok].astype(np.int64)
    ol = g_olabel[arc_id]
    graph = g_weight[arc_id].astype(np.float64)
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
    # backward costs, frame by frame (epsilon arcs of a frame to a fixed point, then emitting)
    beta = fin.copy()
    by_frame = np.argsort(-frame, kind="stable")
    frame_sorted = frame[by_frame]
    bounds = np.flatnonzero(np.diff(frame_sorted)) + 1
    for group in np.split(by_frame, bounds):
        if not len(group):
            continue
        eps = group[~emitting[group]]
        for _ in range(1000):
            cand = cost[eps] + beta[dst[eps]]
            before = beta.copy()
            np.minimum.at(beta, src[eps], cand)
            if np.array_equal(before, beta):
                break
        em = group[emitting[group]]
        np.minimum.at(beta, src[em], cost[em] + beta[dst[em]])
    best = float(np.min(alpha + fin)) if np.isfinite(alpha + fin).any() else math.inf
    keep = alpha[src] + cost + beta[dst] <= best + lattice_beam + 1e-4
    src, dst, ilabel, ol = src[keep], dst[keep], g_ilabel[arc_id][keep], ol[keep]
    graph, ac = graph[keep], ac[keep]
    # renumber: start node first, then kept nodes in node order
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
    final = {int(new_id[i]): float(fin[i]) for i in np.flatnonzero(np.isfinite(fin) & used) if new_id[i] >= 0}
    return StateLattice(
        num_nodes=len(ids),
        src=new_id[src],
        dst=new_id[dst],
        ilabel=ilabel.astype(np.int64),
        olabel=ol.astype(np.int64),
        graph=graph,
        acoustic=ac,
        final=final,
        num_frames=num_frames,
        words=words,
        beam=lattice_beam,
    )
