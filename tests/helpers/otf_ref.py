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


def random_arpa(path: Path, rng: np.random.Generator, words: list[str], order: int) -> Path:
    """A random (unnormalised, valid) ARPA of `order` over `words`: every unigram, some bigrams
    (also from <s> and to </s>), trigrams extending some of the bigrams."""
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
    """`folder` with small.arpa (unigram) and large.arpa (trigram) of the NeMo fixture sentences and
    their TLGs `small/` and `large/` built through the CLI (`run` = test_cli.run) for `model`."""
    from helpers.wfst_ref import nemo_sentences, write_arpa

    unigram_arpa(folder / "small.arpa", nemo_sentences())
    write_arpa(folder / "large.arpa", nemo_sentences())
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
