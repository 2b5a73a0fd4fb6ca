"""Benchmark greedy transducer decoding: label looping (paper 003 Alg. 3) vs frame looping (Alg. 2).

    .venv/bin/python scripts/bench/transducer_greedy.py --out out/bench/transducer_greedy.json
    .venv/bin/python scripts/bench/transducer_greedy.py --batch-sizes 1 4 --utts 8 --repeats 2   # quick
    .venv/bin/python scripts/bench/transducer_greedy.py --nemo   # also NeMo's greedy_batch, if installed

One run, same model(s), same audio: the fixture clips (tests/fixtures/nemo/audio) cycled to ``--utts``
utterances, decoded at each batch size. Per batch size: the front end + encoder are timed once per
repeat and shared; each loop's decoder is timed on the same encoder output. Reported, as in paper 003
tables 2-3: total RTFx (audio seconds / (encoder + decoder seconds)) and decoder-only RTFx, and the
label/frame ratios. Timing follows the paper: ``--warmup`` untimed passes, then the mean of
``--repeats`` timed passes. Both loops must produce identical tokens (checked).
CPU note: the per-step tensors are tiny, so ``--threads 1`` (the default) is the fair setting on a
shared machine; more intra-op threads mostly add synchronisation.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from asrdecode.decoders.transducer_greedy import greedy_frame_looping, greedy_label_looping  # noqa: E402
from asrdecode.models.nemo import load_nemo  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "nemo"
LOOPS = {"labels": greedy_label_looping, "frames": greedy_frame_looping}


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


@torch.inference_mode()
def bench_model(path: Path, waves, sizes, warmup: int, repeats: int, max_symbols: int) -> dict:
    model = load_nemo(path).eval()
    audio_seconds = sum(len(w) for w in waves) / model.sample_rate
    rows = []
    for size in sizes:
        data = batches(waves, size)
        enc_times, dec_times = [], {k: [] for k in LOOPS}
        tokens: dict[str, list] = {}
        for rep in range(warmup + repeats):
            enc_total = 0.0
            outputs = []
            for batch, lengths in data:
                dt, out = timed(lambda b=batch, n=lengths: model(b, n))
                enc_total += dt
                outputs.append(out)
            loop_total = {}
            for name, fn in LOOPS.items():
                total, toks = 0.0, []
                for out in outputs:
                    dt, (hyps, _) = timed(lambda o=out, f=fn: f(model, o.encoder_out, o.lengths, max_symbols))
                    total += dt
                    lens = hyps.lengths.tolist()
                    toks += [hyps.transcript[b, : lens[b]].tolist() for b in range(len(lens))]
                loop_total[name] = total
                tokens[name] = toks
            if rep >= warmup:
                enc_times.append(enc_total)
                for name in LOOPS:
                    dec_times[name].append(loop_total[name])
        if tokens["labels"] != tokens["frames"]:
            raise SystemExit(f"{path.name} batch {size}: label and frame looping disagree")
        enc = float(np.mean(enc_times))
        row = {"batch_size": size, "batches": len(data), "encoder_seconds": enc}
        for name in LOOPS:
            dec = float(np.mean(dec_times[name]))
            row[name] = {
                "decoder_seconds": dec,
                "total_seconds": enc + dec,
                "rtfx_total": audio_seconds / (enc + dec),
                "rtfx_decoder": audio_seconds / dec,
            }
        row["speedup_total"] = row["labels"]["rtfx_total"] / row["frames"]["rtfx_total"]
        row["speedup_decoder"] = row["labels"]["rtfx_decoder"] / row["frames"]["rtfx_decoder"]
        row["tokens"] = sum(len(t) for t in tokens["labels"])
        rows.append(row)
    return {
        "model": str(path),
        "transducer": "tdt" if model.durations else "rnnt",
        "durations": model.durations,
        "utterances": len(waves),
        "audio_seconds": audio_seconds,
        "results": rows,
    }


@torch.inference_mode()
def bench_nemo(path: Path, waves, sizes, warmup: int, repeats: int, max_symbols: int) -> dict:
    """NeMo's own greedy_batch on the same checkpoint and audio (only when NeMo is installed)."""
    try:
        from nemo.collections.asr.models import ASRModel  # type: ignore[import-not-found]
        from omegaconf import OmegaConf  # type: ignore[import-not-found]
    except ImportError:
        return {"model": str(path), "skipped": "NeMo is not installed"}
    model = ASRModel.restore_from(str(path), map_location="cpu").eval()
    audio_seconds = sum(len(w) for w in waves) / 16000
    rows = []
    for size in sizes:
        data = batches(waves, size)
        row: dict = {"batch_size": size}
        outputs = [model(input_signal=b, input_signal_length=n) for b, n in data]
        for name, loop_labels in (("labels", True), ("frames", False)):
            cfg = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
            over = {
                "strategy": "greedy_batch",
                "greedy": {
                    "max_symbols": max_symbols,
                    "loop_labels": loop_labels,
                    "use_cuda_graph_decoder": False,
                },
            }
            model.change_decoding_strategy(OmegaConf.merge(cfg, OmegaConf.create(over)), verbose=False)
            times = []
            for rep in range(warmup + repeats):
                total = 0.0
                for enc, enc_len in outputs:
                    dt, _ = timed(
                        lambda e=enc, n=enc_len: model.decoding.rnnt_decoder_predictions_tensor(
                            encoder_output=e, encoded_lengths=n
                        )
                    )
                    total += dt
                if rep >= warmup:
                    times.append(total)
            dec = float(np.mean(times))
            row[name] = {"decoder_seconds": dec, "rtfx_decoder": audio_seconds / dec}
        rows.append(row)
    return {"model": str(path), "audio_seconds": audio_seconds, "results": rows}


def table(report: dict) -> str:
    lines = [
        "| model | batch | enc s | frames dec s | labels dec s | total RTFx frames / labels (x) "
        "| decoder RTFx frames / labels (x) |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in report["models"]:
        for r in m["results"]:
            f, lab = r["frames"], r["labels"]
            lines.append(
                f"| {Path(m['model']).stem} | {r['batch_size']} | {r['encoder_seconds']:.3f} "
                f"| {f['decoder_seconds']:.3f} | {lab['decoder_seconds']:.3f} "
                f"| {f['rtfx_total']:.1f} / {lab['rtfx_total']:.1f} ({r['speedup_total']:.2f}x) "
                f"| {f['rtfx_decoder']:.1f} / {lab['rtfx_decoder']:.1f} ({r['speedup_decoder']:.2f}x) |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="+", type=Path, default=[FIX / "rnnt_bpe.nemo", FIX / "tdt_bpe.nemo"]
    )
    parser.add_argument("--audio", type=Path, default=FIX / "audio", help="folder of 16 kHz wavs")
    parser.add_argument("--utts", type=int, default=32, help="utterances (clips cycled)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 16, 32])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-symbols", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--nemo", action="store_true", help="also time NeMo's greedy_batch if installed")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    waves = load_clips(args.audio, args.utts)
    report = {
        "benchmark": "transducer-greedy label looping vs frame looping",
        "device": "cpu",
        "threads": args.threads,
        "torch": torch.__version__,
        "platform": platform.platform(),
        "warmup": args.warmup,
        "repeats": args.repeats,
        "max_symbols": args.max_symbols,
        "models": [
            bench_model(p, waves, args.batch_sizes, args.warmup, args.repeats, args.max_symbols)
            for p in args.models
        ],
    }
    if args.nemo:
        report["nemo"] = [
            bench_nemo(p, waves, args.batch_sizes, args.warmup, args.repeats, args.max_symbols)
            for p in args.models
        ]
    print(table(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
