#!/usr/bin/env python3
"""Export pocketsphinx 5.1.1's `en-us.lm.bin` to ARPA, plus a vocabulary-limited, pruned version.

    .venv/bin/python scripts/export_sphinx_lm.py            # data/lm/sphinx-en-us-10k.arpa.gz (~1 min)
    .venv/bin/python scripts/export_sphinx_lm.py --full     # + data/cache/sphinx-en-us.arpa.gz (35 MB)
    .venv/bin/python scripts/export_sphinx_lm.py --vocab 20000 --prune 1e-7

pocketsphinx's own `NGramModel.write(path, 'arpa')` crashes on this file in 5.1.1 (its trie header
declares 6 more bigrams than it holds, and the writer sorts the uninitialised ones), and its
values need a scale correction in some builds, so the binary trie is decoded by
`asrdecode.lm.sphinx_trie` and the log10 scale is fixed from `<s>` (-99 by ARPA convention).
Every export is checked against pocketsphinx's own `NGramModel.prob` on sampled n-grams (explicit
ones and random word tuples that back off); the script fails if any differs by more than one
logmath unit (4.3e-5 in log10) plus float rounding.

The limited LM keeps the `--vocab` most probable unigrams that the model's dictionary
(`cmudict-en-us.dict`) can pronounce, renormalises (`limit_vocabulary`), then entropy-prunes with
kaldingram (`--prune`, relative perplexity change). Vocabulary choice uses unigram probability only.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from asrdecode.graph.arpa import check_arpa
from asrdecode.lm.sphinx_trie import NgramLookup, TrieLM, limit_vocabulary, read_trie_lm, write_arpa
from asrdecode.models.loading import resolve_packaged_path

LOG10_PER_SPHINX_UNIT = float(np.log10(1.0001))  # pocketsphinx's default logmath base
TOLERANCE = LOG10_PER_SPHINX_UNIT + 1e-5


def compare_with_pocketsphinx(
    lm: TrieLM, lm_bin: Path, samples: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Max |log10 p_ours - log10 p_pocketsphinx| per order, on explicit and random (backed-off) n-grams."""
    import pocketsphinx

    reference = pocketsphinx.NGramModel.readfile(str(lm_bin))
    lookup = NgramLookup(lm)
    rng = np.random.default_rng(seed)
    vocab = lm.vocab
    worst: dict[str, float] = {}
    for k, table in enumerate(lm.orders):
        explicit = table.words[rng.integers(0, len(table.words), samples)]
        random = rng.integers(0, len(vocab), (samples, k + 1))
        for name, words in (("explicit", explicit), ("random", random)):
            ours = lookup.log10_prob(words)
            # pocketsphinx takes the predicted word first, then the history most recent first
            theirs = np.array([reference.prob([vocab[w] for w in row[::-1]]) for row in words])
            worst[f"{k + 1}-gram {name}"] = float(np.abs(ours - theirs * LOG10_PER_SPHINX_UNIT).max())
    return worst


def dictionary_words(path: Path) -> set[str]:
    """Head words of a sphinx dictionary (`word(2)` alternates fold into `word`)."""
    words = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                words.add(line.split()[0].split("(")[0])
    return words


def oov_rate(vocab: set[str], manifest: Path) -> tuple[int, int]:
    """(OOV tokens, tokens) of a JSONL manifest's `text` against `vocab` (reported, never used to choose)."""
    import json

    oov = total = 0
    for line in manifest.read_text().splitlines():
        for word in json.loads(line).get("text", "").split():
            total += 1
            oov += word not in vocab
    return oov, total


def main() -> None:
    root = Path(resolve_packaged_path("embedded:sphinx-en-us/.."))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm-bin", type=Path, default=root / "en-us.lm.bin")
    ap.add_argument("--dict", type=Path, default=root / "cmudict-en-us.dict")
    ap.add_argument("--out", type=Path, default=Path("data/lm"))
    ap.add_argument("--vocab", type=int, default=10000, help="words kept in the limited LM")
    ap.add_argument(
        "--prune", type=float, default=3e-6, help="kaldingram entropy-pruning threshold (0 = none)"
    )
    ap.add_argument("--full", action="store_true", help="also write the whole LM as ARPA (35 MB gz)")
    ap.add_argument("--full-out", type=Path, default=Path("data/cache/sphinx-en-us.arpa.gz"))
    ap.add_argument(
        "--samples", type=int, default=2000, help="n-grams per order checked against pocketsphinx"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    lm = read_trie_lm(args.lm_bin)
    counts = [len(t.words) for t in lm.orders]
    print(
        f"read {args.lm_bin.name}: {counts} n-grams, "
        f"log10 per stored unit {lm.log10_per_unit:.6g} ({time.time() - t0:.1f} s)"
    )
    worst = compare_with_pocketsphinx(lm, args.lm_bin, args.samples)
    for name, diff in worst.items():
        print(f"  vs pocketsphinx NGramModel.prob, {name}: max |diff| {diff:.2e} log10")
    if max(worst.values()) > TOLERANCE:
        sys.exit(
            f"{args.lm_bin}: export differs from pocketsphinx by {max(worst.values()):.3g} > {TOLERANCE:.3g}"
        )
    if args.full:
        args.full_out.parent.mkdir(parents=True, exist_ok=True)
        full = write_arpa(lm, args.full_out)
        print(f"wrote {full} ({full.stat().st_size / 1e6:.1f} MB, {time.time() - t0:.0f} s)")

    pronounceable = dictionary_words(args.dict)
    uni = lm.orders[0].log10_prob
    ranked = [lm.vocab[i] for i in np.argsort(-uni, kind="stable") if lm.vocab[i] in pronounceable]
    keep = set(ranked[: args.vocab])
    limited = limit_vocabulary(lm, keep)
    name = f"sphinx-en-us-{args.vocab // 1000}k"
    stage = write_arpa(limited, args.out / f"{name}-unpruned.arpa")
    pruned = args.out / f"{name}-pruned.arpa"
    if args.prune > 0:
        cmd = [sys.executable, "-m", "kaldingram.cli", "prune", "--threshold", str(args.prune)]
        cmd += ["--lm", str(stage), "--write-lm", str(pruned), "--verbose", "5"]
        subprocess.run(cmd, check=True, capture_output=True)
        stage.unlink()
    else:
        stage.rename(pruned)
    final = args.out / f"{name}.arpa.gz"
    with (
        open(pruned, "rb") as src,
        gzip.GzipFile(final, "wb", mtime=0) as dst,
    ):  # mtime 0: same bytes every run
        shutil.copyfileobj(src, dst)
    pruned.unlink()
    summary = check_arpa(final)
    print(
        f"wrote {final}: {summary.counts} n-grams, "
        f"{final.stat().st_size / 1e6:.2f} MB ({time.time() - t0:.0f} s)"
    )
    real = Path("data/demo/real/manifest.jsonl")
    if real.exists():
        oov, total = oov_rate(set(limited.vocab), real)
        print(
            f"  OOV rate of {real} against the {args.vocab}-word vocabulary: "
            f"{oov}/{total} = {oov / total:.1%}"
        )


if __name__ == "__main__":
    main()
