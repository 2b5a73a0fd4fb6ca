"""Time the sphinx front end and senone scoring (top-N and full mixture) on real clips, with
pocketsphinx's own decoder on the same audio as the peer.

    .venv/bin/asrdecode bench sphinx-scoring [--threads 1] [--batch 1] [--json PATH] [WAV ...]

Default clips: data/demo/real/*.wav (16 kHz). Rows: asrdecode's MFCC front end (float64 and
float32), senone scoring of every frame and all 5,126 senones (topn 4, pocketsphinx's default, and
the exact full mixture), and pocketsphinx 5.1.1 decoding the same clips with its defaults
(front end + scoring of its active senones + search, start_utt..end_utt). Columns: best wall
seconds over ``--repeat`` runs, the process CPU seconds of that run, ms per frame, RTFx (audio
seconds / wall seconds) and the ratio to pocketsphinx's RTFx. On a shared machine wall clock
drifts with the load: compare the ratios of one run, and the CPU column. Writes JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import soundfile as sf
import torch

from asrdecode.bench.harness import bench_parser, parse
from asrdecode.features.sphinx_mfcc import SphinxFeConfig, SphinxMFCC
from asrdecode.models.loading import load_model
from asrdecode.models.sphinx import SphinxAcousticModel

ROOT = Path(__file__).resolve().parents[2]


def timed(fn, repeat: int) -> tuple[float, float]:
    """Best (wall, CPU) seconds of `repeat` calls (CPU time of the same call)."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if wall < best[0]:
            best = (wall, cpu)
    return best


def pocketsphinx_decode(paths: list[str]):
    """A callable decoding every clip with pocketsphinx's defaults (model loading done here)."""
    from pocketsphinx import Decoder

    decoder = Decoder(loglevel="FATAL")
    pcm = [sf.read(p, dtype="int16")[0].tobytes() for p in paths]

    def run() -> None:
        for raw in pcm:
            decoder.start_utt()
            decoder.process_raw(raw, no_search=False, full_utt=True)
            decoder.end_utt()

    return run


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(
        __doc__, report=ROOT / "out/bench/sphinx_scoring.json", threads=1, repeats=3, aliases=("--repeat",)
    )
    ap.add_argument("wavs", nargs="*")
    ap.add_argument("--batch", type=int, default=1)
    args = parse(ap, argv)
    paths = args.wavs or sorted(str(p) for p in (ROOT / "data" / "demo" / "real").glob("*.wav"))
    clips = [torch.from_numpy(sf.read(p, dtype="float32")[0]) for p in paths]
    audio_s = sum(c.numel() for c in clips) / 16000
    model = load_model("embedded:sphinx-en-us", "sphinx", topn=4)
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
    with torch.inference_mode():
        feats = [model.features(w, n) for w, n in padded]
        frames = sum(int(n.sum()) for _, n in feats)
        model.forward_features(*feats[0])  # first-call costs
        rows = {
            "features float64": timed(lambda: [fe64(w, n) for w, n in padded], args.repeats),
            "features float32": timed(lambda: [fe32(w, n) for w, n in padded], args.repeats),
            "scoring topn=4": timed(lambda: [model.forward_features(f, n) for f, n in feats], args.repeats),
            "scoring full": timed(lambda: [full.forward_features(f, n) for f, n in feats], args.repeats),
        }
    rows["pocketsphinx decode"] = timed(pocketsphinx_decode(paths), args.repeats)
    peer = audio_s / rows["pocketsphinx decode"][0]
    print(
        f"{len(clips)} clips, {audio_s:.1f} s audio, {frames} frames, batch {args.batch}, "
        f"{args.threads} torch threads\n"
    )
    print(f"{'':20s} {'wall s':>8s} {'CPU s':>8s} {'ms/frame':>9s} {'RTFx':>8s} {'vs PS':>7s}")
    result = {"clips": len(clips), "audio_seconds": audio_s, "frames": frames, "threads": args.threads}
    result["rows"] = {}
    for name, (wall, cpu) in rows.items():
        rtfx = audio_s / wall
        print(
            f"{name:20s} {wall:8.3f} {cpu:8.3f} {wall / frames * 1000:9.3f} {rtfx:8.1f} {rtfx / peer:6.1f}x"
        )
        result["rows"][name] = {
            "wall_seconds": wall,
            "cpu_seconds": cpu,
            "rtfx": rtfx,
            "vs_pocketsphinx": rtfx / peer,
        }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
