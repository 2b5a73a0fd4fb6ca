"""A decoding graph restricted to one word sequence: the graph for forced alignment.

``WordSequenceGraphs(graph).restrict(word_ids)`` is the part of ``graph`` whose paths output
exactly ``word_ids`` (epsilon outputs in between): the composition ``graph o W`` with the linear
acceptor W of the words, each arc keeping its input label and cost. Decoding it exhaustively gives
the best path of that word sequence in the graph (acoustic + graph cost), so the cost of any
hypothesis - another decoder's, a reference transcript - can be compared with the decoder's own
1-best in the same model (Kaldi's forced alignment, with the decoding graph's own LM costs kept).

Product states are (graph state s, words output so far k). To stay small on an HCLG with a large
vocabulary, a state (s, k) is kept only if from s a path of epsilon-output arcs reaches an arc
that outputs ``word_ids[k]`` (or, once every word is out, a final state): the backward closure
``can_emit[w]`` over epsilon-output arcs, computed once per distinct word by a compiled loop.
Without it, every word's pronunciation prefix would enter the product at every position.
"""

from __future__ import annotations

import numba
import numpy as np

from asrdecode.errors import GraphError
from asrdecode.graph.format import DeviceGraph
from asrdecode.numba_status import configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)


@numba.njit(nogil=True, cache=True)
def backward_closure(
    rev_offsets: np.ndarray, rev_src: np.ndarray, seeds: np.ndarray, num_states: int
) -> np.ndarray:
    """States from which a path over the reversed arcs' sources reaches a seed (seeds included)."""
    mark = np.zeros(num_states, dtype=np.bool_)
    stack = np.empty(num_states, dtype=np.int64)
    top = 0
    for s in seeds:
        if not mark[s]:
            mark[s] = True
            stack[top] = s
            top += 1
    while top > 0:
        top -= 1
        s = stack[top]
        for a in range(rev_offsets[s], rev_offsets[s + 1]):
            p = rev_src[a]
            if not mark[p]:
                mark[p] = True
                stack[top] = p
                top += 1
    return mark


def reversed_arcs(
    src: np.ndarray, nextstate: np.ndarray, selected: np.ndarray, num_states: int
) -> tuple[np.ndarray, np.ndarray]:
    """The `selected` arcs grouped by destination, for `backward_closure`: per state s, the sources
    of the arcs into s are ``rev_src[rev_offsets[s]:rev_offsets[s + 1]]`` (input order kept)."""
    arcs = np.flatnonzero(selected)
    order = arcs[np.argsort(nextstate[arcs], kind="stable")]
    rev_offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(nextstate[order], minlength=num_states), out=rev_offsets[1:])
    return rev_offsets, src[order]


class WordSequenceGraphs:
    """Restrictions of one graph to word sequences; per-word closures are cached."""

    def __init__(self, graph: DeviceGraph):
        arcs = graph.arc_arrays()
        self.graph = graph
        self.num_states = graph.num_states
        self.offsets = graph.offsets.cpu().numpy().astype(np.int64)
        self.ilabel = arcs["ilabel"].astype(np.int64)
        self.olabel = arcs["olabel"].astype(np.int64)
        self.weight = arcs["weight"]
        self.nextstate = arcs["nextstate"].astype(np.int64)
        self.src = arcs["src"]
        self.final = graph.final.cpu().numpy()
        # epsilon-output arcs, reversed: nextstate -> src
        self.rev_offsets, self.rev_src = reversed_arcs(
            self.src, self.nextstate, self.olabel == 0, self.num_states
        )
        self._can_emit: dict[int, np.ndarray] = {}

    def can_emit(self, word: int) -> np.ndarray:
        """[S] bool: from this state an epsilon-output path reaches an arc outputting `word`
        (word -1: reaches a final state)."""
        if word not in self._can_emit:
            if word < 0:
                seeds = np.flatnonzero(np.isfinite(self.final))
            else:
                seeds = np.unique(self.src[self.olabel == word])
            self._can_emit[word] = backward_closure(
                self.rev_offsets, self.rev_src, seeds.astype(np.int64), self.num_states
            )
        return self._can_emit[word]

    def restrict(self, word_ids: list[int]) -> DeviceGraph:
        """The graph's paths that output exactly `word_ids` (a trim graph; no states if none)."""
        return self.restrict_with_states(word_ids)[0]

    def restrict_with_states(self, word_ids: list[int]) -> tuple[DeviceGraph, np.ndarray]:
        """`restrict`, and per state of the restriction its product state: int64 [N, 2] rows of
        (graph state, words output so far)."""
        n = len(word_ids)
        if any(w <= 0 for w in word_ids):
            raise GraphError("word sequence: word ids must be positive")
        allowed = [self.can_emit(w) for w in word_ids] + [self.can_emit(-1)]
        index: dict[tuple[int, int], int] = {}
        arcs: list[tuple[int, int, int, float, int]] = []
        start = self.graph.start
        if start < 0 or not allowed[0][start]:
            return _empty(self.graph), np.zeros((0, 2), dtype=np.int64)
        index[(start, 0)] = 0
        todo = [(start, 0)]
        while todo:
            s, k = todo.pop()
            here = index[(s, k)]
            lo, hi = self.offsets[s], self.offsets[s + 1]
            out, ns = self.olabel[lo:hi], self.nextstate[lo:hi]
            step = (out != 0).astype(np.int64)
            keep = out == 0
            if k < n:
                keep |= out == word_ids[k]
            for a in np.flatnonzero(keep):
                nk = k + int(step[a])
                target = int(ns[a])
                if not allowed[nk][target]:
                    continue
                key = (target, nk)
                if key not in index:
                    index[key] = len(index)
                    todo.append(key)
                arcs.append(
                    (here, int(self.ilabel[lo + a]), int(out[a]), float(self.weight[lo + a]), index[key])
                )
        final = np.full(len(index), np.inf, dtype=np.float32)
        for (s, k), i in index.items():
            if k == n:
                final[i] = self.final[s]
        rows = np.array(arcs, dtype=np.float64).reshape(-1, 5)
        states = np.zeros((len(index), 2), dtype=np.int64)
        for key, i in index.items():
            states[i] = key
        graph = DeviceGraph.from_arrays(
            len(index),
            0,
            final,
            rows[:, 0].astype(np.int64),
            rows[:, 1].astype(np.int64),
            rows[:, 2].astype(np.int64),
            np.array([a[3] for a in arcs], dtype=np.float32),
            rows[:, 4].astype(np.int64),
            meta=dict(self.graph.meta),
        )
        return graph, states


def _empty(graph: DeviceGraph) -> DeviceGraph:
    z = np.zeros(0, dtype=np.int64)
    return DeviceGraph.from_arrays(
        0, -1, np.zeros(0, np.float32), z, z, z, z.astype(np.float32), z, dict(graph.meta)
    )
