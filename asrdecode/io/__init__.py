"""Inputs (manifests, folders, Kaldi dirs, saved log-probs) and outputs (transcripts, CTM, report)."""

from asrdecode.io.manifests import (
    AUDIO_EXTENSIONS,
    DEFAULT_BOOST_SCORE,
    INPUT_KINDS,
    InputSet,
    LogprobsMeta,
    Utterance,
    load_logprobs,
    logprobs_filename,
    probe_duration,
    read_inputs,
    save_logprobs,
    write_logprobs_meta,
)
from asrdecode.io.writers import OutputWriter, write_report

__all__ = [
    "AUDIO_EXTENSIONS",
    "DEFAULT_BOOST_SCORE",
    "INPUT_KINDS",
    "InputSet",
    "LogprobsMeta",
    "OutputWriter",
    "Utterance",
    "load_logprobs",
    "logprobs_filename",
    "probe_duration",
    "read_inputs",
    "save_logprobs",
    "write_logprobs_meta",
    "write_report",
]
