#!/usr/bin/env python3
"""Export pocketsphinx 5.1.1's `en-us.lm.bin` to ARPA, plus a vocabulary-limited, pruned version.

    .venv/bin/python scripts/export_sphinx_lm.py            # data/lm/sphinx-en-us-72k.arpa.gz (~4 min)
    .venv/bin/python scripts/export_sphinx_lm.py --full     # + data/cache/sphinx-en-us.arpa.gz (35 MB)
    .venv/bin/python scripts/export_sphinx_lm.py --vocab 20000 --prune 1e-7
    .venv/bin/python scripts/export_sphinx_lm.py --prune 1e-5 --exact-bigram \
        --name sphinx-en-us-72k-small --out asrdecode/assets/lm   # the small graph LM (both setups)

pocketsphinx 5.1.1's own `NGramModel.write(path, 'arpa')` multiplies every log10 value by a
constant that changes from run to run, and dies (SIGSEGV) at the end of the bigrams, before any
trigram (its trie header declares 6 more bigrams than the trie holds). So the binary trie is
decoded by `asrdecode.lm.sphinx_trie` (log10 scale from `<s>`, -99 by ARPA convention) and checked
two ways; the script fails if either disagrees:
- against `NGramModel.prob` on sampled n-grams of every order (explicit ones and random word tuples
  that back off), within one logmath unit (4.3e-5 in log10: pocketsphinx rounds to whole units);
- against what pocketsphinx's writer printed before dying (run in a child process: all unigrams and
  ~2.05M bigrams with backoffs, `asrdecode.lm.sphinx_arpa_dump`), its factor recovered from `<s>`,
  within its 4 printed decimals.

The graph LM keeps the words that the model's dictionary (`cmudict-en-us.dict`) can pronounce (all
of them by default, or the `--vocab` most probable), renormalises (`limit_vocabulary`), then
entropy-prunes with kaldingram (`--prune`, relative perplexity change) so that an HCLG builds on a
2-core machine. Vocabulary choice uses unigram probability only.

``--exact-bigram`` then keeps the pruned LM's bigrams, each raised to its backoff route where that
is more probable (`asrdecode.lm.backoff.exact_bigram`): the small graph of on-the-fly decoding,
whose G must read the LM exactly for the composition to be the large LM read exactly.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from asrdecode.lm.arpa import check_arpa
from asrdecode.lm.backoff import BackoffReadings, exact_bigram
from asrdecode.lm.sphinx_arpa_dump import (
    compare_with_dump,
    dump_scale,
    read_arpa_dump,
    run_pocketsphinx_writer,
)
from asrdecode.lm.sphinx_trie import NgramLookup, TrieLM, limit_vocabulary, read_trie_lm, write_arpa
from asrdecode.models.loading import resolve_packaged_path

LOG10_PER_SPHINX_UNIT = float(np.log10(1.0001))  # pocketsphinx's default logmath base
TOLERANCE = LOG10_PER_SPHINX_UNIT + 1e-5
WRITER_DECIMALS_HALF = 0.5e-4  # pocketsphinx prints log10 values with 4 decimals
FLOAT32_SLACK = 99 * 2.0**-23  # float32 rounding of values down to -99 (when the writer's factor != 1)


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


def check_with_pocketsphinx_writer(lm: TrieLM, lm_bin: Path) -> None:
    """Compare `lm` with whatever pocketsphinx's own ARPA writer gets out before it crashes."""
    with tempfile.TemporaryDirectory() as tmp:
        dump_path = Path(tmp) / "pocketsphinx.arpa"
        t0 = time.time()
        rc = run_pocketsphinx_writer(lm_bin, dump_path)
        dump = read_arpa_dump(dump_path, max_order=len(lm.orders))
    factor = dump_scale(dump)
    state = "complete" if dump.complete else f"exit code {rc}, output truncated"
    print(
        f"  pocketsphinx NGramModel.write ({state}, {time.time() - t0:.0f} s): "
        f"every log10 value x {factor:.6g}"
    )
    tol = WRITER_DECIMALS_HALF / factor + FLOAT32_SLACK
    bad = []
    for order, c in sorted(compare_with_dump(lm, dump, factor).items()):
        print(
            f"    {order}-grams: {c.compared:,} lines, max |diff| prob {c.max_prob_diff:.2e}, "
            f"backoff {c.max_backoff_diff:.2e} (tolerance {tol:.2g}); {c.missing} not in ours"
        )
        if c.missing or max(c.max_prob_diff, c.max_backoff_diff) > tol:
            bad.append(order)
    if bad or 1 not in dump.ngrams:
        sys.exit(f"{lm_bin}: export disagrees with pocketsphinx's ARPA writer on orders {bad or [1]}")


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
    ap.add_argument("--vocab", type=int, default=0, help="words kept (most probable first); 0 = all")
    ap.add_argument(
        "--prune", type=float, default=1e-6, help="kaldingram entropy-pruning threshold (0 = none)"
    )
    ap.add_argument(
        "--exact-bigram", action="store_true", help="keep bigrams, raised so that G reads them exactly"
    )
    ap.add_argument("--name", help="file stem of the graph LM (default sphinx-en-us-<vocab/1000>k)")
    ap.add_argument("--full", action="store_true", help="also write the whole LM as ARPA (35 MB gz)")
    ap.add_argument("--full-out", type=Path, default=Path("data/cache/sphinx-en-us.arpa.gz"))
    ap.add_argument(
        "--samples", type=int, default=2000, help="n-grams per order checked against pocketsphinx (0: none)"
    )
    ap.add_argument(
        "--no-writer-check",
        action="store_true",
        help="skip the comparison with pocketsphinx's own (crashing) ARPA writer (~20 s)",
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
    worst = compare_with_pocketsphinx(lm, args.lm_bin, args.samples) if args.samples > 0 else {}
    for name, diff in worst.items():
        print(f"  vs pocketsphinx NGramModel.prob, {name}: max |diff| {diff:.2e} log10")
    if worst and max(worst.values()) > TOLERANCE:
        sys.exit(
            f"{args.lm_bin}: export differs from pocketsphinx by {max(worst.values()):.3g} > {TOLERANCE:.3g}"
        )
    if not args.no_writer_check:
        check_with_pocketsphinx_writer(lm, args.lm_bin)
    if args.full:
        args.full_out.parent.mkdir(parents=True, exist_ok=True)
        full = write_arpa(lm, args.full_out)
        print(f"wrote {full} ({full.stat().st_size / 1e6:.1f} MB, {time.time() - t0:.0f} s)")

    pronounceable = dictionary_words(args.dict)
    uni = lm.orders[0].log10_prob
    ranked = [lm.vocab[i] for i in np.argsort(-uni, kind="stable") if lm.vocab[i] in pronounceable]
    keep = set(ranked[: args.vocab] if args.vocab > 0 else ranked)
    limited = limit_vocabulary(lm, keep)
    name = args.name or f"sphinx-en-us-{len(keep) // 1000}k"
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
    if args.exact_bigram:
        small, raised = exact_bigram(BackoffReadings.read(final))
        small.write(final)
        print(f"  kept the bigrams; {raised} raised to their backoff route")
    summary = check_arpa(final)
    print(
        f"wrote {final}: {summary.counts} n-grams, "
        f"{final.stat().st_size / 1e6:.2f} MB ({time.time() - t0:.0f} s)"
    )
    real = Path("data/demo/real/manifest.jsonl")
    if real.exists():
        oov, total = oov_rate(set(limited.vocab), real)
        print(
            f"  OOV rate of {real} against the {len(keep)}-word vocabulary: {oov}/{total} = {oov / total:.1%}"
        )


if __name__ == "__main__":
    main()
