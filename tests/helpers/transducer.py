"""The transducer decoder tests' shared pieces: a greedy decoder for a model, a `ModelOutput` from
NeMo's own encoder output, and NeMo's greedy reference of one utterance."""

from __future__ import annotations

import torch

from asrdecode.config import dataclass_from_dict
from asrdecode.decoders.base import DecoderContext
from asrdecode.decoders.transducer_greedy import TransducerGreedyConfig, TransducerGreedyDecoder
from asrdecode.models import ModelOutput


def make_decoder(model, **options) -> TransducerGreedyDecoder:
    config = dataclass_from_dict(TransducerGreedyConfig, options, prefix="decoder.")
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    return TransducerGreedyDecoder(config, ctx)


def nemo_output(model, ref: dict, rows: list[int] | None = None) -> ModelOutput:
    """ModelOutput built from NeMo's own encoder output (the decoders' reference input)."""
    enc = torch.from_numpy(ref["encoder_out"]).transpose(1, 2).contiguous()
    lengths = torch.from_numpy(ref["encoder_len"]).long()
    if rows is not None:
        enc, lengths = enc[rows, : int(lengths[rows].max())], lengths[rows]
    return ModelOutput(
        None, lengths, model.frame_shift, model.blank_id, model.units, enc, {"transducer": model}
    )


def reference(ref: dict, b: int, key: str = "greedy") -> dict:
    n = int(ref[f"{key}_tokens_len"][b])
    out = {
        "tokens": ref[f"{key}_tokens"][b, :n].tolist(),
        "frames": ref[f"{key}_timestamps"][b, :n].tolist(),
        "text": str(ref[f"{key}_text"][b]),
        "score": float(ref[f"{key}_score"][b]),
    }
    if f"{key}_durations_single" in ref:
        out["durations"] = ref[f"{key}_durations_single"][b, :n].tolist()
    return out
