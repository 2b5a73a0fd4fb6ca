"""The Python API: what `asrdecode transcribe` does, as functions, and the decoders on their own.

    import asrdecode
    rows = asrdecode.transcribe(["a.wav", "b.flac"])                  # the default setup (English)
    rows = asrdecode.transcribe("data.jsonl", model="embedded:demo_ctc_bpe", out="out/x")
    decoder = asrdecode.make_decoder("ctc-greedy", units=units)     # log-probs in, results out
    results = asrdecode.decode(decoder, log_probs, lengths)

`transcribe` runs the same pipeline as the CLI (`pipeline.Transcriber`: batching, resuming into
``out``, bad files reported and skipped) and returns the transcript records it wrote (the rows of
``transcripts.jsonl``); options are the CLI's config keys, as ``{"decoder.beam": 10}`` or keyword
arguments with ``__`` for the dots (``decoder__beam=10``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from asrdecode.decoders.base import Decoder, DecoderContext, DecodeResult, set_model_texts
from asrdecode.errors import InputError, InputsFailed
from asrdecode.models.base import ModelOutput

__all__ = ["InputsFailed", "decode", "load_graph", "load_model", "make_decoder", "transcribe"]


def _override_items(overrides: Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> list[str]:
    items = dict(overrides or {})
    items.update({key.replace("__", "."): value for key, value in keywords.items()})
    return [
        f"{key}={json.dumps(value) if not isinstance(value, str) else value}" for key, value in items.items()
    ]


def _input_path(inputs: str | Path | Iterable[str | Path], folder: Path) -> Path:
    """A path as it is; a list of audio files becomes a manifest in `folder` (utt ids: file stems,
    numbered when two files share a stem)."""
    from asrdecode.io.manifests import user_path

    if isinstance(inputs, (str, Path)):
        return Path(inputs)
    inputs = list(inputs)
    if not inputs:
        raise InputError("no inputs given (an empty list of audio files)")
    rows, seen = [], set()
    for i, item in enumerate(inputs):
        path = user_path(item).resolve()
        utt = path.stem if path.stem not in seen else f"{path.stem}-{i}"
        seen.add(utt)
        rows.append(json.dumps({"audio_filepath": str(path), "utt_id": utt}))
    manifest = folder / "inputs.jsonl"
    manifest.write_text("\n".join(rows) + "\n")
    return manifest


def transcribe(
    inputs: str | Path | Iterable[str | Path],
    *,
    config: str | Path | None = None,
    model: str | None = None,
    decoder: str | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    strict: bool = False,
    overrides: Mapping[str, Any] | None = None,
    on_progress: Callable[[dict], None] | None = None,
    **options: Any,
) -> list[dict]:
    """Transcribe ``inputs`` (an audio folder, manifest, Kaldi data dir, saved log-probs folder, one
    audio file, or a list of audio files) and return one record per utterance (``utt_id``,
    ``pred_text``, ``words`` with times, scores; the rows of ``transcripts.jsonl``), in input order.
    ``config`` / ``model`` / ``decoder`` / options: as the CLI's ``--config``, ``--model``,
    ``--decoder`` and ``KEY.PATH=VALUE``; with neither config nor model, the default setup. Files
    are written to ``out`` (resumed if it holds an earlier run, unless ``overwrite``), else to a
    temporary folder that is removed. Errors are `AsrDecodeError`s with one-line messages. Inputs
    that cannot be transcribed (a missing, empty or damaged file) are skipped while the others are
    decoded, then raised as one `InputsFailed` naming them (its ``rows``: the others' records,
    ``failed``: one entry per failed input), for a list, a folder and a manifest alike; ``strict``
    stops at the first instead."""
    from asrdecode.config import build_config, setup_of
    from asrdecode.io.writers import read_errors
    from asrdecode.pipeline import Transcriber

    items = _override_items(overrides, options)
    if model:
        items.append(f"model.path={model}")
    if decoder:
        items.append(f"decoder.type={decoder}")
    with tempfile.TemporaryDirectory(prefix="asrdecode-") as tmp:
        source = _input_path(inputs, Path(tmp))
        cfg = build_config(config, items, setup=setup_of(config, items, source))
        folder = Path(out) if out is not None else Path(tmp) / "out"
        runner = Transcriber(cfg, source, folder, overwrite=overwrite, strict=strict, on_progress=on_progress)
        runner.run()
        lines = (folder / "transcripts.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        errors = {e["utt_id"]: e for e in read_errors(folder)}
        failed = [errors[u] for u in runner.inputs.ids() if u in errors]
    if failed:
        raise InputsFailed(rows, failed)
    return rows


def load_model(spec: str, **options: Any):
    """An acoustic model (`asrdecode.models.loading.load_model`): a ``.nemo`` file,
    ``embedded:demo_ctc_bpe``, ``embedded:sphinx-en-us``, ...; options as ``model.*`` keys
    (``head``, ``attention``, ``att_context_size``, ``topn``, ...). Call it on waveforms
    ([B, S] at ``model.sample_rate``, lengths) for a `ModelOutput`."""
    from asrdecode.models.loading import load_model as load

    return load(spec, **options)


def load_graph(spec: str):
    """(DeviceGraph, {word id: word}) of a graph folder, ``graph.pt``, an OpenFst ``.fst`` or
    ``cache:BUILD_CONFIG.yaml`` (built into the graph cache on first use)."""
    from asrdecode.decoders.wfst.paths import load_graph as load
    from asrdecode.graph.cache import resolve_graph_spec

    return load(resolve_graph_spec(spec))


def make_decoder(
    decoder_type: str,
    *,
    model: Any = None,
    units: list[str] | None = None,
    blank_id: int | None = None,
    frame_shift: float = 0.04,
    **options: Any,
) -> Decoder:
    """A decoder (``ctc-greedy``, ``ctc-beam``, ``wfst``, ``wfst-otf``, ``let``, ``transducer-greedy``,
    ``transducer-beam``) with its options as keyword arguments (``graph=``, ``beam=``, ...). The
    model's units, blank, frame shift and word grouping come from ``model``, or from ``units``
    (blank = ``len(units)`` unless given; words = units joined, ``▁`` starting a word)."""
    from asrdecode.decoders import make_decoder as make
    from asrdecode.graph.cache import resolve_graph_spec
    from asrdecode.pipeline import text_of_units, words_of_units

    if isinstance(options.get("graph"), str):  # cache:BUILD_CONFIG.yaml is built on first use
        options["graph"] = resolve_graph_spec(options["graph"])

    if model is not None:
        text_of = getattr(model, "tokens_to_text", None)
        context = DecoderContext(
            list(model.units), model.blank_id, model.frame_shift, model.tokens_to_words, text_of
        )
    elif units is not None:
        blank = len(units) if blank_id is None else blank_id
        context = DecoderContext(
            list(units), blank, frame_shift, words_of_units(list(units)), text_of_units(list(units))
        )
    else:
        raise TypeError("make_decoder needs model= or units=")
    return make({"type": decoder_type, **options}, context)


def decode(
    decoder: Decoder, log_probs: torch.Tensor, lengths: torch.Tensor | None = None
) -> list[DecodeResult]:
    """Decode a batch of log-probs [B, T, V] (or one [T, V]) with frame counts ``lengths``
    (default: all T) into one `DecodeResult` per utterance (``.text``, ``.words``, ``.tokens``)."""
    if log_probs.dim() == 2:
        log_probs = log_probs.unsqueeze(0)
    if lengths is None:
        lengths = torch.full((log_probs.shape[0],), log_probs.shape[1], dtype=torch.int64)
    context = getattr(decoder, "context", None)
    units = list(context.units) if context is not None else []
    blank = context.blank_id if context is not None else log_probs.shape[-1] - 1
    shift = context.frame_shift if context is not None else 0.04
    results = decoder.decode(ModelOutput(log_probs, lengths, shift, blank, units))
    set_model_texts(results, context.text_of if context is not None else None)
    return results
