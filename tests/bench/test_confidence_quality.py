"""scripts/confidence_quality.py: hypothesis words aligned to the references, and NIST's normalised
cross entropy of their confidences, on a hand-made run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_alignment_and_nce(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(
        json.dumps({"audio_filepath": "a.wav", "text": "the cat sat"}) + "\n"
        + json.dumps({"audio_filepath": "b.wav", "text": "Hello, world"}) + "\n"
    )  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    words = {
        "a": [("the", 0.9), ("hat", 0.2), ("sat", 0.8)],  # one substitution
        "b": [("hello", 0.7), ("world", 0.6), ("again", 0.5)],  # one insertion
    }
    rows = [
        {"utt_id": u, "words": [{"word": w, "start": 0.0, "end": 0.1, "conf": c} for w, c in ws]}
        for u, ws in words.items()
    ]
    (run / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/confidence_quality.py"), str(manifest), str(run)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    correct = [0.9, 0.8, 0.7, 0.6]
    wrong = [0.2, 0.5]
    p = 4 / 6
    base = -(4 * math.log2(p) + 2 * math.log2(1 - p))
    nce = (base + sum(math.log2(c) for c in correct) + sum(math.log2(1 - c) for c in wrong)) / base
    assert "6 words, 66.7% correct" in proc.stdout
    assert f"{sum(correct) / 4:.3f} correct / {sum(wrong) / 2:.3f} wrong" in proc.stdout
    assert f"NCE {nce:.3f}" in proc.stdout


def test_fit_recovers_a_known_calibration() -> None:
    """`fit_calibration` on labels drawn from sigmoid(a + b * logit(conf)) finds a and b."""
    import importlib.util
    import random

    script = ROOT / "scripts/confidence_quality.py"
    spec = importlib.util.spec_from_file_location("confidence_quality", script)
    cq = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cq)
    rng = random.Random(0)
    pairs = []
    for _ in range(20000):
        conf = rng.random()
        p = 1 / (1 + math.exp(-(-0.7 + 0.4 * cq.logit(conf))))
        pairs.append((conf, rng.random() < p))
    a, b = cq.fit_calibration(pairs)
    assert abs(a + 0.7) < 0.08 and abs(b - 0.4) < 0.05
