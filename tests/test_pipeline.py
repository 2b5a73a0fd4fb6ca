"""`Transcriber` (asrdecode.pipeline) as a library, in this process: the NeMo fixture model's texts,
the callbacks, a bad file counted and skipped, and a resumed run that decodes nothing again."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf
from helpers.cli import AUDIO, FIX, MODEL, read_jsonl

from asrdecode.config import build_config
from asrdecode.errors import AudioError
from asrdecode.pipeline import Transcriber


def nemo_texts() -> dict[str, str]:
    z = np.load(FIX / "reference" / "ctc_bpe.npz", allow_pickle=False)
    return {str(u): str(t) for u, t in zip(z["utt_ids"], z["greedy_text"], strict=True)}


def test_transcriber_runs_resumes_and_reports(tmp_path):
    audio = tmp_path / "audio"
    shutil.copytree(AUDIO, audio)
    (audio / "broken.wav").write_bytes(b"RIFF not really a wav")
    cfg = build_config(None, [f"model.path={MODEL}", "batch.max_utterances=3", "threads=1"])
    events, errors, statuses = [], [], []
    report = Transcriber(
        cfg,
        audio,
        tmp_path / "out",
        on_progress=events.append,
        on_error=lambda utt, msg: errors.append((utt, msg)),
        on_status=statuses.append,
    ).run()
    texts = {r["utt_id"]: r["pred_text"] for r in read_jsonl(tmp_path / "out" / "transcripts.jsonl")}
    assert texts == nemo_texts()  # NeMo 3.0.0's greedy texts of the same clips
    assert report["decoded_this_run"] == len(texts) and report["failed"] == 1
    assert [utt for utt, _ in errors] == ["broken"] and "broken.wav" in errors[0][1]
    assert events[-1]["done"] == len(texts) + 1  # progress counts the failed input too
    # the audio decoded against the inputs' known total: the bar and the time left go by it
    total = sum(sf.info(w).duration for w in AUDIO.glob("*.wav"))
    assert all(e["audio_total"] == pytest.approx(total) for e in events)
    assert events[-1]["audio_seconds"] == pytest.approx(total, abs=0.01)
    assert any("loading model" in s for s in statuses)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["failed"] == 1

    again = Transcriber(cfg, audio, tmp_path / "out").run()
    assert again["decoded_this_run"] == 0 and again["resumed"] == len(texts)


def test_stage_timer_times_the_items_production_not_their_use(monkeypatch):
    """`StageTimer.timed` (a streamed input's reading): the stage gets the time spent making each
    item, not the time its consumer spends between items (a clock that only the test moves)."""
    import torch

    import asrdecode.pipeline as pipeline

    clock = [0.0]
    monkeypatch.setattr(pipeline.time, "perf_counter", lambda: clock[0])

    def read():
        for block in range(3):
            clock[0] += 2.0  # reading a block
            yield block

    timer = pipeline.StageTimer(torch.device("cpu"))
    got = []
    for block in timer.timed("load", read()):
        clock[0] += 10.0  # decoding it
        got.append(block)
    assert got == [0, 1, 2] and timer.seconds["load"] == 6.0


def test_the_output_folder_is_locked_before_the_model_loads(tmp_path, monkeypatch):
    """A second run started while the first loads its model finds the folder taken."""
    import fcntl

    import asrdecode.models.loading as loading

    real_load = loading.load_model
    held = []

    def load_and_check(*args, **kwargs):
        with open(tmp_path / "out" / ".asrdecode.lock") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(True)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(loading, "load_model", load_and_check)
    cfg = build_config(None, [f"model.path={MODEL}", "threads=1"])
    Transcriber(cfg, AUDIO / "ps_goforward.wav", tmp_path / "out").run()
    assert held == [True]


def test_input_and_resume_warnings_are_shown(tmp_path):
    """Renamed duplicate ids and resumed lines dropped for their schema reach `on_status` (the
    terminal and the log)."""
    manifest = tmp_path / "m.jsonl"
    wav = str(AUDIO / "ps_goforward.wav")
    manifest.write_text(
        json.dumps({"audio_filepath": wav}) + "\n" + json.dumps({"audio_filepath": wav}) + "\n"
    )
    cfg = build_config(None, [f"model.path={MODEL}", "threads=1"])
    statuses: list[str] = []
    Transcriber(cfg, manifest, tmp_path / "out", on_status=statuses.append).run()
    assert any("id 'ps_goforward' already used, using 'ps_goforward-2'" in s for s in statuses)
    rows = (tmp_path / "out" / "transcripts.jsonl").read_text().splitlines()
    broken = json.loads(rows[0]) | {"pred_text": 5}
    (tmp_path / "out" / "transcripts.jsonl").write_text(json.dumps(broken) + "\n" + rows[1] + "\n")
    statuses.clear()
    report = Transcriber(cfg, manifest, tmp_path / "out", on_status=statuses.append).run()
    assert any(
        s.startswith("warning: ") and "dropped a line (pred_text must be a string" in s for s in statuses
    )
    assert report["resumed"] == 1 and report["decoded_this_run"] == 1


def test_a_failed_input_leaves_the_progress_total_and_strict_reports_it_once(tmp_path):
    """An input whose header promises audio that is not there (a WAV cut short) fails: its
    header's seconds leave the progress total, so the time left is that of what can be decoded;
    with ``strict`` the run stops with its message, which is not also reported as skipped."""
    audio = tmp_path / "audio"
    audio.mkdir()
    good = AUDIO / "ps_goforward.wav"
    shutil.copy(good, audio / "a.wav")
    data = good.read_bytes()
    (audio / "cut.wav").write_bytes(data[: len(data) // 2])
    cfg = build_config(None, [f"model.path={MODEL}", "threads=1"])
    events, errors = [], []
    report = Transcriber(
        cfg, audio, tmp_path / "out", on_progress=events.append, on_error=lambda u, m: errors.append(u)
    ).run()
    assert report["failed"] == 1 and errors == ["cut"]
    assert events[0]["audio_total"] == pytest.approx(
        sf.info(good).duration + sf.info(audio / "cut.wav").duration
    )
    assert events[-1]["audio_total"] == pytest.approx(sf.info(good).duration)
    errors.clear()
    with pytest.raises(AudioError, match="cut.wav"):
        Transcriber(
            cfg, audio, tmp_path / "strict", strict=True, on_error=lambda u, m: errors.append(u)
        ).run()
    assert errors == []
