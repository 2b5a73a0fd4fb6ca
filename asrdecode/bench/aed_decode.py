"""Benchmark AED (Canary) decoding: `aed-greedy` / `aed-beam` against NeMo's own greedy and beam
search generators on the same model and the same encoder states.

    .venv/bin/asrdecode bench aed --out out/bench/aed.json
    .venv/bin/asrdecode bench aed --batch-sizes 1 8 --repeats 2       # quick

One run, same models, same audio: the fixture clips (tests/fixtures/nemo/audio) cycled to ``--utts``
utterances, in batches of each size. The front end and encoder run once (ours); the decoders decode
those encoder states. NeMo is not a dependency: it runs in its own venv (``--nemo-python``, default
/work/nemo-venv/bin/python) as a child process that restores the same ``.nemo`` file and is handed our
encoder states; its passes interleave with ours (ours, NeMo, ours, NeMo, ...), so both see the same
load. NeMo's side is the generator a ``transcribe`` runs (``GreedySequenceGenerator`` /
``BeamSearchSequenceGenerator`` called on the batch, prompt included), ours the decoder's ``decode``
(words included). NeMo's beam search is run one utterance at a time, as its batched search gives
other results (docs/decoders.md); ours on the batch. Tokens are compared (agreement printed). Ratios
are NeMo seconds / asrdecode seconds (> 1: ours is faster). ``--threads`` (default 1) for both.

``--models``: ``.nemo`` files (default: the two Canary-like fixtures, trained on the clips, so they
stop where the text does). ``--large`` adds a model with a 4-layer, 1024-wide decoder (87M parameters,
random weights: its hypotheses run to their length limit, the encoder's frames + 50), built into
``out/nemo-aed-large`` on first use by ``scripts/make_nemo_fixtures.py --set aed-large``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import bench_parser, machine_info, parse, timing_setup, write_report
from asrdecode.bench.transducer_greedy import FIX, NemoChild, batches, load_clips

DEFAULT_MODELS = [str(FIX / "aed_canary2.nemo"), str(FIX / "aed_canary.nemo")]
DEFAULT_NEMO_PYTHON = "/work/nemo-venv/bin/python"
LARGE = FIX.parents[2] / "out" / "nemo-aed-large" / "aed_large.nemo"
STRATEGIES = ("greedy", "beam")


class NemoAedPeer(NemoChild):
    """This script's NeMo child: the request holds our encoder states and masks per batch; each
    line ``<strategy> <batch size>`` is one timed pass over that size's batches."""

    def __init__(self, python: str, model: str, data: dict, beam_size: int, delta: int, threads: int):
        arrays = {}
        for size, items in data.items():
            for i, (states, lengths, prompt) in enumerate(items):
                arrays[f"enc_{size}_{i}"] = states
                arrays[f"len_{size}_{i}"] = lengths
                arrays[f"prompt_{size}_{i}"] = prompt
        meta = {
            "model": model,
            "batches": {str(s): len(v) for s, v in data.items()},
            "beam_size": beam_size,
            "delta": delta,
            "threads": threads,
        }
        super().__init__(python, __file__, meta, arrays, threads)


def nemo_child(request: Path) -> int:
    """Runs under NeMo's venv: restores the model, then times one pass per stdin line."""
    import nemo
    import torch
    from nemo.collections.asr.models import ASRModel
    from omegaconf import OmegaConf

    data = np.load(request, allow_pickle=False)
    meta = json.loads(str(data["meta"]))
    torch.set_num_threads(meta["threads"])
    model = ASRModel.restore_from(meta["model"], map_location="cpu").eval()
    generators = {}
    for strategy in STRATEGIES:
        beam = {
            "beam_size": meta["beam_size"] if strategy == "beam" else 1,
            "max_generation_delta": meta["delta"],
        }
        model.change_decoding_strategy(
            OmegaConf.create(
                {"strategy": strategy, "greedy": {"max_generation_delta": meta["delta"]}, "beam": beam}
            )
        )
        inner = model.decoding.decoding
        generators[strategy] = inner.greedy_search if strategy == "greedy" else inner.beam_search
    print("@@" + json.dumps({"nemo": nemo.__version__, "torch": torch.__version__}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        strategy, size = words[0], words[1]
        seconds, tokens = 0.0, []
        with torch.inference_mode():
            for i in range(meta["batches"][size]):
                states = torch.from_numpy(data[f"enc_{size}_{i}"])
                lengths = torch.from_numpy(data[f"len_{size}_{i}"])
                prompt = torch.from_numpy(data[f"prompt_{size}_{i}"])
                mask = (torch.arange(states.shape[1])[None, :] < lengths[:, None]).to(states.dtype)
                rows = [(states, mask, prompt)]
                if strategy == "beam":  # one utterance at a time (its batched search differs)
                    rows = [
                        (states[b : b + 1, : int(n)], mask[b : b + 1, : int(n)], prompt[b : b + 1])
                        for b, n in enumerate(lengths.tolist())
                    ]
                for enc, enc_mask, ids in rows:
                    start = time.perf_counter()
                    out = generators[strategy](
                        encoder_hidden_states=enc, encoder_input_mask=enc_mask, decoder_input_ids=ids
                    )
                    seconds += time.perf_counter() - start
                    best = out[0] if isinstance(out, tuple) else out
                    tokens += [row[ids.shape[1] :].tolist() for row in best]
        print("@@" + json.dumps({"seconds": seconds, "tokens": tokens}), flush=True)
    return 0


def divergence_margin(model, out, b: int, ours: list[int], theirs: list[int]) -> float | None:
    """Where two token sequences for utterance ``b`` first differ: the log-probability of ours minus
    that of NeMo's there, in our model (a near tie if tiny); None if one is the other's prefix."""
    import torch

    first = next((i for i, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y), None)
    if first is None:
        return None
    n = int(out.lengths[b])
    with torch.inference_mode():
        state = model.start(out.encoder_out[b : b + 1, :n], out.lengths[b : b + 1])
        log_probs = model.step(state, torch.tensor([model.prompt_ids()]))
        for token in ours[:first]:
            log_probs = model.step(state, torch.tensor([[token]]))
    return float(log_probs[0, ours[first]] - log_probs[0, theirs[first]])


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(
        __doc__, report="out/bench/aed.json", threads=1, warmup=1, repeats=3, aliases=("--out",)
    )
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 24])
    parser.add_argument("--utts", type=int, default=24)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--max-generation-delta", type=int, default=50)
    parser.add_argument("--large", action="store_true", help="also the 87M-parameter random model")
    parser.add_argument("--nemo-python", default=DEFAULT_NEMO_PYTHON)
    parser.add_argument("--nemo-child", type=Path, help=argparse.SUPPRESS)
    args = parse(parser, argv)
    if args.nemo_child:
        return nemo_child(args.nemo_child)
    import torch

    from asrdecode.decoders.aed import (
        AedBeamConfig,
        AedBeamDecoder,
        AedGreedyConfig,
        AedGreedyDecoder,
        generation_limits,
        text_tokens,
    )
    from asrdecode.decoders.base import DecoderContext
    from asrdecode.models.loading import load_model

    if not Path(args.nemo_python).exists():
        raise SystemExit(f"--nemo-python {args.nemo_python}: not found (see scripts/make_nemo_fixtures.py)")
    if args.large:
        if not LARGE.exists():
            script = FIX.parents[2] / "scripts" / "make_nemo_fixtures.py"
            cmd = [args.nemo_python, str(script), "--set", "aed-large", "--out", str(LARGE.parent)]
            subprocess.run(cmd, check=True, capture_output=True)
        args.models = [*args.models, str(LARGE)]
    load_at_start = os.getloadavg()
    delta = args.max_generation_delta
    waves = load_clips(FIX / "audio", args.utts)
    audio_seconds = sum(len(w) for w in waves) / 16000
    report = {"rows": [], "setup": timing_setup(args), "audio_seconds": audio_seconds}
    head = ("model", "decoder", "batch", "asrdecode s", "NeMo s", "ratio", "same")
    print(f"{head[0]:<14} {head[1]:<8} {head[2]:>5} {head[3]:>12} {head[4]:>9} {head[5]:>6} {head[6]:>6}")
    for path in args.models:
        model = load_model(path).eval()
        context = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
        decoders = {
            "greedy": AedGreedyDecoder(
                AedGreedyConfig(max_generation_delta=args.max_generation_delta), context
            ),
            "beam": AedBeamDecoder(
                AedBeamConfig(beam_size=args.beam_size, max_generation_delta=args.max_generation_delta),
                context,
            ),
        }
        outputs, data = {}, {}
        with torch.inference_mode():
            for size in args.batch_sizes:
                outputs[size] = []
                for audio, lengths in batches(waves, size):
                    feats, feat_len = model.features(audio, lengths)
                    out = model.forward_features(feats, feat_len)
                    outputs[size].append(out)
                prompt = np.array(model.prompt_ids(), dtype=np.int64)
                data[size] = [
                    (o.encoder_out.numpy(), o.lengths.numpy(), np.tile(prompt, (o.lengths.shape[0], 1)))
                    for o in outputs[size]
                ]
        peer = NemoAedPeer(
            args.nemo_python, path, data, args.beam_size, args.max_generation_delta, args.threads
        )
        try:
            for strategy in STRATEGIES:
                for size in args.batch_sizes:
                    ours, theirs, tokens_ours, tokens_nemo = [], [], [], []
                    for rep in range(args.warmup + args.repeats):
                        start = time.perf_counter()
                        with torch.inference_mode():
                            results = [r for o in outputs[size] for r in decoders[strategy].decode(o)]
                        seconds = time.perf_counter() - start
                        reply = peer.ask(strategy, size)
                        if rep >= args.warmup:
                            ours.append(seconds)
                            theirs.append(reply["seconds"])
                        tokens_ours = [r.tokens for r in results]
                        tokens_nemo = [text_tokens(t, model.eos_id, model.pad_id) for t in reply["tokens"]]
                    rows_out = [(o, j) for o in outputs[size] for j in range(o.lengths.shape[0])]
                    # NeMo's batched greedy search stops every utterance at the batch's longest
                    # limit, ours at each one's own: a hypothesis cut at its own limit counts as the
                    # same if it is the start of NeMo's
                    limit = [
                        int(generation_limits(model, o.lengths[j : j + 1], len(model.prompt_ids()), delta)[0])
                        for o, j in rows_out
                    ]
                    same = sum(
                        a == b or (len(a) == limit[i] + (strategy == "beam") and b[: len(a)] == a)
                        for i, (a, b) in enumerate(zip(tokens_ours, tokens_nemo, strict=True))
                    )
                    margins = [
                        divergence_margin(model, *rows_out[i], a, b)
                        for i, (a, b) in enumerate(zip(tokens_ours, tokens_nemo, strict=True))
                        if a != b and strategy == "greedy"
                    ]
                    row = {
                        "model": Path(path).stem,
                        "decoder": strategy,
                        "batch": size,
                        "asrdecode_seconds": float(np.mean(ours)),
                        "nemo_seconds": float(np.mean(theirs)),
                        "ratio": float(np.mean(theirs) / np.mean(ours)),
                        "same_tokens": f"{same}/{len(tokens_ours)}",
                        # greedy, where they differ: log p(our token) - log p(NeMo's) at the first difference
                        "divergence_margins": [m for m in margins if m is not None],
                        "asrdecode_runs": ours,
                        "nemo_runs": theirs,
                    }
                    report["rows"].append(row)
                    print(
                        f"{row['model']:<14} {strategy:<8} {size:>5} {row['asrdecode_seconds']:>12.3f} "
                        f"{row['nemo_seconds']:>9.3f} {row['ratio']:>6.2f} {row['same_tokens']:>6}"
                        + (
                            f"  (margins {max(row['divergence_margins']):.1e})"
                            if row["divergence_margins"]
                            else ""
                        ),
                        flush=True,
                    )
            report.setdefault("nemo", peer.info)
        finally:
            peer.close()
    report["machine"] = machine_info(load_at_start)
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
