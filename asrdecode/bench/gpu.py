"""Every decoder on a CUDA device against the CPU (`asrdecode bench gpu`; scripts/gpu_check.sh runs it).

    asrdecode bench gpu --out out/bench/gpu       # batch 1, 32 and 256
    asrdecode bench gpu --quick --out /tmp/gpu    # one utterance at batch 1, a small graph (seconds)

Inputs: the NeMo fixture models (tests/fixtures/nemo: `ctc_bpe` for the CTC and WFST decoders,
`rnnt_bpe`, `aed_canary2`) run once, untimed, on the fixture clips cycled to each row's utterances.
For each decoder and batch size: seconds of audio decoded per second (RTFx) on cuda and on the CPU
with all its cores (the compiled backend for `wfst` and `wfst-otf`, the same torch code for the
others) and their ratio; torch operations (each a kernel launch on a GPU; a replayed CUDA graph
counts none) plus the fused WFST search's Triton launches, and host synchronisations per frame step
(`DispatchCounter`, one untimed pass over the first two batches); the peak GPU memory of the timed
pass. `wfst` and `wfst-otf` search the demo TLG (the demo trigram, data/demo/packed/graph/lm.arpa.gz,
as bigrams over the fixture's BPE units, built once into --graphs; `--quick`: data/demo/otf/small-lm.arpa),
`wfst-otf` with the whole trigram on the fly; ``wfst-fused`` is `wfst` with ``kernel: fused`` on cuda
(wfst/fused.py: the frame loop on the device). ``wfst-20k`` and ``wfst-fused-20k`` search the 20k-word
TLG of `asrdecode bench wfst` (a synthetic trigram, letters + ``|``, ~1.3M states) on its spelled
log-probs (no model; frame shift 0.04 s): the GPU run's target is `wfst` there at batch 256 faster
than the compiled backend on all the machine's cores (paper 001 reports 15.6x a 16-core CPU decoder).
``--spelled-words`` sets its words (`--quick`: 300). Without CUDA only the CPU rows are made, unless
``--cuda-rows-on-cpu``: then the cuda rows' settings run on the CPU too (the fused kernels need
TRITON_INTERPRET=1), which checks their code, the same-words column and the table without a
GPU (no measurement: the table says so). The
targets' rows run first (``wfst-20k`` and ``wfst-fused-20k`` at batch 256, ``transducer-greedy`` at
32), then the rest batch size by batch size; bench_gpu.json and bench_gpu.md in --out are rewritten
after each row, and rows that would start past `--seconds` are listed as skipped. ``--graphs-only``
builds the graphs, compiles the CPU rows' kernels into numba's disk cache (`warm_compiled`) and stops
(scripts/gpu_check.sh runs it beside the cuda tests).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from asrdecode.bench.harness import bench_parser, machine_info, parse

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "nemo"
DEMO_LM = ROOT / "data" / "demo" / "packed" / "graph" / "lm.arpa.gz"  # tracked (make demo-data unpacks it)
SMALL_LM = ROOT / "data" / "demo" / "otf" / "small-lm.arpa"


SPELLED_SHIFT = 0.04  # seconds per frame of the spelled log-probs (`asrdecode bench wfst`'s 20k case)


@dataclass
class Case:
    """One decoder: its fixture model (None: the spelled case's log-probs), its `decoder:` section
    and the options of each device."""

    name: str
    model: str | None
    section: dict[str, Any]
    on: dict[str, dict[str, Any]] = field(default_factory=dict)  # "cuda" / "cpu" -> extra options
    target: tuple[int, float] | None = None  # a target of the GPU run: (batch, cuda/CPU ratio above)


@dataclass
class Graphs:
    """The benchmark's graphs: the demo TLG, its LM, and the spelled case's TLG, corpus and name."""

    demo: Path
    lm: Path
    spelled: Path
    corpus: Path
    label: str
    spelled_error: str | None = None  # why the spelled TLG could not be built (its rows say it)


def cases(graphs: Graphs) -> list[Case]:
    search = {"graph": str(graphs.demo), "beam": 10.0, "max_active": 10000}
    spelled = {**search, "graph": str(graphs.spelled), "min_active": 200}
    torch_search = {"backend": "torch", "cuda_graphs": True}
    compiled = {"backend": "compiled", "threads": 0}
    per_frame = {"cuda": torch_search, "cpu": compiled}
    fused = {"cuda": {**torch_search, "kernel": "fused"}, "cpu": compiled}
    return [
        Case("ctc-greedy", "ctc_bpe", {"type": "ctc-greedy"}),
        Case("ctc-beam", "ctc_bpe", {"type": "ctc-beam", "beam_size": 4}),
        Case("wfst", "ctc_bpe", {"type": "wfst", **search}, per_frame),
        Case("wfst-fused", "ctc_bpe", {"type": "wfst", **search}, fused),
        Case(f"wfst-{graphs.label}", None, {"type": "wfst", **spelled}, per_frame, target=(256, 1.0)),
        Case(f"wfst-fused-{graphs.label}", None, {"type": "wfst", **spelled}, fused, target=(256, 1.0)),
        Case("wfst-otf", "ctc_bpe", {"type": "wfst-otf", **search, "lm": str(graphs.lm)}, per_frame),
        Case(
            "transducer-greedy",
            "rnnt_bpe",
            {"type": "transducer-greedy"},
            {"cuda": {"cuda_graphs": True}},
            target=(32, 10.0),
        ),
        Case("transducer-beam", "rnnt_bpe", {"type": "transducer-beam", "strategy": "malsd", "beam_size": 4}),
        Case("aed-greedy", "aed_canary2", {"type": "aed-greedy"}),
        Case("aed-beam", "aed_canary2", {"type": "aed-beam", "beam_size": 4}),
    ]


def clips(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixture clips (sorted by name) cycled to `n` utterances: a padded batch and lengths."""
    import soundfile

    audio = [soundfile.read(p, dtype="float32")[0] for p in sorted((FIX / "audio").glob("*.wav"))]
    rows = [audio[i % len(audio)] for i in range(n)]
    wav = torch.zeros(n, max(len(r) for r in rows))
    for i, r in enumerate(rows):
        wav[i, : len(r)] = torch.from_numpy(r)
    return wav, torch.tensor([len(r) for r in rows])


def build_graphs(folder: Path, quick: bool, words: int) -> Graphs:
    """The demo TLG (or, `quick`, the small demo LM's) and the `words`-word spelled TLG, built once
    into `folder`."""
    from asrdecode.bench.wfst_decode import demo_graph as build
    from asrdecode.bench.wfst_decode import spelled_graph

    lm = SMALL_LM if quick else DEMO_LM
    demo = build(folder / ("gpu-graph-small" if quick else "gpu-graph"), lm)
    label = f"{words // 1000}k" if words % 1000 == 0 else f"{words}w"
    spelled = folder / f"gpu-graph-{label}"
    try:
        spelled, _, corpus = spelled_graph(spelled, words)
    except Exception as err:  # the other rows still run
        return Graphs(demo, lm, spelled, spelled, label, f"spelled TLG: {err!r}"[:300])
    return Graphs(demo, lm, spelled, corpus, label)


def warm_compiled(graphs: Graphs) -> list[str]:
    """Decode one utterance with each CPU row's compiled backend (`wfst`, `wfst-otf`), so numba's
    disk cache holds their kernels before the timed rows (scripts/gpu_check.sh runs this with the
    graph build, beside the cuda tests); returns the cases warmed."""
    from asrdecode.decoders import make_decoder

    warmed, seen, models = [], set(), {}
    for case in cases(graphs):
        section = {**case.section, **case.on.get("cpu", {})}
        key = json.dumps(section, sort_keys=True)
        unbuilt = case.model is None and graphs.spelled_error is not None
        if section.get("backend") != "compiled" or key in seen or unbuilt:
            continue
        seen.add(key)
        outputs, _, context = case_inputs(case, graphs, 1, 1, "cpu", models)
        make_decoder(section, context).decode(outputs[0])
        warmed.append(case.name)
    return warmed


def case_inputs(
    case: Case, graphs: Graphs, n: int, batch: int, device: str, models: dict[tuple[str, str], Any]
) -> tuple[list, float, Any]:
    """A row's inputs: `n` utterances as model outputs in batches of `batch` on `device`, their
    seconds of audio and the decoder context (None for the spelled case, which has no model);
    `models` keeps each loaded fixture model per device."""
    from asrdecode.decoders import DecoderContext
    from asrdecode.models.loading import load_model

    if case.model is None:
        outputs, seconds = spelled_outputs(graphs.corpus, n, batch, device)
        return outputs, seconds, None
    key = (case.model, device)
    if key not in models:
        models[key] = load_model(str(FIX / f"{case.model}.nemo")).to(device).eval()
    model = models[key]
    wav, lens = clips(n)
    context = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    return model_outputs(model, wav, lens, batch, device), float(lens.sum()) / 16000, context


def spelled_outputs(corpus: Path, n: int, batch: int, device: str) -> tuple[list, float]:
    """The spelled case's log-probs of `n` corpus sentences as model outputs in batches of `batch`
    on `device`, and their seconds of audio."""
    from asrdecode.bench.wfst_decode import LETTERS, SEPARATOR, spelled_logprobs, spelled_sentences
    from asrdecode.models.base import ModelOutput

    lp, lengths = spelled_logprobs(spelled_sentences(corpus, n))
    units = [*LETTERS, SEPARATOR]
    outputs = []
    for i in range(0, n, batch):
        T = int(lengths[i : i + batch].max())
        x = torch.from_numpy(lp[i : i + batch, :T].copy()).to(device)
        lens = torch.from_numpy(lengths[i : i + batch])
        outputs.append(ModelOutput(x, lens, SPELLED_SHIFT, len(units), units))
    return outputs, float(lengths.sum()) * SPELLED_SHIFT


def model_outputs(model: Any, wav: torch.Tensor, lens: torch.Tensor, batch: int, device: str) -> list:
    """The model's outputs for `wav` in batches of `batch` on `device` (untimed)."""
    outputs = []
    with torch.inference_mode():
        for i in range(0, len(wav), batch):
            n = int(lens[i : i + batch].max())
            outputs.append(model(wav[i : i + batch, :n].to(device), lens[i : i + batch].to(device)))
    return outputs


def count_pass(decoder: Any, outputs: list) -> dict[str, float]:
    """Torch operations plus Triton launches of the fused WFST search (`wfst.fused.LAUNCHES`:
    launches issued from Python, none for a replayed CUDA graph) and host syncs per frame step
    over the first two batches."""
    from asrdecode.decoders.dispatch_count import DispatchCounter
    from asrdecode.decoders.wfst.fused import LAUNCHES

    part = outputs[:2]
    launches = LAUNCHES[0]
    with DispatchCounter() as c:
        for out in part:
            decoder.decode(out)
    launches = LAUNCHES[0] - launches
    steps = sum(int(out.lengths.max()) for out in part)
    return {
        "ops_per_frame": (c.ops + launches) / steps,
        "triton_launches_per_frame": launches / steps,
        "syncs_per_frame": c.syncs / steps,
        "sync_ops": dict(c.sync_ops),
    }


def run_row(
    case: Case, context: Any, device: str, batch: int, outputs: list, seconds: float
) -> tuple[dict, list[list[str]]]:
    """One decoder at one batch size on one device over `outputs` (`seconds` of audio): RTFx of a
    timed pass after a warm-up batch; and each utterance's words."""
    from asrdecode.decoders import make_decoder

    decoder = make_decoder({**case.section, **case.on.get(device, {})}, context)
    first = outputs[0]
    cuda = any(t is not None and t.is_cuda for t in (first.log_probs, first.encoder_out))  # (or on the CPU)
    decoder.decode(first)  # warm-up: compiles, captures, grows capacities
    utterances = sum(len(out.lengths) for out in outputs)
    row: dict[str, Any] = {"decoder": case.name, "device": device, "batch": batch, "utterances": utterances}
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    results = []
    for out in outputs:
        results += decoder.decode(out)
    if cuda:
        torch.cuda.synchronize()
        row["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    row["seconds"] = time.perf_counter() - start
    row["rtfx"] = seconds / row["seconds"]
    row.update(count_pass(decoder, outputs))
    return row, [[w.word for w in r.words] for r in results]


def plan(chosen: list[Case], batches: list[int]) -> list[tuple[Case, int]]:
    """The rows in the order they run: the GPU run's targets first (each case's `target` batch), then
    batch size by batch size (all decoders at the smallest first), so a time budget cuts the rest."""
    first = [(case, case.target[0]) for case in chosen if case.target and case.target[0] in batches]
    return first + [(case, batch) for batch in batches for case in chosen if (case, batch) not in first]


def run(args: argparse.Namespace) -> None:
    """Every row (`plan`); the report is rewritten after each row, and rows past the time budget
    (`--seconds`) are listed as skipped."""
    start = time.perf_counter()
    cuda = torch.cuda.is_available()
    stand_in = args.cuda_rows_on_cpu and not cuda  # the cuda rows' settings on the CPU
    devices = ["cuda", "cpu"] if cuda or stand_in else ["cpu"]
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(cores)
    graphs = build_graphs(Path(args.graphs), args.quick, args.spelled_words)
    chosen = [c for c in cases(graphs) if c.name in (args.decoders or [c.name])]
    report = {
        "machine": machine_info(args.load_start),
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
        "cuda_rows_on_cpu": stand_in,
        "cpu_threads": cores,
        "graph": str(graphs.demo),
        "spelled_graph": str(graphs.spelled) if graphs.spelled_error is None else graphs.spelled_error,
        "quick": args.quick,
        "targets": [
            {"decoder": c.name, "batch": c.target[0], "ratio_above": c.target[1]} for c in chosen if c.target
        ],
        "rows": [],
    }
    models: dict[tuple[str, str], Any] = {}
    for case, batch in plan(chosen, [1] if args.quick else args.batch):
        n = 1 if args.quick else max(batch, min(16 * batch, args.utterances))
        words: dict[str, list[list[str]]] = {}  # per device: each utterance's words
        for device in devices:
            row = {"decoder": case.name, "device": device, "batch": batch}
            if args.seconds and time.perf_counter() - start > args.seconds:
                row["error"] = f"skipped: past the {args.seconds:.0f} s budget"
            elif case.model is None and graphs.spelled_error is not None:
                row["error"] = graphs.spelled_error
            else:
                try:
                    on = "cpu" if stand_in else device
                    outputs, seconds, context = case_inputs(case, graphs, n, batch, on, models)
                    row, words[device] = run_row(case, context, device, batch, outputs, seconds)
                except Exception as err:  # one failing row must not hide the others
                    row["error"] = repr(err)[:300]
            if device == "cpu" and "cuda" in words and "cpu" in words:  # the cuda row, already listed
                same = sum(a == b for a, b in zip(words["cuda"], words["cpu"], strict=True))
                report["rows"][-1]["same_words_as_cpu"] = [same, len(words["cpu"])]
            report["rows"].append(row)
            print(one_line(row), flush=True)
            write(report, Path(args.out), args.json)


def write(report: dict, out: Path, json_path: Path | None = None) -> None:
    """The report as JSON (``json_path``, default OUT/bench_gpu.json) and its table (OUT/bench_gpu.md)."""
    report["machine"]["load_average_at_end"] = os.getloadavg()
    out.mkdir(parents=True, exist_ok=True)
    json_path = json_path or out / "bench_gpu.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    (out / "bench_gpu.md").write_text(table(report))


def one_line(row: dict) -> str:
    head = f"{row['decoder']:<18} {row['device']:<4} batch {row['batch']:>3}"
    if "error" in row:
        return f"{head}  error: {row['error']}"
    memory = f", peak {row['peak_gpu_mib']:.0f} MiB" if "peak_gpu_mib" in row else ""
    return (
        f"{head}  RTFx {row['rtfx']:9.1f}  ops/frame {row['ops_per_frame']:7.1f}  "
        f"syncs/frame {row['syncs_per_frame']:5.2f}{memory}"
    )


def table(report: dict) -> str:
    """A markdown table: one line per decoder and batch, cuda next to the CPU (and how many
    utterances got the same words on both); then the targets."""
    by = {(r["decoder"], r["batch"], r["device"]): r for r in report["rows"]}
    device = report["cuda_device"] or "no CUDA device"
    lines = [
        f"GPU: {device}; CPU: {report['machine']['cpu']}, {report['cpu_threads']} threads; torch "
        f"{report['machine']['torch']}; load {report['machine']['load_average_at_start'][0]:.2f} before, "
        f"{report['machine']['load_average_at_end'][0]:.2f} after",
        "",
        "| decoder | batch | RTFx cuda | RTFx CPU | cuda / CPU | same words as CPU | ops per frame (cuda) "
        "| syncs per frame (cuda) | peak GPU MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(row: dict | None, key: str, fmt: str) -> str:
        if row is None:
            return "-"
        return "error" if "error" in row else format(row[key], fmt) if key in row else "-"

    for (name, batch, dev), cpu in by.items():
        if dev != "cpu":
            continue
        gpu = by.get((name, batch, "cuda"))
        ratio = "-"
        if gpu and "error" not in gpu and "error" not in cpu:
            ratio = f"{gpu['rtfx'] / cpu['rtfx']:.2f}"
        counted = gpu if gpu is not None else cpu
        same = "-"
        if gpu and "same_words_as_cpu" in gpu:
            same = "{}/{}".format(*gpu["same_words_as_cpu"])
        lines.append(
            f"| {name} | {batch} | {cell(gpu, 'rtfx', '.1f')} | {cell(cpu, 'rtfx', '.1f')} | {ratio} "
            f"| {same} | {cell(counted, 'ops_per_frame', '.1f')} | {cell(counted, 'syncs_per_frame', '.2f')} "
            f"| {cell(gpu, 'peak_gpu_mib', '.0f')} |"
        )
    if report.get("cuda_rows_on_cpu"):
        lines += ["", "No CUDA device: the cuda rows' settings ran on the CPU (a check of their code, not a "
                  "measurement); no target measured."]  # fmt: skip
    elif report["cuda_device"] is None:
        lines += ["", "No CUDA device: the ops and syncs columns are the CPU run's; no target measured."]
    else:
        lines += ["", "Targets (cuda RTFx / CPU RTFx):"]
        for t in report.get("targets", []):
            gpu, cpu = (by.get((t["decoder"], t["batch"], d)) for d in ("cuda", "cpu"))
            what = f"- {t['decoder']} at batch {t['batch']}, wanted above {t['ratio_above']:g}: "
            if gpu is None or cpu is None or "error" in gpu or "error" in cpu:
                lines.append(what + "no result")
            else:
                ratio = gpu["rtfx"] / cpu["rtfx"]
                lines.append(what + f"{ratio:.2f}, {'met' if ratio > t['ratio_above'] else 'not met'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report=None)
    ap.add_argument(
        "--out", default="out/bench/gpu", help="folder of bench_gpu.md (and bench_gpu.json without --json)"
    )
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32, 256])
    ap.add_argument(
        "--utterances", type=int, default=256, help="at most this many per row (at least a batch)"
    )
    ap.add_argument("--decoders", nargs="*", help="only these decoders")
    ap.add_argument("--graphs", default="out/bench", help="where the demo graph is built (once)")
    ap.add_argument("--quick", action="store_true", help="one utterance at batch 1, the small demo graph")
    ap.add_argument("--seconds", type=float, default=0.0, help="skip the rows that start later (0: none)")
    ap.add_argument(
        "--spelled-words", type=int, default=0, help="words of the spelled case's LM (0: 20000, --quick 300)"
    )
    ap.add_argument(
        "--graphs-only", action="store_true", help="build the graphs, compile the CPU kernels and stop"
    )
    ap.add_argument(
        "--cuda-rows-on-cpu",
        action="store_true",
        help="without CUDA, run the cuda rows' settings on the CPU: a check of their code, not a measurement",
    )
    args = parse(ap, argv)
    args.spelled_words = args.spelled_words or (300 if args.quick else 20000)
    args.load_start = os.getloadavg()
    if args.graphs_only:
        graphs = build_graphs(Path(args.graphs), args.quick, args.spelled_words)
        print(f"graphs: {graphs.demo}, {graphs.spelled_error or graphs.spelled}")
        print(f"compiled (numba's disk cache): {', '.join(warm_compiled(graphs))}")
        return
    run(args)
    out = Path(args.out)
    print((out / "bench_gpu.md").read_text())
    print(f"wrote {args.json or out / 'bench_gpu.json'} and {out / 'bench_gpu.md'}")


if __name__ == "__main__":
    main()
