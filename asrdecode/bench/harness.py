"""What every benchmark of `asrdecode bench` records with its figures: the machine and its load
average at the start and the end (the machine is shared; a figure without its load means little),
and the JSON report written next to the printed table."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from asrdecode.machine import cache_sizes, cpu_model

ROOT = Path(__file__).resolve().parents[2]


def machine_info(load_at_start: tuple[float, float, float]) -> dict:
    """Python, torch, CPU model and caches, usable cores and the load average at the start and now."""
    import torch

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "caches": cache_sizes(),
        "cores": len(os.sched_getaffinity(0)),
        "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(),
    }


def timing_setup(args: argparse.Namespace) -> dict:
    """How the timed runs were set up: device, torch threads, untimed warm-up passes, timed repeats
    (the `--threads`, `--warmup` and `--repeats` options) and the command line."""
    return {
        "device": "cpu",
        "threads": args.threads,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "command": " ".join(sys.argv),
    }


def model_digest(model: str) -> str:
    """The first 12 hex digits of a model file's sha256 (`embedded:NAME` or a path): the key of
    outputs a benchmark caches from that model, so a new model never meets stale ones."""
    import hashlib

    from asrdecode.models.loading import resolve_model_path

    return hashlib.sha256(resolve_model_path(model).read_bytes()).hexdigest()[:12]


def write_report(path: str | Path, report: dict) -> Path:
    """Write the report as indented JSON (folders made) and say where, with the load averages."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    machine = report.get("machine", {})
    load = ""
    if "load_average_at_start" in machine:
        start, end = machine["load_average_at_start"], machine["load_average_at_end"]
        load = f" (load average at start {start}, at end {end})"
    print(f"\nwrote {out}{load}")
    return out


def interleaved_passes(
    args: argparse.Namespace,
    data: dict,
    specs: list,
    decoders: dict,
    peer: Callable[[object, int], dict] | None = None,
) -> tuple[dict, dict]:
    """Time every decoder of ``specs`` (``decoders[spec].decode``) on every batch of ``data`` (batch
    size -> model outputs): ``args.warmup`` untimed passes, then ``args.repeats`` timed ones, the
    decoders (and the peer's pass, ``peer(spec, size)`` -> its reply with ``seconds``) interleaved
    within a pass so all see the same load. Returns (times, results): ``("asrdecode" | "nemo", size,
    spec)`` -> the timed passes' seconds, and -> the last pass's results (ours) or reply (the peer's)."""
    import time

    times: dict = {}
    results: dict = {}
    for rep in range(args.warmup + args.repeats):
        for size, outputs in data.items():
            for spec in specs:
                total, got = 0.0, []
                for out in outputs:
                    start = time.perf_counter()
                    got += decoders[spec].decode(out)
                    total += time.perf_counter() - start
                results["asrdecode", size, spec] = got
                if rep >= args.warmup:
                    times.setdefault(("asrdecode", size, spec), []).append(total)
                if peer is not None:
                    reply = peer(spec, size)
                    results["nemo", size, spec] = reply
                    if rep >= args.warmup:
                        times.setdefault(("nemo", size, spec), []).append(reply["seconds"])
    return times, results


def sphinx_static_graph() -> Path:
    """The static sphinx HCLG folder the bench cases read: out/graphs/sphinx-en-us if built there,
    else configs/graph/sphinx-en-us.yaml's folder in the graph cache (configs/sphinx-en-us.yaml
    builds it there on first use). Nothing is built: a folder without graph.pt means "skip"."""
    local = ROOT / "out" / "graphs" / "sphinx-en-us"
    if (local / "graph.pt").is_file():
        return local
    from asrdecode.errors import AsrDecodeError
    from asrdecode.graph.cache import cache_folder, load_graph_config

    try:
        return cache_folder(load_graph_config(ROOT / "configs" / "graph" / "sphinx-en-us.yaml"))
    except (AsrDecodeError, OSError):  # its inputs unreadable from here: nothing cached to find
        return local
