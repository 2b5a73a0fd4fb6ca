"""How well word confidences separate correct from wrong words: a transcribe run's words (with
`conf`) aligned to the references of its manifest; prints per run the words, the share correct,
the mean confidence of correct and of wrong words, and the normalised cross entropy (NCE, NIST's
measure: 1 = perfect, 0 = no better than the share correct, below 0 worse).

    .venv/bin/python scripts/confidence_quality.py data/real/dev/manifest.jsonl out/dev-lattice
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import jiwer

from asrdecode.scoring import normalize_text


def labelled_words(manifest: Path, run: Path) -> list[tuple[float, bool]]:
    """(confidence, correct) of every hypothesis word with a confidence."""
    refs = {}
    for line in manifest.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            refs[row.get("utt_id") or Path(row["audio_filepath"]).stem] = row.get("text", "")
    out = []
    for line in (run / "transcripts.jsonl").read_text().splitlines():
        row = json.loads(line)
        words = [w for w in row.get("words", []) if normalize_text(w["word"])]
        ref = normalize_text(refs.get(row["utt_id"], ""))
        if not words or "conf" not in words[0]:
            continue
        hyp = [normalize_text(w["word"]) for w in words]
        correct = [False] * len(hyp)
        if ref:
            chunks = jiwer.process_words(ref, " ".join(hyp)).alignments[0]
            for c in chunks:
                if c.type == "equal":
                    for j in range(c.hyp_start_idx, c.hyp_end_idx):
                        correct[j] = True
        out += [(float(w["conf"]), ok) for w, ok in zip(words, correct, strict=True)]
    return out


def nce(pairs: list[tuple[float, bool]]) -> float:
    """Normalised cross entropy of the confidences (clipped to [1e-6, 1 - 1e-6])."""
    n = len(pairs)
    n_ok = sum(ok for _, ok in pairs)
    if n_ok in (0, n):
        return math.nan
    p = n_ok / n
    base = -(n_ok * math.log2(p) + (n - n_ok) * math.log2(1 - p))
    got = 0.0
    for c, ok in pairs:
        c = min(max(c, 1e-6), 1 - 1e-6)
        got += math.log2(c) if ok else math.log2(1 - c)
    return (base + got) / base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", type=Path)
    ap.add_argument("run", type=Path, help="an `asrdecode transcribe` output folder")
    args = ap.parse_args()
    pairs = labelled_words(args.manifest, args.run)
    ok = [c for c, good in pairs if good]
    bad = [c for c, good in pairs if not good]
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    print(
        f"{args.run}: {len(pairs)} words, {len(ok) / max(len(pairs), 1):.1%} correct, mean confidence "
        f"{mean(ok):.3f} correct / {mean(bad):.3f} wrong, NCE {nce(pairs):.3f}"
    )


if __name__ == "__main__":
    main()
