"""Time the sphinx front end and senone scoring (top-N vs full mixture) on real clips.

    .venv/bin/python scripts/bench/sphinx_scoring.py [--threads 2] [--batch 1] [WAV ...]

Default clips: data/demo/real/*.wav (16 kHz). Prints seconds and real-time factors (RTFx = audio
seconds / compute seconds) for features (float64 and float32) and scoring (topn 4 and full).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import soundfile as sf
import torch

from asrdecode.features.sphinx_mfcc import SphinxFeConfig, SphinxMFCC
from asrdecode.models.loading import load_model
from asrdecode.models.sphinx import SphinxAcousticModel

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("wavs", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    paths = args.wavs or sorted(str(p) for p in (ROOT / "data" / "demo" / "real").glob("*.wav"))
    clips = [torch.from_numpy(sf.read(p, dtype="float32")[0]) for p in paths]
    audio_s = sum(c.numel() for c in clips) / 16000
    model = load_model("embedded:sphinx-en-us")
    fe64 = model.frontend
    fe32 = SphinxMFCC(SphinxFeConfig(**{**fe64.cfg.to_dict(), "dtype": "float32"}))
    full = SphinxAcousticModel(model.data, frontend=fe64, topn=0)
    batches = [clips[i : i + args.batch] for i in range(0, len(clips), args.batch)]

    def pad(group: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        lens = torch.tensor([c.numel() for c in group])
        out = torch.zeros(len(group), int(lens.max()))
        for i, c in enumerate(group):
            out[i, : c.numel()] = c
        return out, lens

    padded = [pad(g) for g in batches]
    feats = [model.features(w, n) for w, n in padded]
    frames = sum(int(n.sum()) for _, n in feats)

    def timed(fn) -> float:
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best

    rows = [
        ("features float64", timed(lambda: [fe64(w, n) for w, n in padded])),
        ("features float32", timed(lambda: [fe32(w, n) for w, n in padded])),
        ("scoring topn=4", timed(lambda: [model.forward_features(f, n) for f, n in feats])),
        ("scoring full", timed(lambda: [full.forward_features(f, n) for f, n in feats])),
    ]
    print(
        f"{len(clips)} clips, {audio_s:.1f} s audio, {frames} frames, batch {args.batch}, "
        f"{args.threads} threads"
    )
    for name, sec in rows:
        print(f"{name:18s} {sec:7.3f} s  {sec / frames * 1000:6.3f} ms/frame  RTFx {audio_s / sec:7.1f}")


if __name__ == "__main__":
    main()
