"""read_inputs: every input kind, relative paths, ids, and file:line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrdecode.audio import load_audio
from asrdecode.errors import AudioError, InputError
from asrdecode.io import read_inputs


def wav(path: Path, seconds: float = 0.5, sr: int = 16000, channels: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = int(round(seconds * sr))
    data = np.zeros((n, channels), dtype=np.float32) if channels > 1 else np.zeros(n, dtype=np.float32)
    sf.write(path, data, sr)
    return path


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------------------ folders and files


def test_audio_folder_recursive_ids_and_durations(tmp_path):
    d = tmp_path / "audio"
    wav(d / "spk1" / "utt one.wav", 0.5)
    wav(d / "spk1" / "b.flac", 1.0)
    wav(d / "top.WAV", 0.25)
    wav(d / ".hidden" / "x.wav")
    wav(d / "._junk.wav")
    (d / "notes.txt").write_text("not audio")
    s = read_inputs(d)
    assert s.kind == "folder" and s.source == d
    by = s.by_id()
    assert sorted(by) == ["spk1-b", "spk1-utt_one", "top"]
    assert by["spk1-b"].duration == pytest.approx(1.0)
    assert by["spk1-utt_one"].audio_path == str(d / "spk1" / "utt one.wav")
    assert by["top"].record["duration"] == pytest.approx(0.25)
    assert s.total_duration() == pytest.approx(1.75)
    assert read_inputs(d).ids() == s.ids()  # stable


def test_audio_folder_clashing_ids_are_made_unique(tmp_path):
    d = tmp_path / "a"
    wav(d / "x.wav")
    wav(d / "x.flac")
    wav(d / "p" / "q.wav")
    wav(d / "p-q.wav")
    s = read_inputs(d)
    ids = s.ids()
    assert len(set(ids)) == 4
    assert {"x-flac", "x-wav"} <= set(ids)
    assert s.warnings  # renamed ids are reported


def test_audio_folder_unreadable_file_becomes_utterance_that_fails_on_load(tmp_path):
    d = tmp_path / "a"
    wav(d / "good.wav")
    (d / "bad.wav").write_bytes(b"\x00garbage" * 50)
    s = read_inputs(d)
    bad = s.by_id()["bad"]
    assert bad.duration is None and s.unknown_durations() == ["bad"]
    with pytest.raises(AudioError, match="bad.wav"):
        load_audio(bad)


def test_empty_folder_and_missing_path(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no audio files"):
        read_inputs(tmp_path / "empty")
    with pytest.raises(InputError, match="nope"):
        read_inputs(tmp_path / "nope")


def test_single_audio_file(tmp_path):
    p = wav(tmp_path / "one file.flac", 0.75)
    s = read_inputs(p)
    assert s.kind == "file" and len(s) == 1
    u = s.utterances[0]
    assert u.utt_id == "one_file" and u.duration == pytest.approx(0.75)


def test_unknown_file_kind(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"\x01\x02\x03" * 10)
    with pytest.raises(InputError, match="x.bin"):
        read_inputs(p)


# ------------------------------------------------------------------------------ JSONL manifests


def test_jsonl_manifest_fields_and_relative_paths(tmp_path, monkeypatch):
    wav(tmp_path / "data" / "wavs" / "a.wav", 2.0)
    wav(tmp_path / "data" / "wavs" / "b.wav", 1.0)
    m = write_jsonl(
        tmp_path / "data" / "m.jsonl",
        [
            {"audio_filepath": "wavs/a.wav", "duration": 2.0, "text": "hello world", "speaker": "s1"},
            {"audio_filepath": "wavs/a.wav", "offset": 0.5, "duration": 1.0, "boost": ["acme", "zork"]},
            {"audio_filepath": "wavs/b.wav", "id": "custom", "boost": {"acme": 2.5}, "channel": 0},
            "",
        ],
    )
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the manifest, not the cwd
    s = read_inputs(m)
    assert s.kind == "jsonl" and s.ids() == ["a", "a-2", "custom"]
    a, a2, c = s.utterances
    assert a.audio_path == str(tmp_path / "data" / "wavs" / "a.wav")
    assert (
        a.text == "hello world" and a.record["speaker"] == "s1" and a.record["audio_filepath"] == "wavs/a.wav"
    )
    assert a2.offset == 0.5 and a2.duration == 1.0 and a2.boost == {"acme": 1.0, "zork": 1.0}
    assert c.boost == {"acme": 2.5} and c.channel == 0
    assert c.duration == pytest.approx(1.0)  # missing duration read from the file
    assert s.references() == {"a": "hello world"}
    assert len(load_audio(a2)[0]) == 16000


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "invalid JSON"),
        ('["a.wav"]', "expected a JSON object"),
        ('{"duration": 1.0}', "missing 'audio_filepath'"),
        ('{"audio_filepath": "a.wav", "duration": "long"}', "'duration'"),
        ('{"audio_filepath": "a.wav", "offset": -1}', "'offset'"),
        ('{"audio_filepath": "a.wav", "text": 5}', "'text'"),
        ('{"audio_filepath": "a.wav", "boost": 3}', "'boost'"),
        ('{"audio_filepath": "a.wav", "boost": {"w": "x"}}', "'boost'"),
        ('{"audio_filepath": "a.wav", "utt_id": "has space"}', "whitespace"),
        ('{"audio_filepath": "a.wav", "utt_id": "u1"}', "duplicate utt_id 'u1' (first on line 1)"),
        ('{"audio_filepath": "a.wav", "k": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested more than 100"),
        ('{"audio_filepath": "a.wav", "k": ' + "[" * 101 + "]" * 101 + "}", "nested more than 100"),
        ('{"audio_filepath": "a.wav", "duration": ' + "9" * 5000 + "}", "a number of 5000 digits"),
    ],
)
def test_jsonl_malformed_line_names_file_and_line(tmp_path, line, problem):
    m = tmp_path / "m.jsonl"
    m.write_text(
        json.dumps({"audio_filepath": "a.wav", "duration": 1.0, "utt_id": "u1"}) + "\n\n" + line + "\n"
    )
    with pytest.raises(InputError) as e:
        read_inputs(m)
    msg = str(e.value)
    assert f"{m}:3:" in msg and problem in msg and "\n" not in msg


def test_jsonl_bad_utf8_and_empty_manifest(tmp_path):
    m = tmp_path / "m.json"
    m.write_bytes(b'{"audio_filepath": "a.wav"}\n{"audio_filepath": "\xff.wav"}\n')
    with pytest.raises(InputError, match=r"m\.json:2: not valid UTF-8"):
        read_inputs(m)
    m.write_text("\n\n")
    with pytest.raises(InputError, match="no entries"):
        read_inputs(m)


def test_jsonl_explicit_ids_win_over_derived(tmp_path):
    wav(tmp_path / "a.wav")
    m = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"audio_filepath": "a.wav"},
            {"audio_filepath": "a.wav", "utt_id": "a"},
            {"audio_filepath": "a.wav"},
        ],
    )
    assert read_inputs(m).ids() == ["a-2", "a", "a-3"]


# ------------------------------------------------------------------------------ Kaldi data dirs


def test_kaldi_dir_with_text_and_utt2dur(tmp_path, monkeypatch):
    wav(tmp_path / "wavs" / "r1.wav", 1.0)
    wav(tmp_path / "wavs" / "r2.wav", 0.5)
    d = tmp_path / "data" / "test"
    d.mkdir(parents=True)
    (d / "wav.scp").write_text(f"r1 {tmp_path / 'wavs' / 'r1.wav'}\nr2 wavs/r2.wav\n")
    (d / "text").write_text("r1 HELLO  there\nr2\nr9 orphan\n")
    (d / "utt2dur").write_text("r1 1.0\nr2 0.5\n")
    monkeypatch.chdir(tmp_path)  # Kaldi: relative to the recipe root (cwd)
    s = read_inputs(d)
    assert s.kind == "kaldi" and s.ids() == ["r1", "r2"]
    r1, r2 = s.utterances
    assert r1.text == "HELLO there" and r2.text == ""
    assert r2.audio_path == str(tmp_path / "wavs" / "r2.wav") and r2.duration == 0.5
    assert r1.record == {
        "audio_filepath": str(tmp_path / "wavs" / "r1.wav"),
        "duration": 1.0,
        "text": "HELLO there",
    }
    assert any("orphan" in w or "r9" in w for w in s.warnings)
    assert read_inputs(d / "wav.scp").ids() == ["r1", "r2"]


def test_kaldi_segments(tmp_path):
    wav(tmp_path / "rec.wav", 3.0)
    d = tmp_path / "k"
    d.mkdir()
    (d / "wav.scp").write_text(f"rec {tmp_path / 'rec.wav'}\n")
    (d / "segments").write_text("u1 rec 0.0 1.0\nu2 rec 1.5 2.5\nu3 rec 2.0 -1\n")
    s = read_inputs(d)
    u1, u2, u3 = s.utterances
    assert (u2.offset, u2.duration) == (1.5, 1.0)
    assert u3.offset == 2.0 and u3.duration == pytest.approx(1.0)
    assert len(load_audio(u2)[0]) == 16000
    assert u2.record["recording_id"] == "rec" and "ctm_file" not in u2.record
    (d / "reco2file_and_channel").write_text("rec rec_file A\n")
    assert read_inputs(d).utterances[1].record | {} == u2.record | {
        "ctm_file": "rec_file",
        "ctm_channel": "A",
    }
    (d / "reco2file_and_channel").write_text("rec rec_file\n")
    with pytest.raises(
        InputError, match=r"reco2file_and_channel:1: expected '<recording-id> <file-id> <channel>'"
    ):
        read_inputs(d)
    (d / "reco2file_and_channel").write_text("other f A\n")
    with pytest.raises(InputError, match=r"reco2file_and_channel:1: recording 'other' is not in wav.scp"):
        read_inputs(d)
    (d / "reco2file_and_channel").unlink()
    (d / "segments").write_text("u1 rec 0.0 1.0\nu2 nope 0 1\n")
    with pytest.raises(InputError, match=r"segments:2: recording 'nope' is not in wav.scp"):
        read_inputs(d)
    (d / "segments").write_text("u1 rec 1.0 0.5\n")
    with pytest.raises(InputError, match=r"segments:1: bad segment times"):
        read_inputs(d)


def test_kaldi_pipes_known_forms_read_others_rejected_per_utterance(tmp_path):
    a = wav(tmp_path / "a.flac", 0.5)
    st = tmp_path / "st.wav"
    sf.write(st, np.stack([np.full(800, 0.5), np.full(800, -0.25)], axis=1).astype(np.float32), 16000)
    d = tmp_path / "k"
    d.mkdir()
    (d / "wav.scp").write_text(
        f"a flac -c -d -s {a} |\n"
        f"b sox {st} -t wav - remix 2 |\n"
        f"c gunzip -c {a}.gz | sox -t flac - -t wav - |\n"
        f"d /x/feats.ark:1234\n"
        f"e ffmpeg -nostdin -loglevel error -i {a} -f wav -ar 16000 -ac 1 - |\n"
        f"f ffmpeg -i {a} -ac 2 -f wav - |\n"
        f"g ffmpeg -i {a} -af volume=2 -f wav - |\n"
        f"h ffmpeg -i {a} -f wav out.wav |\n"
    )
    s = read_inputs(d)
    ua, ub, uc, ud, ue, uf, ug, uh = s.utterances
    assert ua.audio_path == str(a) and ua.error is None
    assert ub.audio_path == str(st) and ub.channel == 1
    assert ue.audio_path == str(a) and ue.error is None and ue.channel is None
    np.testing.assert_array_equal(load_audio(ub)[0], np.full(800, -0.25, dtype=np.float32))
    for u, line in ((uc, 3), (ud, 4), (uf, 6), (ug, 7), (uh, 8)):
        where = f"wav.scp:{line}"
        with pytest.raises(AudioError) as e:
            load_audio(u)
        assert where in str(e.value) and "\n" not in str(e.value)


def test_kaldi_malformed_lines(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    (d / "wav.scp").write_text("r1 /a.wav\nr2\n")
    with pytest.raises(InputError, match=r"wav\.scp:2:"):
        read_inputs(d)
    (d / "wav.scp").write_text("r1 /a.wav\nr1 /b.wav\n")
    with pytest.raises(InputError, match=r"wav\.scp:2: duplicate recording id 'r1' \(first on line 1\)"):
        read_inputs(d)
    (d / "wav.scp").write_text("r1 /a.wav\n")
    (d / "utt2dur").write_text("r1 long\n")
    with pytest.raises(InputError, match=r"utt2dur:1:"):
        read_inputs(d)


def test_a_fifo_in_a_folder_is_an_input_that_fails_unopened(tmp_path):
    """A named pipe among the audio files: listed, never opened (opening it would wait for a
    writer forever), and failed with one line when its turn comes."""
    from helpers.fuzz import only_asrdecode_errors

    wav(tmp_path / "audio" / "a.wav")
    os.mkfifo(tmp_path / "audio" / "pipe.wav")
    only_asrdecode_errors(lambda: read_inputs(tmp_path / "audio"))
    a, pipe = read_inputs(tmp_path / "audio").utterances
    assert pipe.utt_id == "pipe" and pipe.duration is None
    with pytest.raises(AudioError, match="pipe.wav: a FIFO"):
        load_audio(pipe)
    with pytest.raises(InputError, match="pipe.wav: a FIFO"):  # given as the input itself
        read_inputs(tmp_path / "audio" / "pipe.wav")
