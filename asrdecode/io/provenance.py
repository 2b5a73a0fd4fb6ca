"""What made the results of an output folder, so that a resumed run never mixes them.

`setup.json` records the settings that change a transcript (`run_setup`: the model and its file,
the decoder and the files it reads, the front end, the segment length); a rerun with other such
settings refuses to resume. Each transcript record names its input (``audio_filepath``, absolute,
``offset``, ``duration``); a resumed record whose id is no longer in the input, or now names
another file or span (`same_source`), is moved to `stale.jsonl` and its utterance decoded again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrdecode.errors import one_line, shown

if TYPE_CHECKING:
    from asrdecode.config import RunConfig
    from asrdecode.io.manifests import Utterance

SETUP = "setup.json"
STALE = "stale.jsonl"
# decoder, model and run settings that change speed or memory, not what is decoded
SPEED_ONLY = frozenset(
    {
        "threads",
        "backend",
        "host_copy_frames",
        "cuda_graphs",
        "pinned_copies",
        "kernel",
        "lm_on_host",
        "lm_cache",
    }
)
_SAMPLES = 16  # blocks of a file hashed for its identity
_BLOCK = 1 << 16


def file_identity(path: Path) -> str:
    """A file's size and the SHA-256 of 16 blocks of 64 KiB spread over it (a retrained model of
    the same size differs in all of them); a folder's: its files' identities (not recursive)."""
    h = hashlib.sha256()
    if path.is_dir():
        for child in sorted(path.iterdir()):
            if child.is_file() and not child.name.startswith("."):
                h.update(f"{child.name}\0{file_identity(child)}\0".encode())
        return h.hexdigest()[:16]
    size = path.stat().st_size
    with open(path, "rb") as fh:
        for i in range(_SAMPLES):
            fh.seek(max(0, size - _BLOCK) * i // (_SAMPLES - 1))
            h.update(fh.read(_BLOCK))
    return f"{size}:{h.hexdigest()[:16]}"


def _value_file(value: Any) -> Path | None:
    """The file or folder a setting's string value names (as the run reads it), or None."""
    from asrdecode.models.loading import in_checkout

    if not isinstance(value, str) or not value or value.startswith(("embedded:", "cache:")):
        return None
    if "/" not in value and "." not in value:  # a word such as `auto`, not a path
        return None
    try:
        path = Path(in_checkout(value))
        return path if path.is_file() or path.is_dir() else None
    except (OSError, ValueError):
        return None


def _flatten(prefix: str, section: Mapping[str, Any], out: dict[str, Any]) -> None:
    for key, value in section.items():
        if key in SPEED_ONLY:
            continue
        out[f"{prefix}{key}"] = value
        path = _value_file(value)
        if path is not None:
            try:
                out[f"{prefix}{key}:file"] = file_identity(path)
            except OSError as err:  # unreadable: the run's loading reports it
                out[f"{prefix}{key}:file"] = f"unreadable ({err.strerror or err})"


def run_setup(cfg: RunConfig, logprobs_meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings that change a run's transcripts, as flat ``key: value`` pairs (file and folder
    settings with their contents' identity, `file_identity`). ``logprobs_meta``: a saved log-probs
    input (logprobs.json), which stands for the model."""
    from asrdecode.decoders import decoder_section

    out: dict[str, Any] = {}
    if logprobs_meta:
        units = {k: logprobs_meta.get(k) for k in ("frame_shift", "blank_id", "units")}
        out["model.path"] = "(saved log-probs)"
        out["model:units"] = hashlib.sha256(json.dumps(units, sort_keys=True).encode()).hexdigest()[:16]
    else:
        _flatten("model.", dataclasses.asdict(cfg.model), out)
        _flatten("features.", dataclasses.asdict(cfg.features), out)
        out["batch.segment_seconds"] = cfg.batch.segment_seconds
    _flatten("decoder.", decoder_section(cfg.decoder), out)
    return json.loads(json.dumps(out, default=str))  # as setup.json reads back


def read_setup(path: Path) -> dict[str, Any] | None:
    """The settings recorded in `path` (setup.json), or None when it is missing or damaged."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    settings = data.get("settings") if isinstance(data, dict) else None
    return settings if isinstance(settings, dict) else None


def setup_json(settings: Mapping[str, Any]) -> str:
    """setup.json's text."""
    return json.dumps({"settings": dict(settings)}, indent=1, ensure_ascii=False) + "\n"


def setup_differences(old: Mapping[str, Any] | None, new: Mapping[str, Any], limit: int = 3) -> str:
    """What differs between two setups, in words: ``model.path embedded:a, now embedded:b; ...``."""
    if old is None:
        return f"{SETUP} is missing or damaged, so what made them is unknown"

    def value(v: Any) -> str:
        return (
            shown(one_line(ValueError(json.dumps(v, ensure_ascii=False)), 60)) if v is not None else "unset"
        )

    keys = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
    shown_keys = [k for k in keys if not k.endswith(":file") or k.rsplit(":", 1)[0] not in keys]
    parts = []
    for key in shown_keys[:limit]:
        if key.endswith(":file"):
            parts.append(f"{key.rsplit(':', 1)[0]}: the file's contents changed")
        else:
            parts.append(f"{key} {value(old.get(key))}, now {value(new.get(key))}")
    more = len(shown_keys) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def source_of(utt: Utterance) -> dict[str, Any]:
    """Where an utterance comes from: its audio file (absolute), offset and duration (None: to the
    end), as its transcript record names them."""
    path = utt.audio_path or utt.logprobs_path
    return {
        "audio_filepath": os.path.abspath(path) if path else None,
        "offset": utt.offset,
        "duration": utt.duration,
    }


def same_source(record: Mapping[str, Any], source: Mapping[str, Any]) -> bool:
    """Whether a transcript record was made from `source` (`source_of`): the same file (a relative
    path read from the current folder) and span (durations within 1 ms)."""
    path = record.get("audio_filepath")
    if source["audio_filepath"] is not None and isinstance(path, str):
        try:
            if os.path.abspath(path) != source["audio_filepath"]:
                return False
        except ValueError:
            return False
    offset = record.get("offset") or 0.0
    if isinstance(offset, int | float) and abs(float(offset) - (source["offset"] or 0.0)) > 1e-3:
        return False
    duration, expected = record.get("duration"), source["duration"]
    if isinstance(duration, int | float) and expected is not None and math.isfinite(expected):
        return abs(float(duration) - expected) <= 1e-3
    return True
