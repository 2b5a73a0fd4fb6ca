"""Results -> files, appended per batch and fsync'ed so that a killed run can resume.

transcripts.jsonl is the source of truth: `text`, `hyp.ctm` and `segments.jsonl` are derived from
it and rebuilt
from its complete lines whenever an existing output folder is resumed. Lattices go to one Kaldi
text archive, lattices/lat.ark.txt (``lat.ark,t`` entries: `utt-id` line, arcs, finals, blank
line), appended per batch *before* the batch's transcripts; on resume it keeps only complete
entries of utterances with a transcript (once each), so a killed run leaves no partial or
duplicate entry.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from asrdecode.atomic_files import atomic_write_text
from asrdecode.errors import InputError, OutputError, message_line
from asrdecode.io.lines import parse_json
from asrdecode.io.provenance import SETUP, STALE, read_setup, same_source, setup_differences, setup_json
from asrdecode.io.schema import ERROR_RECORD, TRANSCRIPT_RECORD, problem
from asrdecode.io.subtitles import SubtitleStyle, record_subtitles

if TYPE_CHECKING:
    from asrdecode.decoders.base import DecodeResult
    from asrdecode.io.manifests import Utterance

TRANSCRIPTS = "transcripts.jsonl"
TEXT = "text"
CTM = "hyp.ctm"
SEGMENT_LINES = "segments.jsonl"  # one line per decoded segment of each input, with its times
ERRORS = "errors.jsonl"
REPORT = "report.json"
LATTICES = "lattices"  # folder: lat.ark.txt (all utterances) and <utt>.fst files
LATTICE_ARCHIVE = "lattices/lat.ark.txt"
SUBTITLES = "subtitles"  # folder: <utt>.srt / <utt>.vtt (output.subtitles)
LOCK = ".asrdecode.lock"
SEGMENTS = "segments"  # folder: a long input's decoded segments (`asrdecode.io.segment_log`)
# what a result adds to its input record
RESULT_FIELDS = frozenset(
    {"pred_text", "words", "score", "acoustic_score", "lm_score", "nbest", "lattice_density", "segments"}
)

try:  # POSIX only; elsewhere two runs on one folder are not detected
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


class OutputWriter:
    """Appends results to out_dir/{transcripts.jsonl, text, hyp.ctm, segments.jsonl, errors.jsonl}.

    overwrite=False resumes: complete lines of an earlier run are kept (`done_ids()`), a partial
    last line (a run killed mid-write) is cut off, and text/hyp.ctm are rebuilt to match.
    overwrite=True starts fresh. A lock file keeps two runs from writing the same folder.
    `setup` (`provenance.run_setup`): the settings that make this run's transcripts, kept in
    setup.json; a folder whose results another setup made is refused (`OutputError`) unless
    overwrite. `sources` (utt_id -> `provenance.source_of`): the run's inputs; a resumed line whose
    id is not among them, or that was made from another file or span, moves to stale.jsonl.
    `subtitles` (formats of `asrdecode.io.subtitles`): each transcript also gets
    subtitles/<utt>.<fmt>, written before its line (a resumed run writes the missing ones).
    Use as a context manager, or call close().
    """

    def __init__(
        self,
        out_dir: str | Path,
        overwrite: bool = False,
        subtitles: tuple[str, ...] = (),
        subtitle_style: SubtitleStyle | None = None,
        setup: dict | None = None,
        sources: Mapping[str, dict] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.sources = sources
        self.subtitles = subtitles
        self.subtitle_style = subtitle_style or SubtitleStyle()
        self.warnings: list[str] = []
        own = (TRANSCRIPTS, TEXT, SEGMENT_LINES, SETUP, LOCK)  # this run's if new (`discard_if_unused`)
        self._made = [self.out_dir] if not self.out_dir.exists() else []
        self._made += [self.out_dir / name for name in own if not (self.out_dir / name).exists()]
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"{self.out_dir}: cannot create output folder: {e.strerror or e}") from None
        self._lock_fh = self._lock()
        self._failed = False  # a write failed (disk full, ...): close() leaves the files as they are
        self._done: set[str] = set()
        self._files: dict[str, IO[str]] = {}
        try:
            # what a killed atomic write left
            for name in (TRANSCRIPTS, TEXT, CTM, SEGMENT_LINES, ERRORS, REPORT, SETUP):
                for tmp in self.out_dir.glob(f".{name}.*.tmp"):
                    tmp.unlink(missing_ok=True)
            if overwrite:
                for name in (TRANSCRIPTS, TEXT, CTM, SEGMENT_LINES, ERRORS, REPORT, LATTICE_ARCHIVE, STALE):
                    (self.out_dir / name).unlink(missing_ok=True)
                for fst in (self.out_dir / LATTICES).glob("*.fst"):
                    fst.unlink()
                for sub in (self.out_dir / SUBTITLES).glob("*.*"):
                    if sub.suffix in (".srt", ".vtt"):
                        sub.unlink()
                for kept in self._segment_logs():
                    kept.unlink()
            if setup is not None:  # after the old results are gone: setup.json never names others
                self._check_setup(setup)
            if not overwrite:
                self._recover()
            for name in (TRANSCRIPTS, TEXT, SEGMENT_LINES):  # hyp.ctm / errors.jsonl: on first use
                self._open(name)
        except OSError as e:
            self._release()
            raise OutputError(f"{self.out_dir}: cannot write output files: {e.strerror or e}") from None
        except BaseException:
            self._release()
            raise

    # -- public API ------------------------------------------------------------------------------

    def done_ids(self) -> set[str]:
        """Ids with a complete line in transcripts.jsonl (from earlier runs and this one)."""
        return set(self._done)

    def write_results(
        self,
        utts: Sequence[Utterance],
        results: Sequence[DecodeResult],
        seconds: Sequence[float] | None = None,
        ctm: bool = True,
        extras: Sequence[dict | None] | None = None,
    ) -> None:
        """Append one batch (input record + utt_id, pred_text, words, score, nbest) and fsync.

        seconds: audio seconds actually decoded per utterance, stored as `duration` when the input
        record has none. ctm=False leaves hyp.ctm alone (it is still rebuilt from transcripts.jsonl
        on resume if it exists). extras: per-utterance fields to add to the record.
        """
        self.write_records(batch_records(utts, results, seconds, extras), ctm=ctm)

    def write_records(self, records: Sequence[dict], ctm: bool = True) -> None:
        """Write the records' subtitles, append finished transcript records (`batch_records`) to
        text, hyp.ctm, segments.jsonl and transcripts.jsonl, and fsync."""
        self._write_subtitles(records)
        self._append(TEXT, [text_line(rec) for rec in records])
        if ctm:
            self._append(CTM, [line for rec in records for line in ctm_lines(rec)])
        self._append(SEGMENT_LINES, [line for rec in records for line in segment_lines(rec)])
        self._append(TRANSCRIPTS, [_dumps(rec) + "\n" for rec in records])
        self._done.update(rec["utt_id"] for rec in records)

    def write_lattices(self, entries: Sequence[tuple[str, str]]) -> None:
        """Append (utt_id, Kaldi text entry) pairs to lattices/lat.ark.txt and fsync (call before
        `write_results` of the same batch). Each entry starts with its utt_id line and ends with
        a blank line."""
        for utt, text in entries:
            if not text.startswith(utt) or not text.endswith("\n\n"):
                raise ValueError(f"lattice entry of {utt!r} is not a `utt-id` ... blank-line block")
        if entries:
            (self.out_dir / LATTICES).mkdir(exist_ok=True)
            self._append(LATTICE_ARCHIVE, [text for _, text in entries])

    def read_records(self) -> list[dict]:
        """Every complete record of transcripts.jsonl."""
        path = self.out_dir / TRANSCRIPTS
        return _read_jsonl_records(path, [])[0] if path.exists() else []

    def write_errors(self, items: Iterable[tuple[str, str | None, str]]) -> None:
        """Append (utt_id, path, error message) entries to errors.jsonl and fsync."""
        lines = [_dumps({"utt_id": u, "path": p, "error": e}) + "\n" for u, p, e in items]
        self._append(ERRORS, lines)

    def write_error(self, utt: Utterance | str, error: str | BaseException, path: str | None = None) -> None:
        """Append one failed utterance (an Utterance, or an id plus `path`) to errors.jsonl."""
        self.write_errors([error_entry(utt, error, path)])

    def read_hypotheses(self) -> dict[str, str]:
        """utt_id -> pred_text of every complete line in transcripts.jsonl."""
        path = self.out_dir / TRANSCRIPTS
        if not path.exists():
            return {}
        records, _, _ = _read_jsonl_records(path, [])
        return {r["utt_id"]: str(r.get("pred_text") or "") for r in records}

    def write_report(self, report: dict) -> Path:
        """Write out_dir/report.json atomically (also after close())."""
        return write_report(self.out_dir, report)

    def close(self, order: Sequence[str] | None = None) -> None:
        """Finish: optionally rewrite transcripts and the files made from them in `order` (input
        order, undoing the longest-first batching; unknown ids go last), drop errors.jsonl entries
        of utterances that have since succeeded or failed again later, and release the lock."""
        if self._lock_fh is None:
            return
        try:
            self._close_files()
            if self._failed:  # complete lines are kept as written; a rerun resumes from them
                return
            if order is not None:
                records, _, _ = _read_jsonl_records(self.out_dir / TRANSCRIPTS, self.warnings)
                rank = {u: i for i, u in enumerate(order)}
                records.sort(key=lambda r: rank.get(r["utt_id"], len(rank)))
                _atomic_write(self.out_dir / TRANSCRIPTS, [_dumps(r) + "\n" for r in records])
                self._rebuild_derived(records)
            self._compact_errors()
        except OSError as e:
            raise OutputError(f"{self.out_dir}: cannot finish the output files: {e.strerror or e}") from None
        finally:
            self._release()

    def discard_if_unused(self) -> None:
        """After `close`, for a run that stopped before its first result (a model, graph or LM
        that does not load): remove the files this writer made while they are still empty (and
        setup.json, the lock file), and the folder if it made it and nothing else is in it: a
        failed start leaves no folder of empty files."""
        if self._lock_fh is not None:
            return
        folder, files = (self._made[0], self._made[1:]) if self.out_dir in self._made else (None, self._made)
        try:
            if any(
                f.name in (TRANSCRIPTS, TEXT, SEGMENT_LINES) and f.stat().st_size for f in files if f.exists()
            ):
                return
            for f in files:
                f.unlink(missing_ok=True)
            if folder is not None and not any(folder.iterdir()):
                folder.rmdir()
        except OSError:
            pass  # best effort: what cannot be removed stays; the run's own error is what it reports

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------------

    def _lock(self) -> IO[str] | None:
        fh = open(self.out_dir / LOCK, "a+")  # noqa: SIM115
        if fcntl is not None:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                raise OutputError(f"{self.out_dir}: in use by another asrdecode run") from None
        return fh

    def _check_setup(self, setup: dict) -> None:
        """Refuse a folder whose transcripts another setup made; record `setup` in setup.json."""
        path = self.out_dir / SETUP
        old = read_setup(path)
        if old == setup:
            return
        results = self.out_dir / TRANSCRIPTS
        if (results.is_file() and results.stat().st_size > 0) or self._segment_logs():
            raise OutputError(
                f"{self.out_dir}: holds results of another setup ({setup_differences(old, setup)}); "
                "--overwrite decodes everything again, or choose another --out"
            )
        atomic_write_text(path, setup_json(setup))

    def _close_files(self) -> None:
        """Close the append handles; a buffer that cannot be flushed (disk full) marks the run failed."""
        for f in self._files.values():
            try:
                f.close()
            except OSError:
                self._failed = True
        self._files = {}

    def _release(self) -> None:
        self._close_files()
        if self._lock_fh is not None:
            self._lock_fh.close()  # closing drops the flock
            self._lock_fh = None

    def _open(self, name: str) -> IO[str]:
        if name not in self._files:
            self._files[name] = open(self.out_dir / name, "a", encoding="utf-8", newline="\n")  # noqa: SIM115
        return self._files[name]

    def _append(self, name: str, lines: list[str]) -> None:
        if not lines:
            return
        if self._lock_fh is None:
            raise OutputError(f"{self.out_dir}: writer is closed")
        try:
            f = self._open(name)
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            self._failed = True
            raise OutputError(f"{self.out_dir / name}: cannot write: {e.strerror or e}") from None

    def _recover(self) -> None:
        path = self.out_dir / TRANSCRIPTS
        kept: list[dict] = []
        if path.exists():
            records, good_bytes, clean = _read_jsonl_records(path, self.warnings)
            stale: list[dict] = []
            for rec in records:
                if rec["utt_id"] in self._done:
                    clean = False
                    self.warnings.append(f"{path}: dropped a duplicate line for {rec['utt_id']!r}")
                    continue
                if self.sources is not None and not self._current(rec):
                    stale.append(rec)
                    continue
                self._done.add(rec["utt_id"])
                kept.append(rec)
            if stale:
                clean = False
                self._move_stale(stale)
            if clean:
                if good_bytes != path.stat().st_size:
                    os.truncate(path, good_bytes)  # cut the partial line of a killed run
            else:
                _atomic_write(path, [_dumps(r) + "\n" for r in kept])
        self._rebuild_derived(kept)
        self._compact_errors()
        self._recover_lattices()
        for log in self._segment_logs():  # of inputs whose transcript was written before a kill
            if unquote(log.name.removesuffix(".jsonl")) in self._done:
                log.unlink()

    def _segment_logs(self) -> list[Path]:
        """The kept segments of long inputs (`asrdecode.io.segment_log`)."""
        return sorted((self.out_dir / SEGMENTS).glob("*.jsonl"))

    def _current(self, rec: dict) -> bool:
        """Whether a resumed record is of one of this run's inputs, made from the same file and span."""
        source = self.sources.get(rec["utt_id"]) if self.sources is not None else None
        return source is not None and same_source(rec, source)

    def _move_stale(self, records: list[dict]) -> None:
        """Append resumed records that are not of this run's inputs to stale.jsonl (their
        utterances are decoded again), with one warning."""
        with open(self.out_dir / STALE, "a", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(_dumps(r) + "\n" for r in records))
            fh.flush()
            os.fsync(fh.fileno())
        gone = [r["utt_id"] for r in records if self.sources is not None and r["utt_id"] not in self.sources]
        changed = [r["utt_id"] for r in records if r["utt_id"] not in gone]
        what = []
        if gone:
            what.append(f"{len(gone)} whose id is not among the inputs now ({_some(gone)})")
        if changed:
            what.append(
                f"{len(changed)} whose id now names another file or span ({_some(changed)}: decoded again)"
            )
        self.warnings.append(
            f"{self.out_dir / TRANSCRIPTS}: moved {len(records)} result(s) to {self.out_dir / STALE}: "
            + "; ".join(what)
        )

    def _recover_lattices(self) -> None:
        """Keep the complete lattice entries of utterances with a transcript, first one each."""
        path = self.out_dir / LATTICE_ARCHIVE
        if not path.exists():
            return
        data = path.read_text(encoding="utf-8", errors="replace")
        blocks = data.split("\n\n")
        complete, tail = blocks[:-1], blocks[-1]  # the part after the last blank line is partial
        kept, seen = [], set()
        for block in complete:
            block = block.lstrip("\n")
            utt = block.split("\n", 1)[0].strip()
            if block and utt in self._done and utt not in seen:
                seen.add(utt)
                kept.append(block + "\n\n")
        dropped = len([b for b in complete if b.strip()]) - len(kept) + (1 if tail.strip() else 0)
        if dropped:
            self.warnings.append(f"{path}: dropped {dropped} lattice entries without a transcript line")
            _atomic_write(path, kept)

    def _write_subtitles(self, records: Sequence[dict], missing_only: bool = False) -> None:
        """subtitles/<utt>.<fmt> of each record (`asrdecode.io.subtitles`), each file atomic."""
        if not self.subtitles or not records:
            return
        folder = self.out_dir / SUBTITLES
        try:
            folder.mkdir(exist_ok=True)
            for rec in records:
                for fmt in self.subtitles:
                    path = folder / f"{quote(str(rec['utt_id']), safe='')}.{fmt}"
                    if not (missing_only and path.exists()):
                        atomic_write_text(path, record_subtitles(rec, fmt, self.subtitle_style))
        except OSError as e:
            self._failed = True
            raise OutputError(f"{folder}: cannot write subtitles: {e.strerror or e}") from None

    def _rebuild_derived(self, records: list[dict]) -> None:
        self._write_subtitles(records, missing_only=True)
        _atomic_write(self.out_dir / TEXT, [text_line(r) for r in records])
        _atomic_write(self.out_dir / SEGMENT_LINES, [line for r in records for line in segment_lines(r)])
        if (self.out_dir / CTM).exists():
            _atomic_write(self.out_dir / CTM, [line for r in records for line in ctm_lines(r)])

    def _compact_errors(self) -> None:
        """Keep the last error per utterance, and none for utterances that have a transcript."""
        path = self.out_dir / ERRORS
        if not path.exists():
            return
        entries, _, _ = _read_jsonl_records(path, self.warnings)
        last: dict[str, dict] = {}
        for e in entries:
            last.pop(e["utt_id"], None)  # re-insert so the order follows the latest failure
            last[e["utt_id"]] = e
        kept = [e for u, e in last.items() if u not in self._done]
        lines = [_dumps(e) + "\n" for e in kept]
        if "".join(lines).encode("utf-8") != path.read_bytes():
            _atomic_write(path, lines)


def _some(ids: list[str], limit: int = 3) -> str:
    """Up to `limit` ids, quoted, and how many more."""
    shown = ", ".join(repr(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


# ------------------------------------------------------------------------------------------------
# Line formats


def error_entry(
    utt: Utterance | str, error: str | BaseException, path: str | None = None
) -> tuple[str, str | None, str]:
    """(utt_id, path, message) of a failed utterance (an Utterance, or an id plus `path`)."""
    if not isinstance(utt, str):
        path = path or utt.audio_path or utt.logprobs_path
        utt = utt.utt_id
    return utt, path, message_line(str(error))


def batch_records(
    utts: Sequence[Utterance],
    results: Sequence[DecodeResult],
    seconds: Sequence[float] | None = None,
    extras: Sequence[dict | None] | None = None,
) -> list[dict]:
    """The transcripts.jsonl records of one batch (`result_record`), with the decoded audio seconds
    as `duration` where the input record has none."""
    n = len(utts)
    if len(results) != n or any(x is not None and len(x) != n for x in (seconds, extras)):
        raise ValueError("utts, results, seconds and extras must have the same length")
    records = []
    for i, (u, r) in enumerate(zip(utts, results, strict=True)):
        rec = result_record(u, r, extras[i] if extras is not None else None)
        if seconds is not None and rec.get("duration") is None:
            rec["duration"] = round(float(seconds[i]), 6)
        records.append(rec)
    return records


def result_record(utt: Utterance, result: DecodeResult, extra: dict | None = None) -> dict:
    """The transcripts.jsonl object: input record (less the result fields of an earlier run's
    transcripts.jsonl read as a manifest), then extra fields, then the result."""
    rec: dict[str, Any] = {k: v for k, v in utt.record.items() if k not in RESULT_FIELDS}
    if extra:
        rec.update(extra)
    rec["utt_id"] = utt.utt_id
    rec["pred_text"] = result.text
    rec["words"] = [
        {"word": w.word, "start": _r(w.start), "end": _r(w.end)}
        | ({"conf": _r(w.confidence, 4)} if w.confidence is not None else {})
        for w in result.words
    ]
    rec["score"] = _finite(result.score)
    if result.acoustic_score is not None:
        rec["acoustic_score"] = _finite(result.acoustic_score)
    if result.lm_score is not None:
        rec["lm_score"] = _finite(result.lm_score)
    if result.nbest:
        rec["nbest"] = [{"text": " ".join(ws), "score": _finite(s)} for ws, s in result.nbest]
    return rec


def text_line(rec: dict) -> str:
    """Kaldi `text` line: `utt_id word word ...` (the words of ``pred_text``, one space apart:
    whitespace-separated, as Kaldi reads it)."""
    words = " ".join(str(rec.get("pred_text") or "").split())
    return f"{rec['utt_id']} {words}\n" if words else f"{rec['utt_id']}\n"


def segment_lines(rec: dict) -> list[str]:
    """segments.jsonl lines of a transcript record: one per segment an input was decoded in (the
    record's ``segments``: start and end in seconds from the input's start and how many of its
    words each holds), else one for the whole input; each with ``utt_id``, ``segment`` (from 0),
    ``start``, ``end`` and ``pred_text`` (its words' times are in the record's ``words``)."""
    words = list(rec.get("words") or [])
    spans = rec.get("segments")
    if not spans or sum(int(s.get("words", 0)) for s in spans) != len(words):
        spans = [{"start": 0.0, "end": rec.get("duration"), "words": len(words)}]
    lines, first = [], 0
    for i, span in enumerate(spans):
        part = words[first : first + int(span["words"])]
        first += len(part)
        line = {"utt_id": rec["utt_id"], "segment": i, "start": span["start"], "end": span["end"]}
        line["pred_text"] = " ".join(str(w.get("word", "")) for w in part)
        lines.append(_dumps(line) + "\n")
    return lines


def ctm_lines(rec: dict) -> list[str]:
    """CTM lines `utt_id 1 start dur word [conf]`, times relative to the utterance start; for a
    segment of a recording (a Kaldi data dir with segments, or a manifest line with `recording_id`:
    the record has it) `file channel start dur word [conf]`
    in the recording's time, as Kaldi's `utils/convert_ctm.pl` writes them for sclite (file and
    channel from reco2file_and_channel, else the recording id and 1). The confidence column is left
    out when the decoder gives none; words without times, as an attention encoder-decoder writes
    them, have no line."""
    out = []
    name, channel, shift = rec["utt_id"], "1", 0.0
    if rec.get("recording_id") is not None:
        name = str(rec.get("ctm_file") or rec["recording_id"])
        channel = str(rec.get("ctm_channel") or "1")
        shift = float(rec.get("offset") or 0.0)
    for w in rec.get("words") or []:
        if w.get("start") is None or w.get("end") is None:
            continue
        start, end = float(w.get("start") or 0.0), float(w.get("end") or 0.0)
        word = "_".join(str(w.get("word", "")).split()) or "<unk>"
        line = f"{name} {channel} {shift + start:.3f} {max(end - start, 0.0):.3f} {word}"
        if w.get("conf") is not None:
            line += f" {float(w['conf']):.4f}"
        out.append(line + "\n")
    return out


# ------------------------------------------------------------------------------------------------
# Helpers


def write_report(out_dir: str | Path, report: dict) -> Path:
    """Write report.json atomically (temp file + fsync + rename); NaN/inf become null."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_jsonable(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    path = out_dir / REPORT
    try:
        _atomic_write(path, [text])
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror or e}") from None
    return path


def read_errors(out_dir: str | Path) -> list[dict]:
    """The entries of out_dir/errors.jsonl (``utt_id``, ``path``, ``error``); [] without one."""
    path = Path(out_dir) / ERRORS
    return _read_jsonl_records(path, [])[0] if path.is_file() else []


def _read_jsonl_records(path: Path, warnings: list[str]) -> tuple[list[dict], int, bool]:
    """Complete lines that parse and fit the file's schema (`TRANSCRIPT_RECORD` for
    transcripts.jsonl, `ERROR_RECORD` otherwise) -> (records, byte length of the valid prefix,
    clean). clean is False when a bad line sits before the end (then the file must be rewritten);
    each dropped line adds a warning naming the line and what was wrong."""
    schema = TRANSCRIPT_RECORD if path.name == TRANSCRIPTS else ERROR_RECORD
    data = path.read_bytes()
    records: list[dict] = []
    pos = good = lineno = 0
    clean = True
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:  # partial last line: killed mid-write
            warnings.append(f"{path}: dropped an incomplete last line ({len(data) - pos} bytes)")
            break
        raw = data[pos:nl]
        pos, lineno = nl + 1, lineno + 1
        if not raw.strip():
            if clean:
                good = pos
            continue
        try:
            obj = parse_json(raw, f"{path}:{lineno}")
            wrong = problem(obj, schema)
        except InputError as err:
            wrong = str(err).removeprefix(f"{path}:{lineno}: ")
        if wrong is not None:
            clean = False
            warnings.append(f"{path}:{lineno}: dropped a line ({wrong})")
            continue
        records.append(obj)
        if clean:
            good = pos
    return records, good, clean


def _atomic_write(path: Path, lines: Iterable[str]) -> None:
    atomic_write_text(path, "".join(lines))


def _dumps(obj: dict) -> str:
    return json.dumps(_jsonable(obj), ensure_ascii=False, allow_nan=False)


def _jsonable(x: Any) -> Any:
    """Plain JSON types: numpy/torch scalars -> Python numbers, NaN/inf -> None, Paths -> str."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str | int):
        return x
    if isinstance(x, float):
        return _finite(x)
    if hasattr(x, "item") and callable(x.item):  # numpy / torch scalar
        try:
            return _jsonable(x.item())
        except (ValueError, RuntimeError):
            pass
    if hasattr(x, "tolist") and callable(x.tolist):
        return _jsonable(x.tolist())
    return str(x)


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _r(x: float, nd: int = 3) -> float | None:
    v = _finite(x)
    return None if v is None else round(v, nd)


class JsonLog:
    """A structured log of a run: one JSON object per line (``time`` in seconds since the epoch,
    ``event``, its fields), flushed per line; does nothing without a path. A context manager."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._fh = None
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in __exit__)
            except OSError as err:
                raise InputError(f"{self.path}: cannot write the log file ({err.strerror or err})") from None

    def write(self, event: str, **fields: Any) -> None:
        if self._fh is not None:
            record = {"time": round(time.time(), 3), "event": event, **fields}
            self._fh.write(json.dumps(record, default=str) + "\n")
            self._fh.flush()

    def __enter__(self) -> JsonLog:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
