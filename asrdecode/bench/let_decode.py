"""Benchmark `let` (paper 002: token groups + lazy evaluation) against `wfst-otf` (paper 000: one token per
(graph state, LM state)) on the same small-LM graph and large LM, and against `wfst` on the graph built
directly with the large LM, on the same log-probs.

    nice -n 5 .venv/bin/asrdecode bench let                 # both cases
    .venv/bin/asrdecode bench let --cases demo --capacities 4 16

Cases: the two of asrdecode bench wfst-otf (whose helpers this script imports), same graphs, LMs,
log-probs and beams:

* ``demo``: the embedded demo model on the 44 demo clips; large LM = the demo trigram, small = its
  entropy-pruned copy (data/demo/otf/small-lm.arpa); beam 16, max_active 10000.
* ``20k``: the 20k-word synthetic trigram (character lexicon, spelled 10%-confused log-probs of
  ``--utterances`` corpus sentences) and its copy pruned at 1e-5; beam 10, max_active 10000.

Rows (one process, compiled backends on one thread, each decoder set up and warmed up on one
utterance before the clock starts): `wfst` on the large-LM graph, `wfst-otf`, and `let` at each
``--capacities`` group capacity with the exact cut-off (bucket_width 0) and with the bucket queue
(``--bucket-width``). Columns: frames/s and its ratio to `wfst-otf` and to `wfst`, WER, 1-best
identical to `wfst-otf`'s, arcs expanded per frame, tokens (groups for `let`) per frame after the
epsilon closure, and for `let` the members evaluated at word arcs and in unions per frame. `max_active`
counts groups in `let` and tokens in the others. Wall-clock timings on a shared machine: compare the
ratios of one run. Writes JSON (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import machine_info, write_report
from asrdecode.bench.wfst_otf import case_result, run_cases, wer

ROOT = Path(__file__).resolve().parents[2]


def run_row(name: str, decoder, lp, lengths, shift: float, blank: int) -> dict:
    """Decode one utterance at a time (longest first) after a warm-up; sums the decoder's stats."""
    import torch

    from asrdecode.models.base import ModelOutput

    def out(i: int) -> ModelOutput:
        n = int(lengths[i])
        return ModelOutput(torch.from_numpy(lp[i : i + 1, :n]), torch.tensor([n]), shift, blank, [])

    decoder.decode(out(0))  # warm-up: numba cache load / compile
    results: list = [None] * len(lp)
    stats: dict[str, int] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    for i in np.argsort(-lengths, kind="stable"):
        results[i] = decoder.decode(out(int(i)))[0]
        for k, v in decoder.last_info["stats"].items():
            if isinstance(v, int):
                stats[k] = stats.get(k, 0) + v
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    frames = float(lengths.sum())
    tokens = stats.get("groups", stats.get("tokens", 0))
    return {
        "decoder": name,
        "seconds": wall,
        "cpu_seconds": cpu,
        "frames_per_second": frames / wall,
        "arcs_per_frame": stats.get("arcs", 0) / frames,
        "tokens_per_frame": tokens / frames if tokens else None,
        "word_members_per_frame": stats["word_members"] / frames if "word_members" in stats else None,
        "union_members_per_frame": stats["union_members"] / frames if "union_members" in stats else None,
        "stats": stats,
        "words": [[w.word for w in r.words] for r in results],
    }


def run_case(name, large_graph, small_graph, large_lm, lp, lengths, refs, shift, beam, args) -> dict:
    from asrdecode.decoders.let import LetConfig, LetDecoder
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

    blank = lp.shape[2] - 1
    opts = {"beam": beam, "max_active": 10000, "min_active": 200, "threads": 1}
    print(f"\n{name}: {len(lp)} utterances, {int(lengths.sum())} frames", flush=True)
    rows = []
    plain = WfstDecoder(WfstConfig(graph=str(large_graph), backend="compiled", **opts))
    rows.append(run_row("wfst, large-LM graph", plain, lp, lengths, shift, blank))
    otf = WfstOtfDecoder(WfstOtfConfig(graph=str(small_graph), lm=str(large_lm), backend="compiled", **opts))
    rows.append(run_row("wfst-otf, small-LM graph + large LM", otf, lp, lengths, shift, blank))
    print("  wfst, wfst-otf: done", flush=True)
    for cap in args.capacities:
        for width in (0.0, args.bucket_width):
            cfg = LetConfig(
                graph=str(small_graph), lm=str(large_lm), group_capacity=cap, bucket_width=width, **opts
            )
            label = f"let, capacity {cap}, " + (f"bucket queue {width:g}" if width else "exact cut-off")
            rows.append(run_row(label, LetDecoder(cfg, lm=otf.diff), lp, lengths, shift, blank))
            rows[-1].update(group_capacity=cap, bucket_width=width)
            print(f"  {label}: done", flush=True)
    plain_row, otf_row = rows[0], rows[1]
    for r in rows:
        r["ratio_to_otf"] = r["frames_per_second"] / otf_row["frames_per_second"]
        r["ratio_to_wfst"] = r["frames_per_second"] / plain_row["frames_per_second"]
        r["wer"] = wer(refs, r["words"])
        r["same_1best_as_otf"] = sum(a == b for a, b in zip(r["words"], otf_row["words"], strict=True))
    return case_result(name, lp, lengths, beam, rows)


def print_case(c: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"{c['case']}: {c['utterances']} utterances, {c['frames']} frames, beam {c['options']['beam']}"
    )
    cols = (
        "decoder",
        "frames/s",
        "vs otf",
        "vs wfst",
        "WER",
        "1-best = otf",
        "arcs/fr",
        "tokens/fr",
        "members/fr",
    )
    for col in cols:
        t.add_column(col, justify="left" if col == "decoder" else "right")

    def num(x, fmt: str = ".0f") -> str:
        return "-" if x is None else format(x, fmt)

    for r in c["rows"]:
        members = None
        if r["word_members_per_frame"] is not None:
            members = r["word_members_per_frame"] + r["union_members_per_frame"]
        t.add_row(
            r["decoder"],
            f"{r['frames_per_second']:.0f}",
            f"{r['ratio_to_otf']:.2f}x",
            f"{r['ratio_to_wfst']:.3f}x",
            f"{r['wer']:.3f}",
            f"{r['same_1best_as_otf']}/{c['utterances']}",
            num(r["arcs_per_frame"]),
            num(r["tokens_per_frame"]),
            num(members),
        )
    Console(width=200).print(t)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["demo", "20k"], choices=["demo", "20k"])
    ap.add_argument("--utterances", type=int, default=64, help="20k case: spelled sentences")
    ap.add_argument("--capacities", type=int, nargs="+", default=[4, 16], help="let group capacities")
    ap.add_argument("--bucket-width", type=float, default=0.5, help="let bucket-queue bin width")
    ap.add_argument("--out", default="out/bench/let_decode.json")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    load_start = os.getloadavg()
    cases = run_cases(args, run_case, print_case, 1e-5)  # the sentences and pruned graph of wfst_otf
    write_report(args.out, {"machine": machine_info(load_start), "cases": cases})


if __name__ == "__main__":
    main()
