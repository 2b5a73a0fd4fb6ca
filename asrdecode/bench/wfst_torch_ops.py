"""Kernel launches and host synchronisations per frame of the `wfst` torch backend.

    .venv/bin/asrdecode bench wfst-ops                 # demo TLG + sphinx HCLG if built
    .venv/bin/asrdecode bench wfst-ops --batch 1 32 --cases demo --kernels fused

What decides how the torch backend runs on a GPU is not its CPU time but how many kernels each
frame launches (each is a few microseconds of launch latency unless the frame is captured as a
CUDA graph) and how often the host has to wait for the device (a host synchronisation breaks a
CUDA-graph capture and stalls the launch queue). This script counts both with
`asrdecode.decoders.dispatch_count.DispatchCounter` (a torch dispatch mode, so the count is the
same on any device) on the same inputs as `asrdecode bench wfst` (the demo TLG with the NeMo
fixture's log-probs; the sphinx en-us HCLG with real senone log-likelihoods when that graph
exists: `harness.sphinx_static_graph`), for each ``--kernels`` choice:

* ``torch`` (the per-frame search, `core.TokenPassing`): the torch operations of every
  `TokenPassing.step` (one frame of a whole batch: expansion, pruning, recombination, epsilon
  closure); the sync column names every op that synchronised.
* ``fused`` (`fused.FusedSearch`, the frame loop on the device): every torch operation and every
  Triton launch of the whole batch decode (start, windows, results), divided by the batch's frame
  steps. Without CUDA the kernels run under the Triton interpreter (TRITON_INTERPRET=1, set here;
  slow, so ``--fused-frames`` can cut each utterance to its first frames; the counts per frame do
  not depend on the speed).

The peer is the compiled (numba) backend, which launches no torch operation per frame at all:
the ratio is meaningless there, so the table reports counts. The first batch is decoded once
unmeasured (capacities grow to fit; an overflowing frame or window is rerun with larger buffers;
the fused search's first pass uses windows of `WARM_UP_WINDOW` frames, so a rerun redoes only a
few frames, and its record and lattice capacities are per frame step, so the measured pass's
windows of ``sync_frames`` need none), then the measured pass runs. Prints a table and writes JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
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

WARM_UP_WINDOW = 4  # fused: frames per window of the unmeasured first pass


def count_case(
    graph: Path,
    lp: np.ndarray,
    lengths: np.ndarray,
    shift: float,
    batch: int,
    beam: float,
    max_active: int,
    kernel: str = "torch",
    device: str = "cpu",
) -> dict:
    """Ops (torch operations + Triton launches) and syncs per frame step of one pass over the
    inputs in batches of `batch` (module docstring)."""
    steps: list[tuple[int, int]] = []
    sync_ops: Counter[str] = Counter()
    original = TokenPassing.step

    def counted(self, *args, **kwargs):
        with DispatchCounter() as c:
            out = original(self, *args, **kwargs)
        steps.append((c.ops, c.syncs))
        sync_ops.update(c.sync_ops)
        return out

    cfg = WfstConfig(graph=str(graph), beam=beam, max_active=max_active, backend="torch", kernel=kernel)
    dec = WfstDecoder(cfg)
    blank = lp.shape[2] - 1
    order = np.argsort(-lengths, kind="stable")
    batches = [order[i : i + batch] for i in range(0, len(lp), batch)]

    def output(idx: np.ndarray) -> ModelOutput:
        T = int(lengths[idx].max())
        return ModelOutput(
            torch.from_numpy(np.ascontiguousarray(lp[idx, :T])).to(device),
            torch.from_numpy(lengths[idx]),
            shift,
            blank,
            [],
        )

    if kernel == "fused":  # capacities settle in short windows: an overflow reruns a few frames
        dec = WfstDecoder(dataclasses.replace(cfg, sync_frames=WARM_UP_WINDOW))
        dec.decode(output(batches[0]))
        for search in dec._fused.values():  # the measured pass: the configured windows (record and
            search.sync_frames = cfg.sync_frames  # lattice capacities are per frame step)
    else:
        dec.decode(output(batches[0]))  # capacities settle
    reruns, launches, frame_steps, decode_ops, decode_syncs = 0, 0, 0, 0, 0
    if kernel == "fused":
        from asrdecode.decoders.wfst.fused import LAUNCHES

        for idx in batches:
            out = output(idx)
            start = LAUNCHES[0]
            with DispatchCounter() as c:
                dec.decode(out)
            stats = dec.last_info["stats"]
            launches += LAUNCHES[0] - start
            frame_steps += stats["frames"]
            decode_ops += c.ops + LAUNCHES[0] - start
            decode_syncs += c.syncs
            sync_ops.update(c.sync_ops)
            reruns += stats["redone_frames"]
        return {
            "batch": batch,
            "kernel": kernel,
            "frame_steps": frame_steps,
            "ops_per_frame": decode_ops / frame_steps,
            "launches_per_frame": launches / frame_steps,
            "torch_ops_per_frame": (decode_ops - launches) / frame_steps,
            "syncs_per_frame": decode_syncs / frame_steps,
            "syncs": decode_syncs,
            "ops_per_utterance_frame": decode_ops / float(lengths.sum()),
            "reruns": int(reruns),
            "sync_ops": dict(sync_ops.most_common()),
        }
    TokenPassing.step = counted
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
        "kernel": kernel,
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
    ap.add_argument("--kernels", nargs="*", default=["torch", "fused"], choices=["torch", "triton", "fused"])
    ap.add_argument(
        "--fused-frames",
        type=int,
        default=0,
        help="fused rows: only the first N frames of each utterance (0 = all)",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parse(ap, argv)
    interpret = args.device == "cpu" and bool(set(args.kernels) & {"triton", "fused"})
    if interpret and os.environ.get("TRITON_INTERPRET") != "1":
        # the interpreter must be on before triton is imported: run this bench in a fresh process
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        command = [
            sys.executable,
            "-m",
            "asrdecode.bench.wfst_torch_ops",
            *(argv if argv is not None else sys.argv[1:]),
        ]
        raise SystemExit(subprocess.run(command, env=env).returncode)
    cases = []
    if "demo" in args.cases:
        lp, lengths = load_npz(DEMO_LOGPROBS, args.utterances)
        cases.append(
            ("demo TLG (BPE, bigram)", demo_graph(BENCH / "wfst-graph"), lp, lengths, 0.08, 10.0, 10000)
        )
    sphinx = sphinx_static_graph()
    if "sphinx" in args.cases and (sphinx / "graph.pt").is_file():
        lp, lengths, _ = sphinx_loglikes(BENCH / "sphinx-loglikes.npz")
        reps = -(-args.utterances // len(lp))  # the recordings repeated to --utterances, as the demo's
        lp = np.concatenate([lp] * reps)[: args.utterances]
        lengths = np.concatenate([lengths] * reps)[: args.utterances]
        cases.append(("sphinx en-us HCLG (real speech)", sphinx, lp, lengths, 0.01, 14.0, 5000))
    elif "sphinx" in args.cases:
        print(f"no {sphinx}/graph.pt (a first run of configs/sphinx-en-us.yaml builds it); skipped")
    result = []
    for name, graph, lp, lengths, shift, beam, max_active in cases:
        rows = []
        for kernel in args.kernels:
            x, n = lp, lengths
            if kernel == "fused" and args.fused_frames > 0:
                x, n = lp[:, : args.fused_frames], np.minimum(lengths, args.fused_frames)
            for b in args.batch:
                if b <= len(lp):
                    rows.append(count_case(graph, x, n, shift, b, beam, max_active, kernel, args.device))
                    print(f"  {name}: {kernel} batch {b} counted", flush=True)
        result.append(
            {
                "case": name,
                "graph": str(graph),
                "utterances": len(lp),
                "beam": beam,
                "max_active": max_active,
                "fused_frames": args.fused_frames,
                "device": args.device,
                "rows": rows,
            }
        )
        print(f"\n== {name}: {len(lp)} utterances, {int(lengths.sum())} frames, beam {beam}")
        print(
            f"{'kernel':>7}{'batch':>6}{'launches/frame':>16}{'triton':>8}{'syncs/frame':>13}"
            f"{'reruns':>8}  sync ops"
        )
        for r in rows:
            ops = ", ".join(f"{k} {v}" for k, v in r["sync_ops"].items())
            triton_launches = f"{r['launches_per_frame']:.1f}" if "launches_per_frame" in r else "-"
            print(
                f"{r['kernel']:>7}{r['batch']:>6}{r['ops_per_frame']:>16.1f}{triton_launches:>8}"
                f"{r['syncs_per_frame']:>13.3f}{r['reruns']:>8}  {ops}"
            )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cases": result, "torch": torch.__version__}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
