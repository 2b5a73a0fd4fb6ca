"""A long input's finished segments, kept as they are decoded, so that a run stopped midway (Ctrl-C,
a kill) continues from the next segment.

``--out/segments/<utt>.jsonl``: a first line naming what the segments are of (the input's file and
span, the sample rate and segment length they were cut at), then one line per decoded segment, in
order: its sample range and its result (words, tokens and their frames, scores), appended and
fsync'ed after each batch of segments. A rerun cuts the input again (the cuts depend only on the
samples and the segment length), takes the kept results of the segments whose ranges match and
decodes the rest; the joined result is the one an uninterrupted run writes. The file goes once the
input's transcript line is written. Results with lattices are not kept (their input is decoded
whole again).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from asrdecode.atomic_files import atomic_write_text
from asrdecode.decoders.base import DecodeResult, Word
from asrdecode.errors import InputError, OutputError
from asrdecode.io.lines import parse_json
from asrdecode.io.writers import SEGMENTS


@dataclass
class KeptSegment:
    """A decoded segment: its sample range [start, end) and result."""

    start: int
    end: int
    result: DecodeResult


def result_json(result: DecodeResult) -> dict[str, Any]:
    """A segment's result as JSON (no lattice, no n-best: the joined result has neither)."""
    return {
        "words": [[w.word, w.start, w.end, w.confidence] for w in result.words],
        "tokens": list(result.tokens),
        "token_frames": list(result.token_frames),
        "score": result.score,
        "acoustic_score": result.acoustic_score,
        "lm_score": result.lm_score,
        "token_durations": result.token_durations,
    }


def result_of(data: dict[str, Any]) -> DecodeResult:
    """`result_json`'s result back (ValueError, TypeError or KeyError for anything else)."""
    words = [Word(str(w), start, end, conf) for w, start, end, conf in data["words"]]
    durations = data["token_durations"]
    return DecodeResult(
        words=words,
        tokens=[int(t) for t in data["tokens"]],
        token_frames=[int(f) for f in data["token_frames"]],
        score=float(data["score"]),
        acoustic_score=None if data["acoustic_score"] is None else float(data["acoustic_score"]),
        lm_score=None if data["lm_score"] is None else float(data["lm_score"]),
        token_durations=None if durations is None else [int(d) for d in durations],
    )


class SegmentLog:
    """The kept segments of one input (module docstring); `header` names what they are of."""

    def __init__(self, out_dir: str | Path, utt_id: str, header: dict[str, Any]) -> None:
        self.path = Path(out_dir) / SEGMENTS / f"{quote(utt_id, safe='')}.jsonl"
        self.header = json.loads(json.dumps(header))  # as it reads back

    def kept(self) -> list[KeptSegment]:
        """The segments kept by an earlier run of the same input and cuts, in order; a file of
        another input or cut, or damaged from some line on, counts up to that line."""
        if not self.path.is_file():
            return []
        segments: list[KeptSegment] = []
        try:
            lines = self.path.read_bytes().split(b"\n")[:-1]  # a cut last line has no newline
            if not lines or parse_json(lines[0], str(self.path)) != {"segments_of": self.header}:
                return []
            for raw in lines[1:]:
                line = parse_json(raw, str(self.path))
                start, end = int(line["start"]), int(line["end"])
                if start != (segments[-1].end if segments else 0) or end <= start:
                    break
                segments.append(KeptSegment(start, end, result_of(line["result"])))
        except (OSError, InputError, ValueError, TypeError, KeyError):
            pass
        return segments

    def keep(self, segments: list[KeptSegment]) -> None:
        """Rewrite the file with `segments` alone (the kept ones a rerun found still true)."""
        lines = [json.dumps({"segments_of": self.header})] + [self._line(s) for s in segments]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, "".join(line + "\n" for line in lines))
        except OSError as err:
            raise OutputError(f"{self.path}: cannot write: {err.strerror or err}") from None

    def append(self, segments: list[KeptSegment]) -> None:
        """Add decoded segments (the file started with its header if new) and fsync."""
        if not self.path.is_file():
            self.keep([])
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("".join(self._line(s) + "\n" for s in segments))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            raise OutputError(f"{self.path}: cannot write: {err.strerror or err}") from None

    def remove(self) -> None:
        """Drop the file (the input's transcript is written, or it failed), and the folder once
        it holds no other."""
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # another input's kept segments, or no folder
            self.path.parent.rmdir()

    @staticmethod
    def _line(segment: KeptSegment) -> str:
        return json.dumps({"start": segment.start, "end": segment.end, "result": result_json(segment.result)})
