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
            frontier = self.cheapest_step(frontier, w)
        return min(frontier.values()) * LN10

    def cheapest_step(self, frontier: dict[tuple[str, ...], float], w: str) -> dict[tuple[str, ...], float]:
        """One word of `cheapest_path`'s Viterbi pass over G: from each state of `frontier` (G state ->
        lowest cost so far, -log10 p), `w` read at every backoff level (G's epsilon arcs), into the
        states it ends in with their lowest costs."""
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
        return nxt

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


def _normalised_bow(lm: BackoffReadings, hist: tuple[str, ...], words: list[str]) -> float | None:
    """The log10 backoff weight that makes p(. | hist) sum to one with these explicit `words`
    (Katz's renormalisation, as after pruning); None where the explicit words leave no mass."""
    num = 1.0 - sum(10.0 ** lm.prob[hist + (w,)] for w in words)
    den = 1.0 - sum(10.0 ** lm.word_log10(lm.state(hist[1:]), w) for w in words)
    return math.log10(num / den) if num > 1e-12 and den > 1e-12 else None


def _consistent(lm: BackoffReadings) -> tuple[BackoffReadings, int, int]:
    """Order by order from bigrams up: every explicit n-gram less probable than its backoff route
    is removed, or raised to the route where it is a history of longer n-grams, and its history's
    backoff weight renormalised (which only lowers the routes). Returns the LM, removed, raised."""
    prob, bow = dict(lm.prob), dict(lm.bow)
    edited = BackoffReadings(prob, bow)  # reads the tables as they are edited below
    removed = raised = 0
    for k in range(2, lm.order + 1):
        children: dict[tuple[str, ...], list[str]] = {}
        for g in prob:
            if len(g) == k:
                children.setdefault(g[:-1], []).append(g[-1])
        histories = {g[:-1] for g in prob if len(g) == k + 1}
        for h, words in children.items():
            if k >= 3:  # the orders below changed: renormalise first
                b = _normalised_bow(edited, h, words)
                if b is not None:
                    bow[h] = b
            lower = {w: edited.word_log10(edited.state(h[1:]), w) for w in words}
            while True:
                b = bow.get(h, 0.0)
                below = [w for w in words if prob[h + (w,)] < b + lower[w] - 1e-9]
                if not below:
                    break
                for w in below:
                    if h + (w,) in histories:
                        prob[h + (w,)] = b + lower[w]
                        raised += 1
                    else:
                        del prob[h + (w,)]
                        removed += 1
                words = [w for w in words if h + (w,) in prob]
                b = _normalised_bow(edited, h, words)
                if b is None:  # no mass left to renormalise: the weight stays (no route undercuts)
                    break
                bow[h] = b
    return BackoffReadings(prob, {g: b for g, b in bow.items() if g in prob}), removed, raised


def _shortcuts(lm: BackoffReadings) -> set[tuple[str, ...]]:
    """Histories that G can skip at a profit: for an explicit n-gram ``h w`` landing in history s,
    a route that backs off further, reads w at a shorter level and lands in a shorter state, costs
    less than the n-gram plus the backoff weights from s down to that state (so it undercuts every
    continuation that backs off from s)."""
    found = set()
    for g, p in lm.prob.items():
        if len(g) < 2:
            continue
        h, w = g[:-1], g[-1]
        s = lm.state(g)
        route, shorter = -lm.bow.get(h, 0.0), h[1:]
        while True:
            if shorter + (w,) in lm.prob:
                lands = lm.state(shorter + (w,))
                if len(lands) < len(s):
                    chain, t = 0.0, s
                    while len(t) > len(lands):
                        chain -= lm.bow.get(t, 0.0)
                        t = lm.state(t[1:])
                    if -p + chain > route - lm.prob[shorter + (w,)] + 1e-9:
                        found.add(s)
            if not shorter:
                break
            route -= lm.bow.get(shorter, 0.0)
            shorter = shorter[1:]
    return found


def exact_readable(lm: BackoffReadings) -> tuple[BackoffReadings, dict[str, int]]:
    """An LM close to `lm` whose G (epsilon backoff arcs) reads every sentence exactly: its
    cheapest path is the backoff rule's cost, so a static graph scores it as pocketsphinx does.

    Two ways G undercuts the rule: a backoff route cheaper than an explicit n-gram (removed, or
    raised to the route where it is a history; `_consistent`), and a route that reads a word at a
    lower order to land in a shorter history and skip that history's backoff weight later
    (`_shortcuts`: the longer n-grams of such a history are removed, so it is one no more).
    Repeated until neither is left. Returns the LM and the counts of removed and raised n-grams."""
    counts = {"removed": 0, "raised": 0, "history_ngrams_removed": 0}
    for _ in range(lm.order + 8):
        lm, removed, raised = _consistent(lm)
        counts["removed"] += removed
        counts["raised"] += raised
        skip = _shortcuts(lm)
        if not skip:
            return lm, counts
        prob = {g: p for g, p in lm.prob.items() if len(g) < 2 or g[:-1] not in skip}
        counts["history_ngrams_removed"] += len(lm.prob) - len(prob)
        lm = BackoffReadings(prob, {g: b for g, b in lm.bow.items() if g not in skip and g in prob})
    raise ValueError("exact_readable: shortcuts left after the rounds (an LM with cyclic histories?)")
