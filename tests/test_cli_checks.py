"""Settings and inputs are checked before anything is loaded and before `--out` is made: one line
each, no output folder left behind, `--strict` stops before the model loads."""

from __future__ import annotations

import json
import os

import pytest
from helpers.cli import AUDIO, MODEL, read_jsonl, run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope.nemo"], "nope.nemo: model file not found"),
        (["--model", "nvidia/parakeet-tdt-0.6b-v2"], "models are files here, not hub names"),
        (["--model", "embedded:demo_ctc"], "embedded models: demo_ctc_bpe,"),
        (["--model", str(MODEL), "batch.max_seconds=-5"], "batch.max_seconds must be seconds > 0"),
        (["--model", str(MODEL), "--decoder", "wfst", "decoder.graph=nope"], "decoder.graph: nope"),
        (["--model", str(MODEL), "threads=1000000"], "threads=1000000: use 0"),
    ],
)
def test_bad_settings_stop_before_loading_and_leave_no_output_folder(tmp_path, args, message):
    out = tmp_path / "out"
    proc = run("transcribe", str(AUDIO), *args, "--out", str(out), check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not out.exists()


def test_a_model_that_does_not_load_leaves_no_output_folder(tmp_path):
    """A model file that passes the checks but is damaged inside stops the run at loading with
    one line; what the run made for its output is removed (no folder of empty files), and what
    was there before is left."""
    damaged = tmp_path / "cut.nemo"
    damaged.write_bytes(MODEL.read_bytes()[: MODEL.stat().st_size // 2])
    out = tmp_path / "out"
    for existed in (False, True):
        proc = run("transcribe", str(AUDIO), "--model", str(damaged), "--out", str(out), check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {damaged}: ")
        assert [p.name for p in out.iterdir()] == ["mine.txt"] if existed else not out.exists()
        out.mkdir(exist_ok=True)
        (out / "mine.txt").write_text("kept")


def test_strict_checks_every_input_before_the_model_loads(tmp_path):
    manifest = tmp_path / "m.jsonl"
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    rows = [
        {"audio_filepath": str(AUDIO / "ps_goforward.wav")},
        {"audio_filepath": str(fifo), "duration": 1.0},
    ]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    proc = run("transcribe", str(manifest), "--model", str(MODEL), "--strict", "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pipe.wav: a FIFO (named pipe), not a regular file" in proc.stderr.splitlines()[-1]
    assert "loading model" not in proc.stderr and not read_jsonl(out / "transcripts.jsonl")
    assert [e["utt_id"] for e in read_jsonl(out / "errors.jsonl")] == ["pipe"]


def test_build_graph_reads_shipped_configs_from_any_folder(tmp_path):
    out = tmp_path / "graph"
    run("build-graph", "--config", "configs/graph/demo-ctc-bpe-tlg.yaml", "--out", str(out), cwd=tmp_path)
    assert (out / "meta.json").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--language", "de"],
            "--language de: embedded:configs/hama-en-us-otf.yaml transcribes English (en) only",
        ),
        (
            ["--language", "de", "--model", str(MODEL)],
            "model.source_lang, model.target_lang: only AED models",
        ),
    ],
)
def test_a_language_the_model_cannot_take_is_one_line(tmp_path, args, message):
    """Refused in one line, before loading for the English setups (a .nemo file's family is known
    once it is read), and no output folder left."""
    out = tmp_path / "out"
    proc = run("transcribe", str(AUDIO), *args, "--out", str(out), check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and message in lines[-1], proc.stderr
    assert not out.exists()


def test_language_sets_a_canary_models_prompt(tmp_path):
    """``--language en`` with a Canary checkpoint (a test model trained on the fixture clips):
    transcribed in English; a language its tokenizer lacks is one line naming it."""
    canary = MODEL.parent / "aed_canary2.nemo"
    wav = AUDIO / "ps_goforward.wav"
    proc = run(
        "transcribe", str(wav), "--model", str(canary), "--language", "en", "--out", str(tmp_path / "en")
    )
    assert "transcript: go forward ten meters" in proc.stdout
    proc = run(
        "transcribe",
        str(wav),
        "--model",
        str(canary),
        "--language",
        "xx",
        "--out",
        str(tmp_path / "xx"),
        check=False,
    )
    assert (
        proc.returncode == 2 and "Traceback" not in proc.stderr and "<|xx|>" in proc.stderr.splitlines()[-1]
    )
