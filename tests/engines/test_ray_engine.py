"""`transcribe --engine ray`: the same output files as a local run, resumable, a dead worker's shard
decoded by a new one, one-line errors; a local Ray instance with 2 workers on this machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf
from helpers.sphinx_graph import GOFORWARD, tiny_sphinx_hclg

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
MODEL = FIX / "ctc_bpe.nemo"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "asrdecode.cli", *args], capture_output=True, text=True, env=ENV
    )


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]


def same_transcripts(a: Path, b: Path) -> bool:
    ra, rb = rows(a), rows(b)
    keys = ("utt_id", "pred_text", "words")
    return [[r[k] for k in keys] for r in ra] == [[r[k] for k in keys] for r in rb] and [
        r["score"] for r in ra
    ] == pytest.approx([r["score"] for r in rb], abs=1e-3)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    """30 utterances of the fixture clips and one unreadable file."""
    folder = tmp_path_factory.mktemp("ray")
    wavs = sorted((FIX / "audio").glob("*.wav"))
    lines = [
        {"audio_filepath": str(w), "duration": sf.info(w).duration, "utt_id": f"u{i:02d}"}
        for i, w in enumerate(wavs[i % len(wavs)] for i in range(30))
    ]
    (folder / "bad.wav").write_bytes(b"RIFF not audio")
    lines.insert(7, {"audio_filepath": str(folder / "bad.wav"), "duration": 1.0, "utt_id": "bad"})
    path = folder / "m.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def local_run(manifest, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "out"
    proc = cli(
        "transcribe", str(manifest), "--model", str(MODEL), "--out", str(out), "batch.max_utterances=4"
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_ray_run_writes_what_a_local_run_writes(manifest, local_run, tmp_path):
    out = tmp_path / "ray"
    args = ["transcribe", str(manifest), "--model", str(MODEL), "--out", str(out), "batch.max_utterances=4"]
    proc = cli(*args, "--engine", "ray", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert same_transcripts(out, local_run)
    assert (out / "text").read_text() == (local_run / "text").read_text()
    assert (out / "segments.jsonl").read_text() == (local_run / "segments.jsonl").read_text()
    errors = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["utt_id"] for e in errors] == ["bad"] and "bad.wav" in errors[0]["error"]
    report = json.loads((out / "report.json").read_text())
    assert report["engine"] == "ray" and report["decoder"] == "ctc-greedy"
    assert report["decoded_this_run"] == 30 and report["failed"] == 1
    workers = report["workers"]
    assert len(workers) == 2 and sum(w["utterances"] for w in workers) == 31
    assert all(w["rtfx"] > 0 for w in workers) and report["rtfx"] > 0
    # peak memory: the driver's and each worker process's (each loads its own model)
    assert all(w["peak_memory_mb"] > 0 for w in workers)
    assert report["peak_memory_mb_workers"] == pytest.approx(
        sum(w["peak_memory_mb"] for w in workers), abs=0.2
    )
    assert report["peak_memory_mb_total"] == pytest.approx(
        report["peak_memory_mb"] + report["peak_memory_mb_workers"], abs=0.2
    )


def test_ray_run_resumes_a_folder(manifest, local_run, tmp_path):
    out = tmp_path / "resumed"
    out.mkdir()
    kept = (local_run / "transcripts.jsonl").read_text().splitlines()[:10]
    (out / "transcripts.jsonl").write_text("\n".join(kept) + "\n")
    shutil.copy(local_run / "setup.json", out)  # what a killed run leaves: its setup, some results
    args = ["transcribe", str(manifest), "--model", str(MODEL), "--out", str(out), "batch.max_utterances=4"]
    proc = cli(*args, "--engine", "ray", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert same_transcripts(out, local_run)
    report = json.loads((out / "report.json").read_text())
    assert report["resumed"] == 10 and report["decoded_this_run"] == 20


def test_model_that_cannot_load_is_one_line(manifest, tmp_path):
    garbage = tmp_path / "garbage.nemo"
    garbage.write_bytes(b"\x00" * 100)
    proc = cli(
        "transcribe", str(manifest), "--model", str(garbage), "--out", str(tmp_path / "o"), "--engine", "ray"
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and "garbage.nemo" in proc.stderr


class DyingWorker:
    """A worker whose process exits on its first shard, once per marker file (the first worker
    to start a shard dies; its replacement and the other worker finish)."""

    def __init__(self, *args):
        from asrdecode.engines.ray import ShardWorker

        self.inner = ShardWorker(*args)

    def run(self, utts):
        marker = Path(os.environ["ASRDECODE_TEST_MARKER"])
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return self.inner.run(utts)
        os.close(fd)
        os._exit(1)


def test_a_dead_workers_shard_goes_to_a_new_worker(manifest, local_run, tmp_path, monkeypatch):
    import ray

    import asrdecode.engines.ray as engine
    from asrdecode.config import build_config
    from asrdecode.pipeline import Transcriber

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(engine, "WORKER", DyingWorker)
    monkeypatch.setenv("ASRDECODE_TEST_MARKER", str(tmp_path / "died"))
    cfg = build_config(None, [f"model.path={MODEL}", "batch.max_utterances=4", "engine.type=ray"])
    statuses = []
    report = Transcriber(cfg, manifest, tmp_path / "out", on_status=statuses.append).run()
    assert (tmp_path / "died").exists() and any("a worker died" in s for s in statuses)
    assert report["decoded_this_run"] == 30 and report["failed"] == 1
    assert same_transcripts(tmp_path / "out", local_run)


def test_workers_whose_search_threads_score_say_so(tmp_path):
    """The sphinx model with `wfst` on CPU workers: each worker's search threads score its
    utterances (deferred scores), and the driver's report says so."""
    graph = tiny_sphinx_hclg(tmp_path)
    audio = tmp_path / "audio"
    audio.mkdir()
    for name in ("a.wav", "b.wav", "c.wav"):
        shutil.copy(GOFORWARD, audio / name)
    out = tmp_path / "out"
    proc = cli(
        "transcribe", str(audio), "--model", "embedded:sphinx-en-us", "--decoder", "wfst",
        f"decoder.graph={graph}", "decoder.acoustic_scale=0.1538", "batch.max_utterances=1",
        "--engine", "ray", "--workers", "2", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [r["pred_text"] for r in rows(out)] == ["go forward ten meters"] * 3
    assert json.loads((out / "report.json").read_text())["scores_deferred"] is True


def test_canary_prompts_per_line_on_ray(tmp_path):
    """A Canary manifest on Ray workers: each line's own prompt, as a local run decodes it; a line
    whose language the model lacks fails in one line there too."""
    wavs = sorted((FIX / "audio").glob("*.wav"))
    lines = [{"audio_filepath": str(w), "utt_id": f"u{i}"} | ({"target_lang": "de"} if i % 2 else {})
             for i, w in enumerate(wavs)]  # fmt: skip
    lines.append({"audio_filepath": str(wavs[0]), "utt_id": "fr", "target_lang": "fr"})
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    model = str(FIX / "aed_canary.nemo")
    local, ray = tmp_path / "local", tmp_path / "ray"
    assert cli("transcribe", str(path), "--model", model, "--out", str(local)).returncode == 0
    proc = cli(
        "transcribe", str(path), "--model", model, "--out", str(ray), "--engine", "ray", "--workers", "2"
    )
    assert proc.returncode == 0, proc.stderr
    assert same_transcripts(ray, local)
    for out in (local, ray):
        errors = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
        assert [e["utt_id"] for e in errors] == ["fr"] and "<|fr|>" in errors[0]["error"]
