"""Benchmark `wfst-otf` (a graph built with a small, pruned LM, rescored on the fly by the large LM)
against `wfst` on the graph built directly with the large LM, on the same log-probs (paper 000's
comparison: speed and accuracy for a fraction of the graph memory).

    nice -n 5 .venv/bin/asrdecode bench wfst-otf                 # both cases
    .venv/bin/asrdecode bench wfst-otf --cases demo --torch      # + torch-backend rows

Cases (the small LM is the large one entropy-pruned with kaldingram; both graphs are compact TLGs
built with asrdecode.graph.build_graph from the same units and lexicon rules):

* ``demo``: the embedded demo model (configs/wfst.yaml / configs/wfst-otf.yaml) on the 44 demo clips
  (data/demo/synthetic + real; log-probs cached in out/bench/inputs/otf-demo.npz); large LM = the
  demo trigram (data/demo/graph/lm.arpa), small = data/demo/otf/small-lm.arpa
  (scripts/make_otf_demo_lms.py); graphs out/graphs/demo-ctc-bpe-tlg and -small-tlg; beam 16,
  max_active 10000 as the configs. The model is barely trained: WER is high for both.
* ``20k``: asrdecode bench wfst's 20k-word synthetic trigram with a character lexicon and
  its spelled, 10%-confused log-probs of corpus sentences (``--utterances``); small LM pruned at
  ``--threshold-20k`` into out/bench/wfst-otf/; beam 10, max_active 10000 as that benchmark, and
  `wfst-otf` also at wider beams (``--otf-beams-20k``). Its WER stays above `wfst`'s at any beam:
  the large-LM graph reads this LM as its cheapest paths, `wfst-otf` reads it exactly, and on this
  synthetic LM the two differ a lot (`asrdecode bench lm-backoff`).

Rows (one process, each decoder set up and warmed up on one utterance before the clock starts; the
compiled backend on one thread, ``--torch`` adds the torch backend at batch 32, `wfst-otf` with
``lm_on_host`` false and true, with the lookup counters of the latter in the JSON): frames/s and the
ratio to `wfst` on the large graph, process CPU seconds, WER, 1-best identical to `wfst`'s,
arcs expanded per frame, and memory: the device graph's bytes (CSR tensors) and, for `wfst-otf`,
plus the LM tables it holds (both LMs' CSR tables and the union states; torch rows: the LM bytes on
the device). Wall-clock timings on a
shared machine: compare the ratios of one run. Writes JSON (``--out``) and prints a table.

A second table per case: the bytes the torch backend keeps on the device for the LM lookups with
``decoder.lm_on_host`` false (both LMs' tables) vs true (paper 000 sec. 2.2: labels, first-label
offsets and backoff states, the union states' LM states, the ``--lm-cache`` arc cache), as a
ratio; and the large LM alone (its device structure / all its tables; paper 000 reports about 30%).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import bench_parser, machine_info, model_digest, parse, write_report

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "out" / "bench"


def prune(large: Path, small: Path, threshold: float) -> Path:
    if not small.is_file():
        small.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "kaldingram.cli", "prune", "--threshold", str(threshold)]
        subprocess.run([*cmd, "--lm", str(large), "--write-lm", str(small), "--verbose", "5"], check=True)
    return small


def build(cfg, out: Path) -> Path:
    from asrdecode.graph import build_graph

    if not (out / "meta.json").is_file():
        print(f"building {out} ...", flush=True)
    build_graph(cfg, out)  # reuses an existing build with the same inputs
    return out


def demo_inputs(cache: Path) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
    """Log-probs of the embedded demo model on data/demo/{synthetic,real} (cached under a name
    with the model file's checksum, so a new model gets new log-probs) and references."""
    digest = model_digest("embedded:demo_ctc_bpe")
    cache = cache.with_name(f"{cache.stem}-{digest}{cache.suffix}")
    if not cache.is_file():
        import soundfile
        import torch

        from asrdecode.audio.batching import pad_batch
        from asrdecode.models.loading import load_model

        rows, waves = [], []
        for sub in ("synthetic", "real"):
            d = ROOT / "data" / "demo" / sub
            for ln in (d / "manifest.jsonl").read_text().splitlines():
                if ln.strip():
                    r = json.loads(ln)
                    rows.append(r)
                    waves.append(soundfile.read(d / r["audio_filepath"], dtype="float32")[0])
        model = load_model("embedded:demo_ctc_bpe").eval()
        lps, lens = [], []
        with torch.no_grad():
            for w in waves:  # one at a time: no padding effects
                batch, n = pad_batch([w])
                out = model.forward_features(*model.features(batch, n))
                lps.append(out.log_probs[0, : int(out.lengths[0])].float().numpy())
                lens.append(int(out.lengths[0]))
        T = max(lens)
        x = np.zeros((len(lps), T, lps[0].shape[1]), np.float32)
        for b, lp in enumerate(lps):
            x[b, : len(lp)] = lp
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, log_probs=x, lengths=np.array(lens), text=np.array([r["text"] for r in rows]))
    d = np.load(cache)
    return d["log_probs"], d["lengths"], [str(t).split() for t in d["text"]]


def demo_case() -> tuple[Path, Path, Path, np.ndarray, np.ndarray, list[list[str]]]:
    """The demo case: (large-LM TLG, small-LM TLG, large ARPA, log-probs, lengths, references), the
    graphs built as configs/graph/demo-ctc-bpe-{,small-}tlg.yaml build them."""
    import yaml

    from asrdecode.graph import GraphBuildConfig

    large_lm = ROOT / "data" / "demo" / "graph" / "lm.arpa"
    small_lm = ROOT / "data" / "demo" / "otf" / "small-lm.arpa"
    if not small_lm.is_file():
        sys.exit(f"{small_lm} not found: run scripts/make_otf_demo_lms.py")
    graphs = []
    for name in ("demo-ctc-bpe-tlg", "demo-ctc-bpe-small-tlg"):
        spec = yaml.safe_load((ROOT / "configs" / "graph" / f"{name}.yaml").read_text())
        spec = {k: str(ROOT / v) if k in ("arpa", "model") else v for k, v in spec.items()}
        graphs.append(build(GraphBuildConfig(**spec), ROOT / "out" / "graphs" / name))
    lp, lengths, refs = demo_inputs(BENCH / "inputs" / "otf-demo.npz")
    return graphs[0], graphs[1], large_lm, lp, lengths, refs


def case_20k(threshold: float, utterances: int) -> tuple[Path, Path, Path, np.ndarray, np.ndarray, list]:
    """The 20k-word case: (large-LM TLG, TLG of the LM pruned at `threshold`, large ARPA, log-probs,
    lengths, sentences): `utterances` spelled corpus sentences of 5+ words (seed 1)."""
    from asrdecode.bench.wfst_decode import spelled_graph, spelled_logprobs, spelled_sentences
    from asrdecode.graph import GraphBuildConfig

    large_graph, large_lm, corpus = spelled_graph(BENCH / "wfst-graph-20k-sep")
    small_lm = prune(large_lm, BENCH / "wfst-otf" / f"lm_20000_pruned_{threshold:g}.arpa", threshold)
    meta = json.loads((large_graph / "meta.json").read_text())["config"]
    small_graph = build(
        GraphBuildConfig(**{**meta, "arpa": str(small_lm)}), BENCH / "wfst-otf" / f"graph-20k-{threshold:g}"
    )
    sents = spelled_sentences(corpus, utterances)
    lp, lengths = spelled_logprobs(sents)
    return large_graph, small_graph, large_lm, lp, lengths, sents


def wer(refs: list[list[str]], hyps: list[list[str]]) -> float:
    import jiwer

    return float(jiwer.wer([" ".join(r) for r in refs], [" ".join(h) or "<none>" for h in hyps]))


def graph_bytes(graph_dir: Path) -> int:
    from asrdecode.graph.format import DeviceGraph, find_graph_file

    g = DeviceGraph.load(find_graph_file(graph_dir))
    return sum(
        t.numel() * t.element_size()
        for t in (g.offsets, g.split, g.ilabel, g.olabel, g.nextstate, g.weight, g.final)
    )


def lm_device_memory(diff, cache: int) -> dict:
    """Device bytes of the torch backend's LM lookups: ``lm_on_host: false`` (both LMs' tables and
    the union-state maps on the device) vs ``true`` (paper 000 sec. 2.2: labels, first-label offsets
    and backoff states per LM, the union states' LM states and orders, the arc cache), and the large
    LM alone (labels + offsets + backoff vs all its tables: paper 000's "about 30%")."""
    from asrdecode.lm.host_lookup import HostLookupLM

    host = HostLookupLM(diff, "cpu", cache_size=cache)
    parts = host.device_bytes()
    on_device = diff.table_bytes()
    large_all = diff.large.describe()["bytes"]
    return {
        "lm_on_host_false": {"total": on_device, "state_maps": diff.state_bytes()},
        "lm_on_host_true": parts,
        "lm_cache_entries": cache,
        "host_bytes_lm_on_host_true": host.host_bytes(),
        "ratio_total": parts["total"] / on_device,
        "ratio_without_cache": (parts["total"] - parts["cache"]) / on_device,
        "large_lm": {
            "tables": large_all,
            "device_structure": host.large.nbytes(),
            "ratio": host.large.nbytes() / large_all,
            "ngrams": diff.large.info["ngrams"],
            "states": diff.large.num_states,
            "arcs": diff.large.num_arcs,
        },
    }


def run_row(name: str, decoder, lp, lengths, shift: float, blank: int, batch: int) -> dict:
    import torch

    from asrdecode.models.base import ModelOutput

    def out(idx: np.ndarray) -> ModelOutput:
        T = int(lengths[idx].max())
        return ModelOutput(torch.from_numpy(lp[idx, :T]), torch.from_numpy(lengths[idx]), shift, blank, [])

    decoder.decode(out(np.array([0])))  # warm-up (numba cache load / compile, graph on the device)
    order = np.argsort(-lengths, kind="stable")
    results: list = [None] * len(lp)
    arcs = 0
    lookups: dict[str, int] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(order), batch):
        idx = order[i : i + batch]
        for j, r in zip(idx, decoder.decode(out(idx)), strict=True):
            results[j] = r
        stats = decoder.last_info["stats"]
        arcs += int(stats.get("arcs", 0))
        for k, v in stats.get("lm_lookups", {}).items():  # torch, lm_on_host: deduplication counters
            lookups[k] = lookups.get(k, 0) + v
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    frames = float(lengths.sum())
    return {
        "decoder": name,
        "seconds": wall,
        "cpu_seconds": cpu,
        "frames_per_second": frames / wall,
        "arcs_per_frame": arcs / frames,
        "lm_lookups": lookups,
        "words": [[w.word for w in r.words] for r in results],
    }


def run_case(
    name: str,
    large_graph: Path,
    small_graph: Path,
    large_lm: Path,
    lp,
    lengths,
    refs,
    shift,
    beam,
    args,
    otf_beams: tuple[float, ...] = (),
):
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

    blank = lp.shape[2] - 1
    opts = {"beam": beam, "max_active": 10000, "min_active": 200, "threads": 1}
    print(f"\n{name}: {len(lp)} utterances, {int(lengths.sum())} frames", flush=True)
    rows = []
    backends = [("compiled", 1)] + ([("torch", 32)] if args.torch else [])
    otf_lm = None
    for backend, batch in backends:
        plain = WfstDecoder(WfstConfig(graph=str(large_graph), backend=backend, **opts))
        rows.append(run_row(f"wfst, large-LM graph ({backend})", plain, lp, lengths, shift, blank, batch))
        rows[-1]["backend"] = backend
        rows[-1]["memory_bytes"] = rows[-1]["graph_bytes"] = graph_bytes(large_graph)
        # torch: the LM tables on the device and in host memory (decoder.lm_on_host, paper 000)
        variants = [False, True] if backend == "torch" else [False]
        for b in (beam, *otf_beams):  # the same beam, then wider ones (the large LM scores words late)
            for on_host in variants:
                cfg = WfstOtfConfig(
                    graph=str(small_graph),
                    lm=str(large_lm),
                    backend=backend,
                    lm_on_host=on_host,
                    lm_cache=args.lm_cache,
                    **{**opts, "beam": b},
                )
                t0 = time.perf_counter()
                otf = WfstOtfDecoder(cfg, lm=otf_lm)
                load = time.perf_counter() - t0
                otf_lm = otf.diff
                label = f"wfst-otf, small-LM graph + large LM ({backend}{', lm_on_host' if on_host else ''})"
                label += f", beam {b:g}" if b != beam else ""
                rows.append(run_row(label, otf, lp, lengths, shift, blank, batch))
                # compiled: the LM tables in host memory; torch: what sits on the device
                lm_bytes = (
                    otf.lm_device_bytes("cpu")["total"] if backend == "torch" else otf.diff.table_bytes()
                )
                rows[-1].update(
                    graph_bytes=graph_bytes(small_graph),
                    lm_bytes=lm_bytes,
                    lm_load_seconds=load,
                    backend=backend,
                    lm_on_host=on_host,
                )
                rows[-1]["memory_bytes"] = rows[-1]["graph_bytes"] + lm_bytes
        print(f"  {backend}: done", flush=True)
    lm_memory = lm_device_memory(otf_lm, args.lm_cache)
    for r in rows:  # ratios to `wfst` on the large-LM graph with the same backend
        peer = next(p for p in rows if p["backend"] == r["backend"] and p["decoder"].startswith("wfst,"))
        r["ratio_fps"] = r["frames_per_second"] / peer["frames_per_second"]
        r["ratio_graph_bytes"] = r["graph_bytes"] / peer["graph_bytes"]
        r["ratio_memory_bytes"] = r["memory_bytes"] / peer["memory_bytes"]
        r["wer"] = wer(refs, r["words"])
        r["same_1best_as_wfst"] = sum(a == b for a, b in zip(r["words"], peer["words"], strict=True))
    return {
        **case_result(name, lp, lengths, beam, rows),
        "lm_device_memory": lm_memory,
    }


def print_case(c: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"{c['case']}: {c['utterances']} utterances, {c['frames']} frames, beam {c['options']['beam']}"
    )
    for col in (
        "decoder",
        "frames/s",
        "ratio",
        "CPU s",
        "WER",
        "1-best = wfst",
        "arcs/frame",
        "graph MB",
        "+ LM MB",
        "memory ratio",
    ):
        t.add_column(col, justify="left" if col == "decoder" else "right")
    for r in c["rows"]:
        t.add_row(
            r["decoder"],
            f"{r['frames_per_second']:.0f}",
            f"{r['ratio_fps']:.3f}x",
            f"{r['cpu_seconds']:.2f}",
            f"{r['wer']:.3f}",
            f"{r['same_1best_as_wfst']}/{c['utterances']}",
            f"{r['arcs_per_frame']:.0f}",
            f"{r['graph_bytes'] / 1e6:.2f}",
            f"{r.get('lm_bytes', 0) / 1e6:.2f}",
            f"{r['ratio_memory_bytes']:.3f} (graph {r['ratio_graph_bytes']:.3f})",
        )
    Console(width=200).print(t)
    m = c["lm_device_memory"]
    t = Table(title=f"{c['case']}: LM bytes on the device, torch backend (decoder.lm_on_host)")
    for col in ("lm_on_host", "LM tables / labels MB", "state maps MB", "cache MB", "total MB", "ratio"):
        t.add_column(col, justify="left" if col == "lm_on_host" else "right")
    off, on = m["lm_on_host_false"], m["lm_on_host_true"]
    t.add_row(
        "false", f"{(off['total'] - off['state_maps']) / 1e6:.3f}", f"{off['state_maps'] / 1e6:.3f}", "-",
        f"{off['total'] / 1e6:.3f}", "1",
    )  # fmt: skip
    t.add_row(
        f"true (cache {m['lm_cache_entries']})", f"{on['labels'] / 1e6:.3f}", f"{on['state_maps'] / 1e6:.3f}",
        f"{on['cache'] / 1e6:.3f}", f"{on['total'] / 1e6:.3f}",
        f"{m['ratio_total']:.3f} ({m['ratio_without_cache']:.3f} without cache)",
    )  # fmt: skip
    big = m["large_lm"]
    t.add_row(
        "large LM alone: device structure / all tables", f"{big['device_structure'] / 1e6:.3f}", "-", "-",
        f"{big['tables'] / 1e6:.3f}", f"{big['ratio']:.3f}",
    )  # fmt: skip
    Console(width=200).print(t)


def case_result(name: str, lp, lengths, beam: float, rows: list[dict]) -> dict:
    """A case of the report: its size, options and rows (without their hypotheses)."""
    return {
        "case": name,
        "utterances": len(lp),
        "frames": int(lengths.sum()),
        "options": {"beam": beam, "max_active": 10000, "min_active": 200},
        "rows": [{k: v for k, v in r.items() if k != "words"} for r in rows],
    }


def run_cases(args, run_case, print_case, threshold_20k: float, *extra_20k) -> list[dict]:
    """The cases of ``args.cases`` through a benchmark's `run_case` (this one's or `let_decode`'s),
    each printed as it finishes: the demo model on the demo clips (frame shift 0.08 s, beam 16)
    and the 20k-word case with its LM pruned at `threshold_20k` (0.04 s, beam 10; `extra_20k`
    passed on to its run)."""
    cases = []
    if "demo" in args.cases:
        cases.append(run_case("demo TLG (BPE, trigram vs pruned)", *demo_case(), 0.08, 16.0, args))
        print_case(cases[-1])
    if "20k" in args.cases:
        sentences_and_graphs = case_20k(threshold_20k, args.utterances)
        name = "20k-word TLG (chars + |, trigram vs pruned)"
        cases.append(run_case(name, *sentences_and_graphs, 0.04, 10.0, args, *extra_20k))
        print_case(cases[-1])
    return cases


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report="out/bench/wfst_otf.json", threads=1, aliases=("--out",))
    ap.add_argument("--cases", nargs="+", default=["demo", "20k"], choices=["demo", "20k"])
    ap.add_argument("--utterances", type=int, default=64, help="20k case: spelled sentences")
    ap.add_argument(
        "--threshold-20k", type=float, default=1e-5, help="kaldingram prune threshold (20k small LM)"
    )
    ap.add_argument("--torch", action="store_true", help="also the torch backend (batch 32)")
    ap.add_argument(
        "--otf-beams-20k", type=float, nargs="*", default=[13.0, 16.0], help="wider wfst-otf beams"
    )
    ap.add_argument(
        "--lm-cache", type=int, default=1 << 16, help="decoder.lm_cache entries for the LM memory table"
    )
    args = parse(ap, argv)
    load_start = os.getloadavg()
    cases = run_cases(args, run_case, print_case, args.threshold_20k, tuple(args.otf_beams_20k))
    write_report(args.json, {"machine": machine_info(load_start), "cases": cases})


if __name__ == "__main__":
    main()
