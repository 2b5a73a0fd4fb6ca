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
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from asrdecode.bench.harness import finish, interleaved_passes, machine_info, markdown_table, timing_setup
from asrdecode.bench.transducer_greedy import (
    NemoChild,
    answer_passes,
    batches,
    child_request,
    nemo_bench_parser,
    nemo_decoding,
    parse_with_nemo_options,
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
    model, meta, inputs = child_request(request, ("enc", "enc_len"))
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
            decoders[strategy, beam] = nemo_decoding(model, over)
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
def beam_rows(
    args,
    specs: list,
    make: Callable,
    start_peer: Callable,
    ask: Callable,
    row_of: Callable,
    nemo_of: Callable,
) -> tuple[list[dict], dict]:
    """The run both beam benchmarks share: ``args.model``'s outputs on ``args.utts`` utterances of
    the manifest at each batch size, every decoder of ``specs`` (``make(model, spec)``; greedy first,
    the ratios' base) timed with `interleaved_passes`, and NeMo's side (``start_peer(path, model, data)``,
    ``ask(peer, spec, size)``) with ``--nemo``. Each row: ``row_of(spec, results)``'s fields, the
    time, RTFx, ratio to greedy, WER and CER, and NeMo's time, ratio to ours and agreement (with
    ``nemo_of(reply, seconds, greedy seconds)``'s fields). Returns (rows, the run's facts)."""
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
    decoders = {spec: make(model, spec) for spec in specs}
    peer = start_peer(path, model, data) if args.nemo else None
    try:
        asked = None if peer is None else (lambda spec, size: ask(peer, spec, size))
        times, results = interleaved_passes(args, data, specs, decoders, asked)
    finally:
        if peer is not None:
            peer.close()
    refs = dict(zip(ids[:distinct], texts[:distinct], strict=True))
    rows = []
    for size in args.batch_sizes:
        greedy_seconds = float(np.mean(times["asrdecode", size, specs[0]]))
        nemo_greedy = float(np.mean(times["nemo", size, specs[0]])) if peer is not None else None
        for spec in specs:
            res = results["asrdecode", size, spec]
            seconds = float(np.mean(times["asrdecode", size, spec]))
            report = score(refs, {ids[i]: res[i].text for i in range(distinct)})
            row = {"batch_size": size, **row_of(spec, res)}
            row |= {
                "decoder_seconds": seconds,
                "rtfx_decoder": audio_seconds / seconds,
                "over_greedy": seconds / greedy_seconds,
                "wer": report.wer,
                "cer": report.cer,
            }
            if peer is not None:
                nemo = results["nemo", size, spec]
                nemo_seconds = float(np.mean(times["nemo", size, spec]))
                same = sum(r.tokens == t for r, t in zip(res, nemo["tokens"], strict=True))
                row["nemo"] = {
                    "decoder_seconds": nemo_seconds,
                    **nemo_of(nemo, nemo_seconds, nemo_greedy),
                    "class": nemo["class"],
                    "utterances_same_tokens": same,
                    "asrdecode_over_nemo_time": seconds / nemo_seconds,
                }
            rows.append(row)
    facts = {
        "model": args.model,
        "path": str(path),
        "parameters": sum(p.numel() for p in model.parameters()),
        "manifest": str(args.manifest),
        "utterances": args.utts,
        "distinct_utterances_scored": distinct,
        "audio_seconds": audio_seconds,
        "machine": machine_info(load_start),
        **timing_setup(args),
        "nemo": peer.info["versions"] if peer is not None else None,
    }
    return rows, facts


def run(args) -> dict:
    rows, facts = beam_rows(
        args,
        decoder_specs(args),
        lambda model, spec: make_decoder(model, *spec, args),
        lambda path, model, data: NemoPeer(args.nemo_python, path, data, args),
        lambda peer, spec, size: peer.run(spec[0], spec[1], size),
        lambda spec, res: {
            "strategy": spec[0],
            "beam_size": spec[1],
            "tokens": sum(len(r.tokens) for r in res),
        },
        lambda reply, seconds, greedy: {
            "over_nemo_greedy": seconds / greedy,
            "computer": reply.get("computer"),
        },
    )
    return {
        "benchmark": "transducer-beam (malsd/maes) vs transducer-greedy (and NeMo's malsd_batch/maes_batch)",
        **facts,
        "max_symbols": args.max_symbols,
        "maes": {
            "num_steps": args.maes_num_steps,
            "expansion_beta": args.maes_expansion_beta,
            "expansion_gamma": args.maes_expansion_gamma,
        },
        "results": rows,
    }


# the columns of a beam-search row (`beam_cells`) and of NeMo's side of it (`nemo_cells`)
BEAM_HEAD = ["dec s", "dec RTFx", "/ greedy", "WER %", "CER %"]
NEMO_HEAD = ["NeMo dec s", "NeMo / NeMo greedy", "same tokens", "ours / NeMo time"]


def beam_cells(r: dict) -> list[str]:
    """A beam-search row's time, speed, ratio to greedy and error rates."""
    return [
        f"{r['decoder_seconds']:.3f}",
        f"{r['rtfx_decoder']:.1f}",
        f"{r['over_greedy']:.2f}x",
        f"{100 * r['wer']:.1f}",
        f"{100 * r['cer']:.1f}",
    ]


def nemo_cells(n: dict, utterances: int) -> list[str]:
    """NeMo's side of a row (`NEMO_HEAD`; without ``over_nemo_greedy``, that column left out)."""
    cells = [f"{n['decoder_seconds']:.3f}"]
    if "over_nemo_greedy" in n:
        cells.append(f"{n['over_nemo_greedy']:.2f}x")
    return [*cells, f"{n['utterances_same_tokens']}/{utterances}", f"{n['asrdecode_over_nemo_time']:.2f}"]


def table(report: dict) -> str:
    nemo = report["nemo"] is not None
    rows = [
        [str(r["batch_size"]), r["strategy"], str(r["beam_size"]), *beam_cells(r)]
        + (nemo_cells(r["nemo"], report["utterances"]) if nemo else [])
        for r in report["results"]
    ]
    return markdown_table(["batch", "decoder", "beam", *BEAM_HEAD, *(NEMO_HEAD if nemo else [])], rows)


def beam_parser(doc: str | None, model: str, model_help: str, beams: list[int]) -> argparse.ArgumentParser:
    """The options both beam benchmarks take (`nemo_bench_parser`'s and the model, manifest,
    utterances, batch sizes and beams)."""
    parser = nemo_bench_parser(doc, repeats=2)
    parser.add_argument("--model", default=model, help=model_help)
    parser.add_argument("--manifest", type=Path, default=ROOT / "data" / "demo" / "real" / "manifest.jsonl")
    parser.add_argument("--utts", type=int, default=16, help="utterances (manifest cycled)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--beams", nargs="+", type=int, default=beams)
    return parser


def beam_main(
    parser, argv: list[str] | None, nemo_help: str, child: Callable, run: Callable, table: Callable
) -> int:
    """A beam benchmark's run: parse, answer as NeMo's child or run and finish with the table."""
    args = parse_with_nemo_options(parser, argv, nemo_help)
    if args.nemo_child:
        return child(args.nemo_child)
    report = run(args)
    return finish(args, report, table(report))


def main(argv: list[str] | None = None) -> int:
    parser = beam_parser(__doc__, "embedded:demo_rnnt_bpe", "RNN-T .nemo or embedded:NAME", [2, 4, 8])
    parser.add_argument("--strategies", nargs="+", default=["malsd", "maes"], choices=["malsd", "maes"])
    parser.add_argument("--maes-num-steps", type=int, default=2)
    parser.add_argument("--maes-expansion-beta", type=int, default=2)
    parser.add_argument("--maes-expansion-gamma", type=float, default=2.3)
    return beam_main(parser, argv, "also time NeMo's decoders (child process)", nemo_child, run, table)


if __name__ == "__main__":
    sys.exit(main())
