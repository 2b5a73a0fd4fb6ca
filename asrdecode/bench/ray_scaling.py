#!/usr/bin/env python3
"""Throughput of `transcribe --engine ray` with 1 and 2 workers against a local run, same input.

    .venv/bin/asrdecode bench ray-scaling                       # demo CTC on data/demo/synthetic x8
    .venv/bin/asrdecode bench ray-scaling --manifest data/real/dev/manifest.jsonl --repeat 2 \
        --config embedded:configs/sphinx-en-us-otf.yaml model.threads=1     # the sphinx setup

Every run is `asrdecode transcribe` in a child process into a fresh folder. Printed per run: wall
seconds of the whole command (process start, Ray start, model loads included), the report's RTFx
(audio seconds over the decoding wall time, Ray start included, model load excluded for local), and
the ratio of each RTFx to the local run's; the same goes to --json. The load average is printed
before and after: figures from a busy machine mean little. The transcripts of every run are checked
against the local run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from asrdecode.bench.harness import bench_parser, parse

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report=ROOT / "out/bench/ray_scaling.json", threads=1)
    ap.add_argument("--manifest", default=str(ROOT / "data/demo/synthetic/manifest.jsonl"))
    ap.add_argument(
        "--copies", "--repeat", type=int, default=8, help="each utterance this many times (new ids)"
    )
    ap.add_argument("--model", default="embedded:demo_ctc_bpe")
    ap.add_argument("--config", help="a run config instead of --model (e.g. configs/hama-en-us-otf.yaml)")
    ap.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. model.threads=1")
    args = parse(ap, argv)

    base = Path(args.manifest).resolve().parent
    rows = [json.loads(x) for x in Path(args.manifest).read_text().splitlines() if x.strip()]
    with tempfile.TemporaryDirectory(prefix="ray-bench-") as tmp:
        manifest = Path(tmp) / "m.jsonl"
        with manifest.open("w") as f:
            for r in range(args.copies):
                for i, row in enumerate(rows):
                    row = dict(row, utt_id=f"r{r}-{i:04d}")
                    row["audio_filepath"] = str((base / row["audio_filepath"]).resolve())
                    f.write(json.dumps(row) + "\n")
        runs = [("local", []), ("ray 1 worker", ["--engine", "ray", "--workers", "1"])]
        runs.append(("ray 2 workers", ["--engine", "ray", "--workers", "2"]))
        print(f"load average before: {os.getloadavg()}")
        what = f"config {args.config}" if args.config else f"model {args.model}"
        print(
            f"{len(rows) * args.copies} utterances, {what}, threads={args.threads} per process, "
            f"overrides {args.overrides}"
        )
        results, texts = [], {}
        for name, extra in runs:
            out = Path(tmp) / name.replace(" ", "-")
            cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(manifest)]
            cmd += ["--config", args.config] if args.config else ["--model", args.model]
            cmd += ["--out", str(out), f"threads={args.threads}", *args.overrides, *extra]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.exit(f"{name} failed:\n{proc.stderr[-2000:]}")
            report = json.loads((out / "report.json").read_text())
            texts[name] = (out / "text").read_text()
            results.append((name, wall, report))
        local_rtfx = results[0][2]["rtfx"]
        print(f"{'run':<15} {'wall s':>8} {'RTFx':>8} {'vs local':>9}  per worker RTFx")
        for name, wall, report in results:
            per = ", ".join(f"{w['rtfx']:.1f}" for w in report.get("workers", []))
            print(f"{name:<15} {wall:8.1f} {report['rtfx']:8.1f} {report['rtfx'] / local_rtfx:8.2f}x  {per}")
        same = all(t == texts["local"] for t in texts.values())
        print(f"transcripts identical to the local run: {same}")
        print(f"load average after: {os.getloadavg()}")
        rows_out = [
            {"run": name, "wall_seconds": wall, "rtfx": r["rtfx"], "vs_local": r["rtfx"] / local_rtfx,
             "workers": r.get("workers", [])}
            for name, wall, r in results
        ]  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        summary = {"runs": rows_out, "identical": same, "load_average": os.getloadavg()}
        args.json.write_text(json.dumps(summary, indent=1))
        print(f"written {args.json}")


if __name__ == "__main__":
    main()
