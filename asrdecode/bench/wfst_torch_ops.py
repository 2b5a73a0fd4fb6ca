"""Torch operations and host synchronisations per frame of the `wfst` torch backend.

    .venv/bin/asrdecode bench wfst-ops                 # demo TLG + sphinx HCLG if built
    .venv/bin/asrdecode bench wfst-ops --batch 1 32 --cases demo

What decides how the torch backend runs on a GPU is not its CPU time but how many kernels each
frame launches (each is a few microseconds of launch latency unless the frame is captured as a
CUDA graph) and how often the host has to wait for the device (a host synchronisation breaks a
CUDA-graph capture and stalls the launch queue). This script counts both with
`asrdecode.decoders.dispatch_count.DispatchCounter` (a torch dispatch mode, so the count is the
same on any device) around every `TokenPassing.step` (one frame of a whole batch: expansion,
pruning, recombination, epsilon closure) on the same inputs as `asrdecode bench wfst`
(the demo TLG with the NeMo fixture's log-probs; the sphinx en-us HCLG with real senone
log-likelihoods when that graph exists: `harness.sphinx_static_graph`). The peer column is the
compiled (numba) backend, which launches no torch operation per frame at all: the ratio is
meaningless there, so the table reports counts, and the sync column names every op that synchronised.

The first batch is decoded once unmeasured (capacities grow to fit; an overflowing frame is rerun
with larger buffers), then the measured pass runs. Prints a table and writes JSON.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from asrdecode.bench.harness import bench_parser, parse, sphinx_static_graph
from asrdecode.bench.wfst_decode import BENCH, DEMO_LOGPROBS, demo_graph, load_npz, sphinx_loglikes
from asrdecode.decoders.dispatch_count import DispatchCounter  # noqa: E402
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder  # noqa: E402
from asrdecode.decoders.wfst.core import TokenPassing  # noqa: E402
from asrdecode.models.base import ModelOutput  # noqa: E402


def count_case(
    graph: Path, lp: np.ndarray, lengths: np.ndarray, shift: float, batch: int, beam: float, max_active: int
) -> dict:
    """Ops and syncs of every frame step of one pass over the inputs in batches of `batch`."""
    steps: list[tuple[int, int]] = []
    sync_ops: Counter[str] = Counter()
    original = TokenPassing.step

    def counted(self, *args, **kwargs):
        with DispatchCounter() as c:
            out = original(self, *args, **kwargs)
        steps.append((c.ops, c.syncs))
        sync_ops.update(c.sync_ops)
        return out

    dec = WfstDecoder(WfstConfig(graph=str(graph), beam=beam, max_active=max_active, backend="torch"))
    blank = lp.shape[2] - 1
    order = np.argsort(-lengths, kind="stable")
    batches = [order[i : i + batch] for i in range(0, len(lp), batch)]

    def output(idx: np.ndarray) -> ModelOutput:
        T = int(lengths[idx].max())
        return ModelOutput(
            torch.from_numpy(np.ascontiguousarray(lp[idx, :T])),
            torch.from_numpy(lengths[idx]),
            shift,
            blank,
            [],
        )

    dec.decode(output(batches[0]))  # capacities settle
    TokenPassing.step = counted
    reruns = 0
    try:
        for idx in batches:
            dec.decode(output(idx))
            reruns += dec.last_info["stats"]["redone_frames"]
    finally:
        TokenPassing.step = original
    ops = np.array([o for o, _ in steps])
    syncs = np.array([s for _, s in steps])
    return {
        "batch": batch,
        "frame_steps": len(steps),
        "ops_per_frame": float(ops.mean()),
        "ops_per_frame_p95": float(np.percentile(ops, 95)),
        "syncs_per_frame": float(syncs.mean()),
        "max_syncs_in_a_frame": int(syncs.max()),
        "ops_per_utterance_frame": float(ops.sum() / lengths.sum()),
        "reruns": int(reruns),
        "sync_ops": dict(sync_ops.most_common()),
    }


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report="out/bench/wfst_torch_ops.json", threads=1, aliases=("--out",))
    ap.add_argument("--cases", nargs="*", default=["demo", "sphinx"])
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8, 32])
    ap.add_argument("--utterances", type=int, default=32)
    args = parse(ap, argv)
    cases = []
    if "demo" in args.cases:
        lp, lengths = load_npz(DEMO_LOGPROBS, args.utterances)
        cases.append(
            ("demo TLG (BPE, bigram)", demo_graph(BENCH / "wfst-graph"), lp, lengths, 0.08, 10.0, 10000)
        )
    sphinx = sphinx_static_graph()
    if "sphinx" in args.cases and (sphinx / "graph.pt").is_file():
        lp, lengths, _ = sphinx_loglikes(BENCH / "sphinx-loglikes.npz")
        cases.append(("sphinx en-us HCLG (real speech)", sphinx, lp, lengths, 0.01, 14.0, 5000))
    elif "sphinx" in args.cases:
        print(f"no {sphinx}/graph.pt (a first run of configs/sphinx-en-us.yaml builds it); skipped")
    result = []
    for name, graph, lp, lengths, shift, beam, max_active in cases:
        rows = [
            count_case(graph, lp, lengths, shift, b, beam, max_active) for b in args.batch if b <= len(lp)
        ]
        result.append(
            {
                "case": name,
                "graph": str(graph),
                "utterances": len(lp),
                "beam": beam,
                "max_active": max_active,
                "rows": rows,
            }
        )
        print(f"\n== {name}: {len(lp)} utterances, {int(lengths.sum())} frames, beam {beam}")
        print(f"{'batch':>6}{'ops/frame':>11}{'p95':>8}{'syncs/frame':>13}{'max':>5}{'reruns':>8}  sync ops")
        for r in rows:
            ops = ", ".join(f"{k} {v}" for k, v in r["sync_ops"].items())
            print(
                f"{r['batch']:>6}{r['ops_per_frame']:>11.0f}{r['ops_per_frame_p95']:>8.0f}"
                f"{r['syncs_per_frame']:>13.2f}{r['max_syncs_in_a_frame']:>5}{r['reruns']:>8}  {ops}"
            )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cases": result, "torch": torch.__version__}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
