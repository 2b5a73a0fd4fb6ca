"""Benchmark graph building: build time, peak memory, states/arcs and bytes -> JSON.

    # graphs from config files
    .venv/bin/python scripts/bench/build_graph.py --config configs/graph/demo-tlg.yaml \
        --out out/bench/graph.json
    # synthetic trigram LMs with 5k and 20k words (Zipf text, character lexicon, compact TLG)
    .venv/bin/python scripts/bench/build_graph.py --synthetic 5000 20000 --out out/bench/graph.json

Each build runs in its own process so its peak RSS is measured alone; `baseline_rss_mib` is the
peak of a process that only imports asrdecode.graph (torch alone is ~0.7 GB).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from asrdecode.lm import train_arpa

CHILD = """
import json, sys, time, yaml
from asrdecode.config import dataclass_from_dict
from asrdecode.graph import GraphBuildConfig, build_graph
cfg = dataclass_from_dict(GraphBuildConfig, json.loads(sys.argv[1]))
t = time.perf_counter()
meta = build_graph(cfg, sys.argv[2], force=True)
print(json.dumps({"wall_seconds": time.perf_counter() - t, "meta": meta}))
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
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(cfg), str(out_dir)], capture_output=True, text=True
    )
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        return {"name": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    meta = result["meta"]
    final = meta["sizes"].get("TLG") or meta["sizes"].get("HCLG")
    return {
        "name": name,
        "kind": meta.get("kind"),
        "topology": meta.get("topology"),
        "lm": meta.get("lm"),
        "words": meta.get("words"),
        "build_seconds": round(result["wall_seconds"], 3),
        "process_seconds": round(wall, 3),
        "peak_rss_mib": round(peak_kb / 1024, 1) if peak_kb > before else None,
        "stage_seconds": meta.get("seconds"),
        "states": final["states"],
        "arcs": final["arcs"],
        "epsilon_share": round(final["epsilon_share"], 4),
        "bytes": final["bytes"],
        "sizes": meta["sizes"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", default=[], help="graph YAML config (repeatable)")
    ap.add_argument("--synthetic", type=int, nargs="*", default=[], help="vocabulary sizes of synthetic LMs")
    ap.add_argument("--sentences", type=int, default=20000, help="sentences per synthetic corpus")
    ap.add_argument("--topology", default="compact")
    ap.add_argument("--out", default="out/bench/graph.json")
    args = ap.parse_args()
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
            print(json.dumps({k: v for k, v in results[-1].items() if k != "sizes"}))
        for vocab in args.synthetic:
            arpa = synthetic_lm(vocab, tmp, args.sentences)
            cfg = {
                "arpa": str(arpa),
                "unit_list": LETTERS,
                "blank": "last",
                "lexicon_type": "chars",
                "topology": args.topology,
            }
            results.append(run_one(f"synthetic-{vocab}", cfg, tmp / f"g{vocab}"))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "sizes"}))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "baseline_rss_mib": baseline_mib,
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
