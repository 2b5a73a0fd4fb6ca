"""Decoder registry: `decoder.type` in the config → decoder class and its config dataclass."""

from __future__ import annotations

import dataclasses

from asrdecode.config import dataclass_from_dict
from asrdecode.decoders.base import Decoder, DecoderContext, DecodeResult, Word
from asrdecode.decoders.ctc_greedy import CtcGreedyDecoder
from asrdecode.decoders.let import LetDecoder
from asrdecode.decoders.transducer_beam import TransducerBeamDecoder
from asrdecode.decoders.transducer_greedy import TransducerGreedyDecoder
from asrdecode.decoders.wfst import WfstDecoder
from asrdecode.decoders.wfst_otf import WfstOtfDecoder
from asrdecode.errors import ConfigError

DECODERS: dict[str, type] = {
    CtcGreedyDecoder.name: CtcGreedyDecoder,
    TransducerGreedyDecoder.name: TransducerGreedyDecoder,
    TransducerBeamDecoder.name: TransducerBeamDecoder,
    WfstDecoder.name: WfstDecoder,
    WfstOtfDecoder.name: WfstOtfDecoder,
    LetDecoder.name: LetDecoder,
}

__all__ = [
    "DECODERS",
    "DecodeResult",
    "Decoder",
    "DecoderContext",
    "Word",
    "decoder_config_from_dict",
    "make_decoder",
]


def _decoder_class(section: dict) -> type:
    name = section.get("type", "ctc-greedy")
    if name not in DECODERS:
        raise ConfigError(f"unknown decoder.type '{name}'; available: {', '.join(sorted(DECODERS))}")
    return DECODERS[name]


def decoder_config_from_dict(section: dict):
    """Validate the `decoder:` section against the selected decoder's config dataclass."""
    cls = _decoder_class(section)
    options = {k: v for k, v in section.items() if k != "type"}
    return dataclass_from_dict(cls.config_type, options, prefix="decoder.")


def make_decoder(section: dict, context: DecoderContext) -> Decoder:
    cls = _decoder_class(section)
    return cls(decoder_config_from_dict(section), context)


def decoder_options(name: str) -> list[str]:
    return [f.name for f in dataclasses.fields(DECODERS[name].config_type)]
