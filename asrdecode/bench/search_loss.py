"""Where a pruned search loses a given path: the frame, and the pruning step that dropped it.

`follow_path(decoder, ac, word_ids, graphs)` runs a compiled WFST search (`wfst` or `wfst-otf`:
its graph, LM difference and pruning settings) one frame at a time beside the best path of a word
sequence in the same model (the exhaustive search over the graph restricted to those words,
`graph.restrict`, as forced alignment does). The path is *alive* after frame t while the search
holds a token in the path's (graph state, LM state) at no more than the path's cost so far: a path
at least as cheap can then still reach the end, so a search error (a word sequence cheaper than the
search's result) must be lost at some frame. At the first frame where it is not alive, the step
that dropped it, in the search's order (`compiled.search_advance`):

- ``history``: more than the history beam above the cheapest token of its graph state;
- ``history_max``: not among the history cap's cheapest tokens of its graph state;
- ``beam``: more than the beam above the frame's best token (Kaldi's GetCutoff);
- ``max_active``: within the beam, at or above the max_active cut;
- ``bound``: expanded, but its successor above the new tokens' bound (best new + adaptive beam)
  or dropped with them in the epsilon closure;
- ``start``: lost in the start token's closure.

With it: the path's cost added in that frame, split into graph weight, LM difference and
acoustic cost; its cost above the frame's best; its rank among the frame's tokens. An analysis
tool (`scripts/probe_search_error_frames.py`), not a decoder: it reads the search's workspace.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asrdecode.decoders.wfst.align import cheaper, exhaustive_config
from asrdecode.decoders.wfst.compiled import C_TOKENS, CURRENT, cap_histories, get_cutoff, prune_histories
from asrdecode.decoders.wfst.decoder import WfstDecoder
from asrdecode.decoders.wfst.paths import utterance_costs
from asrdecode.graph.restrict import WordSequenceGraphs
from asrdecode.lm.difference import DifferenceLM, lm_step

_NO_BOOST = np.zeros(0, np.float32)


def current_tokens(search: Any, w: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copies of the current tokens' graph states, costs and LM states (-1 without an LM)."""
    n = int(w.ctr[C_TOKENS])
    state, cost, _rec, u, _pos = w.arrays[CURRENT]
    lm = u[:n].copy() if search.lm is not None else np.full(n, -1, np.int32)
    return state[:n].copy(), cost[:n].copy(), lm


def path_per_frame(
    decoder: Any, ac: np.ndarray, word_ids: list[int], graphs: WordSequenceGraphs
) -> list[tuple[int, int, float, float, int]] | None:
    """The best path of `word_ids` in the decoder's model, per frame t (after its epsilon arcs):
    (graph state, words out so far, cost so far without the LM difference); None if no path."""
    restricted, product = graphs.restrict_with_states(word_ids)
    if restricted.num_states == 0:
        return None
    words = decoder.paths.words
    aligner = WfstDecoder(exhaustive_config(decoder), decoder.context, graph=restricted, words=words)
    search, settings = aligner.compiled_search(), aligner.search_settings()
    w = search.new_workspace()
    search.begin(w, _NO_BOOST, settings)
    alpha = []  # per frame: restricted state -> cheapest cost
    for t in range(ac.shape[0]):
        search.advance(w, ac[t : t + 1], _NO_BOOST, settings)
        state, cost, _ = current_tokens(search, w)
        alpha.append(dict(zip(state.tolist(), cost.tolist(), strict=True)))
    path = search.best(w)
    if not math.isfinite(path.total):
        return None
    arrays = restricted.arc_arrays()
    nxt, src, weight, olabel = arrays["nextstate"], arrays["src"], arrays["weight"], arrays["olabel"]
    arcs, frames = np.asarray(path.arcs), np.asarray(path.frames)
    if len(arcs) > 1 and not np.all(nxt[arcs[:-1]] == src[arcs[1:]]):
        raise RuntimeError("probe: the aligned path's arcs do not chain")
    out = []
    i, here = 0, 0  # restricted start state
    for t in range(ac.shape[0]):
        graph_cost, word = 0.0, 0
        while i < len(arcs) and frames[i] <= t:
            here = int(nxt[arcs[i]])
            graph_cost += float(weight[arcs[i]]) if frames[i] == t else 0.0
            word = int(olabel[arcs[i]]) or word
            i += 1
        s, k = product[here]
        out.append((int(s), int(k), alpha[t][here], graph_cost, word))
    return out


def follow_path(decoder: Any, ac: np.ndarray, word_ids: list[int], graphs: WordSequenceGraphs) -> dict | None:
    """Run the decoder's search one frame at a time beside the best path of `word_ids`: the first
    frame where the search holds no token as cheap in the path's (graph state, LM state), and why
    (None if it never does); until then, the path's largest cost above the frame's best; the
    search's final cost."""
    trace = path_per_frame(decoder, ac, word_ids, graphs)
    if trace is None:
        return None
    search = decoder.compiled_search()
    lm = search.lm
    lm_state, lm_cost = [DifferenceLM.START], [0.0]  # after k words
    for wid in word_ids:
        c, u = lm_step(lm, lm_state[-1], wid) if lm is not None else (0.0, -1)
        lm_state.append(int(u))
        lm_cost.append(lm_cost[-1] + float(c))
    settings = decoder.search_settings()
    w = search.new_workspace()
    search.begin(w, _NO_BOOST, settings)
    prev, lost = None, None
    peak = {"above_best": -math.inf, "rank": 0}  # the path's farthest from the best while kept
    above: list[float] = []  # per frame while kept: the path's cost above the frame's best
    after = current_tokens(search, w)
    for t in range(ac.shape[0]):
        search.advance(w, ac[t : t + 1], _NO_BOOST, settings)
        if lost is not None:
            continue
        before, after = after, current_tokens(search, w)
        state, cost, us = after
        s, k, c, graph_cost, word = trace[t]
        u = lm_state[k] if lm is not None else -1
        mine = c + lm_cost[k]
        here = (state == s) & (us == u)
        if here.any() and not cheaper(mine, float(cost[here].min())):
            prev = (s, u, mine)
            gap = mine - float(cost.min())
            above.append(round(gap, 2))
            if gap > peak["above_best"]:
                peak = {"above_best": gap, "rank": int(np.sum(cost < mine)), "frame": t}
            continue
        lost = {"frame": t, "word": k}
        if prev is not None:  # the path's cost added in this frame, in parts
            k0 = trace[t - 1][1]
            lm_part = lm_cost[k] - lm_cost[k0]
            lost["added"] = {
                "total": mine - prev[2],
                "graph": graph_cost,
                "lm_difference": lm_part,
                "acoustic": mine - prev[2] - graph_cost - lm_part,
                "best_moved": float(cost.min()) - float(before[1].min()),
                "word_out": decoder.paths.words.get(word, "") if word else "",
            }
        lost.update(loss_step(settings, before, prev, cost, mine))
    final = search.best(w)
    out = search.arcs["olabel"][np.asarray(final.arcs, dtype=np.int64)]
    ours = [decoder.paths.words[int(o)] for o in out if o != 0]
    return {"frames": int(ac.shape[0]), "lost": lost, "kept_peak": peak, "search_cost": float(final.total),
            "ours": ours, "above_best": above}  # fmt: skip


def loss_step(settings: Any, before: tuple, prev: tuple | None, new_cost: np.ndarray, mine: float) -> dict:
    """The pruning step that dropped the path's token between the previous frame and this one."""
    state, cost, us = before
    if prev is None:
        return {"step": "start"}
    s, u, _ = prev
    c = float(cost[(state == s) & (us == u)].min())  # the path's token (alive: not above c_prev)
    info = {"tokens": int(len(cost)), "above_best": c - float(cost.min())}
    hist = float(settings.history_beam)
    costs = cost.copy()
    if math.isfinite(hist):
        best_at = np.full(int(state.max()) + 1, np.inf, np.float32)
        prune_histories(state, costs, len(costs), best_at, np.float32(hist))
        if c > float(cost[state == s].min()) + hist:
            return {**info, "step": "history", "above_state_best": c - float(cost[state == s].min())}
    if settings.history_max > 0:
        count = np.full(int(state.max()) + 1, -1, np.int32)
        cap_histories(state, costs, len(costs), count, int(settings.history_max))
        if not np.isfinite(costs[(state == s) & (us == u)]).any():
            rank = int(np.sum(cost[state == s] < c))
            return {**info, "step": "history_max", "rank_in_state": rank}
    info["rank"] = int(np.sum(costs < c))
    scratch = np.empty(len(costs), np.float32)
    cut, adaptive = get_cutoff(
        costs, len(costs), scratch, settings.beam, settings.max_active, settings.min_active,
        settings.beam_delta,
    )  # fmt: skip
    if c > float(costs.min()) + float(settings.beam):
        return {**info, "step": "beam"}
    if c >= cut:
        return {**info, "step": "max_active", "cut_above_best": float(cut) - float(costs.min())}
    new_best = float(new_cost.min()) if len(new_cost) else math.inf
    return {**info, "step": "bound", "adaptive_beam": float(adaptive), "new_above_best": mine - new_best}


def follow_words(decoder: Any, output: Any, words: list[str], graphs: WordSequenceGraphs) -> dict | None:
    """`follow_path` for one utterance's model output (a `ModelOutput` of batch size 1) and a
    word sequence; None if a word is not in the graph or no path outputs them. The row gets the
    word the path was in when lost (``lost["in_word"]``)."""
    ids = [decoder.paths.word_ids.get(w) for w in words]
    if any(i is None for i in ids):
        return None
    rows, convert = utterance_costs(
        output, decoder._blank_column(output), decoder.config.acoustic_scale, decoder.config.blank_penalty
    )
    got = follow_path(decoder, np.ascontiguousarray(convert(rows[0])), [int(i) for i in ids], graphs)
    if got is not None and got["lost"] is not None and got["lost"]["word"] < len(words):
        got["lost"]["in_word"] = words[got["lost"]["word"]]
    return got
