"""Benchmark transducer beam search (paper 004): ALSD++ (``malsd``) and AES++ (``maes``) at several beam
sizes against transducer-greedy (label looping) on the same model, audio and encoder outputs, with the WER
of each; and (``--nemo``) NeMo's own ``malsd_batch`` / ``maes_batch`` / ``greedy_batch`` on the same
checkpoint and the same encoder outputs.

    nice -n 5 .venv/bin/asrdecode bench transducer-beam --nemo --out out/bench/transducer_beam.json
    .venv/bin/asrdecode bench transducer-beam --beams 4 --batch-sizes 16 --repeats 1     # quick

One run, one model (default the embedded demo RNN-T), the clips of ``--manifest`` (default
data/demo/real, 14 real utterances with reference texts) cycled to ``--utts`` utterances. The front end +
encoder run once per batch size, untimed; every decoder is then timed on those encoder outputs: the
decoder's full ``decode`` call (search + per-utterance results), ``--warmup`` untimed passes, then the mean
of ``--repeats`` timed passes, decoders interleaved within a pass so all see the same machine load.
Reported per batch size: decoder seconds, decoder RTFx (audio seconds / decoder seconds), the ratio
beam time / greedy time, and the WER / CER of each decoder on the distinct utterances (scored as
``asrdecode score`` does).

``--nemo``: NeMo runs in its own venv (``--nemo-python``) as a child process that restores the same
``.nemo`` and decodes **our encoder outputs** with ``BeamBatchedRNNTInfer`` / ``GreedyBatchedRNNTInfer``
(the wrapper call that returns ``Hypothesis`` objects, the level of our ``decode``; CUDA graphs off,
``max_symbols`` 10, the same maes settings). Its passes interleave with ours. Printed: NeMo's seconds, how
many utterances have the same tokens as ours, and ours / NeMo time (< 1: ours is faster).

CPU, one intra-op thread by default on both sides (the per-step tensors are tiny; see
asrdecode bench transducer-greedy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from asrdecode.bench.harness import interleaved_passes, machine_info, timing_setup
from asrdecode.bench.transducer_greedy import (
    NemoChild,
    answer_passes,
    batches,
    parse_with_nemo_options,
    print_and_write,
    timed,
)

ROOT = Path(__file__).resolve().parents[2]


def load_manifest(path: Path, n: int) -> tuple[list[torch.Tensor], list[str], list[str]]:
    """Waveforms, ids and reference texts of a JSONL manifest, cycled to n utterances."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"{path}: no utterances")
    waves, ids, texts = [], [], []
    for row in rows:
        audio = Path(row["audio_filepath"])
        audio = audio if audio.is_absolute() else path.parent / audio
        waves.append(torch.from_numpy(sf.read(audio, dtype="float32")[0]))
        ids.append(audio.stem)
        texts.append(row.get("text", ""))
    k = len(rows)
    return [waves[i % k] for i in range(n)], [ids[i % k] for i in range(n)], [texts[i % k] for i in range(n)]


def decoder_specs(args) -> list[tuple[str, int]]:
    """(strategy, beam) of every decoder timed; ("greedy", 1) first."""
    return [("greedy", 1)] + [(s, k) for s in args.strategies for k in args.beams]


# ----------------------------------------------------------------- NeMo (child process in the NeMo venv)


class NemoPeer(NemoChild):
    """The NeMo child of this script: the request holds our encoder outputs per batch size; each line
    ``<strategy> <beam> <batch size>`` is one timed pass."""

    def __init__(self, python: str, model_path: Path, data: dict, args) -> None:
        arrays = {}
        for size, items in data.items():
            for i, out in enumerate(items):
                arrays[f"enc_{size}_{i}"] = out.encoder_out.transpose(1, 2).contiguous().numpy()  # [B, D, T]
                arrays[f"enc_len_{size}_{i}"] = out.lengths.numpy()
        meta = {
            "model": str(model_path),
            "batches": {str(s): len(v) for s, v in data.items()},
            "threads": args.threads,
            "max_symbols": args.max_symbols,
            "maes": [args.maes_num_steps, args.maes_expansion_beta, args.maes_expansion_gamma],
        }
        super().__init__(python, __file__, meta, arrays, args.threads)

    def run(self, strategy: str, beam: int, size: int) -> dict:
        return self.ask(strategy, beam, size)


def nemo_child(request: Path) -> int:
    """Runs under NeMo's venv: timed passes of NeMo's beam/greedy decoders on the given encoder outputs."""
    from nemo.collections.asr.models import ASRModel
    from omegaconf import OmegaConf

    data = np.load(request, allow_pickle=False)
    meta = json.loads(str(data["meta"]))
    torch.set_num_threads(int(meta["threads"]))
    model = ASRModel.restore_from(meta["model"], map_location="cpu").eval()
    inputs = {
        size: [(torch.from_numpy(data[f"enc_{size}_{i}"]), torch.from_numpy(data[f"enc_len_{size}_{i}"]))
               for i in range(n)]
        for size, n in meta["batches"].items()
    }  # fmt: skip
    steps, beta, gamma = meta["maes"]
    decoders: dict = {}

    def decoder(strategy: str, beam: int):
        if (strategy, beam) not in decoders:
            if strategy == "greedy":
                over = {"strategy": "greedy_batch", "greedy": {"max_symbols": meta["max_symbols"],
                        "loop_labels": True, "use_cuda_graph_decoder": False}}  # fmt: skip
            else:
                over = {
                    "strategy": f"{strategy}_batch",
                    "beam": {
                        "beam_size": beam,
                        "return_best_hypothesis": True,
                        "score_norm": True,
                        "allow_cuda_graphs": False,
                        "max_symbols": meta["max_symbols"],
                        "maes_num_steps": steps,
                        "maes_expansion_beta": beta,
                        "maes_expansion_gamma": gamma,
                    },
                }
            base = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
            model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
            decoders[strategy, beam] = model.decoding.decoding
        return decoders[strategy, beam]

    def one_pass(words: list[str]) -> dict:
        strategy, beam, size = words[0], int(words[1]), words[2]
        infer = decoder(strategy, beam)
        seconds, tokens = 0.0, []
        for enc, enc_len in inputs[size]:
            dt, out = timed(lambda e=enc, n=enc_len, f=infer: f(encoder_output=e, encoded_lengths=n))
            seconds += dt
            tokens += [torch.as_tensor(h.y_sequence).tolist() for h in out[0]]
        reply = {"seconds": seconds, "tokens": tokens, "class": type(infer).__name__}
        computer = getattr(infer, "decoding_computer", None)
        if computer is not None:
            reply["computer"] = type(computer).__name__
        return reply

    return answer_passes(one_pass)


# ----------------------------------------------------------------- ours


def make_decoder(model, strategy: str, beam: int, args):
    from asrdecode.decoders.base import DecoderContext
    from asrdecode.decoders.transducer_beam import TransducerBeamConfig, TransducerBeamDecoder
    from asrdecode.decoders.transducer_greedy import TransducerGreedyConfig, TransducerGreedyDecoder

    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    if strategy == "greedy":
        return TransducerGreedyDecoder(TransducerGreedyConfig(max_symbols=args.max_symbols), ctx)
    config = TransducerBeamConfig(
        strategy=strategy,
        beam_size=beam,
        max_symbols=args.max_symbols,
        maes_num_steps=args.maes_num_steps,
        maes_expansion_beta=args.maes_expansion_beta,
        maes_expansion_gamma=args.maes_expansion_gamma,
    )
    return TransducerBeamDecoder(config, ctx)


@torch.inference_mode()
def run(args) -> dict:
    from asrdecode.models.loading import resolve_model_path
    from asrdecode.models.nemo import load_nemo
    from asrdecode.scoring import score

    load_start = os.getloadavg()
    path = resolve_model_path(args.model)
    model = load_nemo(path).eval()
    waves, ids, texts = load_manifest(args.manifest, args.utts)
    distinct = len(dict.fromkeys(ids))
    audio_seconds = sum(len(w) for w in waves) / model.sample_rate
    data = {size: [model(b, n) for b, n in batches(waves, size)] for size in args.batch_sizes}
    specs = decoder_specs(args)
    decoders = {spec: make_decoder(model, *spec, args) for spec in specs}
    peer = NemoPeer(args.nemo_python, path, data, args) if args.nemo else None
    try:
        ask = None if peer is None else (lambda spec, size: peer.run(spec[0], spec[1], size))
        times, results = interleaved_passes(args, data, specs, decoders, ask)
    finally:
        if peer is not None:
            peer.close()
    refs = dict(zip(ids[:distinct], texts[:distinct], strict=True))
    rows = []
    for size in args.batch_sizes:
        greedy_seconds = float(np.mean(times["asrdecode", size, ("greedy", 1)]))
        nemo_greedy = float(np.mean(times["nemo", size, ("greedy", 1)])) if peer is not None else None
        for spec in specs:
            res = results["asrdecode", size, spec]
            seconds = float(np.mean(times["asrdecode", size, spec]))
            report = score(refs, {ids[i]: res[i].text for i in range(distinct)})
            row = {
                "batch_size": size,
                "strategy": spec[0],
                "beam_size": spec[1],
                "decoder_seconds": seconds,
                "rtfx_decoder": audio_seconds / seconds,
                "over_greedy": seconds / greedy_seconds,
                "wer": report.wer,
                "cer": report.cer,
                "tokens": sum(len(r.tokens) for r in res),
            }
            if peer is not None:
                nemo = results["nemo", size, spec]
                nemo_seconds = float(np.mean(times["nemo", size, spec]))
                same = sum(r.tokens == t for r, t in zip(res, nemo["tokens"], strict=True))
                row["nemo"] = {
                    "decoder_seconds": nemo_seconds,
                    "over_nemo_greedy": nemo_seconds / nemo_greedy,
                    "class": nemo["class"],
                    "computer": nemo.get("computer"),
                    "utterances_same_tokens": same,
                    "asrdecode_over_nemo_time": seconds / nemo_seconds,
                }
            rows.append(row)
    return {
        "benchmark": "transducer-beam (malsd/maes) vs transducer-greedy (and NeMo's malsd_batch/maes_batch)",
        "model": args.model,
        "path": str(path),
        "parameters": sum(p.numel() for p in model.parameters()),
        "manifest": str(args.manifest),
        "utterances": args.utts,
        "distinct_utterances_scored": distinct,
        "audio_seconds": audio_seconds,
        "machine": machine_info(load_start),
        **timing_setup(args),
        "max_symbols": args.max_symbols,
        "maes": {
            "num_steps": args.maes_num_steps,
            "expansion_beta": args.maes_expansion_beta,
            "expansion_gamma": args.maes_expansion_gamma,
        },
        "nemo": peer.info["versions"] if peer is not None else None,
        "results": rows,
    }


def table(report: dict) -> str:
    nemo = report["nemo"] is not None
    head = "| batch | decoder | beam | dec s | dec RTFx | / greedy | WER % | CER % |"
    rule = "|---|---|---|---|---|---|---|---|"
    if nemo:
        head += " NeMo dec s | NeMo / NeMo greedy | same tokens | ours / NeMo time |"
        rule += "---|---|---|---|"
    lines = [head, rule]
    for r in report["results"]:
        cells = [
            str(r["batch_size"]),
            r["strategy"],
            str(r["beam_size"]),
            f"{r['decoder_seconds']:.3f}",
            f"{r['rtfx_decoder']:.1f}",
            f"{r['over_greedy']:.2f}x",
            f"{100 * r['wer']:.1f}",
            f"{100 * r['cer']:.1f}",
        ]
        if nemo:
            n = r["nemo"]
            cells += [
                f"{n['decoder_seconds']:.3f}",
                f"{n['over_nemo_greedy']:.2f}x",
                f"{n['utterances_same_tokens']}/{report['utterances']}",
                f"{n['asrdecode_over_nemo_time']:.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded:demo_rnnt_bpe", help="RNN-T .nemo or embedded:NAME")
    parser.add_argument("--manifest", type=Path, default=ROOT / "data" / "demo" / "real" / "manifest.jsonl")
    parser.add_argument("--utts", type=int, default=16, help="utterances (manifest cycled)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--beams", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--strategies", nargs="+", default=["malsd", "maes"], choices=["malsd", "maes"])
    parser.add_argument("--maes-num-steps", type=int, default=2)
    parser.add_argument("--maes-expansion-beta", type=int, default=2)
    parser.add_argument("--maes-expansion-gamma", type=float, default=2.3)
    args = parse_with_nemo_options(parser, argv, "also time NeMo's decoders (child process)", repeats=2)
    if args.nemo_child:
        return nemo_child(args.nemo_child)
    report = run(args)
    return print_and_write(report, table(report), args.out)


if __name__ == "__main__":
    sys.exit(main())
