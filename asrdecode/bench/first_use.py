#!/usr/bin/env python3
"""First use of the default setup, as a new user meets it: `asrdecode transcribe MANIFEST --out O`
with no options and an empty cache, then the same command again.

    .venv/bin/asrdecode bench first-use                      # data/demo/real
    .venv/bin/asrdecode bench first-use --manifest data/real/test/manifest.jsonl

Each command runs in a child process with a fresh, private ASRDECODE_CACHE (a temporary folder), so
nothing already built is reused. Printed per run: wall seconds, the child's peak RSS (getrusage of
the child), the graph build stages and their seconds (from the run's own output), WER and the
run's RTFx. The graph build alone is also run as `asrdecode build-graph` in its own process for its
peak RSS. The load average before and after is printed: timings on a shared machine are only
meaningful when it is quiet.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from asrdecode.bench.harness import bench_parser, finish, parse

ROOT = Path(__file__).resolve().parents[2]


def timed(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB of this child (os.wait4), stderr) of one command; fails loudly."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{text[-2000:]}")
    return wall, usage.ru_maxrss / 1024, text


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report=None)
    ap.add_argument("--manifest", type=Path, default=ROOT / "data/demo/real/manifest.jsonl")
    args = parse(ap, argv)
    cli = [sys.executable, "-m", "asrdecode.cli"]
    graph_config = default_graph_config()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ASRDECODE_CACHE": str(Path(tmp) / "cache")}
        # the graph build alone first (its own process: its peak RSS is the build's), then a clean cache
        build_wall, build_rss, _ = timed(
            [*cli, "build-graph", "--config", graph_config, "--out", str(Path(tmp) / "graph")], env
        )
        rows = []
        for name in ("first use (empty cache)", "second run (cache warm)"):
            out = Path(tmp) / name.split()[0]
            wall, rss, err = timed([*cli, "transcribe", str(args.manifest), "--out", str(out)], env)
            report = json.loads((out / "report.json").read_text())
            stages = re.findall(r"graph build: (\S+) done in ([\d.]+) s", err)
            rows.append((name, wall, rss, report, stages))
    load_after = os.getloadavg()
    print(f"default setup on {args.manifest}")
    print(f"  build-graph alone ({graph_config}): {build_wall:.1f} s, peak RSS {build_rss:.0f} MB")
    for name, wall, rss, report, stages in rows:
        wer = f"{report['wer'] * 100:.1f}%" if report.get("wer") is not None else "-"
        print(
            f"  {name}: {wall:.1f} s wall, peak RSS {rss:.0f} MB, WER {wer}, "
            f"RTFx {report.get('rtfx', 0):.1f} ({report['model']} / {report['decoder']})"
        )
        if stages:
            total = sum(float(s) for _, s in stages)
            print("    graph build " + ", ".join(f"{n} {s} s" for n, s in stages) + f" = {total:.1f} s")
    print(
        f"load average (1/5/15 min) before {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}, "
        f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}"
    )
    runs = [
        {"run": name, "wall_seconds": wall, "peak_rss_mb": rss, "report": report, "graph_stages": stages}
        for name, wall, rss, report, stages in rows
    ]
    build = {"config": graph_config, "wall_seconds": build_wall, "peak_rss_mb": build_rss}
    finish(args, {"manifest": str(args.manifest), "build_graph": build, "runs": runs,
                  "load_average_before": load, "load_average_after": load_after})  # fmt: skip


def default_graph_config() -> str:
    """The graph build config of the default setup's `cache:` graph (a file path)."""
    from asrdecode.config import build_config
    from asrdecode.graph.cache import CACHE_PREFIX
    from asrdecode.models.loading import resolve_packaged_path

    graph = str(build_config(None, [], default_setup=True).decoder.graph)
    return resolve_packaged_path(graph.removeprefix(CACHE_PREFIX))


if __name__ == "__main__":
    main()
