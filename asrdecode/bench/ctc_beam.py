"""Benchmark the CTC beam search (``ctc-beam``: NeMo's ``beam_batch`` algorithm) at several beam sizes,
with and without a token n-gram LM, against ctc-greedy on the same model and log-probs, with the WER of
each; and (``--nemo``) NeMo's own ``beam_batch`` (``BeamBatchedCTCInfer``) on the same log-probs.

    nice -n 5 .venv/bin/asrdecode bench ctc-beam --nemo --out out/bench/ctc_beam.json
    .venv/bin/asrdecode bench ctc-beam --beams 4 --batch-sizes 16 --repeats 1     # quick

One run, one model (default the embedded demo CTC model), the clips of ``--manifest`` (default
data/demo/real, 14 real utterances with reference texts) cycled to ``--utts`` utterances. The front end +
encoder run once per batch size, untimed; every decoder is then timed on those log-probs: its full
``decode`` call (search + per-utterance results), ``--warmup`` untimed passes, then the mean of
``--repeats`` timed passes, decoders interleaved within a pass so all see the same machine load. The LM
rows use ``--lm`` (default: the demo token 4-gram over the model's units, data/demo/graph/tokens.arpa,
read by unit strings) at ``--alpha`` (default NeMo's ``ngram_lm_alpha`` default, 1.0: not tuned).

``--nemo``: NeMo runs in its own venv (``--nemo-python``) as a child process that restores the same
``.nemo`` and decodes **our log-probs** with its decoding module switched to ``beam_batch`` (CUDA graphs
off; the LM rows with NeMo's ``NGramGPULanguageModel`` of the same ARPA, which the child writes in NeMo's
token-id form), cut to each batch's longest length (NeMo's search reads every frame it is given). Its
passes interleave with ours. Printed: NeMo's seconds, how many utterances have the
same tokens as ours, and ours / NeMo time (< 1: ours is faster). NeMo's batched search runs a shorter
utterance over its batch's padding too (decoders.md, ``ctc-beam``), so in batches of mixed lengths some
tokens may differ; at batch size 1 none should.

CPU, one intra-op thread by default on both sides.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from asrdecode.bench.harness import interleaved_passes, machine_info, timing_setup
from asrdecode.bench.transducer_beam import load_manifest
from asrdecode.bench.transducer_greedy import (
    NemoChild,
    answer_passes,
    batches,
    parse_with_nemo_options,
    print_and_write,
    timed,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LM = ROOT / "data" / "demo" / "graph" / "tokens.arpa"


def decoder_specs(args) -> list[tuple[str, int, bool]]:
    """(decoder, beam, with the LM) of every decoder timed; greedy first."""
    return [("greedy", 1, False)] + [("beam", k, lm) for lm in (False, True) for k in args.beams]


def ngpu_arpa(words_arpa: Path, units: list[str], out: Path) -> Path:
    """The ARPA over unit strings rewritten with NeMo's token names (unit i -> chr(i + 100)), for
    NeMo's ``NGramGPULanguageModel``; the same probabilities."""
    names = {u: chr(i + 100) for i, u in enumerate(units)} | {"<s>": "<s>", "</s>": "</s>", "<unk>": "<unk>"}
    lines = []
    opener = __import__("gzip").open if words_arpa.suffix == ".gz" else open
    with opener(words_arpa, "rt", encoding="utf-8") as f:
        section = 0
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("\\") and line.endswith("-grams:"):
                section = int(line[1:].split("-")[0])
            elif line.startswith("\\"):
                section = 0
            elif section and line.strip():
                parts = line.split("\t")
                parts[1] = " ".join(names[w] for w in parts[1].split(" "))
                line = "\t".join(parts)
            lines.append(line)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


# ----------------------------------------------------------------- NeMo (child process in the NeMo venv)


class NemoPeer(NemoChild):
    """The NeMo child of this script: the request holds our log-probs per batch size; each line
    ``<beam> <lm 0|1> <batch size>`` is one timed pass."""

    def __init__(self, python: str, model_path: Path, data: dict, lm_path: Path, alpha: float, args) -> None:
        arrays = {}
        for size, items in data.items():
            for i, out in enumerate(items):
                # cut to the batch's longest length: the model's output can run a frame past it,
                # which NeMo's search would read (decoders.md, ``ctc-beam``)
                arrays[f"lp_{size}_{i}"] = out.log_probs[:, : int(out.lengths.max())].numpy()
                arrays[f"len_{size}_{i}"] = out.lengths.numpy()
        meta = {
            "model": str(model_path),
            "batches": {str(s): len(v) for s, v in data.items()},
            "threads": args.threads,
            "lm": str(lm_path),
            "alpha": alpha,
        }
        super().__init__(python, __file__, meta, arrays, args.threads)

    def run(self, beam: int, lm: bool, size: int) -> dict:
        return self.ask(beam, int(lm), size)


def nemo_child(request: Path) -> int:
    """Runs under NeMo's venv: timed passes of NeMo's beam_batch / greedy_batch on the given log-probs."""
    import json

    from nemo.collections.asr.models import ASRModel
    from omegaconf import OmegaConf

    data = np.load(request, allow_pickle=False)
    meta = json.loads(str(data["meta"]))
    torch.set_num_threads(int(meta["threads"]))
    model = ASRModel.restore_from(meta["model"], map_location="cpu").eval()
    inputs = {
        size: [(torch.from_numpy(data[f"lp_{size}_{i}"]), torch.from_numpy(data[f"len_{size}_{i}"]))
               for i in range(n)]
        for size, n in meta["batches"].items()
    }  # fmt: skip
    decoders: dict = {}
    blank = int(model.decoding.blank_id)

    def decoder(beam: int, lm: bool):
        if (beam, lm) not in decoders:
            if beam == 1 and not lm:
                over = {"strategy": "greedy_batch"}
            else:
                settings = {
                    "beam_size": beam,
                    "beam_beta": 0.0,  # ours' defaults, not the checkpoint's decoding config
                    "beam_threshold": 20.0,
                    "return_best_hypothesis": True,
                    "allow_cuda_graphs": False,
                }
                if lm:
                    settings |= {"ngram_lm_model": meta["lm"], "ngram_lm_alpha": meta["alpha"]}
                over = {"strategy": "beam_batch", "beam": settings}
            base = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
            model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
            decoders[beam, lm] = model.decoding.decoding
        return decoders[beam, lm]

    def one_pass(words: list[str]) -> dict:
        beam, lm, size = int(words[0]), words[1] == "1", words[2]
        infer = decoder(beam, lm)
        seconds, tokens = 0.0, []
        for lp, n in inputs[size]:
            dt, out = timed(lambda x=lp, m=n, f=infer: f(decoder_output=x, decoder_lengths=m))
            seconds += dt
            for h in out[0]:
                seq = torch.as_tensor(h.y_sequence).tolist()
                if beam == 1 and not lm:  # greedy_batch keeps the frame labels: CTC's collapse
                    seq = [x for i, x in enumerate(seq) if x != blank and (i == 0 or x != seq[i - 1])]
                tokens.append(seq)
        return {"seconds": seconds, "tokens": tokens, "class": type(infer).__name__}

    return answer_passes(one_pass)


# ----------------------------------------------------------------- ours


def make_decoder(model, spec: tuple[str, int, bool], lm_path: Path, alpha: float):
    from asrdecode.decoders.base import DecoderContext
    from asrdecode.decoders.ctc_beam import CtcBeamConfig, CtcBeamDecoder
    from asrdecode.decoders.ctc_greedy import CtcGreedyConfig, CtcGreedyDecoder

    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    kind, beam, lm = spec
    if kind == "greedy":
        return CtcGreedyDecoder(CtcGreedyConfig(), ctx)
    options = {"beam_size": beam}
    if lm:
        options |= {"ngram_lm": str(lm_path), "ngram_lm_alpha": alpha, "ngram_lm_token_ids": "words"}
    return CtcBeamDecoder(CtcBeamConfig(**options), ctx)


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
    decoders = {spec: make_decoder(model, spec, args.lm, args.alpha) for spec in specs}
    tmp = tempfile.TemporaryDirectory()
    peer = None
    if args.nemo:
        nemo_lm = ngpu_arpa(args.lm, list(model.units), Path(tmp.name) / "tokens_ngpu.arpa")
        peer = NemoPeer(args.nemo_python, path, data, nemo_lm, args.alpha, args)
    try:
        ask = None if peer is None else (lambda spec, size: peer.run(spec[1], spec[2], size))
        times, results = interleaved_passes(args, data, specs, decoders, ask)
    finally:
        if peer is not None:
            peer.close()
        tmp.cleanup()
    refs = dict(zip(ids[:distinct], texts[:distinct], strict=True))
    rows = []
    for size in args.batch_sizes:
        greedy_seconds = float(np.mean(times["asrdecode", size, specs[0]]))
        for spec in specs:
            res = results["asrdecode", size, spec]
            seconds = float(np.mean(times["asrdecode", size, spec]))
            report = score(refs, {ids[i]: res[i].text for i in range(distinct)})
            row = {
                "batch_size": size,
                "decoder": "ctc-greedy" if spec[0] == "greedy" else "ctc-beam",
                "beam_size": spec[1],
                "lm": spec[2],
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
                    "class": nemo["class"],
                    "utterances_same_tokens": same,
                    "asrdecode_over_nemo_time": seconds / nemo_seconds,
                }
            rows.append(row)
    return {
        "benchmark": "ctc-beam (NeMo's beam_batch algorithm) vs ctc-greedy (and NeMo's own)",
        "model": args.model,
        "path": str(path),
        "manifest": str(args.manifest),
        "utterances": args.utts,
        "distinct_utterances_scored": distinct,
        "audio_seconds": audio_seconds,
        "lm": str(args.lm),
        "alpha": args.alpha,
        "machine": machine_info(load_start),
        **timing_setup(args),
        "nemo": peer.info["versions"] if peer is not None else None,
        "results": rows,
    }


def table(report: dict) -> str:
    nemo = report["nemo"] is not None
    head = "| batch | decoder | beam | LM | dec s | dec RTFx | / greedy | WER % | CER % |"
    rule = "|---|---|---|---|---|---|---|---|---|"
    if nemo:
        head += " NeMo dec s | same tokens | ours / NeMo time |"
        rule += "---|---|---|"
    lines = [head, rule]
    for r in report["results"]:
        cells = [
            str(r["batch_size"]),
            r["decoder"],
            str(r["beam_size"]),
            f"{report['alpha']:g}" if r["lm"] else "-",
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
                f"{n['utterances_same_tokens']}/{report['utterances']}",
                f"{n['asrdecode_over_nemo_time']:.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded:demo_ctc_bpe", help="CTC .nemo or embedded:NAME")
    parser.add_argument("--manifest", type=Path, default=ROOT / "data" / "demo" / "real" / "manifest.jsonl")
    parser.add_argument("--utts", type=int, default=16, help="utterances (manifest cycled)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--beams", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--lm", type=Path, default=DEFAULT_LM, help="token ARPA whose words are the units")
    parser.add_argument("--alpha", type=float, default=1.0, help="LM weight of the LM rows")
    args = parse_with_nemo_options(parser, argv, "also time NeMo's beam_batch (child process)", repeats=2)
    if args.nemo_child:
        return nemo_child(args.nemo_child)
    report = run(args)
    return print_and_write(report, table(report), args.out)


if __name__ == "__main__":
    sys.exit(main())
