#!/usr/bin/env python3
"""Write an ARPA LM whose static graph reads it exactly (`asrdecode.lm.backoff.exact_readable`).

    .venv/bin/python scripts/exact_readable_lm.py data/lm/sphinx-en-us-72k.arpa.gz out/lm/exact.arpa.gz
    .venv/bin/asrdecode build-graph --config configs/graph/sphinx-en-us.yaml \\
        arpa=out/lm/exact.arpa.gz --out out/graphs/sphinx-en-us-exact
    .venv/bin/asrdecode bench diagnose-pocketsphinx data/demo/real/manifest.jsonl \\
        --graph out/graphs/sphinx-en-us-exact     # pocketsphinx gets the same (new) LM file

A graph's G reads an LM as its cheapest path over the backoff arcs; pocketsphinx reads the backoff
rule. The new LM drops or raises the n-grams where the two differ (docs/real-speech.md), so
the static path and pocketsphinx then score every sentence alike. It is a different LM from the
input (fewer trigrams): compare both systems on it, not it against the input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asrdecode.errors import AsrDecodeError
from asrdecode.lm.backoff import BackoffReadings, exact_readable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arpa", type=Path, help="input ARPA (plain or .gz)")
    ap.add_argument("out", type=Path, help="output ARPA (.gz: gzip)")
    args = ap.parse_args()
    try:
        lm = BackoffReadings.read(args.arpa)
    except AsrDecodeError as err:
        sys.exit(f"exact_readable_lm: {err}")
    new, counts = exact_readable(lm)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    new.write(args.out)
    before = [sum(1 for g in lm.prob if len(g) == k) for k in range(1, lm.order + 1)]
    after = [sum(1 for g in new.prob if len(g) == k) for k in range(1, new.order + 1)]
    print(
        f"wrote {args.out}: n-grams {before} -> {after}; below their backoff route: {counts['removed']} "
        f"removed, {counts['raised']} raised (histories of longer n-grams); "
        f"{counts['history_ngrams_removed']} n-grams removed under histories G could skip"
    )


if __name__ == "__main__":
    main()
