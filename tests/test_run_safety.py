"""Runs that cannot corrupt each other: `transcribe` killed with SIGKILL at several moments (model
load, mid-batch, half-way through a line, between two output files, while finishing), two runs on
one output folder, and a write limit that stops a run (a full disk): the rerun always gives the
transcripts of an uninterrupted run, every line parses, no utterance twice."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

FIX = Path(__file__).parent / "fixtures" / "nemo"
MODEL = FIX / "ctc_bpe.nemo"
AUDIO = FIX / "audio"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

# Runs the CLI after arming one fault: the process kills itself (SIGKILL) at the chosen moment, or
# ("pause") waits in its nth batch until the file named by ASRDECODE_TEST_GO exists.
FAULTS = r"""
import os, signal, sys

point, nth = sys.argv[1], int(sys.argv[2])
calls = {"n": 0}

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def count():
    calls["n"] += 1
    return calls["n"] == nth

if point == "model-load":
    import asrdecode.models.loading as loading
    loading.load_model = lambda *a, **k: die()
elif point in ("mid-batch", "pause"):
    import time
    import asrdecode.pipeline as pipeline
    real_decode = pipeline.Transcriber._start_decode
    def _decode(self, out, utts):
        if count():
            if point == "mid-batch":
                die()
            while not os.path.exists(os.environ["ASRDECODE_TEST_GO"]):
                time.sleep(0.05)
        return real_decode(self, out, utts)
    pipeline.Transcriber._start_decode = _decode
elif point in ("half-line", "between-files"):
    import asrdecode.io.writers as writers
    real_append = writers.OutputWriter._append
    def _append(self, name, lines):
        if name == writers.TRANSCRIPTS and count():
            if point == "half-line":
                f = self._open(name)
                data = "".join(lines)
                f.write(data[: len(data) - len(lines[-1]) // 2])  # up to the middle of the last line
                f.flush()
                os.fsync(f.fileno())
            die()
        return real_append(self, name, lines)
    writers.OutputWriter._append = _append
elif point == "finishing":
    import asrdecode.io.writers as writers
    real_replace = os.replace
    def replace(src, dst):
        if str(dst).endswith(writers.TRANSCRIPTS) and count():
            die()  # the reordered copy is written, the original not yet replaced
        return real_replace(src, dst)
    writers.os.replace = replace

from asrdecode.cli import main
sys.argv = ["asrdecode", *sys.argv[3:]]
main()
"""


def transcribe_args(manifest: Path, out: Path) -> list[str]:
    return ["transcribe", str(manifest), "--model", str(MODEL), "--out", str(out), "batch.max_utterances=2"]


def run_cli(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "asrdecode.cli", *args], capture_output=True, text=True, env=ENV, **kwargs
    )


def lines_of(path: Path) -> list[dict]:
    """Every line of a JSONL output file, which must all parse."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class Transcripts(list):
    """transcripts.jsonl as (utt_id, text, words, score) in file order; equal to another when all
    but the scores are identical and the scores agree within 1e-3 (a rerun batches the remaining
    utterances differently, which moves float sums in the last digits)."""

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, list)
            and [r[:3] for r in self] == [r[:3] for r in other]
            and [r[3] for r in self] == pytest.approx([r[3] for r in other], abs=1e-3)
        )


def comparable(out: Path) -> Transcripts:
    """The transcripts of a finished output folder; `text` must match them line for line."""
    rows = lines_of(out / "transcripts.jsonl")
    text = (out / "text").read_text().splitlines()
    assert [line.split(" ", 1)[0] for line in text] == [r["utt_id"] for r in rows]
    return Transcripts((r["utt_id"], r["pred_text"], json.dumps(r["words"]), r["score"]) for r in rows)


def make_manifest(folder: Path, count: int) -> Path:
    wavs = sorted(AUDIO.glob("*.wav"))
    lines = []
    for i in range(count):
        w = wavs[i % len(wavs)]
        lines.append(
            json.dumps({"audio_filepath": str(w), "duration": sf.info(w).duration, "utt_id": f"u{i:03d}"})
        )
    path = folder / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run over 24 utterances (12 batches of 2)."""
    folder = tmp_path_factory.mktemp("safety")
    manifest = make_manifest(folder, 24)
    out = folder / "reference"
    proc = run_cli(transcribe_args(manifest, out))
    assert proc.returncode == 0, proc.stderr
    return manifest, comparable(out)


@pytest.mark.parametrize(
    "point,nth",
    [("model-load", 1), ("mid-batch", 4), ("half-line", 3), ("between-files", 5), ("finishing", 1)],
)
def test_killed_run_resumes_to_the_same_transcripts(tmp_path, reference, point, nth):
    manifest, expected = reference
    out = tmp_path / "out"
    killed = subprocess.run(
        [sys.executable, "-c", FAULTS, point, str(nth), *transcribe_args(manifest, out)],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    transcripts = out / "transcripts.jsonl"
    before = transcripts.read_bytes() if transcripts.exists() else b""
    if point in ("mid-batch", "between-files"):
        assert before.endswith(b"\n") and 0 < len(lines_of(transcripts)) < 24
    if point == "half-line":
        assert not before.endswith(b"\n")  # the kill left a cut line
    if point == "finishing":
        assert len(lines_of(transcripts)) == 24 and not (out / "report.json").exists()
    rerun = run_cli(transcribe_args(manifest, out))
    assert rerun.returncode == 0, rerun.stderr
    assert comparable(out) == expected
    report = json.loads((out / "report.json").read_text())
    assert report["resumed"] + report["decoded_this_run"] == 24 and report["failed"] == 0
    assert not list(out.glob(".*.tmp"))  # no temporary file of the killed run is left


def test_second_run_on_the_same_folder_is_refused(tmp_path, reference):
    """While a run holds the folder (paused starting its fourth batch, two batches written: each
    batch is written once the next one is started), a second run, also with --overwrite, is
    refused with one line; the first then finishes with every utterance once."""
    manifest, expected = reference
    out = tmp_path / "out"
    go = tmp_path / "go"
    first = subprocess.Popen(
        [sys.executable, "-c", FAULTS, "pause", "4", *transcribe_args(manifest, out)],
        env={**ENV, "ASRDECODE_TEST_GO": str(go)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    transcripts = out / "transcripts.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and len(lines_of(transcripts) if transcripts.exists() else []) < 4:
        time.sleep(0.05)
    try:
        for extra in ([], ["--overwrite"]):
            proc = run_cli([*transcribe_args(manifest, out), *extra])
            assert proc.returncode != 0
            assert proc.stderr.strip().count("\n") == 0 and "in use by another asrdecode run" in proc.stderr
            assert str(out) in proc.stderr and "Traceback" not in proc.stderr
            assert len(lines_of(transcripts)) == 4  # the refused run touched nothing
        assert first.poll() is None
    finally:
        go.touch()
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert comparable(out) == expected


def _limit_file_size(limit: int):
    def limit_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_size


def test_write_limit_stops_the_run_cleanly_and_the_rerun_resumes(tmp_path, reference):
    """A file-size limit (RLIMIT_FSIZE: writes past it fail like on a full disk) stops the run
    with one line naming the file; the complete lines stay, and the rerun without the limit
    resumes to the uninterrupted transcripts."""
    manifest, expected = reference
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "asrdecode.cli", *transcribe_args(manifest, out)],
        capture_output=True,
        text=True,
        env=ENV,
        preexec_fn=_limit_file_size(4000),
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]  # after the status lines
    assert message.startswith("error: ") and proc.stderr.count("error") == 1, proc.stderr
    assert f"{out / 'transcripts.jsonl'}: cannot write: File too large" in message
    kept = [json.loads(x) for x in (out / "transcripts.jsonl").read_bytes().split(b"\n")[:-1]]
    assert 0 < len(kept) < 24
    assert {r["utt_id"]: r["pred_text"] for r in kept}.items() <= {r[0]: r[1] for r in expected}.items()
    assert not (out / "report.json").exists()
    rerun = run_cli(transcribe_args(manifest, out))
    assert rerun.returncode == 0, rerun.stderr
    assert comparable(out) == expected
    assert json.loads((out / "report.json").read_text())["resumed"] == len(kept)


def long_input(folder: Path, copies: int) -> Path:
    """A manifest of one long input: the fixture clips `copies` times, 0.25 s of silence after each."""
    clips = [sf.read(w, dtype="float32")[0] for w in sorted(AUDIO.glob("*.wav"))]
    wave = np.concatenate([np.concatenate([c, np.zeros(4000, np.float32)]) for c in clips] * copies)
    sf.write(folder / "long.wav", wave, 16000)
    manifest = folder / "long.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": str(folder / "long.wav"), "utt_id": "long"}) + "\n")
    return manifest


def complete_lines(path: Path) -> list[dict]:
    """The complete lines of a file a killed run was appending to."""
    return [json.loads(x) for x in path.read_bytes().split(b"\n")[:-1]] if path.exists() else []


def segment_args(manifest: Path, out: Path) -> list[str]:
    """The run of a long input in 3 s segments, one segment a batch."""
    return [*transcribe_args(manifest, out), "batch.segment_seconds=3", "batch.max_seconds=3"]


def segment_events(log: Path) -> int:
    """A run's progress events between its first and its last: one per batch of segments."""
    return len([e for e in lines_of(log) if e["event"] == "progress"]) - 2


def decode_uninterrupted(tmp_path: Path, manifest: Path) -> None:
    """The reference run: the long input decoded in one go into tmp_path/whole (log whole.log)."""
    whole = run_cli([*segment_args(manifest, tmp_path / "whole"), "--log-file", str(tmp_path / "whole.log")])
    assert whole.returncode == 0, whole.stderr


def test_a_long_input_killed_midway_continues_from_its_next_segment(tmp_path):
    """One 20 s input decoded in 3 s segments, one a batch, killed as its fourth batch starts
    (two segments' results written: each batch's results are kept once the next one has
    started): the rerun decodes only the segments after them (one progress event a segment) and
    writes the transcript of an uninterrupted run; the kept segments' file is gone after it."""
    manifest = long_input(tmp_path, 1)

    args = partial(segment_args, manifest)
    decode_uninterrupted(tmp_path, manifest)
    out = tmp_path / "out"
    killed = subprocess.run(
        [sys.executable, "-c", FAULTS, "mid-batch", "4", *args(out)], capture_output=True, text=True, env=ENV
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not lines_of(out / "transcripts.jsonl")
    kept = lines_of(out / "segments" / "long.jsonl")[1:]
    assert len(kept) == 2 and kept[0]["start"] == 0 and kept[1]["start"] == kept[0]["end"]
    rerun = run_cli([*args(out), "--log-file", str(tmp_path / "rerun.log")])
    assert rerun.returncode == 0, rerun.stderr
    assert comparable(out) == comparable(tmp_path / "whole")
    assert segment_events(tmp_path / "rerun.log") == segment_events(tmp_path / "whole.log") - 2
    assert not (out / "segments").exists()
    assert_resumed_segments(out, tmp_path / "whole", kept)


def assert_resumed_segments(out: Path, whole: Path, kept: list[dict]) -> None:
    """A rerun that took `kept` segments from a stopped run: its segments.jsonl is the
    uninterrupted run's (one line per segment with its times and text), and its report counts
    only the audio it decoded itself."""
    assert lines_of(out / "segments.jsonl") == lines_of(whole / "segments.jsonl")
    (record,) = lines_of(whole / "transcripts.jsonl")
    assert len(lines_of(whole / "segments.jsonl")) == len(record["segments"]) > len(kept)
    assert " ".join(line["pred_text"] for line in lines_of(whole / "segments.jsonl")) == record["pred_text"]
    seconds = json.loads((out / "report.json").read_text())["audio_hours_this_run"] * 3600
    assert seconds == pytest.approx(record["duration"] - kept[-1]["end"] / 16000, abs=1e-3)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT])
def test_a_long_input_stopped_from_outside_continues_from_its_next_segment(tmp_path, stop):
    """The CLI as a user runs it (no hooks), on a 2-minute input in 3 s segments: killed
    (``kill -9``) or interrupted (Ctrl-C) from outside once two segments are kept, wherever it then
    is; the rerun decodes only the segments after the kept ones (one progress event each) and
    writes the transcripts and segments.jsonl of an uninterrupted run."""
    manifest = long_input(tmp_path, 6)

    args = partial(segment_args, manifest)
    decode_uninterrupted(tmp_path, manifest)
    out = tmp_path / "out"
    segments = out / "segments" / "long.jsonl"
    run = subprocess.Popen(
        [sys.executable, "-m", "asrdecode.cli", *args(out)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while run.poll() is None and time.time() < deadline and len(complete_lines(segments)) < 3:
        time.sleep(0.01)
    run.send_signal(stop)
    _, err = run.communicate(timeout=300)
    if stop == signal.SIGKILL:
        assert run.returncode == -signal.SIGKILL, err
    else:
        assert run.returncode == 130 and "interrupted: finished results are kept" in err, err
        assert "Traceback" not in err
    assert not lines_of(out / "transcripts.jsonl")
    kept = complete_lines(segments)[1:]
    assert len(kept) >= 2 and kept[0]["start"] == 0
    rerun = run_cli([*args(out), "--log-file", str(tmp_path / "rerun.log")])
    assert rerun.returncode == 0, rerun.stderr
    assert comparable(out) == comparable(tmp_path / "whole")
    assert segment_events(tmp_path / "rerun.log") == segment_events(tmp_path / "whole.log") - len(kept)
    assert not (out / "segments").exists()
    assert_resumed_segments(out, tmp_path / "whole", kept)
