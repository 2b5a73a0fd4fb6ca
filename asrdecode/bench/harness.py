"""The harness every benchmark of `asrdecode bench` runs on: one option set (`bench_parser`: the
JSON report, torch threads, untimed warm-up and timed passes, each with the same name and meaning in
every benchmark), the timed passes (`interleaved_passes`), what a report records with its figures
(the machine and its load average at the start and the end: the machine is shared, a figure without
its load means little; how the timed runs were set up) and the end of a run (`finish`: the table
printed, the JSON report written)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from asrdecode.machine import cache_sizes, cpu_model

ROOT = Path(__file__).resolve().parents[2]


def bench_parser(
    doc: str | None,
    *,
    report: str | Path | None,
    threads: int | None = None,
    warmup: int | None = None,
    repeats: int | None = None,
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    """A benchmark's parser with the shared options, each where the benchmark has that knob:
    ``--json PATH`` (the JSON report; ``report`` is its default, None: written only when given),
    ``--threads N`` (torch intra-op threads of the timed runs), ``--warmup N`` (untimed passes
    first) and ``--repeats N`` (timed passes; figures are their mean or best, as the benchmark
    says). An option left None here is not one of this benchmark's. ``aliases``: earlier spellings
    still accepted (``--out`` for ``--json``, ``--repeat`` for ``--repeats``). The description is
    the module docstring's first paragraph, its rest the epilog."""
    head, _, rest = (doc or "").strip().partition("\n\n")
    parser = argparse.ArgumentParser(
        description=head, epilog=rest or None, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    shared = parser.add_argument_group("options every asrdecode bench command shares")
    json_names = ["--json", *(["--out"] if "--out" in aliases else [])]
    default = f" (default {report})" if report else " (none unless given)"
    shared.add_argument(
        *json_names, dest="json", type=Path, default=None if report is None else Path(report),
        metavar="PATH", help="the JSON report" + default,
    )  # fmt: skip
    for name, value, what in (
        ("--threads", threads, "torch intra-op threads"),
        ("--warmup", warmup, "untimed passes first"),
        ("--repeats", repeats, "timed passes"),
    ):
        if value is not None:
            names = [name, *(["--repeat"] if name == "--repeats" and "--repeat" in aliases else [])]
            shared.add_argument(
                *names, dest=name[2:], type=int, default=value, metavar="N", help=f"{what} (default {value})"
            )
    return parser


def parse(
    parser: argparse.ArgumentParser, argv: list[str] | None, intermixed: bool = False
) -> argparse.Namespace:
    """Parse a benchmark's arguments (``intermixed``: positional overrides among the options), check
    the shared counts and set torch's intra-op threads to ``--threads``."""
    args = parser.parse_intermixed_args(argv) if intermixed else parser.parse_args(argv)
    for name, least in (("threads", 1), ("warmup", 0), ("repeats", 1)):
        value = getattr(args, name, None)
        if value is not None and value < least:
            raise SystemExit(f"{parser.prog}: --{name} must be >= {least}, got {value}")
    if getattr(args, "threads", None) is not None:
        import torch

        torch.set_num_threads(args.threads)
    return args


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of string cells."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def finish(args: argparse.Namespace, report: dict, text: str | None = None) -> int:
    """The end of a benchmark run: its table printed (``text``) and its JSON report written to
    ``--json`` (if any). Returns the exit status."""
    if text is not None:
        print(text)
    if getattr(args, "json", None):
        write_report(args.json, report)
    return 0


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
        "threads": getattr(args, "threads", None),
        "warmup": getattr(args, "warmup", None),
        "repeats": getattr(args, "repeats", None),
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
