"""Typed run configuration: dataclasses filled from YAML, then `key.path=value` overrides.

Unknown keys and wrong types are `ConfigError`s that list the valid keys. Decoder options live
in one dataclass per decoder type (registered in `asrdecode.decoders`), selected by
`decoder.type`, so `decoder.beam=...` is only valid for decoders that have a beam.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from asrdecode.errors import ConfigError, shown
from asrdecode.typed_config import apply_override, dataclass_from_dict, load_yaml, parse_override

MAX_THREADS = 1024  # the most threads any setting may ask for
DEFAULT_MODEL = "embedded:demo_ctc_bpe"  # model.path when a config names no model
# Real English with pocketsphinx's en-us HMM, a small HCLG built on first use and its full trigram on
# the fly with wfst-otf (`--model embedded:sphinx-en-us`)
SPHINX_SETUP = "embedded:configs/sphinx-en-us-otf.yaml"
# What `asrdecode transcribe` runs with no --config and no model choice: real English with hama's
# phoneme CTC model, a small TLG built on first use and pocketsphinx's full trigram on the fly
DEFAULT_SETUP = "embedded:configs/hama-en-us-otf.yaml"
# The setup a run starts from when `--model` names one of these embedded models and no config is given
MODEL_SETUPS = {"embedded:hama-ipa-ctc": DEFAULT_SETUP, "embedded:sphinx-en-us": SPHINX_SETUP}


@dataclass
class ModelConfig:
    """Which acoustic model: a `.nemo` path or `embedded:<name>` (shipped with asrdecode)."""

    path: str = DEFAULT_MODEL
    type: str = "auto"  # auto | nemo-ctc | nemo-transducer | nemo-aed | sphinx
    # NeMo hybrid RNN-T/TDT + CTC models: transducer (auto) or ctc; decoder.type=auto follows the head
    head: str = "auto"
    # NeMo encoders (as NeMo's change_attention_model): auto = as trained | full | local (sliding window
    # of att_context_size frames each side, default [128, 128]: memory linear in the input length)
    attention: str = "auto"
    att_context_size: list | None = None
    # NeMo cache-aware streaming models: offline (whole input) | cache-aware (NeMo's streaming mode)
    streaming: str = "offline"
    # NeMo CTC and RNN-T models: buffered chunked inference (NeMo's FrameBatchASR / BatchedFrameASRRNNT)
    # when chunk_seconds > 0
    chunk_seconds: float = 0.0
    buffer_seconds: float = 4.0
    topn: int = 4  # sphinx models: top-N Gaussians per codebook (pocketsphinx's -topn); 0 = full mixture
    threads: int = 0  # sphinx models on CPU: threads scoring chunks of frames in parallel (0 = all cores)
    # sphinx models: a Gaussian counts at most this many nats below the frame's best (per stream), as
    # pocketsphinx scores (-1 = its value, 96 steps of its log table = 9.83 nats); 0 = no floor
    density_floor: float = -1.0
    # NeMo AED (Canary) models: the prompt's languages and punctuation; empty = the checkpoint's
    # prompt_defaults (source_lang == target_lang transcribes, else translates)
    source_lang: str = ""
    target_lang: str = ""
    pnc: bool | None = None  # yes | no: punctuation and capitals (none: the checkpoint's)
    timestamps: bool | None = None  # yes: canary2 models write word times (frame tokens)


@dataclass
class FeaturesConfig:
    """Front end: every model brings its own (NeMo log-mel from the checkpoint, the sphinx MFCC),
    so `auto` is the one value."""

    type: str = "auto"  # auto (the model's own front end)


@dataclass
class BatchConfig:
    """Utterances are sorted by length and batched by padded seconds."""

    max_seconds: float = 240.0
    max_utterances: int = 64
    # inputs longer than this (or than max_seconds, if less) are cut at quiet moments into segments of
    # at most that length, decoded like utterances and joined (word times shifted): memory stays
    # bounded on hour-long files; 0 = never
    segment_seconds: float = 60.0


@dataclass
class OutputConfig:
    """What to write besides transcripts.jsonl, text, errors.jsonl and report.json."""

    ctm: bool = True
    save_logprobs: bool = False
    word_timestamps: bool = True
    # subtitles/<utt>.srt and/or .vtt from the word times: "srt", "vtt", "srt,vtt" ("" none)
    subtitles: str = ""
    subtitle_line_chars: int = 42  # characters a line
    subtitle_lines: int = 2  # lines a cue
    subtitle_max_seconds: float = 7.0  # the longest cue (a single longer word keeps its own)
    subtitle_pause: float = 0.8  # a pause this long (seconds) between words starts a new cue

    def subtitle_style(self):
        """The cue rules of `asrdecode.io.subtitles` from these settings."""
        from asrdecode.io.subtitles import SubtitleStyle

        return SubtitleStyle(
            self.subtitle_line_chars, self.subtitle_lines, self.subtitle_max_seconds, self.subtitle_pause
        )


@dataclass
class ScoringConfig:
    """Text normalisation applied to both sides before WER/CER."""

    lowercase: bool = True
    remove_punctuation: bool = True
    worst: int = 5


@dataclass
class EngineConfig:
    """Where the run decodes: in this process (``local``) or in worker actors on Ray (``ray``; the
    ``asrdecode[ray]`` extra), each loading the model and decoder once and decoding shards."""

    type: str = "local"  # local | ray
    address: str | None = None  # ray: none starts a local instance; auto or ray://host:port joins one
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0


@dataclass
class RunConfig:
    """The whole configuration of `asrdecode transcribe`."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # CPU intra-op threads; 0 = torch default
    model: ModelConfig = field(default_factory=ModelConfig)
    features: FeaturesConfig = field(default_factory=FeaturesConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    # the decoder's validated settings (its config dataclass, see `validate_decoder_section`);
    # None = `decoder.type: auto`, the model's natural decoder (resolved at run time)
    decoder: Any = None
    output: OutputConfig = field(default_factory=OutputConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)

    def to_dict(self) -> dict:
        """The YAML/JSON form: the `decoder:` section as `{type: ..., options...}`."""
        from asrdecode.decoders import decoder_section

        tree = dataclasses.asdict(self)
        tree["decoder"] = decoder_section(self.decoder)
        return tree

    def digest(self) -> str:
        """Short hash of the canonical config (reported, and used for caching)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def build_config(
    config_file: str | Path | None = None,
    overrides: list[str] | None = None,
    default_setup: bool = False,
    setup: str | None = None,
) -> RunConfig:
    """YAML file (optional; `embedded:configs/...` for packaged ones) + CLI overrides → validated
    RunConfig (decoder section included). ``default_setup`` (no file given): start from
    `DEFAULT_SETUP`, or from ``setup`` (a packaged setup: `setup_of`); when the overrides choose
    another decoder.type, its decoder options that the chosen decoder does not take are left out
    (``--decoder let`` or ``wfst`` keep the same graph)."""
    from asrdecode.models.loading import resolve_packaged_path

    if default_setup and setup is None:
        setup = DEFAULT_SETUP
    if setup is not None and config_file is None:
        config_file = setup
    tree: dict = load_yaml(resolve_packaged_path(str(config_file))) if config_file else {}
    preset = dict(tree.get("decoder") or {}) if setup is not None else {}
    given: set[str] = set()
    for item in overrides or []:
        path, value = parse_override(item)
        apply_override(tree, path, value)
        if path[0] == "decoder":
            given.add(path[1] if len(path) > 1 else "")
    section = tree.get("decoder")
    if preset and isinstance(section, dict) and section.get("type") != preset.get("type"):
        from asrdecode.decoders import DECODERS, decoder_options

        kind = section.get("type")
        takes = set(decoder_options(kind)) if kind in DECODERS else set(section)
        tree["decoder"] = {k: v for k, v in section.items() if k == "type" or k in takes or k in given}
    cfg = dataclass_from_dict(RunConfig, tree)
    cfg.decoder = validate_decoder_section(cfg.decoder or {})
    validate_run(cfg)
    return cfg


def validate_run(cfg: RunConfig) -> None:
    """The range checks of every section that need no file (one-line ConfigErrors): batch sizes,
    thread counts, the engine and the outputs (the decoder's options: `validate_decoder_section`)."""
    validate_batch(cfg.batch)
    if cfg.features.type != "auto":
        raise ConfigError(
            f"features.type={shown(cfg.features.type)}: use auto (every model brings its own front end: "
            "NeMo log-mel from the checkpoint, the sphinx MFCC)"
        )
    threads = {"threads": cfg.threads, "model.threads": cfg.model.threads}
    if hasattr(cfg.decoder, "threads"):
        threads["decoder.threads"] = cfg.decoder.threads
    for key, value in threads.items():
        check_threads(key, value)
    model = cfg.model
    if not (math.isfinite(model.chunk_seconds) and model.chunk_seconds >= 0):
        raise ConfigError(f"model.chunk_seconds must be seconds >= 0 (0 = off), got {model.chunk_seconds}")
    if not (math.isfinite(model.buffer_seconds) and model.buffer_seconds > 0):
        raise ConfigError(f"model.buffer_seconds must be seconds > 0, got {model.buffer_seconds}")
    if model.topn < 0:
        raise ConfigError(f"model.topn must be >= 0 (0 = the full mixture), got {model.topn}")
    validate_engine(cfg.engine)
    validate_output(cfg.output)


def check_threads(key: str, value: int) -> None:
    """A thread count: 0 (all cores) up to `MAX_THREADS`."""
    if not 0 <= value <= MAX_THREADS:
        cores = os.cpu_count() or 1
        raise ConfigError(
            f"{key}={value}: use 0 (all {cores} cores of this machine) up to {MAX_THREADS} threads"
        )


def validate_batch(batch: BatchConfig) -> None:
    """One-line ConfigError for batch sizes that cannot make batches."""
    if not (math.isfinite(batch.max_seconds) and batch.max_seconds > 0):
        raise ConfigError(f"batch.max_seconds must be seconds > 0, got {batch.max_seconds}")
    if batch.max_utterances < 1:
        raise ConfigError(f"batch.max_utterances must be at least 1, got {batch.max_utterances}")
    if not (math.isfinite(batch.segment_seconds) and batch.segment_seconds >= 0):
        raise ConfigError(
            f"batch.segment_seconds must be seconds >= 0 (0 = never cut), got {batch.segment_seconds}"
        )


def validate_output(output: OutputConfig) -> None:
    """One-line ConfigError for subtitle settings that cannot make subtitles."""
    from asrdecode.io.subtitles import subtitle_formats

    subtitle_formats(output.subtitles)
    if output.subtitle_line_chars < 1 or output.subtitle_lines < 1:
        raise ConfigError("output.subtitle_line_chars and output.subtitle_lines must be at least 1")
    if output.subtitle_max_seconds <= 0 or output.subtitle_pause <= 0:
        raise ConfigError("output.subtitle_max_seconds and output.subtitle_pause must be positive")


def validate_engine(engine: EngineConfig) -> None:
    """One-line ConfigError for an engine section that cannot run."""
    if engine.type not in ("local", "ray"):
        raise ConfigError(f"engine.type '{shown(engine.type)}' is not one of: local, ray")
    if engine.workers < 1:
        raise ConfigError(f"engine.workers must be at least 1, got {engine.workers}")
    if engine.cpus_per_worker < 0 or engine.gpus_per_worker < 0:
        raise ConfigError("engine.cpus_per_worker and engine.gpus_per_worker must not be negative")
    if engine.workers > MAX_THREADS or engine.cpus_per_worker > MAX_THREADS:
        raise ConfigError(f"engine.workers and engine.cpus_per_worker: at most {MAX_THREADS}")


def setup_of(config_file: str | Path | None, overrides: list[str], input_path: Path) -> str | None:
    """The packaged setup a run starts from, or None: with no config file and audio input (a saved
    log-probs folder keeps the plain defaults: its decoder follows its model), `DEFAULT_SETUP` when
    no model is chosen (``model.path`` or ``model.type``; settings such as ``model.threads`` keep
    it), the model's own setup when ``model.path`` is an embedded model of `MODEL_SETUPS` (and
    ``model.type`` is not set)."""
    from asrdecode.io.manifests import LOGPROBS_META

    if config_file is not None or (Path(input_path) / LOGPROBS_META).is_file():
        return None
    chosen = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if key.strip() in ("model.path", "model.type", "model"):
            chosen[key.strip()] = value.strip()
    if not chosen:
        return DEFAULT_SETUP
    if set(chosen) == {"model.path"}:
        return MODEL_SETUPS.get(chosen["model.path"])
    return None


def uses_default_setup(config_file: str | Path | None, overrides: list[str], input_path: Path) -> bool:
    """True when a run gets `DEFAULT_SETUP` (`setup_of`)."""
    return setup_of(config_file, overrides, input_path) == DEFAULT_SETUP


def validate_decoder_section(section: dict) -> Any:
    """The one check of a `decoder:` section: its type's config dataclass, filled with the defaults
    (None for `auto`, which takes no options). Decoders are built from this object as it is."""
    from asrdecode.decoders import decoder_config_from_dict

    if not isinstance(section, dict):
        raise ConfigError(f"config section 'decoder' must be a mapping, got {section!r}")
    kind = section.get("type", "auto")
    if kind == "auto":
        extra = sorted(shown(str(k)) for k in section if k != "type")
        if extra:
            raise ConfigError(
                f"decoder options {', '.join('decoder.' + k for k in extra)} need an explicit decoder.type "
                "(e.g. --decoder ctc-greedy)"
            )
        return None
    return decoder_config_from_dict(section)


def config_to_yaml(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
