"""Decoder registry: `decoder.type` in the config → decoder class and its config dataclass."""

from __future__ import annotations

import dataclasses
from typing import Any

from asrdecode.decoders.aed import AedBeamDecoder, AedGreedyDecoder
from asrdecode.decoders.base import Decoder, DecoderContext, DecodeResult, Word
from asrdecode.decoders.ctc_beam import CtcBeamDecoder
from asrdecode.decoders.ctc_greedy import CtcGreedyDecoder
from asrdecode.decoders.let import LetDecoder
from asrdecode.decoders.transducer_beam import TransducerBeamDecoder
from asrdecode.decoders.transducer_greedy import TransducerGreedyDecoder
from asrdecode.decoders.wfst import WfstDecoder
from asrdecode.decoders.wfst_otf import WfstOtfDecoder
from asrdecode.errors import ConfigError
from asrdecode.typed_config import dataclass_from_dict

DECODERS: dict[str, type] = {
    CtcGreedyDecoder.name: CtcGreedyDecoder,
    CtcBeamDecoder.name: CtcBeamDecoder,
    TransducerGreedyDecoder.name: TransducerGreedyDecoder,
    TransducerBeamDecoder.name: TransducerBeamDecoder,
    WfstDecoder.name: WfstDecoder,
    WfstOtfDecoder.name: WfstOtfDecoder,
    LetDecoder.name: LetDecoder,
    AedGreedyDecoder.name: AedGreedyDecoder,
    AedBeamDecoder.name: AedBeamDecoder,
}

__all__ = [
    "DECODERS",
    "DecodeResult",
    "Decoder",
    "DecoderContext",
    "Word",
    "check_decoder_files",
    "decoder_config_from_dict",
    "decoder_name",
    "decoder_section",
    "make_decoder",
]


def _decoder_class(section: dict) -> type:
    name = section.get("type", "ctc-greedy")
    if name not in DECODERS:
        raise ConfigError(f"unknown decoder.type '{name}'; available: {', '.join(sorted(DECODERS))}")
    return DECODERS[name]


def decoder_config_from_dict(section: dict):
    """Validate the `decoder:` section against the selected decoder's config dataclass and the
    decoder's own range checks (its ``check_options``)."""
    cls = _decoder_class(section)
    options = {k: v for k, v in section.items() if k != "type"}
    config = dataclass_from_dict(cls.config_type, options, prefix="decoder.")
    check = getattr(cls, "check_options", None)
    if check is not None:  # the option ranges, before any graph, LM or model is loaded
        check(config)
    return config


# decoder options that name a file (`graph` also a folder, or `cache:BUILD_CONFIG.yaml`)
FILE_OPTIONS = ("graph", "lexicon", "lm", "small_lm", "rescore_lm", "rescore_graph_lm", "ngram_lm")


def check_decoder_files(settings: Any) -> None:
    """The files a decoder's settings name are there (a `cache:` build config is read, nothing is
    built or loaded): one-line ConfigErrors naming the option, before anything is loaded."""
    from pathlib import Path

    from asrdecode.decoders.lms import lm_file
    from asrdecode.graph.cache import CACHE_PREFIX, load_graph_config
    from asrdecode.models.loading import resolve_packaged_path

    for key in FILE_OPTIONS:
        value = getattr(settings, key, "")
        if not isinstance(value, str) or not value:
            continue
        if key == "graph" and value.startswith(CACHE_PREFIX):
            config = resolve_packaged_path(value[len(CACHE_PREFIX) :])
            if not Path(config).is_file():
                raise ConfigError(f"decoder.graph={value}: build config {config} not found")
            load_graph_config(config)
        elif key == "graph":
            if not Path(value).exists():
                raise ConfigError(f"decoder.graph: {value}: no such graph folder or file")
        else:
            lm_file(key, value)


def _class_of_settings(settings: Any) -> type:
    for cls in DECODERS.values():
        if type(settings) is cls.config_type:
            return cls
    raise ConfigError(f"not a decoder config: {type(settings).__name__}")


def decoder_name(settings: Any) -> str:
    """`decoder.type` of validated settings (None: ``auto``)."""
    return "auto" if settings is None else _class_of_settings(settings).name


def decoder_section(settings: Any) -> dict:
    """Validated settings as the config's `decoder:` section: ``{"type": name, **options}``."""
    if settings is None:
        return {"type": "auto"}
    return {"type": decoder_name(settings), **dataclasses.asdict(settings)}


def make_decoder(settings: Any, context: DecoderContext) -> Decoder:
    """The decoder for validated settings (`decoder_config_from_dict`, as `RunConfig.decoder`
    holds them), or for a `decoder:` dict, validated here."""
    if isinstance(settings, dict):
        settings = decoder_config_from_dict(settings)
    return _class_of_settings(settings)(settings, context)


def decoder_options(name: str) -> list[str]:
    """The options decoder `name` takes: its config's fields, less those it refuses."""
    cls = DECODERS[name]
    refused = getattr(cls, "refused_options", ())
    return [f.name for f in dataclasses.fields(cls.config_type) if f.name not in refused]
