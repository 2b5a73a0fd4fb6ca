"""Subtitles from a transcript's word times: SubRip (`.srt`) and WebVTT (`.vtt`).

Words are grouped into cues the way broadcast subtitle guidelines ask: lines of at most
`line_chars` characters (42), at most `lines` lines a cue (2), a cue no longer than
`max_seconds` (7 s), and a new cue after a pause of `pause_seconds` (0.8 s) or more, so that a
cue never spans a silence. A single word too long for a line or a cue gets a cue of its own.
Times are the words' own, relative to the utterance's start (as in `hyp.ctm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from asrdecode.errors import ConfigError

SUBTITLE_FORMATS = ("srt", "vtt")


@dataclass(frozen=True)
class SubtitleStyle:
    line_chars: int = 42
    lines: int = 2
    max_seconds: float = 7.0
    pause_seconds: float = 0.8


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    lines: tuple[str, ...]


def subtitle_formats(value: str) -> tuple[str, ...]:
    """``"srt"``, ``"vtt"``, ``"srt,vtt"`` (or empty: none) as a tuple; ConfigError otherwise."""
    formats = tuple(dict.fromkeys(f.strip().lower() for f in str(value or "").split(",") if f.strip()))
    unknown = [f for f in formats if f not in SUBTITLE_FORMATS]
    if unknown:
        raise ConfigError(
            f"output.subtitles: unknown format {unknown[0]!r} (one or more of: {', '.join(SUBTITLE_FORMATS)})"
        )
    return formats


def wrap(words: Sequence[str], width: int) -> list[str]:
    """Words on lines of at most `width` characters, greedily (a longer word on a line alone)."""
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def subtitle_cues(words: Sequence[tuple[str, float, float]], style: SubtitleStyle) -> list[Cue]:
    """(word, start, end) in time order -> cues (see the module's docstring)."""
    cues: list[Cue] = []
    current: list[tuple[str, float, float]] = []

    def close() -> None:
        if current:
            start, end = current[0][1], max(current[-1][2], current[0][1])
            cues.append(Cue(start, end, tuple(wrap([w for w, _, _ in current], style.line_chars))))

    for word, start, end in words:
        if current:
            too_many_lines = len(wrap([w for w, _, _ in current] + [word], style.line_chars)) > style.lines
            too_long = end - current[0][1] > style.max_seconds
            if too_many_lines or too_long or start - current[-1][2] >= style.pause_seconds:
                close()
                current = []
        current.append((word, start, end))
    close()
    return cues


def _clock(seconds: float, sep: str) -> str:
    ms = max(int(round(seconds * 1000)), 0)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _cue_blocks(cues: Sequence[Cue], sep: str, numbered: bool, escape=lambda line: line) -> list[str]:
    """Each cue as ``[number]`` / ``start --> end`` (``sep`` before the milliseconds) / its lines."""
    return [
        (f"{i}\n" if numbered else "")
        + f"{_clock(c.start, sep)} --> {_clock(c.end, sep)}\n"
        + "\n".join(map(escape, c.lines))
        + "\n"
        for i, c in enumerate(cues, 1)
    ]


def srt_text(cues: Sequence[Cue]) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each."""
    return "\n".join(_cue_blocks(cues, ",", numbered=True))


def vtt_text(cues: Sequence[Cue]) -> str:
    """WebVTT: the ``WEBVTT`` header, then cues ``HH:MM:SS.mmm --> HH:MM:SS.mmm``; ``&``, ``<``
    and ``>`` escaped (a word such as ``<unk>`` is text, not a tag)."""
    return "WEBVTT\n\n" + "\n".join(_cue_blocks(cues, ".", numbered=False, escape=_vtt_escape))


def _vtt_escape(line: str) -> str:
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def record_subtitles(rec: dict, fmt: str, style: SubtitleStyle) -> str:
    """A transcripts.jsonl record's subtitles in `fmt` (``srt`` or ``vtt``)."""
    words = [
        (" ".join(str(w.get("word", "")).split()), float(w.get("start") or 0.0), float(w.get("end") or 0.0))
        for w in rec.get("words") or []
    ]
    cues = subtitle_cues([w for w in words if w[0]], style)
    return srt_text(cues) if fmt == "srt" else vtt_text(cues)
