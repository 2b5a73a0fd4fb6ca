"""pocketsphinx's own ARPA writer as an independent check of `asrdecode.lm.sphinx_trie`.

In pocketsphinx 5.1.1, `NGramModel.write(path, 'arpa')` on the packaged `en-us.lm.bin`

- converts log values to log10 with the model's LogMath. `NGramModel.readfile` lets that LogMath
  be freed while the model still points at it, so the writer then multiplies every value by
  whatever the freed memory holds (seen: 1, 2**31, ~1.76e13, and -inf on CI;
  pocketsphinx GitHub issues/502).
  The writer here builds the model with `NGramModel(Config(), LogMath(), path)` and keeps the
  LogMath alive, which gives the true values (factor 1); `<s>`, whose ARPA log-prob is -99 by
  convention, still gives the factor back, and a dump whose factor is unusable is an error;
- writes all unigrams and then the bigrams, and dies (SIGSEGV) at the end of the bigram section,
  before any trigram: the trie header declares 6 bigrams more than the trie holds.

So the writer runs in a child process, and whatever it wrote before dying (unigrams and about
2.05M bigrams, with their backoffs) is parsed, rescaled and compared line by line with the trie
decoded by asrdecode. The trigrams are checked through `NGramModel.prob` instead.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asrdecode.errors import InputError
from asrdecode.lm.sphinx_trie import NgramLookup, TrieLM

BOS_LOG10 = -99.0  # ARPA convention for the unpredictable <s>
_WRITER = (
    "import sys, pocketsphinx as ps\n"
    "logmath = ps.LogMath()  # held for the model's lifetime (readfile frees its own)\n"
    "model = ps.NGramModel(ps.Config(), logmath, sys.argv[1])\n"
    "model.write(sys.argv[2], ps.NGramModel.str_to_type('arpa'))\n"
)


@dataclass
class ArpaDump:
    """n-gram lines of a possibly truncated ARPA text, as written (not rescaled)."""

    ngrams: dict[int, list[tuple[str, ...]]]  # order -> word tuples (history first)
    log10_prob: dict[int, np.ndarray]
    log10_backoff: dict[int, np.ndarray]  # NaN where a line has no backoff
    complete: bool  # the text reached `\end\`


def run_pocketsphinx_writer(lm_bin: str | Path, out: str | Path, timeout: float = 300) -> int:
    """`NGramModel.write(out, 'arpa')` in a child process; its return code (-11: SIGSEGV)."""
    cmd = [sys.executable, "-c", _WRITER, str(lm_bin), str(out)]
    return subprocess.run(cmd, capture_output=True, timeout=timeout).returncode


def read_arpa_dump(path: str | Path, max_order: int = 3, limit: int | None = None) -> ArpaDump:
    """Parse n-gram lines up to `max_order` (at most `limit` per order); words may be space- or
    tab-separated (pocketsphinx uses tabs). A last line without its newline (the writer died
    mid-line) is ignored."""
    text = Path(path).read_bytes().decode("utf-8")
    complete = "\\end\\" in text
    lines = text.split("\n")[:-1]  # the piece after the last newline is unfinished (or empty)
    ngrams: dict[int, list[tuple[str, ...]]] = {}
    probs: dict[int, list[float]] = {}
    bows: dict[int, list[float]] = {}
    order = 0
    for lineno, line in enumerate(lines, 1):
        if line.startswith("\\"):
            order = int(line[1:-7]) if line.endswith("-grams:") else 0
            if order > max_order:
                break
            if order:
                ngrams[order], probs[order], bows[order] = [], [], []
            continue
        fields = line.split()
        if not order or not fields or (limit is not None and len(ngrams[order]) >= limit):
            continue
        if len(fields) not in (order + 1, order + 2):
            raise InputError(f"{path}:{lineno}: a {order}-gram line needs {order + 1} or {order + 2} fields")
        try:
            probs[order].append(float(fields[0]))
            bows[order].append(float(fields[order + 1]) if len(fields) == order + 2 else np.nan)
        except ValueError:
            raise InputError(f"{path}:{lineno}: bad number in '{line[:60]}'") from None
        ngrams[order].append(tuple(fields[1 : order + 1]))
    return ArpaDump(
        ngrams=ngrams,
        log10_prob={k: np.array(v) for k, v in probs.items()},
        log10_backoff={k: np.array(v) for k, v in bows.items()},
        complete=complete,
    )


def dump_scale(dump: ArpaDump) -> float:
    """The constant the writer multiplied every log10 value by, from `<s>` (-99 in ARPA)."""
    try:
        i = dump.ngrams[1].index(("<s>",))
    except (KeyError, ValueError):
        raise InputError("ARPA dump has no <s> unigram to recover the log10 scale from") from None
    factor = float(dump.log10_prob[1][i]) / BOS_LOG10
    if not np.isfinite(factor) or factor <= 0:
        raise InputError(f"ARPA dump: <s> has log-prob {dump.log10_prob[1][i]}, no usable scale")
    return factor


@dataclass
class DumpComparison:
    """Per order: lines compared, lines absent from our LM, max |diff| of log10 prob and backoff."""

    compared: int
    missing: int
    max_prob_diff: float
    max_backoff_diff: float


def compare_with_dump(lm: TrieLM, dump: ArpaDump, factor: float) -> dict[int, DumpComparison]:
    """Every n-gram line of `dump` (divided by `factor`) vs the same n-gram of `lm`. A missing
    backoff counts as 0 on both sides (ARPA's default)."""
    index = {w: i for i, w in enumerate(lm.vocab)}
    lookup = NgramLookup(lm)
    out = {}
    for order, grams in dump.ngrams.items():
        ids = np.array([[index.get(w, -1) for w in g] for g in grams], dtype=np.int64).reshape(-1, order)
        known = (ids >= 0).all(axis=1)
        pos = np.full(len(ids), -1)
        pos[known] = lookup.find(ids[known]) if order > 1 else ids[known, 0]
        hit = pos >= 0
        table = lm.orders[order - 1]
        theirs_p = dump.log10_prob[order][hit] / factor
        prob_diff = np.abs(table.log10_prob[pos[hit]] - theirs_p)
        bo_diff = np.zeros(0)
        if table.log10_backoff is not None:
            theirs_b = np.nan_to_num(dump.log10_backoff[order][hit], nan=0.0) / factor
            bo_diff = np.abs(table.log10_backoff[pos[hit]] - theirs_b)
        out[order] = DumpComparison(
            compared=int(hit.sum()),
            missing=int((~hit).sum()),
            max_prob_diff=float(prob_diff.max(initial=0.0)),
            max_backoff_diff=float(bo_diff.max(initial=0.0)),
        )
    return out
