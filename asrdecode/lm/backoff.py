"""Two readings of a backoff n-gram LM, and a small LM whose graph reads it exactly.

A graph's G (kaldilm's arpa2fst, as Kaldi's) has a backoff *epsilon* arc from each history to its
suffix: a word can be read by its own n-gram or after backing off, and a search keeps the cheaper
path, so G's cost of a sentence is its **cheapest path**. LM lookups (`asrdecode.lm.ngram_tensor`,
pocketsphinx, KenLM, SRILM) read the textbook rule instead: the n-gram of the longest history that
has one, the backoff weights of the longer ones added (**exact**). The two agree when no explicit
n-gram costs more than its backoff route, as in an interpolated LM; an LM written with backoff
estimates, or pruned, has n-grams that do.

On-the-fly rescoring (`asrdecode.lm.difference`) adds ``large - small`` read exactly to a graph built
with the small LM, so the composition is the large LM read exactly only if the small graph's
cheapest paths are the small LM's exact reading. `exact_bigram` makes a small LM with that
property: its bigrams (higher orders dropped), each raised to its backoff route where that route
is cheaper. In a bigram LM every way of reading a word ends in the same state (the word's), so
per-word agreement is agreement of whole paths.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

from asrdecode.lm.arpa import ArpaReader

LN10 = math.log(10.0)


class BackoffReadings:
    """An ARPA LM read both ways: `exact` (the backoff rule) and `cheapest_path` (the lowest cost
    over the paths of its G with epsilon backoff arcs: a Viterbi pass over G's states). Histories
    are G's states: every n-gram below the highest order, and the empty history. Costs are -ln p of
    ``<s> words </s>``."""

    def __init__(self, prob: dict[tuple[str, ...], float], bow: dict[tuple[str, ...], float]) -> None:
        self.prob = prob  # log10 p of every n-gram
        self.bow = bow  # log10 backoff weight of the n-grams that have one
        self.order = max(len(g) for g in prob)

    @classmethod
    def read(cls, path: str | Path) -> BackoffReadings:
        prob: dict[tuple[str, ...], float] = {}
        bow: dict[tuple[str, ...], float] = {}
        for entry in ArpaReader(path):
            gram = tuple(entry.words)
            prob[gram] = entry.log10_prob
            if entry.log10_backoff:
                bow[gram] = entry.log10_backoff
        return cls(prob, bow)

    def state(self, gram: tuple[str, ...]) -> tuple[str, ...]:
        """G's state after `gram`: its longest suffix that is a history of the LM."""
        gram = gram[max(len(gram) - (self.order - 1), 0) :]
        while gram and gram not in self.prob:
            gram = gram[1:]
        return gram

    def in_vocabulary(self, words: list[str]) -> bool:
        return all((w,) in self.prob for w in words)

    def word_log10(self, hist: tuple[str, ...], w: str) -> float:
        """log10 p(w | hist) by the backoff rule, from the state `hist`."""
        total = 0.0
        while hist + (w,) not in self.prob:
            if not hist:
                raise KeyError(f"{w!r} is not in the LM's vocabulary")
            total += self.bow.get(hist, 0.0)
            hist = self.state(hist[1:])
        return total + self.prob[hist + (w,)]

    def exact(self, words: list[str]) -> float:
        """-ln p(<s> words </s>) by the backoff rule."""
        hist, total = self.state(("<s>",)), 0.0
        for w in [*words, "</s>"]:
            total -= self.word_log10(hist, w)
            hist = self.state(hist + (w,))
        return total * LN10

    def cheapest_path(self, words: list[str]) -> float:
        """The lowest cost of ``<s> words </s>`` over G's paths, each word read at any backoff level."""
        frontier = {self.state(("<s>",)): 0.0}
        for w in [*words, "</s>"]:
            nxt: dict[tuple[str, ...], float] = {}
            for hist, cost in frontier.items():
                h, acc = hist, cost
                while True:
                    if h + (w,) in self.prob:
                        dst, c = self.state(h + (w,)), acc - self.prob[h + (w,)]
                        if c < nxt.get(dst, math.inf):
                            nxt[dst] = c
                    if not h:
                        break
                    acc -= self.bow.get(h, 0.0)
                    h = self.state(h[1:])
            frontier = nxt
        return min(frontier.values()) * LN10

    def write(self, path: str | Path) -> Path:
        """As an ARPA file (gzip when `path` ends in .gz, with no timestamp: the same bytes each run)."""
        path = Path(path)
        lines = ["\\data\\"]
        by_order = [[g for g in self.prob if len(g) == k] for k in range(1, self.order + 1)]
        lines += [f"ngram {k}={len(grams)}" for k, grams in enumerate(by_order, 1)]
        for k, grams in enumerate(by_order, 1):
            lines += ["", f"\\{k}-grams:"]
            for g in grams:
                tail = f"\t{self.bow[g]:.6f}" if g in self.bow and k < self.order else ""
                lines.append(f"{self.prob[g]:.6f}\t{' '.join(g)}{tail}")
        data = ("\n".join([*lines, "", "\\end\\", ""])).encode("utf-8")
        if path.suffix == ".gz":
            with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                f.write(data)
        else:
            path.write_bytes(data)
        return path


def exact_bigram(lm: BackoffReadings) -> tuple[BackoffReadings, int]:
    """`lm`'s bigram LM whose G reads it exactly: unigrams as they are, each bigram ``h w`` raised to
    ``bow(h) p(w)`` where that backoff route is more probable. Returns it and how many were raised."""
    prob = {g: p for g, p in lm.prob.items() if len(g) <= 2}
    bow = {g: b for g, b in lm.bow.items() if len(g) == 1}
    raised = 0
    for g, p in prob.items():
        if len(g) == 2:
            route = bow.get(g[:1], 0.0) + prob[g[1:]]
            if route > p:
                prob[g] = route
                raised += 1
    return BackoffReadings(prob, bow), raised
