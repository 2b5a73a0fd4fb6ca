"""Inputs -> Utterances: audio folders, NeMo JSONL manifests, Kaldi data dirs, single files, saved log-probs.

Every reader is a pure function of the files it is given (it never prints). Problems with the input as
a whole raise InputError("file:line: problem"); problems with one utterance's audio are found later by
`load_audio` / `load_logprobs`, so that one bad file does not stop a batch run.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import numpy as np
import soundfile as sf

from asrdecode.atomic_files import atomic_target, atomic_write_text
from asrdecode.errors import InputError, LogprobsError, OutputError, one_line
from asrdecode.io.lines import parse_json, read_lines, read_text_bytes
from asrdecode.quiet_stderr import is_mpeg, quiet_stderr

#: Extensions of the containers read by FFmpeg (`asrdecode.audio.containers`), not libsndfile.
CONTAINER_EXTENSIONS: tuple[str, ...] = (
    ".m4a", ".m4b", ".mp4", ".aac", ".webm", ".mka", ".mkv", ".mov", ".wma", ".wmv", ".amr",
    ".3gp", ".ac3", ".avi", ".ts",
)  # fmt: skip
#: Audio file extensions picked up from folders (case-insensitive): libsndfile's, then the containers'.
AUDIO_EXTENSIONS: tuple[str, ...] = (
    ".wav",
    ".flac",
    ".ogg",
    ".oga",
    ".opus",
    ".mp3",
    ".aiff",
    ".aif",
    ".aifc",
    ".au",
    ".snd",
    ".caf",
    ".w64",
    ".rf64",
    ".sph",
    ".nist",
    *CONTAINER_EXTENSIONS,
)
#: Files that mark a folder of saved model outputs / a Kaldi data dir.
LOGPROBS_META = "logprobs.json"
LOGPROBS_UTTS = "utterances.jsonl"
KALDI_WAV_SCP = "wav.scp"
#: Score given to each word of a `boost` list (a dict gives explicit scores).
DEFAULT_BOOST_SCORE = 1.0

INPUT_KINDS = ("folder", "jsonl", "kaldi", "file", "logprobs")


@dataclass
class Utterance:
    """One unit of work: a span of an audio file (or a saved log-prob matrix) plus optional reference.

    offset/duration are in seconds; duration None means "to the end of the file".
    channel: 0-based channel to keep; None averages all channels.
    record: the input line as a dict, echoed into transcripts.jsonl.
    error: set when the input already tells this utterance cannot be loaded (e.g. an unsupported
        Kaldi pipe); `load_audio` raises it as AudioError so it is reported like any unreadable file.
    """

    utt_id: str
    audio_path: str | None
    offset: float = 0.0
    duration: float | None = None
    text: str | None = None
    boost: dict[str, float] | None = None
    record: dict = field(default_factory=dict)
    logprobs_path: str | None = None
    channel: int | None = None
    error: str | None = None


@dataclass
class LogprobsMeta:
    """Contents of logprobs.json: what the saved [T, V] matrices mean."""

    frame_shift: float
    blank_id: int
    units: list[str]
    num_columns: int
    dtype: str = "float32"
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: str | Path) -> LogprobsMeta:
        """Read and validate logprobs.json (InputError naming the file on any problem)."""
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: not found (a log-prob folder needs {LOGPROBS_META})")
        data = parse_json(read_text_bytes(path), str(path))
        if not isinstance(data, dict):
            raise InputError(f"{path}: expected a JSON object")
        try:
            frame_shift = data["frame_shift"]
            blank_id = data["blank_id"]
            units = data["units"]
        except KeyError as e:
            raise InputError(f"{path}: missing key {e.args[0]!r}") from None
        if not _is_number(frame_shift) or frame_shift <= 0:
            raise InputError(f"{path}: 'frame_shift' must be a positive number of seconds")
        if not isinstance(blank_id, int) or isinstance(blank_id, bool):
            raise InputError(f"{path}: 'blank_id' must be an integer (-1 for none)")
        if not isinstance(units, list) or not all(isinstance(u, str) for u in units):
            raise InputError(f"{path}: 'units' must be a list of strings")
        num_columns = data.get("num_columns", _default_num_columns(units, blank_id))
        if not isinstance(num_columns, int) or num_columns <= 0:
            raise InputError(f"{path}: 'num_columns' must be a positive integer")
        dtype = data.get("dtype", "float32")
        if dtype not in ("float32", "float16"):
            raise InputError(f"{path}: 'dtype' must be float32 or float16, got {dtype!r}")
        known = {"frame_shift", "blank_id", "units", "num_columns", "dtype"}
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(float(frame_shift), blank_id, list(units), num_columns, dtype, extra)


@dataclass
class InputSet:
    """The utterances of one input, with where they came from.

    kind: one of INPUT_KINDS. warnings: non-fatal findings for the CLI to show (renamed duplicate
    ids, references without audio, ...). logprobs_meta: set for kind "logprobs".
    """

    kind: str
    source: Path
    utterances: list[Utterance]
    warnings: list[str] = field(default_factory=list)
    logprobs_meta: LogprobsMeta | None = None

    def __len__(self) -> int:
        return len(self.utterances)

    @property
    def meta(self) -> dict:
        """logprobs.json as a dict (frame_shift, blank_id, units, num_columns, dtype, extra keys);
        {} for inputs that are not saved log-probs."""
        m = self.logprobs_meta
        if m is None:
            return {}
        return {
            **m.extra,
            "frame_shift": m.frame_shift,
            "blank_id": m.blank_id,
            "units": list(m.units),
            "num_columns": m.num_columns,
            "dtype": m.dtype,
        }

    def __iter__(self) -> Iterator[Utterance]:
        return iter(self.utterances)

    def ids(self) -> list[str]:
        """Utterance ids in input order."""
        return [u.utt_id for u in self.utterances]

    def by_id(self) -> dict[str, Utterance]:
        return {u.utt_id: u for u in self.utterances}

    def total_duration(self) -> float:
        """Sum of the known durations in seconds (see `unknown_durations`)."""
        return float(sum(u.duration for u in self.utterances if u.duration is not None))

    def unknown_durations(self) -> list[str]:
        """Ids whose duration could not be read (usually unreadable files)."""
        return [u.utt_id for u in self.utterances if u.duration is None]

    @property
    def has_references(self) -> bool:
        return any(u.text is not None for u in self.utterances)

    def references(self) -> dict[str, str]:
        """utt_id -> reference text, for the utterances that have one."""
        return {u.utt_id: u.text for u in self.utterances if u.text is not None}

    def remaining(self, done: set[str]) -> list[Utterance]:
        """Utterances not in `done` (ids already written by an earlier run), in input order."""
        return [u for u in self.utterances if u.utt_id not in done]


# ----------------------------------------------------------------------------------------------------
# Entry point


def user_path(value: str | Path) -> Path:
    """``~`` / ``~user`` expanded where that user has a home; otherwise the path as written (a
    path that then does not exist, reported as such, instead of an exception)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:  # "~name" of an unknown user, or no home directory
        return Path(value)


def read_inputs(path: str | Path, *, channel: int | None = None) -> InputSet:
    """Detect what `path` is and read its utterances.

    - a folder with logprobs.json -> saved model outputs ("logprobs")
    - a folder with wav.scp (or the wav.scp file itself) -> Kaldi data dir ("kaldi")
    - any other folder -> audio files found recursively ("folder")
    - a .json/.jsonl file or a file starting with '{' -> NeMo-style manifest ("jsonl")
    - an audio file -> one utterance ("file")

    `channel` is the default channel selector (None = average all channels); a manifest's
    per-line `channel` key wins. Manifests are read with NeMo's keys (`read_jsonl_manifest`).
    """
    p = user_path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    if not p.is_dir() and (problem := unreadable(p)) is not None:  # a FIFO would block the read
        raise InputError(problem)
    if p.is_dir():
        if (p / LOGPROBS_META).is_file():
            return read_logprobs_dir(p)
        if (p / KALDI_WAV_SCP).is_file():
            return read_kaldi_dir(p, channel=channel)
        return read_audio_folder(p, channel=channel)
    if p.name == KALDI_WAV_SCP:
        return read_kaldi_dir(p.parent, channel=channel)
    if p.name == LOGPROBS_META:
        return read_logprobs_dir(p.parent)
    if p.suffix.lower() in AUDIO_EXTENSIONS:
        return read_audio_file(p, channel=channel)
    if p.suffix.lower() in (".json", ".jsonl", ".manifest") or _first_char(p) in ("{", "["):
        return read_jsonl_manifest(p, channel=channel)
    if probe_duration(p) is not None:
        return read_audio_file(p, channel=channel)
    raise InputError(
        f"{p}: not an audio file, a JSONL manifest, a Kaldi data dir or a folder "
        f"(audio extensions: {', '.join(AUDIO_EXTENSIONS)})"
    )


# ----------------------------------------------------------------------------------------------------
# Audio folder / single file


def read_audio_folder(folder: str | Path, *, channel: int | None = None) -> InputSet:
    """All audio files under `folder` (recursive, hidden files and folders skipped), sorted by path.

    utt_id = relative path without extension, '/' -> '-', whitespace -> '_'. Ids that would clash
    (a.wav + a.flac, x/y.wav + x-y.wav) get the extension appended, then -2, -3, ... in path order.
    """
    folder = Path(folder)
    rels: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.startswith(".") or Path(name).suffix.lower() not in AUDIO_EXTENSIONS:
                continue
            rels.append(Path(root, name).relative_to(folder).as_posix())
    if not rels:
        raise InputError(f"{folder}: no audio files found (looked for {', '.join(AUDIO_EXTENSIONS)})")
    rels.sort()
    warnings: list[str] = []
    ids = _folder_ids(rels, warnings)
    utts = []
    for rel, utt_id in zip(rels, ids, strict=True):
        audio = str(folder / rel)
        dur = probe_duration(audio)
        record: dict[str, Any] = {"audio_filepath": audio}
        if dur is not None:
            record["duration"] = round(dur, 6)
        utts.append(Utterance(utt_id, audio, duration=dur, record=record, channel=channel))
    return InputSet("folder", folder, utts, warnings)


def read_audio_file(path: str | Path, *, channel: int | None = None) -> InputSet:
    """A single audio file as a one-utterance input (utt_id = file stem)."""
    p = Path(path)
    dur = probe_duration(p)
    record: dict[str, Any] = {"audio_filepath": str(p)}
    if dur is not None:
        record["duration"] = round(dur, 6)
    utt = Utterance(_sanitize_id(p.stem), str(p), duration=dur, record=record, channel=channel)
    return InputSet("file", p, [utt])


def _folder_ids(rels: list[str], warnings: list[str]) -> list[str]:
    base = [_sanitize_id(r.rsplit(".", 1)[0].replace("/", "-")) for r in rels]
    counts: dict[str, int] = {}
    for b in base:
        counts[b] = counts.get(b, 0) + 1
    ids = [
        b if counts[b] == 1 else f"{b}-{r.rsplit('.', 1)[1].lower()}" for b, r in zip(base, rels, strict=True)
    ]
    final = _dedupe(ids, set())
    for rel, b, f in zip(rels, base, final, strict=True):
        if b != f:
            warnings.append(f"{rel}: id {b!r} is used by another file, using {f!r}")
    return final


# ----------------------------------------------------------------------------------------------------
# NeMo-style JSONL manifest


def read_jsonl_manifest(
    path: str | Path,
    *,
    audio_key: str = "audio_filepath",
    text_key: str = "text",
    channel: int | None = None,
    default_boost: float = DEFAULT_BOOST_SCORE,
) -> InputSet:
    """One JSON object per line: `audio_filepath` (relative to the manifest's folder), `duration`,
    optional `text`, `offset`, `boost` (dict word->score or list of words), `channel`, `utt_id`/`id`.

    Every line is kept whole in Utterance.record. A missing `duration` is read from the file header.
    """
    path = Path(path)
    base_dir = path.parent
    parsed: list[tuple[int, dict, str | None]] = []  # (line number, object, explicit id)
    first_line_of: dict[str, int] = {}
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        obj = parse_json(line, where)
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        explicit = None
        for key in ("utt_id", "id"):
            if obj.get(key) is not None:
                explicit = _check_explicit_id(obj[key], key, where)
                if explicit in first_line_of:
                    raise InputError(
                        f"{where}: duplicate {key} {explicit!r} (first on line {first_line_of[explicit]})"
                    )
                first_line_of[explicit] = lineno
                break
        parsed.append((lineno, obj, explicit))
    if not parsed:
        raise InputError(f"{path}: manifest has no entries")

    warnings: list[str] = []
    utts: list[Utterance] = []
    taken = set(first_line_of)
    for lineno, obj, explicit in parsed:
        where = f"{path}:{lineno}"
        audio = obj.get(audio_key)
        if audio is None:
            raise InputError(f"{where}: missing {audio_key!r}")
        if not isinstance(audio, str) or not audio.strip():
            raise InputError(f"{where}: {audio_key!r} must be a non-empty string")
        audio_path = user_path(audio)
        if not audio_path.is_absolute():
            audio_path = base_dir / audio_path
        offset = _opt_number(obj, "offset", where, default=0.0)
        duration = _opt_number(obj, "duration", where, default=None)
        text = obj.get(text_key)
        if text is not None and not isinstance(text, str):
            raise InputError(f"{where}: {text_key!r} must be a string")
        boost = _parse_boost(obj.get("boost"), where, default_boost)
        ch = obj.get("channel", channel)
        if ch is not None and (not isinstance(ch, int) or isinstance(ch, bool) or ch < 0):
            raise InputError(f"{where}: 'channel' must be a non-negative integer (0 = first)")
        if duration is None:
            file_dur = probe_duration(audio_path)
            if file_dur is not None:
                duration = max(file_dur - offset, 0.0)
        if explicit is None:
            stem = _sanitize_id(Path(audio).stem) or "utt"
            utt_id = _dedupe([stem], taken)[0]
            if utt_id != stem:
                warnings.append(f"{where}: id {stem!r} already used, using {utt_id!r}")
            taken.add(utt_id)
        else:
            utt_id = explicit
        utts.append(
            Utterance(
                utt_id,
                str(audio_path),
                offset=offset,
                duration=duration,
                text=text,
                boost=boost,
                record=obj,
                channel=ch,
            )
        )
    return InputSet("jsonl", path, utts, warnings)


def _check_explicit_id(value: Any, key: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InputError(f"{where}: {key!r} must be a string")
    utt_id = str(value)
    if not utt_id or any(c.isspace() for c in utt_id):
        raise InputError(f"{where}: {key!r} {utt_id!r} must be non-empty and contain no whitespace")
    return utt_id


def _opt_number(obj: dict, key: str, where: str, default: float | None) -> float | None:
    value = obj.get(key)
    if value is None:
        return default
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: {key!r} must be a non-negative number of seconds, got {value!r}")
    return float(value)


def _parse_boost(value: Any, where: str, default_score: float) -> dict[str, float] | None:
    if value is None:
        return None
    if isinstance(value, list):
        if not all(isinstance(w, str) and w.strip() for w in value):
            raise InputError(f"{where}: 'boost' list must hold non-empty words")
        return {w.strip(): float(default_score) for w in value}
    if isinstance(value, dict):
        out = {}
        for w, s in value.items():
            if not w.strip() or not _is_number(s) or not math.isfinite(s):
                raise InputError(f"{where}: 'boost' must map words to finite numbers (bad entry {w!r})")
            out[w.strip()] = float(s)
        return out
    raise InputError(f"{where}: 'boost' must be a list of words or an object word -> score")


# ----------------------------------------------------------------------------------------------------
# Kaldi data dir

_ARK_RE = re.compile(r"\.(ark|scp):\d+$|^-$")


def read_kaldi_dir(data_dir: str | Path, *, channel: int | None = None) -> InputSet:
    """Kaldi data dir: wav.scp (+ optional segments, text, utt2dur, reco2file_and_channel).

    With segments, each utterance's record names its recording (`recording_id`; with
    reco2file_and_channel also `ctm_file` / `ctm_channel`), so that hyp.ctm is written per recording
    in the recording's time, as Kaldi's scoring does (`writers.ctm_lines`).

    Plain paths are resolved against the working directory first (Kaldi runs from the recipe root),
    then the data dir and its two parents. Pipe entries (`cmd |`) are not run: the common
    "decode this file to stdout" forms (`flac -c -d -s F |`, `sox F -t wav - [remix N] |`,
    `sph2pipe -f wav -p [-c N] F |`, `ffmpeg -i F [-f wav] [-ar N] [-ac 1] - |`) are read as the
    file F (and channel N); any other command or ark offset becomes an utterance whose loading
    fails with a clear message.
    """
    data_dir = Path(data_dir)
    wav_scp = data_dir / KALDI_WAV_SCP
    warnings: list[str] = []
    recs: dict[str, tuple[str, int | None, str | None]] = {}  # rec -> (path, channel, error)
    rec_line: dict[str, int] = {}
    for lineno, line in read_lines(wav_scp):
        if not line.strip():
            continue
        parts = line.strip().split(maxsplit=1)
        where = f"{wav_scp}:{lineno}"
        if len(parts) != 2:
            raise InputError(f"{where}: expected '<recording-id> <path or command |>'")
        rec, entry = parts
        if rec in recs:
            raise InputError(f"{where}: duplicate recording id {rec!r} (first on line {rec_line[rec]})")
        rec_line[rec] = lineno
        recs[rec] = _parse_wav_entry(entry, data_dir, where)

    texts = _read_kaldi_table(data_dir / "text", allow_empty_value=True)
    durs_raw = _read_kaldi_table(data_dir / "utt2dur")
    durs: dict[str, float] = {}
    for utt, (lineno, value) in durs_raw.items():
        try:
            durs[utt] = float(value)
        except ValueError:
            raise InputError(f"{data_dir / 'utt2dur'}:{lineno}: duration {value!r} is not a number") from None

    # (utt, rec, start, end or None)
    spans: list[tuple[str, str, float, float | None]] = []
    seg_file = data_dir / "segments"
    if seg_file.is_file():
        seen: dict[str, int] = {}
        for lineno, line in read_lines(seg_file):
            if not line.strip():
                continue
            where = f"{seg_file}:{lineno}"
            f = line.split()
            if len(f) != 4:
                raise InputError(f"{where}: expected '<utt-id> <recording-id> <start> <end>'")
            utt, rec = f[0], f[1]
            try:
                start, end = float(f[2]), float(f[3])
            except ValueError:
                raise InputError(f"{where}: start/end must be numbers of seconds") from None
            if utt in seen:
                raise InputError(f"{where}: duplicate utterance id {utt!r} (first on line {seen[utt]})")
            seen[utt] = lineno
            if rec not in recs:
                raise InputError(f"{where}: recording {rec!r} is not in wav.scp")
            if start < 0 or (end != -1 and end <= start):
                raise InputError(f"{where}: bad segment times {f[2]}..{f[3]}")
            spans.append((utt, rec, start, None if end == -1 else end))
    else:
        spans = [(rec, rec, 0.0, None) for rec in recs]
    # segments of recordings: hyp.ctm is written per recording, in its time (Kaldi's convert_ctm.pl)
    ctm_names = _read_reco2file_and_channel(data_dir, recs) if seg_file.is_file() else {}

    utts = []
    for utt, rec, start, end in spans:
        path, ch, error = recs[rec]
        if end is not None:
            duration: float | None = end - start
        elif utt in durs and start == 0.0:
            duration = durs[utt]
        elif error is None:
            file_dur = probe_duration(path)
            duration = None if file_dur is None else max(file_dur - start, 0.0)
        else:
            duration = None
        record: dict[str, Any] = {"audio_filepath": path}
        if start:
            record["offset"] = start
        if duration is not None:
            record["duration"] = round(duration, 6)
        text = texts[utt][1] if utt in texts else None
        if text is not None:
            record["text"] = text
        if seg_file.is_file():
            record["recording_id"] = rec
            if rec in ctm_names:
                record["ctm_file"], record["ctm_channel"] = ctm_names[rec]
        utts.append(
            Utterance(
                utt,
                path,
                offset=start,
                duration=duration,
                text=text,
                record=record,
                channel=ch if ch is not None else channel,
                error=error,
            )
        )
    known = {u.utt_id for u in utts}
    orphans = [u for u in texts if u not in known]
    if orphans:
        warnings.append(
            f"{data_dir / 'text'}: {len(orphans)} transcript(s) without audio, e.g. {orphans[0]!r}"
        )
    if not utts:
        raise InputError(f"{wav_scp}: no entries")
    return InputSet("kaldi", data_dir, utts, warnings)


def _read_reco2file_and_channel(data_dir: Path, recs: dict) -> dict[str, tuple[str, str]]:
    """Kaldi's optional reco2file_and_channel (`<recording-id> <file-id> <channel>`, the names a CTM
    and an STM use) -> recording -> (file, channel); {} without the file."""
    path = data_dir / "reco2file_and_channel"
    if not path.is_file():
        return {}
    names: dict[str, tuple[str, str]] = {}
    for lineno, line in read_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 3:
            raise InputError(f"{path}:{lineno}: expected '<recording-id> <file-id> <channel>'")
        if fields[0] not in recs:
            raise InputError(f"{path}:{lineno}: recording {fields[0]!r} is not in wav.scp")
        names[fields[0]] = (fields[1], fields[2])
    return names


def _parse_wav_entry(entry: str, data_dir: Path, where: str) -> tuple[str, int | None, str | None]:
    """wav.scp value -> (path, channel, error message or None)."""
    if entry.endswith("|"):
        cmd = entry[:-1].strip()
        parsed = _parse_pipe(cmd)
        if parsed is None:
            return (
                cmd,
                None,
                f"{where}: pipe command {cmd!r} is not run by asrdecode; "
                f"convert the audio to files and list their paths in wav.scp",
            )
        path, ch = parsed
        return _resolve_kaldi_path(path, data_dir), ch, None
    if _ARK_RE.search(entry):
        return entry, None, f"{where}: ark/stdin entry {entry!r} is not supported; list audio file paths"
    return _resolve_kaldi_path(entry, data_dir), None, None


def _parse_pipe(cmd: str) -> tuple[str, int | None] | None:
    """Recognise commands that only decode one file to stdout; None for anything else."""
    try:
        tok = shlex.split(cmd)
    except ValueError:
        return None
    if len(tok) == 5 and tok[0] == "flac" and sorted(tok[1:4]) == ["-c", "-d", "-s"]:
        return tok[4], None
    if len(tok) in (5, 7) and tok[0] == "sox" and tok[2:5] == ["-t", "wav", "-"]:
        if len(tok) == 5:
            return tok[1], None
        if tok[5] == "remix" and tok[6].isdigit() and int(tok[6]) >= 1:
            return tok[1], int(tok[6]) - 1
        return None
    if tok and tok[0] == "sph2pipe" and len(tok) >= 5 and tok[1:4] == ["-f", "wav", "-p"]:
        rest = tok[4:]
        if len(rest) == 1:
            return rest[0], None
        if len(rest) == 3 and rest[0] == "-c" and rest[1].isdigit() and int(rest[1]) >= 1:
            return rest[2], int(rest[1]) - 1
    if tok and tok[0] == "ffmpeg":
        return _parse_ffmpeg_pipe(tok[1:])
    return None


#: ffmpeg options that change nothing asrdecode reads: logging, prompts (no value / one value).
_FFMPEG_QUIET = {"-nostdin", "-hide_banner", "-y", "-nostats"}
_FFMPEG_LOGGING = {"-loglevel", "-v"}


def _parse_ffmpeg_pipe(tok: list[str]) -> tuple[str, None] | None:
    """`ffmpeg [-nostdin|-hide_banner|-y|-loglevel L] -i F [-f wav] [-ar N] [-ac 1]
    [-acodec|-c:a pcm_s16le|pcm_f32le] [-vn] -|pipe:|pipe:1`: the first audio track of F, mono (the
    model's rate comes from resampling F as any input is); None for any other use of ffmpeg."""
    path: str | None = None
    i = 0
    while i < len(tok) - 1:
        opt, value = tok[i], tok[i + 1]
        if opt in _FFMPEG_QUIET or opt == "-vn":
            i += 1
            continue
        if opt == "-i" and path is None:
            path = value
        elif not _ffmpeg_option_kept_out(opt, value):
            return None
        i += 2
    if path is None or i != len(tok) - 1 or tok[-1] not in ("-", "pipe:", "pipe:1"):
        return None
    return path, None


def _ffmpeg_option_kept_out(opt: str, value: str) -> bool:
    """An ffmpeg option (with its value) that changes nothing asrdecode reads: logging, the rate
    (inputs are resampled anyway), mono, a WAV of PCM samples."""
    return (
        opt in _FFMPEG_LOGGING
        or (opt == "-ar" and value.isdigit())
        or (opt, value) in {("-ac", "1"), ("-f", "wav")}
        or (opt in ("-acodec", "-c:a") and value in ("pcm_s16le", "pcm_f32le"))
    )


def _resolve_kaldi_path(entry: str, data_dir: Path) -> str:
    p = user_path(entry)
    if p.is_absolute():
        return str(p)
    for base in (Path.cwd(), data_dir, data_dir.parent, data_dir.parent.parent):
        if (base / p).exists():
            return str(base / p)
    return str(data_dir / p)


def _read_kaldi_table(path: Path, allow_empty_value: bool = False) -> dict[str, tuple[int, str]]:
    """`key value...` lines -> {key: (line number, value)}; {} if the file does not exist."""
    out: dict[str, tuple[int, str]] = {}
    if not path.is_file():
        return out
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 1 and not allow_empty_value:
            raise InputError(f"{path}:{lineno}: expected '<utt-id> <value>'")
        key = parts[0]
        if key in out:
            raise InputError(f"{path}:{lineno}: duplicate id {key!r} (first on line {out[key][0]})")
        out[key] = (lineno, " ".join(parts[1].split()) if len(parts) == 2 else "")
    return out


# ----------------------------------------------------------------------------------------------------
# Saved log-probs


def logprobs_filename(utt_id: str) -> str:
    """File name of an utterance's matrix: the id, percent-encoded where not file-name safe."""
    return quote(utt_id, safe="") + ".npy"


def save_logprobs(
    out_dir: str | Path,
    utt_id: str,
    log_probs: Any,
    *,
    text: str | None = None,
    duration: float | None = None,
    record: dict | None = None,
) -> Path:
    """Write one [T, V] log-prob matrix as float32 <utt_id>.npy (temp file + rename, so a killed run
    leaves no half file). text/duration/record, when given, are appended to utterances.jsonl beside
    it so that decoding the folder later still has references, durations and input records."""
    if hasattr(log_probs, "detach"):  # torch tensor, without importing torch here
        log_probs = log_probs.detach().float().cpu().numpy()
    arr = np.ascontiguousarray(np.asarray(log_probs, dtype=np.float32))
    if arr.ndim != 2:
        raise ValueError(f"log_probs for {utt_id!r} must be [T, V], got shape {arr.shape}")
    out_dir = Path(out_dir)
    target = out_dir / logprobs_filename(utt_id)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with atomic_target(target) as tmp, open(tmp, "wb") as f:
            np.save(f, arr, allow_pickle=False)
        _append_utterance_info(out_dir, utt_id, text, duration, record)
    except OSError as err:  # a full disk: numpy says only "N requested and M written"
        why = err.strerror or f"a short write ({one_line(err)}): is the disk full?"
        raise OutputError(f"{target}: cannot write the log-probs: {why}") from None
    return target


def _append_utterance_info(
    out_dir: Path, utt_id: str, text: str | None, duration: float | None, record: dict | None
) -> None:
    """utterances.jsonl's line for `utt_id` (its reference, duration and input record), if any."""
    info: dict[str, Any] = {}
    if text is not None:
        info["text"] = text
    if duration is not None:
        info["duration"] = float(duration)
    if record:
        info["record"] = record
    if info:
        line = json.dumps({"utt_id": utt_id, **info}, ensure_ascii=False, default=str)
        with open(out_dir / LOGPROBS_UTTS, "a+b") as f:
            if f.tell() > 0:  # a killed earlier run may have left a cut line: start a fresh one
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = "\n" + line
            f.write((line + "\n").encode("utf-8"))


def write_logprobs_meta(
    out_dir: str | Path,
    frame_shift: float,
    blank_id: int,
    units: list[str],
    extra: dict | None = None,
    num_columns: int | None = None,
) -> Path:
    """Write logprobs.json (atomically). `extra` keys are stored alongside, e.g. model info or
    "utterances": {utt_id: {"text": ref, "record": {...}}} to carry references and input lines."""
    meta: dict[str, Any] = dict(extra or {})
    meta.update(
        frame_shift=float(frame_shift),
        blank_id=int(blank_id),
        units=list(units),
        num_columns=int(num_columns if num_columns is not None else _default_num_columns(units, blank_id)),
        dtype="float32",
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LOGPROBS_META
    atomic_write_text(target, json.dumps(meta, ensure_ascii=False, indent=1))
    return target


def read_logprobs_dir(folder: str | Path) -> InputSet:
    """A folder of <utt_id>.npy [T, V] matrices + logprobs.json. References and input records come
    from logprobs.json's optional "utterances" table; duration = T x frame_shift (from the .npy header)."""
    folder = Path(folder)
    meta = LogprobsMeta.from_file(folder / LOGPROBS_META)
    table = meta.extra.get("utterances") or {}
    if not isinstance(table, dict):
        raise InputError(f"{folder / LOGPROBS_META}: 'utterances' must be an object utt_id -> info")
    table = {**table, **_read_utt_sidecar(folder / LOGPROBS_UTTS)}
    files = sorted(p for p in folder.iterdir() if p.suffix == ".npy" and not p.name.startswith("."))
    if not files:
        raise InputError(f"{folder}: no .npy log-prob files next to {LOGPROBS_META}")
    utts = []
    for p in files:
        utt_id = unquote(p.name[: -len(".npy")])
        info = table.get(utt_id) or {}
        if not isinstance(info, dict):
            raise InputError(f"{folder / LOGPROBS_META}: utterances[{utt_id!r}] must be an object")
        record = dict(info.get("record") or {})
        text = info.get("text", record.get("text"))
        frames = _npy_frames(p)
        duration = info.get("duration")
        if not _is_number(duration) or duration <= 0:
            duration = None if frames is None else frames * meta.frame_shift
        utts.append(
            Utterance(
                utt_id,
                record.get("audio_filepath"),
                duration=duration,
                text=text if isinstance(text, str) else None,
                record=record,
                logprobs_path=str(p),
            )
        )
    have = {u.utt_id for u in utts}
    missing = [u for u in table if u not in have]
    warnings = []
    if missing:
        warnings.append(
            f"{folder}: {len(missing)} utterance(s) in {LOGPROBS_META} have no .npy, e.g. {missing[0]!r}"
        )
    return InputSet("logprobs", folder, utts, warnings, logprobs_meta=meta)


def _read_utt_sidecar(path: Path) -> dict[str, dict]:
    """utterances.jsonl written by save_logprobs: later lines win; a cut last line is ignored."""
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, f"{path}:{lineno}")
        except InputError:
            continue  # partial line of a killed run
        if not isinstance(obj, dict) or not isinstance(obj.get("utt_id"), str):
            raise InputError(f"{path}:{lineno}: expected an object with a string 'utt_id'")
        out[obj.pop("utt_id")] = obj
    return out


def load_logprobs(utt: Utterance, meta: LogprobsMeta | None = None) -> np.ndarray:
    """Load an utterance's saved [T, V] log-probs as float32, checked against logprobs.json.

    Raises LogprobsError (an AudioError) "path: problem" for a missing, truncated, pickled,
    mis-shaped or NaN-holding file.
    """
    if utt.logprobs_path is None:
        raise LogprobsError(f"{utt.utt_id}: no saved log-probs for this utterance")
    path = Path(utt.logprobs_path)
    if meta is None:
        try:
            meta = LogprobsMeta.from_file(path.parent / LOGPROBS_META)
        except InputError as e:
            raise LogprobsError(str(e)) from None
    if not path.is_file():
        raise LogprobsError(f"{path}: file not found")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        raise LogprobsError(f"{path}: cannot read: {e.strerror or e}") from None
    if magic != b"\x93NUMPY":
        raise LogprobsError(f"{path}: cannot read: not a .npy file")
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as e:
        msg = one_line(e)
        if "allow_pickle" in msg or "Object arrays" in msg:
            msg = "holds pickled objects, which are not loaded"
        raise LogprobsError(f"{path}: not a plain .npy array ({msg})") from None
    except Exception as e:  # EOFError, OSError, UnpicklingError, ...
        raise LogprobsError(f"{path}: cannot read .npy (truncated or corrupt: {one_line(e)})") from None
    if arr.ndim != 2:
        raise LogprobsError(f"{path}: expected a [T, V] matrix, got shape {tuple(arr.shape)}")
    if arr.dtype != np.dtype(meta.dtype):
        raise LogprobsError(f"{path}: dtype {arr.dtype} but {LOGPROBS_META} says {meta.dtype}")
    if arr.shape[1] != meta.num_columns:
        raise LogprobsError(f"{path}: {arr.shape[1]} columns but {LOGPROBS_META} says {meta.num_columns}")
    if arr.shape[0] == 0:
        raise LogprobsError(f"{path}: has 0 frames")
    if np.isnan(arr).any():
        raise LogprobsError(f"{path}: contains NaN values")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _npy_frames(path: Path) -> int | None:
    """T of a [T, V] .npy from its header only, or None if unreadable."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, _ = np.lib.format.read_array_header_1_0(f)
            else:
                shape, _, _ = np.lib.format.read_array_header_2_0(f)
    except Exception:
        return None
    return int(shape[0]) if len(shape) == 2 else None


def _default_num_columns(units: list[str], blank_id: int) -> int:
    return max(len(units), blank_id + 1)


# ----------------------------------------------------------------------------------------------------
# Small helpers


def probe_duration(path: str | Path) -> float | None:
    """Duration in seconds from the audio header (libsndfile's, or FFmpeg's container for a format
    libsndfile does not know), or None if the file cannot be opened."""
    if unreadable(path) is not None:  # missing, empty, or a FIFO that opening would block on
        return None
    try:
        with quiet_stderr(is_mpeg(path)):
            info = sf.info(str(path))
    except Exception:
        from asrdecode.audio.containers import container_duration

        return container_duration(str(path))
    if not info.samplerate:
        return None
    return info.frames / info.samplerate


def unreadable(path: str | Path | None) -> str | None:
    """Why `path` cannot be read as an input file (missing, not a regular file: a folder, a FIFO,
    a device; no permission; empty), or None; nothing is opened."""
    if path is None:
        return "no file"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{path}: file not found"
    except (OSError, ValueError) as err:
        return f"{path}: cannot read: {getattr(err, 'strerror', None) or one_line(err)}"
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else None
        return f"{path}: {kind or 'a device or socket'}, not a regular file"
    if not os.access(path, os.R_OK):
        return f"{path}: cannot read: permission denied"
    return f"{path}: empty file (0 bytes)" if os.stat(path).st_size == 0 else None


def _first_char(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return ""
    head = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return chr(head[0]) if head else ""


def _sanitize_id(s: str) -> str:
    return re.sub(r"\s+", "_", s.strip())


def _dedupe(ids: list[str], taken: set[str]) -> list[str]:
    """Make ids unique (against each other and `taken`) by appending -2, -3, ... in order."""
    used = set(taken)
    out = []
    for i in ids:
        new, n = i, 1
        while new in used:
            n += 1
            new = f"{i}-{n}"
        used.add(new)
        out.append(new)
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
