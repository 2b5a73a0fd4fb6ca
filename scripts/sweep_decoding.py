#!/usr/bin/env python3
"""WER of a grid of decoder settings on tuning sets, from saved model outputs (acoustic scoring once).

    .venv/bin/python scripts/sweep_decoding.py \\
        decoder.acoustic_scale=0.0870,0.0952,0.10526,0.1176 decoder.max_active=5000,20000
    .venv/bin/python scripts/sweep_decoding.py --config configs/sphinx-en-us-otf.yaml \\
        --graph cache:embedded:configs/graph/sphinx-en-us-small.yaml decoder.beam=9,11,13   # the sphinx setup

For each `--manifest` (default: the tuning sets data/real/dev, data/demo/real and
data/real/phone-dev; never point it at data/real/test or data/real/phone-test, the held-out sets)
the model runs once with `output.save_logprobs=true`; then every combination of the grid's values
decodes the saved log-probs (`asrdecode transcribe LOGPROBS_DIR`)
and its WER per set and pooled over the sets (errors / reference words) is printed and written to
JSON with the decode stage's seconds summed over the sets (run it on a quiet machine: the load
average is printed at the end). Grid keys are config overrides with comma-separated values; the
last one varies fastest. `--point "KEY=V KEY=V"` (repeatable) adds one setting outside the grid,
and `--rounds N` decodes every setting N times in rounds, alternated, keeping each setting's
fastest round (its rounds' seconds are in the JSON) for comparisons on a noisy machine:

    .venv/bin/python scripts/sweep_decoding.py --config asrdecode/assets/configs/sphinx-en-us-otf.yaml \
        --graph cache:embedded:configs/graph/sphinx-en-us-small.yaml --rounds 2 \
        --point "decoder.beam=11" --point "decoder.beam=10 decoder.graph=out/graphs/small-deferred"

A point's upper-case ``NAME=VALUE`` words are environment variables of its runs, not overrides:
``--point "decoder.threads=1" --point "PYTHONPATH=/tmp/wt decoder.threads=1"`` times a scratch
worktree's code against the checkout's, alternated (the fastest rounds are also printed as a
ratio to the first setting's).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUNING = [
    "data/real/dev/manifest.jsonl",
    "data/demo/real/manifest.jsonl",
    "data/real/phone-dev/manifest.jsonl",
]
HELD_OUT = [ROOT / "data/real/test", ROOT / "data/real/phone-test"]


ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=")


def split_point(words: list[str]) -> tuple[list[str], dict[str, str]]:
    """A point's words as (config overrides, environment variables: the upper-case NAME=VALUE)."""
    env = dict(w.split("=", 1) for w in words if ENV_WORD.match(w))
    return [w for w in words if not ENV_WORD.match(w)], env


def transcribe(source: Path, out: Path, config: Path, overrides: list[str], env: dict | None = None) -> dict:
    # -P: the working directory is not put first on sys.path, so a point's PYTHONPATH decides which
    # asrdecode runs (else `-m` run from the checkout would always import the checkout's)
    cmd = [sys.executable, "-P", "-m", "asrdecode.cli", "transcribe", str(source), "--config", str(config)]
    proc = subprocess.run(
        [*cmd, *overrides, "--out", str(out), "--overwrite"],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        sys.exit(f"asrdecode transcribe failed:\n{proc.stderr}")
    return json.loads((out / "report.json").read_text())


def label(row: dict) -> str:
    """A setting as given: its environment words, then its overrides."""
    return " ".join([*(f"{k}={v}" for k, v in row["env"].items()), *row["overrides"]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", type=Path, action="append", help="a tuning set (repeatable)")
    ap.add_argument("--config", type=Path, default=ROOT / "configs/sphinx-en-us.yaml")
    ap.add_argument(
        "--graph", type=Path, default=None, help="decoder.graph of every run (default: the config's)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out/sweep")
    ap.add_argument("--json", type=Path, default=ROOT / "out/sweep.json")
    ap.add_argument("--point", action="append", default=[], help="one setting: 'KEY=V KEY=V' (repeatable)")
    ap.add_argument("--rounds", type=int, default=1, help="decode every setting this many times, alternated")
    ap.add_argument("grid", nargs="*", help="key=v1,v2,... (config overrides)")
    args = ap.parse_intermixed_args()
    if not (args.grid or args.point) or args.rounds < 1:
        sys.exit("sweep: give a grid (KEY=V1,V2) or --point settings, and --rounds of at least 1")

    manifests = args.manifest or [ROOT / m for m in TUNING]
    held_out = [m for m in manifests if m.resolve().parent in HELD_OUT]
    if held_out:
        sys.exit(f"sweep: {held_out[0]} is a held-out set; tune on data/real/dev, data/demo/real, phone-dev")
    grid = [(g.split("=", 1)[0], g.split("=", 1)[1].split(",")) for g in args.grid]
    keys = [k for k, _ in grid]
    combos = itertools.product(*[v for _, v in grid]) if grid else []  # no grid: no empty setting
    points = [[f"{k}={v}" for k, v in zip(keys, vs, strict=True)] for vs in combos]
    points += [p.split() for p in args.point]
    base = [f"decoder.graph={args.graph}"] if args.graph is not None else []
    saved = {}
    for m in manifests:
        name = m.parent.name if m.parent.name != "real" else f"{m.parent.parent.name}-real"
        out = args.out / name / "model"
        transcribe(m, out, args.config, [*base, "output.save_logprobs=true"])
        saved[name] = out / "logprobs"
    rows = []
    for words in points:
        overrides, env = split_point(words)
        rows.append({"overrides": overrides, "env": env, "sets": {}, "round_seconds": []})
    load = os.getloadavg()
    print(f"load average (1/5/15 min) at the start {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}", flush=True)
    for _ in range(args.rounds):
        for row in rows:
            errors = words = 0
            seconds = 0.0
            for name, logprobs in saved.items():
                overrides = [*base, *row["overrides"]]
                report = transcribe(logprobs, args.out / name / "point", args.config, overrides, row["env"])
                counts = report["scoring"]
                row["sets"][name] = report["wer"]
                seconds += report["stage_seconds"]["decode"]
                errors += counts["substitutions"] + counts["deletions"] + counts["insertions"]
                words += counts["ref_words"]
            row["round_seconds"].append(seconds)
            row["decode_seconds"] = min(row["round_seconds"])
            row["pooled_wer"] = errors / words
            sets = "  ".join(f"{n} {w:6.1%}" for n, w in row["sets"].items())
            print(
                f"{label(row):<60} {sets}  pooled {row['pooled_wer']:6.1%}  decode {seconds:.1f} s",
                flush=True,
            )
    if args.rounds > 1:
        print("\nfastest round of each (and its ratio to the first setting's):")
        for row in rows:
            rounds = " / ".join(f"{t:.1f}" for t in row["round_seconds"])
            ratio = row["decode_seconds"] / max(rows[0]["decode_seconds"], 1e-9)
            print(f"{label(row):<60} {row['decode_seconds']:.1f} s  x{ratio:.2f}  (rounds {rounds})")
    best = min(rows, key=lambda r: r["pooled_wer"])
    print(f"\nbest pooled: {label(best)} ({best['pooled_wer']:.1%})")
    load = os.getloadavg()
    print(f"load average (1/5/15 min) at the end {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"graph": args.graph and str(args.graph), "sets": list(saved), "rows": rows}, indent=2)
    )


if __name__ == "__main__":
    main()
