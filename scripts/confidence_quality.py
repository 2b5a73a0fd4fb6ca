"""How well word confidences separate correct from wrong words: a transcribe run's words (with
`conf`) aligned to the references of its manifest; prints per run the words, the share correct,
the mean confidence of correct and of wrong words, and the normalised cross entropy (NCE, NIST's
measure: 1 = perfect, 0 = no better than the share correct, below 0 worse).

    .venv/bin/python scripts/confidence_quality.py data/real/dev/manifest.jsonl out/dev-lattice

Several MANIFEST RUN pairs may follow each other. `--fit` fits a logistic calibration
``sigmoid(a + b * logit(conf))`` (`paths.calibrated_confidence`; the decoders' `confidence_bias`
a and `confidence_slope` b) to the pooled words of all pairs (maximum likelihood, Newton's
method; run it on tuning sets only, on raw confidences) and prints a, b; `--calibration a,b`
scores calibrated confidences instead of the raw ones.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import jiwer

from asrdecode.decoders.wfst.paths import CONFIDENCE_CLIP, calibrated_confidence
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


def logit(c: float) -> float:
    """The logit `calibrated_confidence` takes of a posterior (clipped as there)."""
    c = min(max(c, CONFIDENCE_CLIP), 1 - CONFIDENCE_CLIP)
    return math.log(c / (1 - c))


def _sigmoid(z: float) -> float:
    return calibrated_confidence(0.5, z, 0.0)  # sigmoid(z + 0 * logit(0.5))


def _log_likelihood(xs: list[float], ys: list[bool], a: float, b: float) -> float:
    total = 0.0
    for x, y in zip(xs, ys, strict=True):
        z = a + b * x
        # log sigmoid(z) if y else log sigmoid(-z), without overflow
        t = z if y else -z
        total += -math.log1p(math.exp(-t)) if t >= 0 else t - math.log1p(math.exp(t))
    return total


def fit_calibration(pairs: list[tuple[float, bool]], steps: int = 100) -> tuple[float, float]:
    """(a, b) maximising the likelihood of the correct/wrong labels under
    ``sigmoid(a + b * logit(conf))``: Newton's method on the two parameters, each step halved
    until the likelihood does not fall."""
    xs, ys = [logit(c) for c, _ in pairs], [ok for _, ok in pairs]
    a, b = 0.0, 1.0
    ll = _log_likelihood(xs, ys, a, b)
    for _ in range(steps):
        ga = gb = haa = hab = hbb = 0.0
        for x, y in zip(xs, ys, strict=True):
            p = _sigmoid(a + b * x)
            r, w = (1.0 if y else 0.0) - p, p * (1 - p)
            ga, gb = ga + r, gb + r * x
            haa, hab, hbb = haa + w, hab + w * x, hbb + w * x * x
        det = haa * hbb - hab * hab
        if det <= 0:
            break
        da, db = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
        step = 1.0
        while step > 1e-6:
            new = _log_likelihood(xs, ys, a + step * da, b + step * db)
            if new >= ll:
                break
            step /= 2
        if step <= 1e-6 or new - ll < 1e-10:
            break
        a, b, ll = a + step * da, b + step * db, new
    return a, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="+", type=Path, help="MANIFEST RUN [MANIFEST RUN ...]")
    ap.add_argument("--fit", action="store_true", help="fit a logistic calibration to all pairs' words")
    ap.add_argument("--calibration", default="", help="a,b: score sigmoid(a + b * logit(conf))")
    args = ap.parse_args()
    if len(args.pairs) % 2:
        ap.error("give MANIFEST RUN pairs")
    cal = [float(x) for x in args.calibration.split(",")] if args.calibration else None
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    pooled = []
    for manifest, run in zip(args.pairs[::2], args.pairs[1::2], strict=True):
        pairs = labelled_words(manifest, run)
        if cal is not None:
            pairs = [(calibrated_confidence(c, cal[0], cal[1]), ok) for c, ok in pairs]
        pooled += pairs
        ok = [c for c, good in pairs if good]
        bad = [c for c, good in pairs if not good]
        print(
            f"{run}: {len(pairs)} words, {len(ok) / max(len(pairs), 1):.1%} correct, mean confidence "
            f"{mean(ok):.3f} correct / {mean(bad):.3f} wrong, NCE {nce(pairs):.3f}"
        )
    if len(args.pairs) > 2:
        print(f"pooled: {len(pooled)} words, NCE {nce(pooled):.3f}")
    if args.fit:
        a, b = fit_calibration(pooled)
        fitted = [(calibrated_confidence(c, a, b), ok) for c, ok in pooled]
        print(f"fitted calibration a={a:.4f} b={b:.4f}: pooled NCE {nce(fitted):.3f}")


if __name__ == "__main__":
    main()
