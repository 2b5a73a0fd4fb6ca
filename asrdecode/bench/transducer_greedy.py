"""Benchmark greedy transducer decoding: label looping (paper 003 Alg. 3) vs frame looping (Alg. 2), and
against NeMo's own batched greedy decoding on the same checkpoint, audio and encoder outputs.

    .venv/bin/asrdecode bench transducer-greedy --out out/bench/transducer_greedy.json
    .venv/bin/asrdecode bench transducer-greedy --batch-sizes 1 4 --utts 8 --repeats 2   # quick
    nice -n 5 .venv/bin/asrdecode bench transducer-greedy --nemo --small \\
        --out out/bench/transducer_greedy_nemo.json          # + NeMo rows, + the FastConformer-Small models

One run, same model(s), same audio: the fixture clips (tests/fixtures/nemo/audio) cycled to ``--utts``
utterances, decoded at each batch size. Per batch size: the front end + encoder are timed once per
repeat and shared; each loop's decoder is timed on the same encoder output. Reported, as in paper 003
tables 2-3: total RTFx (audio seconds / (encoder + decoder seconds)) and decoder-only RTFx, and the
label/frame ratios. Timing follows the paper: ``--warmup`` untimed passes, then the mean of
``--repeats`` timed passes. Both loops must produce identical tokens (checked).

``--nemo``: NeMo is not a dependency; it runs in its own venv (``--nemo-python``, default
/work/nemo-venv/bin/python; install commands in scripts/make_nemo_fixtures.py) as a child process
(``--nemo-child``, :class:`NemoPeer`) that restores the same ``.nemo`` file. The parent hands it,
through a temporary .npz, the audio batches and **asrdecode's encoder outputs**, so NeMo's decoders
decode exactly the encoder frames ours decoded. The child stays up for the whole model and runs one
timed pass at a time on request, interleaved with ours (ours, NeMo, ours, NeMo...), so both see the same
machine load: NeMo's front end + encoder on the audio (for NeMo's total RTFx) and its ``greedy_batch``
decoders on our encoder output: label looping (``GreedyBatched{RNNT,TDT}LabelLoopingComputer``, the
call that returns batched hypotheses, the level ours return; the ``GreedyBatched*Infer`` wrapper that
also builds per-utterance ``Hypothesis`` objects is timed too, JSON only) and, RNN-T only, frame
looping (``loop_labels: false``; NeMo has no batched frame-looping TDT decoder). NeMo's tokens and
frames are compared with ours (agreement printed). Ratios are asrdecode RTFx / NeMo RTFx (> 1: ours is
faster).

``--small``: also the FastConformer-Transducer "Small" RNN-T and TDT (d_model 176, 16 layers, BPE 1024,
random tuned weights, ~56 MB each, not committed), built into ``out/nemo-small`` on first use by
``scripts/make_nemo_fixtures.py --set small`` with ``--nemo-python``.

CPU note: the per-step tensors are tiny, so ``--threads 1`` (the default) is the fair setting on a
shared machine; more intra-op threads mostly add synchronisation. NeMo runs with the same thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from asrdecode.bench.harness import bench_parser, finish, machine_info, parse, timing_setup

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "nemo"
SMALL_DIR = ROOT / "out" / "nemo-small"
SMALL_MODELS = ("rnnt_small", "tdt_small")
DEFAULT_MODELS = [str(FIX / "rnnt_bpe.nemo"), str(FIX / "tdt_bpe.nemo"), "embedded:demo_rnnt_bpe"]
DEFAULT_NEMO_PYTHON = "/work/nemo-venv/bin/python"
IMPLS = (("asrdecode", "labels"), ("asrdecode", "frames"), ("nemo", "labels"), ("nemo", "frames"))


def load_clips(folder: Path, n: int) -> list[torch.Tensor]:
    """The fixture wavs (sorted by name), cycled to n utterances."""
    paths = sorted(folder.glob("*.wav"))
    if not paths:
        raise SystemExit(f"no .wav files in {folder}")
    waves = [torch.from_numpy(sf.read(p, dtype="float32")[0]) for p in paths]
    return [waves[i % len(waves)] for i in range(n)]


def batches(waves: list[torch.Tensor], size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for i in range(0, len(waves), size):
        chunk = waves[i : i + size]
        lengths = torch.tensor([len(w) for w in chunk])
        batch = torch.zeros(len(chunk), int(lengths.max()))
        for j, w in enumerate(chunk):
            batch[j, : len(w)] = w
        out.append((batch, lengths))
    return out


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def rates(audio_seconds: float, enc: float, dec: float) -> dict:
    return {
        "encoder_seconds": enc,
        "decoder_seconds": dec,
        "total_seconds": enc + dec,
        "rtfx_total": audio_seconds / (enc + dec),
        "rtfx_decoder": audio_seconds / dec,
    }


# ----------------------------------------------------------------- NeMo (child process in the NeMo venv)


class NemoChild:
    """A bench script run as ``--nemo-child REQUEST`` under NeMo's venv, kept alive so its passes
    interleave with ours (same load). The request .npz holds ``meta`` (JSON) and the arrays; the child
    prints ``@@ready`` (its info as JSON after ``@@``), then answers each stdin line with one timed pass
    as a ``@@{json}`` line; ``quit`` ends it."""

    def __init__(self, python: str, script: str, meta: dict, arrays: dict, threads: int) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        request = Path(self.tmp.name) / "request.npz"
        np.savez(request, meta=np.array(json.dumps(meta)), **arrays)
        self.log = open(Path(self.tmp.name) / "stderr.txt", "w+")  # noqa: SIM115 - closed in close()
        # the child imports this package's bench modules (nothing else of asrdecode) from the checkout
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(threads),
            "PYTHONWARNINGS": "ignore",
            "PYTHONPATH": str(ROOT),
        }
        cmd = [python, str(Path(script).resolve()), "--nemo-child", str(request)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env
        )
        self.info = self._reply()

    def _reply(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        self.log.seek(0)
        lines = [x for x in self.log.read().strip().splitlines() if x.strip()] or ["(no output)"]
        raise SystemExit(f"NeMo child stopped: {lines[-1]}")

    def ask(self, *words) -> dict:
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        self.log.close()
        self.tmp.cleanup()


def answer_passes(handle) -> int:
    """The NeMo child's loop (under NeMo's venv): say it is ready with its versions, then answer each
    stdin line (its words) with ``handle(words)``'s reply as ``@@{json}``, until ``quit``."""
    import nemo

    versions = {"nemo": nemo.__version__, "torch": torch.__version__, "threads": torch.get_num_threads()}
    print("@@" + json.dumps({"versions": versions}), flush=True)
    with torch.inference_mode():
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "quit":
                break
            print("@@" + json.dumps(handle(words)), flush=True)
    return 0


class NemoPeer(NemoChild):
    """This script's NeMo child: the request holds audio batches + our encoder outputs; each line
    ``<what> <batch size>`` (what: encoder | labels | frames) is one timed pass over that size's batches."""

    def __init__(self, python: str, model_path: Path, data: dict, max_symbols: int, threads: int) -> None:
        arrays = {}
        for size, items in data.items():
            for i, (audio, audio_len, out) in enumerate(items):
                key = f"{size}_{i}"
                arrays[f"audio_{key}"] = audio.numpy()
                arrays[f"audio_len_{key}"] = audio_len.numpy()
                arrays[f"enc_{key}"] = out.encoder_out.transpose(1, 2).contiguous().numpy()  # NeMo [B, D, T]
                arrays[f"enc_len_{key}"] = out.lengths.numpy()
        meta = {
            "model": str(model_path),
            "batches": {str(s): len(v) for s, v in data.items()},
            "max_symbols": max_symbols,
            "threads": threads,
        }
        super().__init__(python, __file__, meta, arrays, threads)

    def run(self, what: str, size: int) -> dict:
        return self.ask(what, size)


def child_request(request: Path, names: tuple[str, ...]):
    """A NeMo child's start (under NeMo's venv): the request's meta, torch's threads set to its
    ``threads``, NeMo's model restored, and each batch size's inputs (the arrays ``NAME_SIZE_I`` of
    ``names``, as tensors). Returns (model, meta, inputs)."""
    from nemo.collections.asr.models import ASRModel

    data = np.load(request, allow_pickle=False)
    meta = json.loads(str(data["meta"]))
    torch.set_num_threads(int(meta["threads"]))
    model = ASRModel.restore_from(meta["model"], map_location="cpu").eval()
    inputs = {
        size: [tuple(torch.from_numpy(data[f"{what}_{size}_{i}"]) for what in names) for i in range(n)]
        for size, n in meta["batches"].items()
    }
    return model, meta, inputs


def nemo_decoding(model, over: dict):
    """NeMo's decoding object after ``change_decoding_strategy`` with ``over`` merged into the
    checkpoint's decoding config (a new one per change)."""
    from omegaconf import OmegaConf

    base = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
    model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
    return model.decoding.decoding


def nemo_child(request: Path) -> int:
    """Runs under NeMo's venv: serve timed passes of NeMo's encoder and greedy_batch decoders."""
    import nemo

    model, meta, inputs = child_request(request, ("audio", "audio_len", "enc", "enc_len"))
    tdt = model.cfg.decoding.get("model_type") == "tdt"
    decoders = {}
    for name, loop_labels in [("labels", True)] + ([] if tdt else [("frames", False)]):
        over = {
            "strategy": "greedy_batch",
            "greedy": {
                "max_symbols": meta["max_symbols"],
                "loop_labels": loop_labels,
                "use_cuda_graph_decoder": False,
            },
        }
        decoders[name] = nemo_decoding(model, over)  # a new GreedyBatched*Infer per strategy change
    classes = {
        name: [type(d).__name__] + ([type(d.decoding_computer).__name__] if d.decoding_computer else [])
        for name, d in decoders.items()
    }
    versions = {"nemo": nemo.__version__, "torch": torch.__version__, "threads": torch.get_num_threads()}
    print("@@" + json.dumps({"classes": classes, "versions": versions, "tdt": tdt}), flush=True)

    def decode(name: str, items) -> dict:
        infer = decoders[name]
        computer = infer.decoding_computer if name == "labels" else None
        seconds, wrapper, toks, frs = 0.0, 0.0, [], []
        for _, _, e, n in items:
            if computer is not None:  # the batched-hypotheses call, the level asrdecode's loops return
                dt, (hyps, _) = timed(lambda e=e, n=n, c=computer: c(x=e.transpose(1, 2), out_len=n))
                lens = hyps.current_lengths.tolist()
                toks += [hyps.transcript[b, : lens[b]].tolist() for b in range(len(lens))]
                frs += [hyps.timestamps[b, : lens[b]].tolist() for b in range(len(lens))]
                wt, _ = timed(lambda e=e, n=n, f=infer: f(encoder_output=e, encoded_lengths=n))
                wrapper += wt
            else:
                dt, (hyps,) = timed(lambda e=e, n=n, f=infer: f(encoder_output=e, encoded_lengths=n))
                toks += [h.y_sequence.tolist() for h in hyps]
                frs += [torch.as_tensor(h.timestamp).tolist() for h in hyps]
            seconds += dt
        out = {"seconds": seconds, "tokens": toks, "frames": frs}
        if computer is not None:
            out["wrapper_seconds"] = wrapper
        return out

    with torch.inference_mode():
        for line in sys.stdin:
            what, _, size = line.strip().partition(" ")
            if what == "quit":
                break
            items = inputs[size]
            if what == "encoder":
                seconds, diff = 0.0, 0.0
                for a, n, e_ours, _ in items:
                    dt, (enc, enc_len) = timed(lambda a=a, n=n: model(input_signal=a, input_signal_length=n))
                    seconds += dt
                    for b, m in enumerate(enc_len.tolist()):
                        diff = max(diff, float((enc[b, :, :m] - e_ours[b, :, :m]).abs().max()))
                reply = {"seconds": seconds, "encoder_max_abs_diff_vs_asrdecode": diff}
            elif what in decoders:
                reply = decode(what, items)
            else:
                reply = {"unsupported": what}
            print("@@" + json.dumps(reply), flush=True)
    return 0


# ----------------------------------------------------------------- one model, both implementations


@torch.inference_mode()
def bench_model(spec: str, waves, args) -> dict:
    """asrdecode's label and frame looping (and NeMo's, interleaved pass by pass, with ``--nemo``)."""
    from asrdecode.decoders.transducer_greedy import greedy_decode
    from asrdecode.models.loading import resolve_model_path
    from asrdecode.models.nemo import load_nemo

    loops = ("labels", "frames")
    path = resolve_model_path(spec)
    model = load_nemo(path).eval()
    audio_seconds = sum(len(w) for w in waves) / model.sample_rate
    sizes = args.batch_sizes
    data = {}
    for size in sizes:  # untimed pass: the encoder outputs both implementations decode
        data[size] = [(b, n, model(b, n)) for b, n in batches(waves, size)]
    peer = NemoPeer(args.nemo_python, path, data, args.max_symbols, args.threads) if args.nemo else None
    times: dict = {(impl, size, what): [] for impl in ("asrdecode", "nemo") for size in sizes
                   for what in ("encoder", "labels", "frames", "wrapper")}  # fmt: skip
    results: dict = {}
    try:
        for rep in range(args.warmup + args.repeats):
            keep = rep >= args.warmup
            for size in sizes:
                items = data[size]
                dt = sum(timed(lambda b=b, n=n: model(b, n))[0] for b, n, _ in items)
                if keep:
                    times["asrdecode", size, "encoder"].append(dt)
                if peer is not None:
                    reply = peer.run("encoder", size)
                    results["nemo", size, "encoder"] = reply
                    if keep:
                        times["nemo", size, "encoder"].append(reply["seconds"])
                for name in loops:
                    total, toks, frs = 0.0, [], []
                    for _, _, out in items:
                        dt, (hyps, _) = timed(
                            lambda o=out, loop=name: greedy_decode(
                                model, o.encoder_out, o.lengths, args.max_symbols, loop=loop
                            )
                        )
                        total += dt
                        lens = hyps.lengths.tolist()
                        toks += [hyps.transcript[b, : lens[b]].tolist() for b in range(len(lens))]
                        frs += [hyps.timestamps[b, : lens[b]].tolist() for b in range(len(lens))]
                    results["asrdecode", size, name] = {"tokens": toks, "frames": frs}
                    if keep:
                        times["asrdecode", size, name].append(total)
                    if peer is not None and not (name == "frames" and peer.info["tdt"]):
                        reply = peer.run(name, size)
                        results["nemo", size, name] = reply
                        if keep:
                            times["nemo", size, name].append(reply["seconds"])
                            if "wrapper_seconds" in reply:
                                times["nemo", size, "wrapper"].append(reply["wrapper_seconds"])
    finally:
        if peer is not None:
            peer.close()
    rows = []
    for size in sizes:
        ours_l, ours_f = results["asrdecode", size, "labels"], results["asrdecode", size, "frames"]
        if (ours_l["tokens"], ours_l["frames"]) != (ours_f["tokens"], ours_f["frames"]):
            raise SystemExit(f"{path.name} batch {size}: label and frame looping disagree")
        enc = float(np.mean(times["asrdecode", size, "encoder"]))
        row = {"batch_size": size, "batches": len(data[size]), "encoder_seconds": enc}
        for name in loops:
            row[name] = rates(audio_seconds, enc, float(np.mean(times["asrdecode", size, name])))
        row["speedup_total"] = row["labels"]["rtfx_total"] / row["frames"]["rtfx_total"]
        row["speedup_decoder"] = row["labels"]["rtfx_decoder"] / row["frames"]["rtfx_decoder"]
        row["tokens"] = sum(len(t) for t in ours_l["tokens"])
        if peer is not None:
            row["nemo"] = nemo_row(size, results, times, row, audio_seconds)
        rows.append(row)
    report = {
        "model": spec,
        "path": str(path),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": int(model.blank_id),
        "transducer": "tdt" if model.durations else "rnnt",
        "durations": model.durations,
        "utterances": len(waves),
        "audio_seconds": audio_seconds,
        "results": rows,
    }
    if peer is not None:
        report["nemo"] = {"classes": peer.info["classes"], "versions": peer.info["versions"]}
    return report


def nemo_row(size: int, results: dict, times: dict, ours: dict, audio_seconds: float) -> dict:
    """NeMo's timings for one batch size, its agreement with our tokens/frames, and our/NeMo ratios."""
    enc = float(np.mean(times["nemo", size, "encoder"]))
    row = {
        "encoder_seconds": enc,
        "encoder_max_abs_diff_vs_asrdecode": results["nemo", size, "encoder"][
            "encoder_max_abs_diff_vs_asrdecode"
        ],
    }
    ref = results["asrdecode", size, "labels"]
    for name in ("labels", "frames"):
        got = results.get(("nemo", size, name))
        if got is None:
            row[name] = None
            continue
        row[name] = rates(audio_seconds, enc, float(np.mean(times["nemo", size, name])))
        if times["nemo", size, "wrapper"] and name == "labels":
            row[name]["wrapper_seconds"] = float(np.mean(times["nemo", size, "wrapper"]))
        pairs = zip(got["tokens"], got["frames"], ref["tokens"], ref["frames"], strict=True)
        same = [t == rt and f == rf for t, f, rt, rf in pairs]
        row[name]["utterances_identical"] = sum(same)
        row[name]["utterances"] = len(same)
        row[name]["asrdecode_over_nemo_total"] = ours[name]["rtfx_total"] / row[name]["rtfx_total"]
        row[name]["asrdecode_over_nemo_decoder"] = ours[name]["rtfx_decoder"] / row[name]["rtfx_decoder"]
    return row


def ensure_small_models(nemo_python: str) -> list[str]:
    paths = [SMALL_DIR / f"{name}.nemo" for name in SMALL_MODELS]
    missing = [p.stem for p in paths if not p.is_file()]
    if missing:
        print(f"building {', '.join(missing)} into {SMALL_DIR} with {nemo_python}", flush=True)
        script = ROOT / "scripts" / "make_nemo_fixtures.py"
        cmd = [nemo_python, str(script), "--set", "small", "--out", str(SMALL_DIR), "--only", *missing]
        if subprocess.run(cmd, capture_output=True, text=True).returncode != 0:
            raise SystemExit(f"building the small models failed; run: {' '.join(cmd)}")
    return [str(p) for p in paths]


# ----------------------------------------------------------------- report


def fmt_impl(r: dict | None) -> tuple[str, str, str, str]:
    if r is None:
        return "-", "-", "-", "-"
    return (
        f"{r['encoder_seconds']:.3f}",
        f"{r['decoder_seconds']:.3f}",
        f"{r['rtfx_total']:.1f}",
        f"{r['rtfx_decoder']:.1f}",
    )


def table(report: dict) -> str:
    lines = [
        "| model | batch | impl | loop | enc s | dec s | total RTFx | dec RTFx | tokens+frames = ours |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in report["models"]:
        model = Path(m["model"]).stem
        for r in m["results"]:
            nr = r.get("nemo")
            for impl, loop in IMPLS:
                if impl == "asrdecode":
                    cells, agree = fmt_impl(r[loop]), "-"
                elif nr is None:
                    continue
                elif nr[loop] is None:
                    cells, agree = fmt_impl(None), "n/a (NeMo has no batched frame-looping TDT)"
                else:
                    cells = fmt_impl(nr[loop])
                    agree = f"{nr[loop]['utterances_identical']}/{nr[loop]['utterances']}"
                lines.append(
                    f"| {model} | {r['batch_size']} | {impl} | {loop} | {' | '.join(cells)} | {agree} |"
                )
    lines += [
        "",
        "| model | params | batch | asrdecode labels/frames total (dec) | asrdecode/NeMo labels total (dec) "
        "| asrdecode/NeMo frames total (dec) |",
        "|---|---|---|---|---|---|",
    ]
    for m in report["models"]:
        for r in m["results"]:
            nr = r.get("nemo")
            cols = [f"{r['speedup_total']:.2f}x ({r['speedup_decoder']:.2f}x)"]
            for loop in ("labels", "frames"):
                x = nr[loop] if nr else None
                cols.append(
                    "-"
                    if x is None
                    else f"{x['asrdecode_over_nemo_total']:.2f}x ({x['asrdecode_over_nemo_decoder']:.2f}x)"
                )
            params = f"{m['parameters'] / 1e6:.1f}M"
            lines.append(
                f"| {Path(m['model']).stem} | {params} | {r['batch_size']} | " + " | ".join(cols) + " |"
            )
    return "\n".join(lines)


def nemo_bench_parser(doc: str | None, repeats: int) -> argparse.ArgumentParser:
    """The parser of a benchmark against NeMo's decoders (`bench_parser`'s shared options: the
    JSON report, threads on both sides, warm-up and timed passes)."""
    return bench_parser(doc, report=None, threads=1, warmup=1, repeats=repeats, aliases=("--out",))


def parse_with_nemo_options(parser: argparse.ArgumentParser, argv: list[str] | None, nemo_help: str):
    """Parse with the options the benchmarks against NeMo's decoders add to `nemo_bench_parser`'s
    (the greedy symbol limit, the NeMo peer in its own venv as a child process); checks NeMo's
    Python."""
    parser.add_argument("--max-symbols", type=int, default=10, help="symbols per frame at most")
    parser.add_argument("--nemo", action="store_true", help=nemo_help)
    parser.add_argument("--nemo-python", default=DEFAULT_NEMO_PYTHON, help="python of a venv with NeMo")
    parser.add_argument("--nemo-child", type=Path, metavar="REQUEST", help=argparse.SUPPRESS)
    args = parse(parser, argv)
    if not args.nemo_child and args.nemo and not Path(args.nemo_python).is_file():
        raise SystemExit(
            f"--nemo: {args.nemo_python} not found (see scripts/make_nemo_fixtures.py for the venv)"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    parser = nemo_bench_parser(__doc__, repeats=3)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help=".nemo files or embedded:NAME")
    parser.add_argument("--small", action="store_true", help="also the FastConformer-Small RNN-T/TDT")
    parser.add_argument("--audio", type=Path, default=FIX / "audio", help="folder of 16 kHz wavs")
    parser.add_argument("--utts", type=int, default=32, help="utterances (clips cycled)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 16, 32])
    args = parse_with_nemo_options(parser, argv, "also time NeMo's greedy_batch (child process)")
    if args.nemo_child:
        return nemo_child(args.nemo_child)
    models = list(args.models) + (ensure_small_models(args.nemo_python) if args.small else [])
    load_start = os.getloadavg()
    waves = load_clips(args.audio, args.utts)
    report = {
        "benchmark": "transducer-greedy label looping vs frame looping (and NeMo greedy_batch)",
        "utterances": args.utts,
        "max_symbols": args.max_symbols,
        "models": [],
    }
    for spec in models:
        print(f"timing {spec}" + (" (+ NeMo, interleaved)" if args.nemo else ""), flush=True)
        report["models"].append(bench_model(spec, waves, args))
    report.update(machine=machine_info(load_start), **timing_setup(args))
    return finish(args, report, table(report))


if __name__ == "__main__":
    sys.exit(main())
