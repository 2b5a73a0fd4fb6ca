#!/usr/bin/env python3
"""Long recordings: wall time and peak RSS of `asrdecode transcribe` on one file of 10, 30 and 60
minutes (data/demo/real clips concatenated with 0.5 s gaps, cycling), each in its own process.

    .venv/bin/asrdecode bench long-audio                       # demo CTC, local attention
    .venv/bin/asrdecode bench long-audio --minutes 10 --options ""   # full attention (20 GB!)
    .venv/bin/asrdecode bench long-audio --model "" --options ""      # the default setup
    .venv/bin/asrdecode bench long-audio --model "" --options "" --minutes 60 --rate 44100 --channels 2
    .venv/bin/asrdecode bench long-audio --model "" --options "" --minutes 60 --format m4a

``--rate`` / ``--channels``: the file at that rate (resampled from 16 kHz by torchaudio) and with
that many channels (the first one repeated at 0.9, 0.8, ... of its level), 16-bit PCM, as a
podcast or a recorder writes it: the reading, down-mixing and resampling are measured too.
``--format m4a`` / ``webm``: the file encoded as a phone's voice memo (AAC in MP4) or a web
recording (Opus in WebM, 48 kHz) by FFmpeg through PyAV, read back the same way.

The peak RSS is the child's own (os.wait4, as asrdecode bench first-use measures it). The load
average before and after is printed.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from asrdecode.bench.first_use import timed
from asrdecode.bench.harness import bench_parser, finish, parse

ROOT = Path(__file__).resolve().parents[2]


def long_file(minutes: float, path: Path, rate: int = 16000, channels: int = 1) -> None:
    rows = [json.loads(line) for line in (ROOT / "data/demo/real/manifest.jsonl").read_text().splitlines()]
    pieces, total, i = [], 0, 0
    while total < minutes * 60 * 16000:
        audio, _ = sf.read(ROOT / "data/demo/real" / rows[i % len(rows)]["audio_filepath"], dtype="float32")
        pieces += [audio, np.zeros(8000, dtype=np.float32)]
        total += len(audio) + 8000
        i += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    audio = np.concatenate(pieces)[: int(minutes * 60 * 16000)]
    if rate == 16000 and channels == 1 and path.suffix == ".wav":
        sf.write(path, audio, 16000)
        return
    import torch
    import torchaudio.functional as AF  # noqa: N812

    def minutes_of_audio():  # [n, channels] float32 at `rate`, a minute at a time
        for lo in range(0, len(audio), 60 * 16000):
            x = audio[lo : lo + 60 * 16000]
            if rate != 16000:
                x = AF.resample(torch.from_numpy(x)[None], 16000, rate)[0].numpy()
            yield np.stack([x * (1 - 0.1 * c) for c in range(channels)], axis=1).astype(np.float32)

    if path.suffix == ".wav":
        with sf.SoundFile(path, "w", rate, channels, "PCM_16") as f:
            for block in minutes_of_audio():
                f.write(block)
        return
    from asrdecode.audio.containers import encode_audio

    encode_audio(str(path), minutes_of_audio(), rate)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report=None)
    ap.add_argument("--minutes", default="10,30,60")
    ap.add_argument("--model", default="embedded:demo_ctc_bpe", help='"" = the default setup')
    ap.add_argument("--options", default="model.attention=local", help="extra transcribe arguments")
    ap.add_argument("--rate", type=int, default=16000, help="the file's sample rate")
    ap.add_argument("--channels", type=int, default=1, help="the file's channels")
    ap.add_argument("--format", default="wav", choices=["wav", "m4a", "webm"], help="the file's format")
    args = parse(ap, argv)
    load = os.getloadavg()
    cli = [sys.executable, "-m", "asrdecode.cli", "transcribe"]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for minutes in (float(m) for m in args.minutes.split(",")):
            folder = Path(tmp) / f"long{minutes:g}"
            long_file(minutes, folder / f"long.{args.format}", args.rate, args.channels)
            model = ["--model", args.model] if args.model else []
            cmd = [*cli, str(folder), *model, *shlex.split(args.options)]
            wall, rss, _ = timed([*cmd, "--out", str(Path(tmp) / "out"), "--overwrite"], dict(os.environ))
            report = json.loads((Path(tmp) / "out" / "report.json").read_text())
            print(
                f"{minutes:g} min at {args.rate} Hz, {args.channels} channel(s), {args.format}, "
                f"{report['model']} / {report['decoder']} {args.options}: {wall:.1f} s, "
                f"peak RSS {rss:.0f} MB, RTFx {report['rtfx']:.1f}, {report.get('segmented', 0)} input(s) "
                "in segments",
                flush=True,
            )
            runs.append({"minutes": minutes, "wall_seconds": wall, "peak_rss_mb": rss, "report": report})
    after = os.getloadavg()
    before_text = "/".join(f"{x:.2f}" for x in load)
    after_text = "/".join(f"{x:.2f}" for x in after)
    print(f"load average (1/5/15 min) before {before_text}, after {after_text}")
    setup = {k: getattr(args, k) for k in ("model", "options", "rate", "channels", "format")}
    finish(args, {**setup, "runs": runs, "load_average_before": load, "load_average_after": after})


if __name__ == "__main__":
    main()
