"""SegmentLog: a long input's decoded segments kept across runs, read back exactly, and trusted
only for the same input and cuts."""

from __future__ import annotations

from asrdecode.decoders.base import DecodeResult, Word
from asrdecode.io.segment_log import KeptSegment, SegmentLog

HEADER = {
    "audio_filepath": "/a/long.wav",
    "offset": 0.0,
    "duration": 60.0,
    "rate": 16000,
    "segment_seconds": 30.0,
}


def segment(start: int, end: int, word: str) -> KeptSegment:
    result = DecodeResult(
        words=[Word(word, 0.1, 0.30000000000000004, 0.25), Word("x", None, None)],
        tokens=[3, 4],
        token_frames=[2, 9],
        score=-float("inf") if word == "inf" else -1.2345678901234567,
        acoustic_score=-1.0,
        token_durations=[1, 2],
    )
    return KeptSegment(start, end, result)


def test_segments_read_back_exactly_and_only_for_the_same_input(tmp_path):
    log = SegmentLog(tmp_path, "long/one", HEADER)
    assert log.kept() == []
    first, second = segment(0, 100, "a"), segment(100, 250, "inf")
    log.append([first])
    log.append([second])
    assert log.path.name == "long%2Fone.jsonl"
    assert SegmentLog(tmp_path, "long/one", HEADER).kept() == [first, second]
    assert SegmentLog(tmp_path, "long/one", {**HEADER, "segment_seconds": 20.0}).kept() == []
    log.keep([first])
    assert log.kept() == [first]
    log.remove()
    assert not log.path.exists()


def test_a_cut_or_damaged_line_ends_what_is_kept(tmp_path):
    log = SegmentLog(tmp_path, "u", HEADER)
    log.append([segment(0, 100, "a"), segment(100, 200, "b"), segment(200, 300, "c")])
    lines = log.path.read_text().splitlines(keepends=True)
    log.path.write_text("".join(lines[:3]) + lines[3][:20])  # killed while writing the third
    assert [k.end for k in log.kept()] == [100, 200]
    log.path.write_text(lines[0] + lines[2] + lines[3])  # a gap: the second segment is missing
    assert log.kept() == []
    log.path.write_text(lines[0] + lines[1] + '{"start": 100, "end": 200, "result": 5}\n' + lines[3])
    assert [k.end for k in log.kept()] == [100]
