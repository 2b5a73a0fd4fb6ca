"""Independent references for the `wfst-otf` tests: a plain-Python ARPA scorer (dictionaries and the
backoff rule, nothing from asrdecode) and small ARPA writers."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from helpers.wfst_ref import all_word_sequences

LN10 = math.log(10.0)


class ArpaScorer:
    """ln p(w | history) of an ARPA file by the textbook backoff rule."""

    def __init__(self, path: Path) -> None:
        self.prob: dict[tuple[str, ...], float] = {}
        self.bow: dict[tuple[str, ...], float] = {}
        order = 0
        for line in Path(path).read_text().splitlines():
            line = line.strip()
            if line.startswith("\\") and line.endswith("-grams:"):
                order = int(line[1:-7])
                continue
            f = line.split()
            if order == 0 or not f or line.startswith("\\"):
                continue
            gram = tuple(f[1 : order + 1])
            self.prob[gram] = float(f[0])
            if len(f) == order + 2:
                self.bow[gram] = float(f[order + 1])
        self.order = max(len(g) for g in self.prob)

    def log10p(self, hist: tuple[str, ...], w: str) -> float:
        hist = hist[max(len(hist) - (self.order - 1), 0) :] if self.order > 1 else ()
        for k in range(len(hist), -1, -1):
            h = hist[len(hist) - k :]
            if h + (w,) in self.prob:
                return self.prob[h + (w,)] + sum(
                    self.bow.get(hist[len(hist) - j :], 0.0) for j in range(k + 1, len(hist) + 1)
                )
        unk = self.prob.get(("<unk>",), -math.inf)
        return unk + sum(self.bow.get(hist[len(hist) - j :], 0.0) for j in range(1, len(hist) + 1))

    def cost(self, words: list[str], eos: bool = True) -> float:
        """-ln p(<s> words [</s>])."""
        hist, total = ("<s>",), 0.0
        for w in [*words, "</s>"] if eos else words:
            total += self.log10p(hist, w)
            hist = hist + (w,)
        return -total * LN10


def history_pruned_search(
    fst: dict,
    lp: np.ndarray,
    large: ArpaScorer,
    small: ArpaScorer,
    scale: float,
    history_beam: float,
    after_last_frame: bool = False,
):
    """The search `PruningOptions.history_beam` defines, without any other pruning, by plain
    dictionaries over (state, word sequence): per frame, before the emitting arcs, a hypothesis
    more than `history_beam` above the cheapest one in its graph state is dropped (with
    `after_last_frame` also after the last frame, before the final costs: `let`, which prunes
    when its blocks are made); word arcs add scale * (large - small) for the word, the end adds
    it for </s>. Returns (cost, words) or None. (Hypotheses are word sequences, not LM states: a
    sequence that a decoder would recombine away is never the cheapest in its state, so the
    pruning and the 1-best agree.) Needs an epsilon-cycle-free fst."""
    arcs_of: dict[int, list] = {}
    for s, il, ol, w, ns in fst["arcs"]:
        arcs_of.setdefault(s, []).append((il, ol, w, ns))

    def word_cost(words: tuple[str, ...], w: str) -> float:
        hist = ("<s>", *words)
        return -scale * LN10 * (large.log10p(hist, w) - small.log10p(hist, w))

    def relax(table: dict, key: tuple, cost: float, queue: list | None = None) -> None:
        if key not in table or cost < table[key]:
            table[key] = cost
            if queue is not None:
                queue.append(key)

    def step(table: dict, key: tuple, cost: float, ol: int, ns: int, queue: list | None = None) -> None:
        words = key[1]
        if ol:
            cost += word_cost(words, WORDS[ol])
            words = (*words, WORDS[ol])
        relax(table, (ns, words), cost, queue)

    def closure(table: dict) -> None:
        queue = list(table)
        while queue:
            key = queue.pop()
            for il, ol, w, ns in arcs_of.get(key[0], ()):
                if il == 0:
                    step(table, key, table[key] + w, ol, ns, queue)

    def pruned(table: dict) -> dict:
        best_at: dict[int, float] = {}
        for (s, _), cost in table.items():
            best_at[s] = min(best_at.get(s, math.inf), cost)
        return {key: cost for key, cost in table.items() if not cost > best_at[key[0]] + history_beam}

    table = {(fst["start"], ()): 0.0}
    closure(table)
    for t in range(len(lp)):
        new: dict = {}
        for key, cost in pruned(table).items():
            for il, ol, w, ns in arcs_of.get(key[0], ()):
                if il:
                    step(new, key, cost + w - float(lp[t, il - 1]), ol, ns)
        closure(new)
        table = new
    if after_last_frame:
        table = pruned(table)
    best = None
    for (s, words), cost in table.items():
        if math.isfinite(fst["final"][s]):
            total = cost + fst["final"][s] + word_cost(words, "</s>")
            if best is None or total < best[0]:
                best = (total, list(words))
    return best


def random_arpa(
    path: Path, rng: np.random.Generator, words: list[str], order: int, bare: float = 0.0
) -> Path:
    """A random (unnormalised, valid) ARPA of `order` over `words`: every unigram, some bigrams
    (also from <s> and to </s>), trigrams extending some of the bigrams. With `bare`, that share of
    the bigrams (when order 3) has backoff weight 0 (log10 1) and, in turn, no trigram (as most of
    pocketsphinx's bigrams: histories whose every cost is their backoff's), its trigrams, or only
    a trigram to </s>."""
    grams: list[dict] = [{}, {}, {}]
    for w in [*words, "</s>"]:
        grams[0][(w,)] = (-rng.uniform(0.2, 2), -rng.uniform(0, 1))
    grams[0][("<s>",)] = (-99.0, -rng.uniform(0, 1))
    if order >= 2:
        for _ in range(3 * len(words)):
            h, w = str(rng.choice(["<s>", *words])), str(rng.choice([*words, "</s>"]))
            grams[1][(h, w)] = (-rng.uniform(0.1, 1.5), -rng.uniform(0, 1))
    if order >= 3:
        for h, w in list(grams[1]):
            if w != "</s>":
                for _ in range(2):
                    grams[2][(h, w, str(rng.choice([*words, "</s>"])))] = (-rng.uniform(0.1, 1.5), 0.0)
        if bare > 0:
            for i, (h, w) in enumerate(b for b in list(grams[1]) if b[1] != "</s>" and rng.random() < bare):
                grams[1][(h, w)] = (grams[1][(h, w)][0], 0.0)
                if i % 3 != 1:
                    grams[2] = {g: v for g, v in grams[2].items() if g[:2] != (h, w)}
                if i % 3 == 2:
                    grams[2][(h, w, "</s>")] = (-rng.uniform(0.1, 1.5), 0.0)
    lines = ["\\data\\"] + [f"ngram {k}={len(grams[k - 1])}" for k in range(1, order + 1)]
    for k in range(1, order + 1):
        lines += ["", f"\\{k}-grams:"]
        for g, (p, b) in grams[k - 1].items():
            tail = f" {b:.4f}" if k < order and g[-1] != "</s>" else ""
            lines.append(f"{p:.4f} {' '.join(g)}{tail}")
    lines += ["", "\\end\\", ""]
    path.write_text("\n".join(lines))
    return path


def unigram_arpa(path: Path, sentences: list[list[str]]) -> Path:
    """Add-one unigram ARPA of the sentences (the 'small' LM)."""
    uni = Counter(w for s in sentences for w in [*s, "</s>"])
    total = sum(uni.values()) + len(uni)
    lines = ["\\data\\", f"ngram 1={len(uni) + 1}", "", "\\1-grams:", "-99 <s>"]
    lines += [f"{math.log10((c + 1) / total):.4f} {w}" for w, c in sorted(uni.items())]
    lines += ["", "\\end\\", ""]
    path.write_text("\n".join(lines))
    return path


def cli_small_and_large_graphs(folder: Path, run, model: Path) -> Path:
    """`folder` with small.arpa (unigram) and large.arpa (trigram) of the NeMo fixture model's sentences
    (`model_sentences`) and their TLGs `small/` and `large/` built through the CLI (`run` =
    test_cli.run) for `model`."""
    from helpers.wfst_ref import model_sentences, write_arpa

    unigram_arpa(folder / "small.arpa", model_sentences())
    write_arpa(folder / "large.arpa", model_sentences())
    for name in ("small", "large"):
        arpa = folder / f"{name}.arpa"
        run("build-graph", f"arpa={arpa}", f"model={model}", "lexicon_type=bpe", "--out", str(folder / name))
    return folder


# words of the random test graphs, and the decoder options / brute force the otf tests share
WORDS = {i: f"w{i}" for i in range(1, 7)}


def backend_options(backend: str, variant: int = 2) -> dict:
    """Decoder options of a BACKENDS entry; torch-host's LM cache by `variant`: none, 4 entries
    (collisions overwrite entries all the time), the default size."""
    if backend == "torch-host":
        return {"backend": "torch", "lm_on_host": True, "lm_cache": (0, 4, 1 << 16)[variant % 3]}
    return {"backend": backend, "lm_on_host": False}


def brute_force(fst: dict, lp: np.ndarray, large: ArpaScorer, small: ArpaScorer, scale: float, boost: dict):
    """min over word sequences of graph cost + scale * (large - small) - boosts: (cost, words) or None."""
    best = None
    for seq, cost in all_word_sequences(fst, lp).items():
        ws = [WORDS[o] for o in seq]
        total = cost + scale * (large.cost(ws) - small.cost(ws)) - sum(boost.get(w, 0.0) for w in ws)
        if best is None or total < best[0]:
            best = (total, ws)
    return best
