#!/usr/bin/env python3
"""How `wfst` lattice generation scales with the input's length: compiled backend, one thread,
the demo TLG (built into the graph cache on first use), peaky random CTC log-probs of each
length. Prints, per length, the seconds of a 1-best decode and of a lattice decode (search with
window pruning, exact pruning, word-lattice determinization), their ratio, the search arcs
kept until the end, and how many frames each window pruning took back on average (it stops at
a frame whose extra costs did not move, so this stays flat as the input grows). Linear scaling
shows as lattice seconds growing like the length.

    .venv/bin/asrdecode bench lattice-scaling --frames 2000 8000 32000
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch

from asrdecode.bench.harness import bench_parser, parse
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.graph.cache import resolve_graph_spec
from asrdecode.models.base import ModelOutput

GRAPH = "cache:configs/graph/demo-ctc-bpe-tlg.yaml"


def peaky_log_probs(frames: int, columns: int, seed: int) -> np.ndarray:
    """[1, frames, columns] log-probs: blank (last column) most frames, a random unit elsewhere."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 1.0, (frames, columns)).astype(np.float32)
    logits[:, -1] += 4.0
    spikes = rng.random(frames) < 0.25
    logits[spikes, rng.integers(0, columns - 1, spikes.sum())] += 8.0
    return torch.from_numpy(logits).log_softmax(-1).numpy()[None]


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report="out/bench/lattice_scaling.json", threads=1)
    ap.add_argument("--frames", type=int, nargs="+", default=[2000, 8000, 32000])
    args = parse(ap, argv)
    rows = []
    graph = resolve_graph_spec(GRAPH)
    print(f"load average before: {os.getloadavg()}")
    print(
        f"{'frames':>8} {'1-best s':>9} {'lattice s':>10} {'ratio':>6} {'kept search arcs':>17}"
        f" {'frames back per pruning':>24}"
    )
    for frames in args.frames:
        lp = peaky_log_probs(frames, 257, seed=frames)
        out = ModelOutput(torch.from_numpy(lp), torch.tensor([frames]), 0.08, 256, [])
        warm = ModelOutput(torch.from_numpy(lp[:, :100]), torch.tensor([100]), 0.08, 256, [])
        seconds, kept, back = [], None, 0.0
        for lattice in (False, True):
            cfg = WfstConfig(
                graph=graph, beam=10.0, lattice_beam=3.0, lattice=lattice, backend="compiled", threads=1
            )
            dec = WfstDecoder(cfg)
            dec.decode(warm)
            t0 = time.perf_counter()
            dec.decode(out)
            seconds.append(time.perf_counter() - t0)
            kept = dec.last_info.get("lattice_search_arcs", kept)
            if lattice:
                back = dec.last_info["stats"]["lattice_prune_frames"] / max(frames // cfg.prune_interval, 1)
        print(
            f"{frames:8d} {seconds[0]:9.2f} {seconds[1]:10.2f} {seconds[1] / seconds[0]:6.1f} {kept:17d}"
            f" {back:24.0f}"
        )
        rows.append({"frames": frames, "one_best_seconds": seconds[0], "lattice_seconds": seconds[1],
                     "ratio": seconds[1] / seconds[0], "kept_search_arcs": kept,
                     "frames_back_per_pruning": back})  # fmt: skip
    print(f"load average after: {os.getloadavg()}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
