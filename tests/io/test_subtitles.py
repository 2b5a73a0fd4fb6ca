"""Subtitles from word times: the cue rules, and SubRip / WebVTT files read back by independent
parsers (the `srt` and `webvtt-py` packages); through the CLI, one file per input, resumed and
overwritten like the other outputs."""

from __future__ import annotations

import html
import json
from datetime import timedelta

import pytest
import srt
import webvtt
from helpers.cli import AUDIO, MODEL, read_jsonl, run
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode.errors import ConfigError
from asrdecode.io.subtitles import (
    SubtitleStyle,
    record_subtitles,
    srt_text,
    subtitle_cues,
    subtitle_formats,
    vtt_text,
    wrap,
)


def spaced(words: list[str], start: float = 0.0, step: float = 0.4, length: float = 0.3):
    return [(w, start + i * step, start + i * step + length) for i, w in enumerate(words)]


def test_cues_break_at_pauses_lines_and_length():
    style = SubtitleStyle(line_chars=12, lines=2, max_seconds=3.0, pause_seconds=0.8)
    words = spaced(["one", "two", "three"]) + spaced(["four", "five"], start=2.5)  # a 1.5 s pause
    cues = subtitle_cues(words, style)
    assert [c.lines for c in cues] == [("one two", "three"), ("four five",)]
    assert (cues[0].start, cues[0].end) == (0.0, pytest.approx(1.1))
    many = spaced(["aaaa", "bbbb", "cccc", "dddd", "eeee", "ffff", "gggg"])  # 2 lines of 12: 4 words
    want = [("aaaa bbbb", "cccc dddd"), ("eeee ffff", "gggg")]
    assert [c.lines for c in subtitle_cues(many, style)] == want
    slow = spaced(["a", "b", "c", "d", "e"], step=1.0, length=0.7)  # a cue may last 3 s
    assert [len(c.lines[0].split()) for c in subtitle_cues(slow, style)] == [3, 2]
    alone = subtitle_cues([("extraordinarily-long-word", 0.0, 4.0), ("x", 4.1, 4.2)], style)
    assert [c.lines for c in alone] == [("extraordinarily-long-word",), ("x",)]


def test_files_read_back_by_independent_parsers(tmp_path):
    words = spaced(["hello", "there", "<unk>", "a&b"]) + spaced(["again"], start=3661.0)
    cues = subtitle_cues(words, SubtitleStyle())
    parsed = list(srt.parse(srt_text(cues)))
    assert [p.index for p in parsed] == [1, 2]
    assert [p.content for p in parsed] == ["hello there <unk> a&b", "again"]
    assert parsed[0].start == timedelta(0) and parsed[0].end == timedelta(seconds=1.5)
    assert parsed[1].start == timedelta(seconds=3661) and parsed[1].end == timedelta(seconds=3661.3)
    (tmp_path / "a.vtt").write_text(vtt_text(cues))
    vtt = webvtt.read(str(tmp_path / "a.vtt"))
    assert [(c.start, c.end, html.unescape(c.text)) for c in vtt] == [
        ("00:00:00.000", "00:00:01.500", "hello there <unk> a&b"),  # references read as a player does
        ("01:01:01.000", "01:01:01.300", "again"),
    ]
    assert "&lt;unk&gt; a&amp;b" in vtt_text(cues)
    empty = record_subtitles({"utt_id": "u", "words": []}, "vtt", SubtitleStyle())
    assert empty == "WEBVTT\n\n" and record_subtitles({"utt_id": "u"}, "srt", SubtitleStyle()) == ""


word_lists = st.lists(
    st.tuples(st.text("abcdefghij", min_size=1, max_size=15), st.floats(0, 2.0), st.floats(0, 1.5)),
    max_size=60,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(raw=word_lists, chars=st.integers(5, 50), lines=st.integers(1, 3), seconds=st.floats(0.5, 10))
def test_cue_rules_hold_for_any_words(raw, chars, lines, seconds):
    """Every word once, in order; lines within the width (a longer word alone); cues in time order,
    none longer than allowed unless it holds one word, none across a pause."""
    style = SubtitleStyle(line_chars=chars, lines=lines, max_seconds=seconds, pause_seconds=0.8)
    words, t = [], 0.0
    for word, gap, length in raw:
        words.append((word, t + gap, t + gap + length))
        t += gap + length
    cues = subtitle_cues(words, style)
    assert [w for c in cues for line in c.lines for w in line.split()] == [w for w, _, _ in words]
    for c in cues:
        assert len(c.lines) <= lines or len(" ".join(c.lines).split()) == 1
        assert all(len(line) <= chars or " " not in line for line in c.lines)
        assert c.end - c.start <= seconds + 1e-9 or len(" ".join(c.lines).split()) == 1
    assert all(a.end <= b.start + 1e-9 for a, b in zip(cues, cues[1:], strict=False))
    pieces = iter(cues)
    cue = next(pieces, None)
    taken = 0
    for (_, _, end), (_, start, _) in zip(words, words[1:], strict=False):
        taken += 1
        if taken == len(" ".join(cue.lines).split()):
            cue, taken = next(pieces), 0
        elif start - end >= 0.8:
            pytest.fail("a cue spans a pause")


def test_wrap_is_greedy():
    assert wrap(["ab", "cd", "efgh", "i"], 5) == ["ab cd", "efgh", "i"]


def test_formats_are_checked():
    assert subtitle_formats("") == () and subtitle_formats("VTT, srt,vtt") == ("vtt", "srt")
    with pytest.raises(ConfigError, match="output.subtitles: unknown format 'txt'"):
        subtitle_formats("srt,txt")


def test_cli_writes_resumes_and_overwrites_subtitles(tmp_path):
    out = tmp_path / "out"
    run("transcribe", str(AUDIO), "--model", str(MODEL), "--subtitles", "srt,vtt", "--out", str(out))
    records = read_jsonl(out / "transcripts.jsonl")
    assert len(records) == 6
    for rec in records:
        cues = list(srt.parse((out / "subtitles" / f"{rec['utt_id']}.srt").read_text()))
        assert " ".join(c.content.replace("\n", " ") for c in cues) == rec["pred_text"]
        assert cues and cues[0].start.total_seconds() == pytest.approx(rec["words"][0]["start"], abs=1e-3)
        vtt = webvtt.read(str(out / "subtitles" / f"{rec['utt_id']}.vtt"))
        assert [html.unescape(c.text) for c in vtt] == [c.content for c in cues]
    # a resumed run writes the subtitles that are missing, and leaves the others
    first = records[0]["utt_id"]
    (out / "subtitles" / f"{first}.vtt").unlink()
    kept = out / "subtitles" / f"{records[1]['utt_id']}.srt"
    kept.write_text("kept\n")
    run("transcribe", str(AUDIO), "--model", str(MODEL), "--subtitles", "srt,vtt", "--out", str(out))
    assert (out / "subtitles" / f"{first}.vtt").read_text().startswith("WEBVTT")
    assert kept.read_text() == "kept\n"
    # --overwrite starts again: no subtitles left from the run before when none are asked for
    run("transcribe", str(AUDIO), "--model", str(MODEL), "--overwrite", "--out", str(out))
    assert not list((out / "subtitles").glob("*.*"))
    bad = run("transcribe", str(AUDIO), "output.subtitles=ass", "--out", str(tmp_path / "x"), check=False)
    assert bad.returncode != 0 and "output.subtitles: unknown format 'ass'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert json.loads((out / "report.json").read_text())["failed"] == 0
