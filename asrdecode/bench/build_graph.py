"""Benchmark graph building: build time, peak memory, states/arcs, bytes -> table + JSON.

    # default: synthetic trigram LMs with 5k and 20k words (Zipf text, character lexicon, compact
    # TLG), each built with word labels `earliest` (default) and `first_unit`
    .venv/bin/asrdecode bench graph-build
    # graphs from config files too (or only: --synthetic with no sizes)
    .venv/bin/asrdecode bench graph-build --config configs/graph/demo-ctc-bpe-tlg.yaml --synthetic

Each build runs in its own child process, which reports its own peak RSS (getrusage RUSAGE_SELF)
and the peak of its own children (kaldilm's arpa2fst runs in one), read right after the build and
before the graph is analysed; `baseline_rss_mib` is the peak of a child that only imports
asrdecode.graph (torch alone is ~0.7 GB). After the build the child measures the graph: epsilon
share, input non-determinism (emitting arcs sharing their (state, ilabel)), and the states where
OpenFst's label pushing would move a word label (asrdecode.graph.labels).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import bench_parser, parse
from asrdecode.lm import train_arpa

CHILD = """
import json, resource, sys, time
from pathlib import Path
from asrdecode.typed_config import dataclass_from_dict
from asrdecode.graph import DeviceGraph, GraphBuildConfig, build_graph, find_graph_file
from asrdecode.graph.labels import emitting_fanout, pushable_label_states
cfg = dataclass_from_dict(GraphBuildConfig, json.loads(sys.argv[1]))
t = time.perf_counter()
meta = build_graph(cfg, sys.argv[2], force=True)
wall = time.perf_counter() - t
peak = {
    "self_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "children_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
}
graph = DeviceGraph.load(find_graph_file(sys.argv[2]))
analysis = {"fanout": emitting_fanout(graph), "pushable_label_states": pushable_label_states(graph)}
print(json.dumps({"wall_seconds": wall, "peak": peak, "analysis": analysis, "meta": meta}))
"""

LETTERS = list("abcdefghijklmnopqrstuvwxyz")


def synthetic_lm(vocab: int, folder: Path, sentences: int, seed: int = 0) -> Path:
    """Zipf-distributed random sentences over `vocab` made-up words, trigram by kaldingram."""
    rng = np.random.default_rng(seed)
    words: set[str] = set()
    while len(words) < vocab:
        words.add("".join(rng.choice(LETTERS, size=int(rng.integers(2, 9)))))
    table = sorted(words)
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / ranks
    p /= p.sum()
    lines = []
    for _ in range(sentences):
        n = int(rng.integers(3, 15))
        lines.append(" ".join(table[i] for i in rng.choice(vocab, size=n, p=p)))
    # every word at least once so the LM vocabulary has the requested size
    lines += [" ".join(table[i : i + 10]) for i in range(0, vocab, 10)]
    corpus = folder / f"corpus_{vocab}.txt"
    corpus.write_text("\n".join(lines) + "\n")
    arpa = folder / f"lm_{vocab}.arpa"
    train_arpa(corpus, arpa, quiet=True)
    return arpa


def run_one(name: str, cfg: dict, out_dir: Path) -> dict:
    """One build in a fresh child process; its own peak RSS, not the max over earlier children."""
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(cfg), str(out_dir)], capture_output=True, text=True
    )
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        return {"name": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    meta, peak = result["meta"], result["peak"]
    final = meta["sizes"].get("TLG") or meta["sizes"].get("HCLG")
    return {
        "name": name,
        "kind": meta.get("kind"),
        "topology": meta.get("topology"),
        "word_labels": meta.get("word_labels", "earliest"),
        "lm": meta.get("lm"),
        "words": meta.get("words"),
        "build_seconds": round(result["wall_seconds"], 3),
        "process_seconds": round(wall, 3),
        "peak_rss_mib": round(max(peak["self_kib"], peak["children_kib"]) / 1024, 1),
        "peak_rss_self_mib": round(peak["self_kib"] / 1024, 1),
        "peak_rss_arpa2fst_mib": round(peak["children_kib"] / 1024, 1),
        "stage_seconds": meta.get("seconds"),
        "states": final["states"],
        "arcs": final["arcs"],
        "epsilon_share": round(final["epsilon_share"], 4),
        "bytes": final["bytes"],
        "fanout_shared_share": round(result["analysis"]["fanout"]["shared_share"], 4),
        "fanout_max": result["analysis"]["fanout"]["max_fanout"],
        "pushable_label_states": result["analysis"]["pushable_label_states"],
        "sizes": meta["sizes"],
    }


def print_table(results: list[dict], baseline_mib: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"graph builds (peak RSS of a process importing asrdecode.graph: {baseline_mib} MiB)")
    for col in (
        "graph",
        "LM words",
        "n-grams",
        "word labels",
        "build s",
        "peak RSS MiB",
        "states",
        "arcs",
        "eps %",
        "MiB",
        "arcs/ref",
        "shared (state,ilabel) %",
        "max fan-out",
        "pushable",
    ):
        table.add_column(col, justify="left" if col in ("graph", "word labels") else "right")
    ref: dict[str, int] = {}
    for r in results:
        if "error" not in r and r["word_labels"] == "earliest":
            ref[r["name"].split(" ")[0]] = r["arcs"]
    for r in results:
        if "error" in r:
            table.add_row(r["name"], "error: " + r["error"])
            continue
        base = ref.get(r["name"].split(" ")[0])
        ngrams = "/".join(str(v) for v in (r["lm"] or {}).get("ngrams", {}).values())
        table.add_row(
            r["name"],
            f"{(r['words'] or {}).get('count', '-'):,}",
            ngrams,
            r["word_labels"],
            f"{r['build_seconds']:.1f}",
            f"{r['peak_rss_mib']:.0f}",
            f"{r['states']:,}",
            f"{r['arcs']:,}",
            f"{100 * r['epsilon_share']:.1f}",
            f"{r['bytes'] / 2**20:.1f}",
            f"{r['arcs'] / base:.2f}x" if base else "-",
            f"{100 * r['fanout_shared_share']:.1f}",
            str(r["fanout_max"]),
            str(r["pushable_label_states"]),
        )
    Console(width=220).print(table)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report="out/bench/build_graph.json", aliases=("--out",))
    ap.add_argument("--config", action="append", default=[], help="graph YAML config (repeatable)")
    ap.add_argument(
        "--synthetic",
        type=int,
        nargs="*",
        default=[5000, 20000],
        help="vocabulary sizes of synthetic LMs (default 5000 20000; give none to skip)",
    )
    ap.add_argument("--sentences", type=int, default=20000, help="sentences per synthetic corpus")
    ap.add_argument("--topology", default="compact")
    ap.add_argument(
        "--word-labels",
        nargs="+",
        default=["earliest", "first_unit"],
        help="word label placements to build for each synthetic LM",
    )
    args = parse(ap, argv)
    import yaml

    results = []
    baseline = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, asrdecode.graph; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    baseline_mib = round(int(baseline.stdout.strip()) / 1024, 1)
    with tempfile.TemporaryDirectory(prefix="bench-graph-") as tmp_name:
        tmp = Path(tmp_name)
        for path in args.config:
            cfg = yaml.safe_load(Path(path).read_text())
            results.append(run_one(Path(path).stem, cfg, tmp / Path(path).stem))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "sizes"}), flush=True)
        for vocab in args.synthetic:
            arpa = synthetic_lm(vocab, tmp, args.sentences)
            for labels in args.word_labels:
                cfg = {
                    "arpa": str(arpa),
                    "unit_list": LETTERS,
                    "blank": "last",
                    "lexicon_type": "chars",
                    "topology": args.topology,
                    "word_labels": labels,
                    "format": "pt",
                }
                size = f"{vocab // 1000}k" if vocab % 1000 == 0 else str(vocab)
                name = f"synthetic-{size} {args.topology}"
                results.append(run_one(name, cfg, tmp / f"g{vocab}-{labels}"))
                print(json.dumps({k: v for k, v in results[-1].items() if k != "sizes"}), flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "baseline_rss_mib": baseline_mib,
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print_table(results, baseline_mib)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
