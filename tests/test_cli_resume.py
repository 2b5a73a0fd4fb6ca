"""Rerunning into an output folder, end to end: results of another setup are never mixed in, ids
that now name another file are decoded again, and transcripts.jsonl feeds back as a manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import soundfile as sf
from helpers.cli import AUDIO, FIX, MODEL, read_jsonl, run


def test_a_rerun_with_another_model_refuses_and_new_files_replace_stale_ids(tmp_path):
    audio = tmp_path / "audio"
    audio.mkdir()
    for name in ("ps_goforward", "ps_cards_005"):
        shutil.copy(AUDIO / f"{name}.wav", audio / f"{name}.wav")
    out = tmp_path / "out"
    run("transcribe", str(audio), "--model", str(MODEL), "--out", str(out))
    before = (out / "transcripts.jsonl").read_bytes()
    other = str(FIX / "rnnt_bpe.nemo")
    proc = run("transcribe", str(audio), "--model", other, "--out", str(out), check=False)
    error = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(error) == 1
    assert "another setup" in error[0] and "model.path" in error[0] and "--overwrite" in error[0]
    assert (out / "transcripts.jsonl").read_bytes() == before

    wave, rate = sf.read(AUDIO / "ps_forever_2.wav")
    sf.write(audio / "ps_goforward.flac", wave, rate)  # beside ps_goforward.wav: both ids change
    shutil.copy(AUDIO / "ps_librivox_0880.wav", audio / "ps_cards_005.wav")  # the same id, another clip
    proc = run("transcribe", str(audio), "--model", str(MODEL), "--out", str(out))
    ids = [r["utt_id"] for r in read_jsonl(out / "transcripts.jsonl")]
    assert ids == ["ps_cards_005", "ps_goforward-flac", "ps_goforward-wav"]
    assert [r["utt_id"] for r in read_jsonl(out / "stale.jsonl")] == ["ps_cards_005", "ps_goforward"]
    assert "stale.jsonl" in proc.stderr and "is used by another file" in proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["resumed"] == 0 and report["decoded_this_run"] == 3

    proc = run("transcribe", str(audio), "--model", other, "--out", str(out), "--overwrite")
    assert len(read_jsonl(out / "transcripts.jsonl")) == 3 and not (out / "stale.jsonl").exists()


def test_transcripts_jsonl_feeds_back_as_a_manifest_from_any_folder(tmp_path):
    """A folder given as a relative path: its records name their files absolutely, so the
    transcripts read as a manifest from another folder give the same texts (and no earlier
    run's result fields linger)."""
    (tmp_path / "audio").mkdir()
    for name in ("ps_goforward", "ps_cards_005"):
        shutil.copy(AUDIO / f"{name}.wav", tmp_path / "audio" / f"{name}.wav")
    run("transcribe", "audio", "--model", str(MODEL), "--out", "first", cwd=tmp_path)
    first = read_jsonl(tmp_path / "first" / "transcripts.jsonl")
    assert all(Path(r["audio_filepath"]).is_absolute() for r in first)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run("transcribe", "../first/transcripts.jsonl", "--model", str(MODEL), "--decoder", "ctc-beam",
        "decoder.return_best_hypothesis=false", "--out", "second", cwd=elsewhere)  # fmt: skip
    second = read_jsonl(elsewhere / "second" / "transcripts.jsonl")
    assert [r["utt_id"] for r in second] == [r["utt_id"] for r in first] and "nbest" in second[0]
    run("transcribe", "second/transcripts.jsonl", "--model", str(MODEL), "--out", "third", cwd=elsewhere)
    third = read_jsonl(elsewhere / "third" / "transcripts.jsonl")
    assert [r["pred_text"] for r in third] == [r["pred_text"] for r in first]
    assert not any("nbest" in r for r in third)  # the second run's n-best is not echoed
