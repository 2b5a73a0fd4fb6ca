"""Shape checks for structured files asrdecode reads back (graph meta.json, a ``.nemo`` model
config's sections, the lines of transcripts.jsonl and errors.jsonl on resume): types, required
keys and nested records, with one line naming the file, the key and what was expected.

A schema is a type (``float`` also takes ints; ``bool`` is not an int here), a tuple of
alternatives, a one-item list ``[item]`` (a list whose every element matches ``item``), or a dict
of keys: ``"name"`` required, ``"name?"`` optional, ``"*"`` every other key's value. Keys a
schema does not name are allowed (files from newer versions stay readable).
"""

from __future__ import annotations

from typing import Any

Schema = Any


def _type_name(spec: Schema) -> str:
    if isinstance(spec, dict):
        return "a mapping"
    if isinstance(spec, list):
        return "a list"
    if isinstance(spec, tuple):
        return " or ".join(_type_name(s) for s in spec)
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
            bool: "true/false", type(None): "null"}.get(spec, spec.__name__)  # fmt: skip


def _matches(value: Any, spec: Schema) -> bool:
    if isinstance(spec, tuple):
        return any(_matches(value, s) for s in spec)
    if isinstance(spec, dict):
        return isinstance(value, dict)
    if isinstance(spec, list):
        return isinstance(value, list)
    if spec is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, spec)


def problem(value: Any, spec: Schema, key: str = "") -> str | None:
    """What is wrong with ``value`` under ``spec`` (``key`` = where it is), or None."""
    where = key or "the top level"
    if not _matches(value, spec):
        return f"{where} must be {_type_name(spec)}, got {type(value).__name__}"
    if isinstance(spec, tuple):
        for alternative in spec:
            if _matches(value, alternative):
                return problem(value, alternative, key)
    if isinstance(spec, list):
        for i, item in enumerate(value):
            if (found := problem(item, spec[0], f"{key}[{i}]")) is not None:
                return found
    if isinstance(spec, dict):
        for name, sub in spec.items():
            if name == "*":
                continue
            optional = name.endswith("?")
            name = name.rstrip("?")
            path = f"{key}.{name}" if key else name
            if name not in value:
                if not optional:
                    return f"{path} is missing"
                continue
            if (found := problem(value[name], sub, path)) is not None:
                return found
        if "*" in spec:
            named = {n.rstrip("?") for n in spec}
            for name, item in value.items():
                if name not in named and (
                    found := problem(item, spec["*"], f"{key}.{name}" if key else name)
                ):
                    return found
    return None


# graph folders' meta.json (and the copy in graph.pt / graph.safetensors headers): what is read back
GRAPH_META: Schema = {
    "kind?": str,
    "topology?": (str, type(None)),
    "blank_column?": int,
    "blank_ilabel?": int,
    "num_columns?": int,
    "seconds?": {"*": float},
    "lm?": {"order": int, "ngrams": (dict, list), "*": (int, float, str, dict, list)},
    "dropped_lexicon_words?": (dict, list, int),
    "inputs?": {"*": {"path?": str, "sha256?": str}},
    "cache_key?": dict,
    "config?": dict,
}

# the sections of a NeMo model_config.yaml that asrdecode reads
NEMO_CONFIG: Schema = {
    "target?": str,
    "sample_rate?": (int, float),
    "labels?": (list, type(None)),
    "tokenizer?": (dict, type(None)),
    "preprocessor?": dict,
    "encoder?": dict,
    "decoder?": dict,
    "joint?": dict,
    "decoding?": (dict, type(None)),
    "aux_ctc?": (dict, type(None)),
    "loss?": (dict, type(None)),
    "model_defaults?": (dict, type(None)),
}

# a line of transcripts.jsonl, read back when a run resumes (text, hyp.ctm and the report's WER are
# rebuilt from these fields)
_NUMBER_OR_NULL = (float, type(None))
TRANSCRIPT_RECORD: Schema = {
    "utt_id": str,
    "pred_text": str,
    "words": [{"word": str, "start": _NUMBER_OR_NULL, "end": _NUMBER_OR_NULL, "conf?": _NUMBER_OR_NULL}],
    "score?": _NUMBER_OR_NULL,
    "lattice_density?": _NUMBER_OR_NULL,
    # an input decoded in segments: each one's span (seconds from the input's start) and word count
    "segments?": [{"start": float, "end": float, "words": int}],
    # a segment of a Kaldi recording: its hyp.ctm lines are in the recording's time
    "offset?": _NUMBER_OR_NULL,
    "recording_id?": (str, int),
    "ctm_file?": (str, int),
    "ctm_channel?": (str, int),
}

# a line of errors.jsonl
ERROR_RECORD: Schema = {"utt_id": str, "path?": (str, type(None)), "error?": str}
