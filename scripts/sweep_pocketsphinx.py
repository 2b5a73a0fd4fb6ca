#!/usr/bin/env python3
"""pocketsphinx's WER on the tuning sets over a grid of one of its options: the peer's side of a
setting asrdecode re-chose on those sets (is the gain asrdecode's, or would pocketsphinx get it too?).

    .venv/bin/python scripts/sweep_pocketsphinx.py wip 0.65 0.1 0.01 0.001 0.0001

For each value, pocketsphinx 5.1.1 (`asrdecode.bench.peers.Pocketsphinx`: its en-us model, a fresh
front end per utterance, its defaults otherwise) decodes the tuning sets data/demo/real,
data/real/dev and data/real/phone-dev (never the held-out data/real/test or data/real/phone-test)
with the static path's LM (data/lm/sphinx-en-us-72k.arpa.gz, "same LM") and with its own full
en-us.lm.bin ("own LM"), and prints the WER per set and pooled over the sets (errors / reference
words; `asrdecode.scoring`), as scripts/sweep_decoding.py does for asrdecode.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TUNING = ["data/demo/real", "data/real/dev", "data/real/phone-dev"]
SAME_LM = ROOT / "data/lm/sphinx-en-us-72k.arpa.gz"


def main() -> None:
    from asrdecode.bench.peers import Pocketsphinx, pcm16, quiet_native_output
    from asrdecode.io.manifests import read_inputs
    from asrdecode.scoring import score

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("option", help="a pocketsphinx option, e.g. wip, beam, silprob")
    ap.add_argument("values", nargs="+", type=float)
    args = ap.parse_args()

    utts = {s: read_inputs(ROOT / s / "manifest.jsonl").utterances for s in TUNING}
    pcms = {s: [pcm16(u.audio_path, u.offset, u.duration) for u in utts[s]] for s in TUNING}
    for name, lm in (("same LM", SAME_LM), ("own LM", None)):
        for value in args.values:
            ps = Pocketsphinx(lm, **{args.option: value})
            errors = words = 0
            row = []
            for s in TUNING:
                refs = {u.utt_id: u.text or "" for u in utts[s]}
                with quiet_native_output():
                    hyps = {u.utt_id: " ".join(ps.words(p)[0]) for u, p in zip(utts[s], pcms[s], strict=True)}
                counts = score(refs, hyps)
                row.append(f"{s.split('/', 1)[1]} {counts.wer:6.1%}")
                errors += counts.substitutions + counts.deletions + counts.insertions
                words += counts.ref_words
            pooled = f"pooled {errors / words:6.1%}"
            print(f"{name:<8} {args.option}={value:<8g} {'  '.join(row)}  {pooled}", flush=True)


if __name__ == "__main__":
    main()
