"""Benchmark the `wfst` decoder against kaldi-decoder's FasterDecoder on the same graph and log-probs.

    .venv/bin/python scripts/bench/wfst_decode.py --out out/bench/wfst_decode.json
    .venv/bin/python scripts/bench/wfst_decode.py --graph out/graphs/my-tlg --logprobs lp.npz \
        --beam 12 --batch 1 8 32 128 --compiled-threads 1 2

Default inputs: a compact TLG for the NeMo fixture model (BPE units) built from the demo LM
(data/demo/graph/lm.arpa, bigram) into out/bench/wfst-graph, and the fixture's real log-probs
(tests/fixtures/nemo/reference/ctc_bpe.npz) repeated to `--utterances` utterances, or
`--synthetic` peaky log-probs. Reports frames/second and RTFx of asrdecode `wfst` with the
compiled backend (numba, `--compiled-threads` worker threads, default 1 and 2) and the torch
backend (at each `--batch` size), and of FasterDecoder (one utterance at a time, one core), their
ratio, how many 1-best word sequences agree, arcs expanded per second and host syncs per frame.
The numba compile (or cache load) happens before timing. Timings are wall clock on a possibly
shared machine: compare ratios from one run, not absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "nemo"


def default_graph(out: Path) -> Path:
    from asrdecode.graph import GraphBuildConfig, build_graph

    cfg = GraphBuildConfig(
        arpa=str(ROOT / "data" / "demo" / "graph" / "lm.arpa"),
        model=str(FIXTURE / "ctc_bpe.nemo"),
        lexicon_type="bpe",
        topology="compact",
        max_order=2,
    )
    build_graph(cfg, out)
    return out


def load_logprobs(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    if args.synthetic:
        rng = np.random.default_rng(0)
        B, T, V = args.utterances, args.frames, 129
        x = np.full((B, T, V), np.log(0.1 / (V - 1)), dtype=np.float32)
        for b in range(B):
            cols = rng.integers(0, V, size=T)
            cols[rng.random(T) < 0.6] = V - 1
            x[b, np.arange(T), cols] = np.log(0.9)
        x += rng.normal(size=x.shape).astype(np.float32) * 0.2
        x -= np.log(np.exp(x).sum(-1, keepdims=True))
        lengths = rng.integers(T // 2, T + 1, size=B)
        return x.astype(np.float32), lengths
    path = Path(args.logprobs) if args.logprobs else FIXTURE / "reference" / "ctc_bpe.npz"
    d = np.load(path)
    lp = d["log_probs"].astype(np.float32)
    lengths = d["encoder_len"] if "encoder_len" in d else d["lengths"]
    reps = -(-args.utterances // len(lp))
    return np.concatenate([lp] * reps)[: args.utterances], np.concatenate([lengths] * reps)[: args.utterances]


def bench_kaldi(graph_dir: Path, lp: np.ndarray, lengths: np.ndarray, args) -> dict:
    import kaldi_decoder
    import kaldifst

    fst_path = next(graph_dir.glob("*LG.fst"))
    fst = kaldifst.StdConstFst.read(str(fst_path))
    opts = kaldi_decoder.FasterDecoderOptions(
        beam=args.beam, max_active=args.max_active, min_active=args.min_active
    )
    words = []
    t = time.perf_counter()
    for b in range(len(lp)):
        dec = kaldi_decoder.FasterDecoder(fst, opts)
        dec.decode(kaldi_decoder.DecodableCtc(np.ascontiguousarray(lp[b, : lengths[b]])))
        ok, lat = dec.get_best_path()
        _, _, olabels, _ = kaldifst.get_linear_symbol_sequence(lat) if ok else (0, 0, [], 0)
        words.append(list(olabels))
    sec = time.perf_counter() - t
    return {"seconds": sec, "frames_per_second": float(lengths.sum()) / sec, "olabels": words}


def bench_wfst(
    graph_dir: Path,
    lp: np.ndarray,
    lengths: np.ndarray,
    batch: int,
    args,
    backend: str = "torch",
    threads: int = 0,
) -> dict:
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.models.base import ModelOutput

    cfg = WfstConfig(
        graph=str(graph_dir),
        beam=args.beam,
        max_active=args.max_active,
        min_active=args.min_active,
        backend=backend,
        threads=threads,
    )
    dec = WfstDecoder(cfg)
    dev = torch.device(args.device)
    if backend == "compiled":  # compile / load the numba cache, start the worker threads
        warm = ModelOutput(torch.from_numpy(lp[:2]), torch.from_numpy(lengths[:2]), 0.08, lp.shape[2] - 1, [])
        dec.decode(warm)
    blank = lp.shape[2] - 1
    words, syncs, frames_stepped, arcs = [], 0, 0, 0
    order = np.argsort(-lengths, kind="stable")  # batches of similar length, as the pipeline does
    results: dict[int, list[int]] = {}
    t = time.perf_counter()
    for i in range(0, len(lp), batch):
        idx = order[i : i + batch]
        x = torch.from_numpy(lp[idx]).to(dev)
        out = ModelOutput(x, torch.from_numpy(lengths[idx]), 0.08, blank, [])
        for j, res in zip(idx, dec.decode(out), strict=True):
            results[int(j)] = [dec.word_ids.get(w.word, -1) for w in res.words]
        st = dec.last_info["stats"]
        syncs += st["syncs"]
        frames_stepped += st["frames"]
        arcs += st["arcs"]
    if dev.type == "cuda":
        torch.cuda.synchronize()
    sec = time.perf_counter() - t
    words = [results[b] for b in range(len(lp))]
    return {
        "decoder": f"compiled {threads} thread{'s' if threads > 1 else ''}"
        if backend == "compiled"
        else f"torch batch {batch}",
        "backend": backend,
        "threads": threads if backend == "compiled" else args.threads,
        "batch": batch,
        "seconds": sec,
        "rtfx": float(lengths.sum()) * args.frame_shift / sec,
        "frames_per_second": float(lengths.sum()) / sec,
        "arcs_per_second": arcs / sec,
        "syncs_per_frame_step": syncs / max(frames_stepped, 1),
        "olabels": words,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", help="graph folder (graph.pt, TLG.fst, words.txt); default: build one")
    ap.add_argument("--logprobs", help="npz with log_probs [B,T,V] and encoder_len/lengths")
    ap.add_argument("--synthetic", action="store_true", help="peaky synthetic log-probs instead")
    ap.add_argument("--utterances", type=int, default=32)
    ap.add_argument("--frames", type=int, default=200, help="frames per synthetic utterance")
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 32], help="torch backend batch sizes")
    ap.add_argument(
        "--compiled-threads", type=int, nargs="*", default=[1, 2], help="compiled backend threads"
    )
    ap.add_argument("--compiled-batch", type=int, default=32, help="utterances per decode() call (compiled)")
    ap.add_argument("--frame-shift", type=float, default=0.08, help="seconds per log-prob frame (RTFx)")
    ap.add_argument("--beam", type=float, default=10.0)
    ap.add_argument("--max-active", type=int, default=10000)
    ap.add_argument("--min-active", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is best on CPU)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="out/bench/wfst_decode.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    graph_dir = Path(args.graph) if args.graph else default_graph(ROOT / "out" / "bench" / "wfst-graph")
    lp, lengths = load_logprobs(args)
    kaldi = bench_kaldi(graph_dir, lp, lengths, args)
    kaldi["rtfx"] = float(lengths.sum()) * args.frame_shift / kaldi["seconds"]
    rows = [
        bench_wfst(graph_dir, lp, lengths, args.compiled_batch, args, "compiled", n)
        for n in args.compiled_threads
    ]
    rows += [bench_wfst(graph_dir, lp, lengths, batch, args, "torch") for batch in args.batch]
    for r in rows:
        r["ratio_vs_kaldi"] = r["frames_per_second"] / kaldi["frames_per_second"]
        r["same_words_as_kaldi"] = sum(a == b for a, b in zip(r["olabels"], kaldi["olabels"], strict=True))

    meta = json.loads((graph_dir / "meta.json").read_text()) if (graph_dir / "meta.json").is_file() else {}
    report = {
        "graph": str(graph_dir),
        "graph_size": meta.get("sizes", {}).get("TLG"),
        "utterances": len(lp),
        "frames": int(lengths.sum()),
        "options": {"beam": args.beam, "max_active": args.max_active, "min_active": args.min_active},
        "device": args.device,
        "threads": args.threads,
        "machine": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cpu": platform.processor(),
        },
        "kaldi_faster_decoder": {k: v for k, v in kaldi.items() if k != "olabels"},
        "wfst": [{k: v for k, v in r.items() if k != "olabels"} for r in rows],
        "summary": {r["decoder"]: round(r["ratio_vs_kaldi"], 3) for r in rows},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"graph {graph_dir}  ({report['graph_size']})")
    print(
        f"{len(lp)} utterances, {int(lengths.sum())} frames, beam {args.beam}, max_active {args.max_active}"
    )
    print(
        f"{'decoder':<28}{'frames/s':>12}{'RTFx':>9}{'vs kaldi':>10}{'same 1-best':>13}"
        f"{'Marcs/s':>10}{'syncs/frame':>13}"
    )
    print(
        f"{'kaldi FasterDecoder (1 core)':<28}{kaldi['frames_per_second']:>12.0f}{kaldi['rtfx']:>9.0f}"
        f"{1.0:>10.2f}{'-':>13}"
    )
    for r in rows:
        print(
            f"{r['decoder']:<28}{r['frames_per_second']:>12.0f}{r['rtfx']:>9.0f}"
            f"{r['ratio_vs_kaldi']:>10.2f}"
            f"{str(r['same_words_as_kaldi']) + '/' + str(len(lp)):>13}{r['arcs_per_second'] / 1e6:>10.2f}"
            f"{r['syncs_per_frame_step']:>13.1f}"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
