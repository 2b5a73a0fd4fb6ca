"""A plain-Python model of kaldi-decoder's FasterDecoder (Kaldi's `faster-decoder.cc`), written
from the published algorithm to explain where the `wfst` decoder and Kaldi can differ.

The model has two switches for the two places where FasterDecoder's result depends on
implementation details rather than on beam / max_active / min_active:

* ``float_cutoff``: ``GetCutoff`` collects the token costs (double) into a ``std::vector<float>``
  and returns the ``max_active``-th (or ``min_active``-th) smallest *float* as the cutoff, while
  tokens survive on ``double cost < cutoff``. When that float rounded up, the token it came from
  survives too: Kaldi keeps ``max_active`` or ``max_active + 1`` tokens, depending on rounding.
  Off: the cutoff is the exact k-th cost (what the `wfst` decoder does with its float32 costs).
* ``keep_unpruned``: ``ProcessEmitting`` tests each new token against a *running* bound
  (best new cost so far + adaptive beam) that only tightens as better tokens are found. Tokens
  inserted before it tightened stay in the hash list: the epsilon closure skips them, but they
  count in the next frame's ``GetCutoff`` (token count, k-th smallest), are expanded when the
  next cutoff is looser than this frame's bound (after a max_active cut, whose adaptive beam is
  narrower than ``beam``, or when min_active loosens it), and after the last frame they take
  part in ``ReachedFinal`` / ``GetBestPath``. Which tokens these are depends on the hash-list
  order (modelled here: buckets ``state % hash_size`` in order of first use, insertion order
  within a bucket). Off: tokens at or above the frame's final bound are dropped after the
  frame (the `wfst` decoder's order-independent rule).

With both switches on the model reproduces kaldi-decoder's 1-best (words, costs, reached-final)
(checked in test_wfst_kaldi_random.py); with both off it is the rule the `wfst` decoder
implements. Costs are accumulated in double as Kaldi does; arc weights are float32 (OpenFst).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FLOAT_MAX = float(np.finfo(np.float32).max)
NO_MAX = 2**31 - 1


def f32(x: float) -> float:
    return float(np.float32(x))


@dataclass
class _Token:
    cost: float
    prev: _Token | None
    arc: tuple[int, int, float, int] | None  # (ilabel, olabel, weight, nextstate)
    acoustic: float


class _HashList:
    """One frame's tokens in Kaldi HashList iteration order."""

    def __init__(self, size: int):
        self.size = size
        self.buckets: dict[int, list[int]] = {}
        self.tokens: dict[int, _Token] = {}

    def insert(self, state: int, token: _Token) -> bool:
        """Add a token for a new state (True) or leave an existing one in place (False)."""
        if state in self.tokens:
            return False
        self.buckets.setdefault(state % self.size, []).append(state)
        self.tokens[state] = token
        return True

    def remove(self, state: int) -> None:
        self.buckets[state % self.size].remove(state)
        del self.tokens[state]

    def order(self) -> list[int]:
        return [s for bucket in self.buckets.values() for s in bucket]


@dataclass
class ModelResult:
    total: float
    graph: float
    acoustic: float
    olabels: list[int]
    reached_final: bool


def faster_decoder(
    fst: dict,
    log_probs: np.ndarray,
    beam: float,
    max_active: int = NO_MAX,
    min_active: int = 20,
    beam_delta: float = 0.5,
    float_cutoff: bool = True,
    keep_unpruned: bool = True,
) -> ModelResult | None:
    """1-best of FasterDecoder (Decode + GetBestPath) on `fst` (wfst_ref arc-list format) and
    log-probs (already multiplied by the acoustic scale; ilabel i reads column i-1)."""
    arcs_of: dict[int, list[tuple[int, int, float, int]]] = {}
    for s, il, ol, w, ns in fst["arcs"]:
        arcs_of.setdefault(s, []).append((il, ol, f32(w), ns))
    final = [f32(x) if math.isfinite(x) else math.inf for x in fst["final"]]
    beam32, delta32 = f32(beam), f32(beam_delta)
    hash_size = 1000

    def closure(frame: _HashList, cutoff: float) -> None:
        queue = frame.order()
        while queue:
            state = queue.pop()
            token = frame.tokens[state]
            if token.cost > cutoff:
                continue
            for arc in arcs_of.get(state, ()):
                if arc[0] != 0:
                    continue
                cost = token.cost + arc[2]
                if cost > cutoff:
                    continue
                new = _Token(cost, token, arc, 0.0)
                if frame.insert(arc[3], new):
                    queue.append(arc[3])
                elif frame.tokens[arc[3]].cost > cost:
                    frame.tokens[arc[3]] = new
                    queue.append(arc[3])

    def cutoff_of(costs: list[float]) -> tuple[float, float, int | None]:
        """GetCutoff: (cutoff, adaptive beam, index of the best token)."""
        best_i = min(range(len(costs)), key=lambda i: (costs[i], i)) if costs else None
        best = costs[best_i] if best_i is not None else math.inf
        if max_active == NO_MAX and min_active == 0:
            return best + beam32, beam32, best_i
        ranked = sorted(f32(c) if float_cutoff else c for c in costs)
        beam_cut = best + beam32
        max_cut = ranked[max_active] if len(ranked) > max_active else math.inf
        if max_cut < beam_cut:
            return max_cut, f32(max_cut - best + delta32), best_i
        min_cut = math.inf
        if len(ranked) > min_active:
            min_cut = best if min_active == 0 else ranked[min_active]
        if min_cut > beam_cut:
            return min_cut, f32(min_cut - best + delta32), best_i
        return beam_cut, beam32, best_i

    cur = _HashList(hash_size)
    cur.insert(fst["start"], _Token(0.0, None, None, 0.0))
    closure(cur, FLOAT_MAX)
    for t in range(len(log_probs)):
        order = cur.order()
        costs = [cur.tokens[s].cost for s in order]
        cutoff, adaptive, best_i = cutoff_of(costs)
        hash_size = max(hash_size, int(f32(len(costs)) * 2.0))
        nxt = _HashList(hash_size)
        bound = math.inf
        if best_i is not None:  # the best token first, for a tight bound
            token = cur.tokens[order[best_i]]
            for arc in arcs_of.get(order[best_i], ()):
                if arc[0]:
                    bound = min(bound, arc[2] + token.cost + f32(-log_probs[t, arc[0] - 1]) + adaptive)
        for state in order:
            token = cur.tokens[state]
            if not token.cost < cutoff:
                continue
            for arc in arcs_of.get(state, ()):
                if not arc[0]:
                    continue
                acoustic = f32(-log_probs[t, arc[0] - 1])
                cost = arc[2] + token.cost + acoustic
                if not cost < bound:
                    continue
                new = _Token(cost, token, arc, acoustic)
                if not nxt.insert(arc[3], new) and nxt.tokens[arc[3]].cost > cost:
                    nxt.tokens[arc[3]] = new
                bound = min(bound, cost + adaptive)
        if not keep_unpruned:
            for state in [s for s, tok in nxt.tokens.items() if not tok.cost < bound]:
                nxt.remove(state)
        closure(nxt, bound)
        cur = nxt
    order = cur.order()
    reached = any(math.isfinite(final[s]) for s in order)
    best: tuple[float, int] | None = None
    for s in order:
        cost = cur.tokens[s].cost + (final[s] if reached else 0.0)
        if math.isfinite(cost) and (best is None or cost < best[0]):
            best = (cost, s)
    if best is None:
        return None
    graph = final[best[1]] if reached else 0.0
    acoustic, olabels = 0.0, []
    token = cur.tokens[best[1]]
    while token.arc is not None:
        graph += token.arc[2]
        acoustic += token.acoustic
        if token.arc[1]:
            olabels.append(token.arc[1])
        token = token.prev
    return ModelResult(graph + acoustic, graph, acoustic, olabels[::-1], reached)
