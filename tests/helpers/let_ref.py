"""Independent references for the `let` decoder tests (no asrdecode search or LM code here).

* `ArpaScorer`: a plain-Python backoff ARPA scorer (dictionaries of n-grams, the textbook rule).
* `composed_viterbi`: exhaustive Viterbi over (graph state, word history) pairs, i.e. the base
  graph composed with D = G_large - G_small, with a Bellman-Ford epsilon closure.
* toy ARPAs over the words of tests/graph/graph_toy.py and `spelled_log_probs`, peaky CTC
  posteriors that spell a word sequence with noise (so hypotheses have several words).
"""

from __future__ import annotations

import math

import numpy as np

from helpers.graph_toy import ARPA as TOY_ARPA  # noqa: E402
from helpers.graph_toy import UNITS, toy_config, write_toy  # noqa: E402

__all__ = ["TOY_ARPA", "UNITS", "toy_config", "write_toy"]

LN10 = math.log(10.0)

# a unigram LM over the toy words (the "small" LM the base graph is built with)
SMALL_UNIGRAM = """\\data\\
ngram 1=6

\\1-grams:
-0.9 </s>
-99 <s>
-0.5 ab
-0.7 ba
-0.6 c
-0.8 cab

\\end\\
"""

# a bigram LM that disagrees with graph_toy's ARPA (a second "small" LM; explicit bigrams cheaper
# than their backoff routes, so the tropical G equals the ARPA probabilities)
SMALL_BIGRAM = """\\data\\
ngram 1=6
ngram 2=4

\\1-grams:
-0.9 </s>
-99 <s> -0.2
-0.6 ab -0.2
-0.6 ba -0.3
-0.7 c -0.1
-0.9 cab -0.2

\\2-grams:
-0.3 <s> c
-0.2 c ab
-0.4 ab </s>
-0.5 cab ba

\\end\\
"""

# a trigram LM (the "large" LM in some tests): explicit n-grams cheaper than their backoff routes
LARGE_TRIGRAM = """\\data\\
ngram 1=6
ngram 2=6
ngram 3=3

\\1-grams:
-1.0 </s>
-99 <s> -0.4
-0.7 ab -0.3
-0.8 ba -0.2
-0.9 c -0.4
-1.2 cab -0.1

\\2-grams:
-0.2 <s> ab -0.1
-0.3 ab ba -0.2
-0.25 ba </s>
-0.4 c c -0.1
-0.5 <s> c -0.2
-0.6 c ab -0.1

\\3-grams:
-0.05 <s> ab ba
-0.1 <s> c c
-0.2 c c ab

\\end\\
"""


class ArpaScorer:
    """ln p(w | history) of an ARPA text by the backoff rule, in plain Python."""

    def __init__(self, text: str) -> None:
        self.prob: dict[tuple[str, ...], float] = {}
        self.bow: dict[tuple[str, ...], float] = {}
        self.order = 0
        section = 0
        for line in text.splitlines():
            f = line.split()
            if not f or line.startswith("\\data") or line.startswith("ngram"):
                continue
            if line.startswith("\\end"):
                break
            if line.startswith("\\") and line.endswith("-grams:"):
                section = int(line[1 : -len("-grams:")])
                self.order = max(self.order, section)
                continue
            gram = tuple(f[1 : section + 1])
            self.prob[gram] = float(f[0]) * LN10
            if len(f) == section + 2:
                self.bow[gram] = float(f[-1]) * LN10

    def logp(self, history: tuple[str, ...], word: str) -> float:
        h = history[len(history) - (self.order - 1) :] if self.order > 1 else ()
        if (*h, word) in self.prob:
            return self.prob[(*h, word)]
        if not h:
            return -math.inf
        return self.bow.get(h, 0.0) + self.logp(h[1:], word)


def composed_viterbi(
    arcs: list[tuple[int, int, int, float, int]],
    start: int,
    final: list[float],
    words: dict[int, str],
    small: ArpaScorer,
    large: ArpaScorer,
    lm_scale: float,
    log_probs: np.ndarray,
):
    """Exact best path of frames x (graph o D): (total cost, word ids) or None. A D state is the
    word history (the last max-order - 1 words, <s> first); a word costs its arc weight plus
    lm_scale * (-ln p_large + ln p_small), the end adds the final cost and D's </s> weight."""
    keep = max(small.order, large.order) - 1
    arcs_of: dict[int, list] = {}
    for s, il, ol, w, ns in arcs:
        arcs_of.setdefault(s, []).append((il, ol, w, ns))

    def d_cost(hist: tuple[str, ...], word: str) -> float:
        lp_s, lp_l = small.logp(hist, word), large.logp(hist, word)
        if lp_s == -math.inf or lp_l == -math.inf:
            return math.inf
        return lm_scale * (lp_s - lp_l)

    def advance(hist, ol):
        if not ol:
            return hist
        h = (*hist, words[ol])
        return h[len(h) - keep :] if keep > 0 else ()

    def closure(table: dict) -> None:
        queue = list(table)
        while queue:
            key = queue.pop()
            s, hist = key
            cost, out = table[key]
            for il, ol, w, ns in arcs_of.get(s, ()):
                if il != 0:
                    continue
                c = cost + w + (d_cost(hist, words[ol]) if ol else 0.0)
                nk = (ns, advance(hist, ol))
                if c < math.inf and (nk not in table or c < table[nk][0]):
                    table[nk] = (c, out + ((ol,) if ol else ()))
                    queue.append(nk)

    start_hist = ("<s>",)[: max(keep, 0)] if keep > 0 else ()
    table = {(start, start_hist): (0.0, ())}
    closure(table)
    for t in range(len(log_probs)):
        new: dict = {}
        for (s, hist), (cost, out) in table.items():
            for il, ol, w, ns in arcs_of.get(s, ()):
                if il == 0:
                    continue
                c = cost + w - float(log_probs[t, il - 1]) + (d_cost(hist, words[ol]) if ol else 0.0)
                nk = (ns, advance(hist, ol))
                if c < math.inf and (nk not in new or c < new[nk][0]):
                    new[nk] = (c, out + ((ol,) if ol else ()))
        closure(new)
        table = new
    best = None
    for (s, hist), (cost, out) in table.items():
        if not math.isfinite(final[s]):
            continue
        fs, fl = small.logp(hist, "</s>"), large.logp(hist, "</s>")
        if fs == -math.inf or fl == -math.inf:
            continue
        total = cost + final[s] + lm_scale * (fs - fl)
        if best is None or total < best[0]:
            best = (total, list(out))
    return best


def spelled_log_probs(
    rng: np.random.Generator, words: list[str], units: list[str], noise: float = 1.5, peak: float = 2.5
) -> np.ndarray:
    """CTC log-probs [T, len(units) + 1] (blank last) spelling `words` (units, blanks between
    repeats and words, a random number of frames each) with Gaussian noise on the logits."""
    blank = len(units)
    seq: list[int] = [blank]
    for w in words:
        for u in w:
            seq += [units.index(u)] * int(rng.integers(1, 3))
            seq += [blank] * int(rng.integers(0, 2))
        seq.append(blank)
    x = rng.normal(size=(len(seq), len(units) + 1)) * noise
    x[np.arange(len(seq)), seq] += peak
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)
