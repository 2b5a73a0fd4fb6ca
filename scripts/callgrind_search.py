"""Instruction counts of the on-the-fly searches per expanded arc, under valgrind's callgrind
(repeatable on a shared machine where wall times are not).

    export NUMBA_CPU_NAME=generic   # the same compiled code natively and under valgrind
    .venv/bin/python scripts/callgrind_search.py run --decoder let --utterances 1 --out /tmp/warm.json
    valgrind --tool=callgrind --instr-atstart=no --dump-instr=yes \\
        --callgrind-out-file=out/prof/let.cg .venv/bin/python scripts/callgrind_search.py run \\
        --decoder let --capacity 16 --utterances 8 --beam 10 --lattice --out out/prof/let.json
    .venv/bin/python scripts/callgrind_search.py report out/prof/let.cg.1 out/prof/let.json

Valgrind's CPU lacks this machine's AVX-512, so numba's disk cache (keyed by the CPU) would miss
under valgrind and every kernel compile there, for many minutes: ``NUMBA_CPU_NAME=generic`` (plain
x86-64 code) in both runs, the first one native, makes the cache hit. The counts are of that code.

``run`` sets up the 20k-word case of `asrdecode bench let` (its graphs, LM and spelled log-probs;
the first ``--utterances`` of its sentences), builds the decoder (``let`` at ``--capacity``,
``wfst-otf`` with no history cap, ``capped``: the sphinx setup's history cap, or ``wfst``: the
pruned-LM graph alone, the search without an LM), decodes every
utterance once untimed (numba's cache loads, workspaces grow), then turns callgrind's
instrumentation on, decodes them again and turns it off (client requests from a small C helper
compiled here with gcc and valgrind/callgrind.h). It writes the decoder's summed stats, the JIT
functions' address map (`profile_search.jit_functions`) and the hypotheses to ``--out``.
``report`` prints the instructions (Ir; with ``--cache-sim=yes`` the cache events too) per frame
and per expanded arc, and their split over the compiled functions (a function LLVM inlined counts
as its caller) and the rest (Python, numpy, the lattice code in Python).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("decode"); }
"""


def client_requests() -> ctypes.CDLL:
    """The C helper's start/stop (no-ops outside valgrind), compiled into a temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="cg-helper-"))
    (folder / "cg.c").write_text(HELPER)
    subprocess.run(
        ["gcc", "-O1", "-shared", "-fPIC", "-o", str(folder / "cg.so"), str(folder / "cg.c")], check=True
    )
    return ctypes.CDLL(str(folder / "cg.so"))


def build_decoder(args, small_graph: Path, large_lm: Path):
    from asrdecode.config import SPHINX_SETUP, build_config
    from asrdecode.decoders.let import LetConfig, LetDecoder
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

    opts = {
        "graph": str(small_graph), "lm": str(large_lm), "beam": args.beam, "max_active": 10000,
        "min_active": 200, "threads": 1, "lattice": args.lattice, "lattice_beam": 8.0,
    }  # fmt: skip
    if args.decoder == "wfst":  # the small graph alone: the search without an LM
        del opts["lm"]
        return WfstDecoder(WfstConfig(**opts, backend="compiled"))
    if args.decoder == "let":
        return LetDecoder(LetConfig(**opts, group_capacity=args.capacity))
    cap = build_config(None, [], setup=SPHINX_SETUP).decoder.history_max if args.decoder == "capped" else 0
    return WfstOtfDecoder(WfstOtfConfig(**opts, backend="compiled", history_max=cap))


def run(args) -> None:
    import numpy as np
    import torch

    from asrdecode.bench.wfst_otf import case_20k
    from asrdecode.models.base import ModelOutput

    sys.path.insert(0, str(ROOT / "scripts"))
    from profile_search import jit_functions

    torch.set_num_threads(1)
    cg = client_requests()
    _, small_graph, large_lm, lp, lengths, refs = case_20k(args.threshold_20k, 64)
    dec = build_decoder(args, small_graph, large_lm)
    n = args.utterances
    outs = [
        ModelOutput(
            torch.from_numpy(lp[i : i + 1, : lengths[i]]), torch.tensor([int(lengths[i])]), 0.04, 27, []
        )
        for i in range(n)
    ]
    for o in outs:  # untimed: caches load, workspaces grow
        dec.decode(o)
    stats: dict[str, int] = defaultdict(int)
    words = []
    cg.cg_start()
    for o in outs:
        words.append([w.word for w in dec.decode(o)[0].words])
        for k, v in dec.last_info["stats"].items():
            if isinstance(v, int):
                stats[k] += v
    cg.cg_stop()
    functions = [(a, s, name) for a, s, name in jit_functions()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "decoder": args.decoder,
                "capacity": args.capacity,
                "beam": args.beam,
                "lattice": args.lattice,
                "utterances": n,
                "frames": int(np.sum(lengths[:n])),
                "stats": stats,
                "words": words,
                "refs": refs[:n],
                "functions": functions,
            }
        )  # fmt: skip
    )


def read_callgrind(path: Path) -> tuple[list[str], dict[str, list[int]], dict[int, list[int]]]:
    """(event names, self cost per callgrind function name, self cost per instruction address) of
    the callgrind file's ``decode`` part (``--dump-instr=yes``; the lines after ``calls=`` are
    inclusive costs of calls and skipped)."""
    events: list[str] = []
    by_fn: dict[str, list[int]] = defaultdict(list)
    by_addr: dict[int, list[int]] = {}
    names: dict[str, str] = {}
    fn = ""
    addr = 0
    skip = False
    positions = 1
    text = path.read_text()
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            continue
        if line.startswith("positions:"):
            positions = len(line.split()) - 1
            continue
        if line.startswith("fn="):
            m = re.match(r"fn=\((\d+)\)(?: (.*))?", line)
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                fn = names[m.group(1)]
            else:
                fn = line[3:]
            continue
        if line.startswith("cfn="):  # a called function's name: the same name table as fn=
            m = re.match(r"cfn=\((\d+)\) (.*)", line)
            if m:
                names[m.group(1)] = m.group(2)
            continue
        if line.startswith("calls="):
            skip = True
            continue
        if not line or line[0] not in "+-*0123456789":
            continue
        parts = line.split()
        pos = parts[0]
        if pos.startswith("0x"):
            addr = int(pos, 16)
        elif pos[0] in "+-":
            addr += int(pos)
        costs = [int(x) for x in parts[positions:]]
        if skip:
            skip = False
            continue
        acc = by_fn[fn]
        if len(acc) < len(costs):
            acc.extend([0] * (len(costs) - len(acc)))
        for i, c in enumerate(costs):
            acc[i] += c
        here = by_addr.setdefault(addr, [0] * len(events))
        for i, c in enumerate(costs):
            here[i] += c
    return events, by_fn, by_addr


def report(cg: Path, meta_path: Path, top: int) -> None:
    meta = json.loads(meta_path.read_text())
    events, by_fn, by_addr = read_callgrind(cg)
    functions = sorted((a, s, n) for a, s, n in meta["functions"])
    starts = [a for a, _, _ in functions]
    import bisect

    jit: dict[str, list[int]] = defaultdict(lambda: [0] * len(events))
    jit_total = [0] * len(events)
    for addr, costs in by_addr.items():
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < functions[i][0] + functions[i][1]:
            acc = jit[functions[i][2]]
            for k, c in enumerate(costs):
                acc[k] += c
                jit_total[k] += c
    total = [sum(v[k] for v in by_fn.values() if k < len(v)) for k in range(len(events))]
    frames, arcs = meta["frames"], meta["stats"].get("arcs", 0)
    print(
        f"{meta['decoder']} capacity {meta['capacity']} beam {meta['beam']} lattice {meta['lattice']}: "
        f"{meta['utterances']} utterances, {frames} frames, {arcs} arcs ({arcs / frames:.0f} per frame)"
    )
    for k, e in enumerate(events):
        per_arc = total[k] / arcs if arcs else float("nan")
        print(
            f"  {e}: {total[k]:,} in all, {total[k] / frames:,.0f} per frame, {per_arc:.1f} per expanded arc"
        )
    ir = 0
    print(f"  compiled code: {100 * jit_total[ir] / max(total[ir], 1):.1f}% of Ir; by function:")
    for name, costs in sorted(jit.items(), key=lambda kv: -kv[1][ir])[:top]:
        share = 100 * costs[ir] / max(total[ir], 1)
        print(f"    {name:50s} {share:5.1f}%  {costs[ir] / max(arcs, 1):7.1f} Ir/arc")
    rest = sorted(((n, c) for n, c in by_fn.items() if not n.startswith("0x")), key=lambda kv: -kv[1][0])
    print("  the rest (named functions):")
    for name, costs in rest[:top]:
        print(f"    {name[:50]:50s} {100 * costs[ir] / max(total[ir], 1):5.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--decoder", choices=["let", "wfst-otf", "capped", "wfst"], default="let")
    r.add_argument("--capacity", type=int, default=16)
    r.add_argument("--beam", type=float, default=10.0)
    r.add_argument("--utterances", type=int, default=8)
    r.add_argument("--threshold-20k", type=float, default=1e-5)
    r.add_argument("--lattice", action="store_true")
    r.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("callgrind", type=Path)
    p.add_argument("meta", type=Path)
    p.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    if args.cmd == "run":
        run(args)
    else:
        report(args.callgrind, args.meta, args.top)


if __name__ == "__main__":
    main()
