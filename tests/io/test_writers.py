"""OutputWriter: appended outputs, resume after a kill, errors, ordering, report."""

from __future__ import annotations

import contextlib
import errno
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from asrdecode.decoders.base import DecodeResult, Word
from asrdecode.errors import OutputError
from asrdecode.io import OutputWriter, Utterance, write_report
from asrdecode.io.writers import segment_lines


def U(i: int) -> Utterance:
    return Utterance(
        f"u{i}", f"/a/{i}.wav", duration=1.5, record={"audio_filepath": f"/a/{i}.wav", "spk": "s"}
    )


def R(i: int) -> DecodeResult:
    return DecodeResult(
        words=[Word(f"w{i}", 0.1, 0.4, 0.9), Word("end", 0.5, 0.8)],
        score=-float(i),
        nbest=[(["w", "end"], -1.0)],
    )


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in lines(out / "transcripts.jsonl")]


def test_writes_all_formats(tmp_path):
    out = tmp_path / "out"
    with OutputWriter(out) as w:
        w.write_results([U(1), U(2)], [R(1), R(2)], seconds=[1.5, 1.5])
        w.write_results([U(3)], [DecodeResult(words=[], score=float("-inf"))], ctm=True)
    (r1, r2, r3) = rows(out)
    assert r1["utt_id"] == "u1" and r1["spk"] == "s" and r1["audio_filepath"] == "/a/1.wav"
    assert r1["pred_text"] == "w1 end" and r1["score"] == -1.0 and r1["duration"] == 1.5
    assert r1["words"] == [
        {"word": "w1", "start": 0.1, "end": 0.4, "conf": 0.9},
        {"word": "end", "start": 0.5, "end": 0.8},
    ]
    assert r1["nbest"] == [{"text": "w end", "score": -1.0}]
    assert r3["pred_text"] == "" and r3["score"] is None and r3["words"] == []
    assert lines(out / "text") == ["u1 w1 end", "u2 w2 end", "u3"]
    assert lines(out / "hyp.ctm")[:2] == ["u1 1 0.100 0.300 w1 0.9000", "u1 1 0.500 0.300 end"]
    assert len(lines(out / "hyp.ctm")) == 4


def test_resume_after_kill_mid_line(tmp_path):
    out = tmp_path / "out"
    w = OutputWriter(out)
    w.write_results([U(i) for i in range(3)], [R(i) for i in range(3)])
    # simulate kill -9 while writing the next batch: text/ctm got their lines, transcripts a partial one
    with open(out / "text", "a") as f:
        f.write("u3 w3 end\n")
    with open(out / "hyp.ctm", "a") as f:
        f.write("u3 1 0.100 0.300 w3 0.9000\nu3 1 0.5")
    with open(out / "transcripts.jsonl", "a") as f:
        f.write('{"audio_filepath": "/a/3.wav", "utt_id": "u3", "pred_')
    (out / ".text.abc.tmp").write_text("half a rebuild")  # killed during an atomic rewrite
    w._release()  # the dead process's lock goes away with it

    w2 = OutputWriter(out)
    assert w2.done_ids() == {"u0", "u1", "u2"}
    assert any("incomplete" in m for m in w2.warnings)
    assert not (out / ".text.abc.tmp").exists()
    assert len(lines(out / "transcripts.jsonl")) == 3 and (out / "transcripts.jsonl").read_text().endswith(
        "\n"
    )
    assert lines(out / "text") == ["u0 w0 end", "u1 w1 end", "u2 w2 end"]
    assert len(lines(out / "hyp.ctm")) == 6
    w2.write_results([U(i) for i in range(3, 6)], [R(i) for i in range(3, 6)])
    w2.close()
    ids = [r["utt_id"] for r in rows(out)]
    assert ids == [f"u{i}" for i in range(6)]
    assert [x.split()[0] for x in lines(out / "text")] == ids
    assert [x.split()[0] for x in lines(out / "hyp.ctm")] == [u for u in ids for _ in range(2)]
    assert OutputWriter(out).done_ids() == set(ids)


def test_corrupt_and_duplicate_lines_are_dropped(tmp_path):
    out = tmp_path / "out"
    with OutputWriter(out) as w:
        w.write_results([U(0), U(1)], [R(0), R(1)])
    good = lines(out / "transcripts.jsonl")
    (out / "transcripts.jsonl").write_text("\n".join([good[0], "\x00\x00garbage", good[1], good[0]]) + "\n")
    w = OutputWriter(out)
    assert w.done_ids() == {"u0", "u1"}
    assert lines(out / "transcripts.jsonl") == good
    w.close()


def test_overwrite_starts_fresh_and_never_deletes_otherwise(tmp_path):
    out = tmp_path / "out"
    with OutputWriter(out) as w:
        w.write_results([U(0)], [R(0)])
        w.write_error(U(9), "boom")
    write_report(out, {"x": 1})
    with OutputWriter(out) as w:
        assert w.done_ids() == {"u0"}
    assert len(lines(out / "transcripts.jsonl")) == 1 and (out / "report.json").exists()
    with OutputWriter(out, overwrite=True) as w:
        assert w.done_ids() == set()
    assert lines(out / "transcripts.jsonl") == [] and not (out / "errors.jsonl").exists()
    assert not (out / "report.json").exists()


def test_errors_are_kept_until_the_utterance_succeeds(tmp_path):
    out = tmp_path / "out"
    with OutputWriter(out) as w:
        w.write_error(U(1), "/a/1.wav: file not found")
        w.write_error("u2", "bad", path="/a/2.wav")
        w.write_results([U(0)], [R(0)])
    errs = [json.loads(x) for x in lines(out / "errors.jsonl")]
    assert errs == [
        {"utt_id": "u1", "path": "/a/1.wav", "error": "/a/1.wav: file not found"},
        {"utt_id": "u2", "path": "/a/2.wav", "error": "bad"},
    ]
    with OutputWriter(out) as w:  # resumed run: u1 now works, u2 fails again
        w.write_results([U(1)], [R(1)])
        w.write_error("u2", "still bad", path="/a/2.wav")
    errs = [json.loads(x) for x in lines(out / "errors.jsonl")]
    assert errs == [{"utt_id": "u2", "path": "/a/2.wav", "error": "still bad"}]


def test_close_can_restore_input_order(tmp_path):
    out = tmp_path / "out"
    w = OutputWriter(out)
    w.write_results([U(2), U(0)], [R(2), R(0)])
    w.write_results([U(1)], [R(1)])
    w.close(order=["u0", "u1", "u2"])
    assert [r["utt_id"] for r in rows(out)] == ["u0", "u1", "u2"]
    assert [x.split()[0] for x in lines(out / "text")] == ["u0", "u1", "u2"]
    assert w.read_hypotheses() == {"u0": "w0 end", "u1": "w1 end", "u2": "w2 end"}


def test_ctm_off_leaves_no_ctm(tmp_path):
    out = tmp_path / "out"
    with OutputWriter(out) as w:
        w.write_results([U(0)], [R(0)], ctm=False)
    assert not (out / "hyp.ctm").exists()
    with OutputWriter(out):
        pass
    assert not (out / "hyp.ctm").exists()


def test_second_writer_on_same_folder_is_refused(tmp_path):
    w = OutputWriter(tmp_path)
    with pytest.raises(OutputError, match="in use"):
        OutputWriter(tmp_path)
    w.close()
    OutputWriter(tmp_path).close()
    with pytest.raises(OutputError, match="closed"):
        w.write_results([U(0)], [R(0)])


def test_write_report_is_atomic_and_json_safe(tmp_path):
    import numpy as np

    p = write_report(
        tmp_path,
        {"wer": float("nan"), "rtfx": math.inf, "n": np.int64(3), "path": tmp_path, "arr": np.arange(2)},
    )
    assert json.loads(p.read_text()) == {
        "wer": None,
        "rtfx": None,
        "n": 3,
        "path": str(tmp_path),
        "arr": [0, 1],
    }
    write_report(tmp_path, {"v": 2})
    assert json.loads(p.read_text()) == {"v": 2}
    assert [x.name for x in tmp_path.iterdir()] == ["report.json"]


def lattice_entry(utt: str, arcs: int = 2) -> str:
    body = "".join(f"{i} {i + 1} 7 1.5,2.25,3_3\n" for i in range(arcs))
    return f"{utt}\n{body}{arcs} 0,0,\n\n"


def test_lattice_archive_appends_and_recovers_after_a_kill(tmp_path):
    """lattices/lat.ark.txt: entries appended per batch; a kill after a batch's lattices but before
    its transcripts (and one mid-entry) leaves entries that a resumed run drops, so the re-decoded
    utterances appear once; overwrite removes the archive."""
    out = tmp_path / "out"
    w = OutputWriter(out)
    w.write_lattices([("u0", lattice_entry("u0")), ("u1", lattice_entry("u1", 3))])
    w.write_results([U(0), U(1)], [R(0), R(1)])
    w.write_lattices([("u2", lattice_entry("u2"))])  # killed before u2's transcript line
    with open(out / "lattices" / "lat.ark.txt", "a") as f:
        f.write("u3\n0 1 7 1.5,")  # and mid-way through the next entry
    w._release()
    with pytest.raises(ValueError):
        OutputWriter(tmp_path / "other").write_lattices([("u9", "u9\n0 1 2 0,0,\n")])
    w = OutputWriter(out)
    assert any("lattice entries" in m for m in w.warnings)
    text = (out / "lattices" / "lat.ark.txt").read_text()
    assert text == lattice_entry("u0") + lattice_entry("u1", 3)
    w.write_lattices([("u2", lattice_entry("u2")), ("u3", lattice_entry("u3"))])
    w.write_results([U(2), U(3)], [R(2), R(3)])
    w.close()
    blocks = [b for b in (out / "lattices" / "lat.ark.txt").read_text().split("\n\n") if b]
    assert [b.split("\n")[0] for b in blocks] == ["u0", "u1", "u2", "u3"]
    with OutputWriter(out) as w:  # a clean resume leaves the archive alone
        assert not w.warnings
    assert len([b for b in (out / "lattices" / "lat.ark.txt").read_text().split("\n\n") if b]) == 4
    (out / "lattices" / "u0.fst").write_bytes(b"x")
    OutputWriter(out, overwrite=True).close()
    assert not (out / "lattices" / "lat.ark.txt").exists() and not (out / "lattices" / "u0.fst").exists()


def test_extras_and_read_records(tmp_path):
    out = tmp_path / "out"
    with OutputWriter(out) as w:
        w.write_results([U(0), U(1)], [R(0), R(1)], extras=[{"lattice_density": 2.5}, None])
        recs = w.read_records()
    assert recs[0]["lattice_density"] == 2.5 and "lattice_density" not in recs[1]


def test_resume_drops_lines_that_do_not_fit_the_record_schema(tmp_path):
    """Lines of transcripts.jsonl / errors.jsonl that parse but do not have the fields text, hyp.ctm
    and the report are rebuilt from are dropped on resume, with a warning naming the line and the
    key; those utterances are decoded again."""
    out = tmp_path / "out"
    with OutputWriter(out) as w:
        w.write_results([U(1)], [R(1)])
    good = lines(out / "transcripts.jsonl")[0]
    bad = [
        {"utt_id": "u2", "pred_text": "x", "words": "x"},
        {"utt_id": "u3", "pred_text": 7, "words": []},
        {"utt_id": "u4", "pred_text": "a", "words": [{"word": "a", "start": "0", "end": 1}]},
        {"utt_id": "u5", "words": []},
        ["u6"],
    ]
    (out / "transcripts.jsonl").write_text("\n".join([good, *map(json.dumps, bad)]) + "\n")
    (out / "hyp.ctm").write_text("")
    (out / "errors.jsonl").write_text(json.dumps({"utt_id": 9, "error": "x"}) + "\n")
    with OutputWriter(out) as w:
        assert w.done_ids() == {"u1"}
        warned = "\n".join(w.warnings)
    for lineno, key in [(2, "words must be a list"), (3, "pred_text must be a string"),
                        (4, "words[0].start must be a number or null"), (5, "pred_text is missing"),
                        (6, "the top level must be a mapping")]:  # fmt: skip
        assert f"transcripts.jsonl:{lineno}: dropped a line ({key}" in warned
    assert "errors.jsonl:1: dropped a line (utt_id must be a string" in warned
    assert lines(out / "transcripts.jsonl") == [good] and lines(out / "text") == ["u1 w1 end"]
    assert len(lines(out / "hyp.ctm")) == 2 and lines(out / "errors.jsonl") == []


@contextlib.contextmanager
def disk_full(monkeypatch, module) -> Iterator[None]:
    """`module`'s os.fsync fails as on a full disk, inside the block."""

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(module.os, "fsync", full)
        yield


def test_write_failure_leaves_complete_lines_and_a_resumable_folder(tmp_path, monkeypatch):
    """A write that fails (disk full) is one OutputError naming the file; close() then leaves the
    files as they are instead of rewriting them, and the next writer resumes from them."""
    import asrdecode.io.writers as writers

    out = tmp_path / "out"
    w = OutputWriter(out)
    w.write_results([U(1)], [R(1)])
    with disk_full(monkeypatch, writers):
        with pytest.raises(OutputError, match=r"text: cannot write: No space left on device"):
            w.write_results([U(2)], [R(2)])
        w.close(order=["u2", "u1"])  # no reordering of a folder whose writes failed, and no error
    with OutputWriter(out) as w2:
        assert w2.done_ids() == {"u1"}
        w2.write_results([U(2)], [R(2)])
    assert [r["utt_id"] for r in rows(out)] == ["u1", "u2"]
    assert lines(out / "text") == ["u1 w1 end", "u2 w2 end"]


def test_subtitles_come_before_their_transcript_and_a_failure_is_one_error(tmp_path, monkeypatch):
    """Each transcript's subtitles are written before its line; a failed subtitle write (disk full)
    is one OutputError, no transcript line is written for that batch, and the next writer resumes
    and writes them."""
    import asrdecode.atomic_files as atomic_files

    out = tmp_path / "out"
    w = OutputWriter(out, subtitles=("srt", "vtt"))
    w.write_results([U(1)], [R(1)])
    assert (out / "subtitles" / "u1.srt").read_text() == "1\n00:00:00,100 --> 00:00:00,800\nw1 end\n"
    assert (out / "subtitles" / "u1.vtt").read_text().startswith("WEBVTT\n\n00:00:00.100 --> 00:00:00.800")
    with disk_full(monkeypatch, atomic_files):
        with pytest.raises(OutputError, match=r"subtitles: cannot write subtitles: No space left on device"):
            w.write_results([U(2)], [R(2)])
        w.close()
    assert [r["utt_id"] for r in rows(out)] == ["u1"]
    with OutputWriter(out, subtitles=("srt",)) as w2:
        w2.write_results([U(2)], [R(2)])
    assert sorted(p.name for p in (out / "subtitles").iterdir()) == ["u1.srt", "u1.vtt", "u2.srt"]


def test_ctm_of_a_recording_segment_is_in_the_recording_time():
    """A segment of a recording (Kaldi segments: the record names the recording) gets Kaldi's
    recording-level CTM (`utils/convert_ctm.pl`): file, channel, times from the recording's start."""
    from asrdecode.io.writers import ctm_lines

    words = [{"word": "a", "start": 0.1, "end": 0.4, "conf": 0.9}, {"word": "b", "start": 0.5, "end": 0.8}]
    rec = {"utt_id": "u2", "words": words}
    assert ctm_lines(rec) == ["u2 1 0.100 0.300 a 0.9000\n", "u2 1 0.500 0.300 b\n"]
    rec |= {"recording_id": "rec", "offset": 1.5}
    assert ctm_lines(rec) == ["rec 1 1.600 0.300 a 0.9000\n", "rec 1 2.000 0.300 b\n"]
    rec |= {"ctm_file": "rec_file", "ctm_channel": "A"}
    assert ctm_lines(rec)[0] == "rec_file A 1.600 0.300 a 0.9000\n"
    assert (
        ctm_lines({"utt_id": "u1", "words": words, "recording_id": "rec"})[0]
        == "rec 1 0.100 0.300 a 0.9000\n"
    )


def test_segments_jsonl_has_a_line_per_decoded_segment_with_its_times(tmp_path):
    """segments.jsonl: an input decoded in segments (its record's ``segments``: spans and word
    counts) gets one line per segment with its words' text; one decoded whole gets one line from 0
    to its duration; a resumed folder rebuilds the file from transcripts.jsonl, and a record whose
    spans do not add up to its words gets one line."""
    out = tmp_path / "out"
    long = DecodeResult(words=[Word("a", 0.1, 0.2), Word("b", 5.1, 5.3), Word("c", 5.4, 5.6)], score=-1.0)
    spans = [{"start": 0.0, "end": 4.5, "words": 1}, {"start": 4.5, "end": 9.0, "words": 2}]
    with OutputWriter(out) as w:
        w.write_results([U(1), U(2)], [long, R(2)], seconds=[9.0, 1.5], extras=[{"segments": spans}, None])
    expected = [
        {"utt_id": "u1", "segment": 0, "start": 0.0, "end": 4.5, "pred_text": "a"},
        {"utt_id": "u1", "segment": 1, "start": 4.5, "end": 9.0, "pred_text": "b c"},
        {"utt_id": "u2", "segment": 0, "start": 0.0, "end": 1.5, "pred_text": "w2 end"},
    ]
    assert [json.loads(x) for x in lines(out / "segments.jsonl")] == expected
    assert rows(out)[0]["segments"] == spans
    (out / "segments.jsonl").write_text("")
    with OutputWriter(out) as w:
        assert w.done_ids() == {"u1", "u2"}
    assert [json.loads(x) for x in lines(out / "segments.jsonl")] == expected
    record = {"utt_id": "u", "duration": 2.0, "words": [{"word": "a"}], "segments": spans}
    assert [json.loads(x) for x in segment_lines(record)] == [
        {"utt_id": "u", "segment": 0, "start": 0.0, "end": 2.0, "pred_text": "a"}
    ]


def test_the_models_text_is_pred_text_and_kaldi_text_has_its_words(tmp_path):
    """A result with the model's text (NeMo's spaces at either end and doubled): pred_text keeps
    it; the Kaldi text line (whitespace-separated words), CTM and segments.jsonl follow the words,
    also when a resumed run rebuilds them."""
    out = tmp_path / "out"
    spaced = DecodeResult(words=[Word("go", 0.1, 0.2), Word("on.", 0.3, 0.5)], model_text=" go  on.  ")
    with OutputWriter(out) as w:
        w.write_results([U(1), U(2)], [spaced, R(2)])
    assert [r["pred_text"] for r in rows(out)] == [" go  on.  ", "w2 end"]
    assert [r["word"] for r in rows(out)[0]["words"]] == ["go", "on."]
    assert lines(out / "text") == ["u1 go on.", "u2 w2 end"]
    assert [x.split()[4] for x in lines(out / "hyp.ctm")][:2] == ["go", "on."]
    assert json.loads(lines(out / "segments.jsonl")[0])["pred_text"] == "go on."
    (out / "text").unlink()
    with OutputWriter(out):
        pass
    assert lines(out / "text") == ["u1 go on.", "u2 w2 end"]
