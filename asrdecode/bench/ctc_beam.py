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

import sys
import tempfile
from pathlib import Path

import torch

from asrdecode.bench.harness import markdown_table
from asrdecode.bench.transducer_beam import (
    BEAM_HEAD,
    NEMO_HEAD,
    beam_cells,
    beam_main,
    beam_parser,
    beam_rows,
    nemo_cells,
)
from asrdecode.bench.transducer_greedy import (
    NemoChild,
    answer_passes,
    child_request,
    nemo_decoding,
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
    model, meta, inputs = child_request(request, ("lp", "len"))
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
            decoders[beam, lm] = nemo_decoding(model, over)
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


def run(args) -> dict:
    tmp = tempfile.TemporaryDirectory()

    def start_peer(path: Path, model, data: dict) -> NemoPeer:
        nemo_lm = ngpu_arpa(args.lm, list(model.units), Path(tmp.name) / "tokens_ngpu.arpa")
        return NemoPeer(args.nemo_python, path, data, nemo_lm, args.alpha, args)

    try:
        rows, facts = beam_rows(
            args,
            decoder_specs(args),
            lambda model, spec: make_decoder(model, spec, args.lm, args.alpha),
            start_peer,
            lambda peer, spec, size: peer.run(spec[1], spec[2], size),
            lambda spec, res: {
                "decoder": "ctc-greedy" if spec[0] == "greedy" else "ctc-beam",
                "beam_size": spec[1],
                "lm": spec[2],
            },
            lambda reply, seconds, greedy: {},
        )
    finally:
        tmp.cleanup()
    return {
        "benchmark": "ctc-beam (NeMo's beam_batch algorithm) vs ctc-greedy (and NeMo's own)",
        **facts,
        "lm": str(args.lm),
        "alpha": args.alpha,
        "results": rows,
    }


def table(report: dict) -> str:
    nemo = report["nemo"] is not None
    rows = [
        [str(r["batch_size"]), r["decoder"], str(r["beam_size"]), f"{report['alpha']:g}" if r["lm"] else "-"]
        + beam_cells(r)
        + (nemo_cells(r["nemo"], report["utterances"]) if nemo else [])
        for r in report["results"]
    ]
    nemo_head = [h for h in NEMO_HEAD if h != "NeMo / NeMo greedy"] if nemo else []
    return markdown_table(["batch", "decoder", "beam", "LM", *BEAM_HEAD, *nemo_head], rows)


def main(argv: list[str] | None = None) -> int:
    parser = beam_parser(__doc__, "embedded:demo_ctc_bpe", "CTC .nemo or embedded:NAME", [4, 8])
    parser.add_argument("--lm", type=Path, default=DEFAULT_LM, help="token ARPA whose words are the units")
    parser.add_argument("--alpha", type=float, default=1.0, help="LM weight of the LM rows")
    return beam_main(parser, argv, "also time NeMo's beam_batch (child process)", nemo_child, run, table)


if __name__ == "__main__":
    sys.exit(main())
