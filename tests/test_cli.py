"""End-to-end CLI tests through subprocess, with the NeMo fixture model (random weights)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers.cli import AUDIO, FIX, MODEL, read_jsonl, run


def reference_texts() -> dict[str, str]:
    z = np.load(FIX / "reference" / "ctc_bpe.npz", allow_pickle=False)
    return {str(u): str(t) for u, t in zip(z["utt_ids"], z["greedy_text"], strict=True)}


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    refs = dict(line.split(" ", 1) for line in (AUDIO / "text").read_text().splitlines() if line.strip())
    lines = []
    for wav in sorted(AUDIO.glob("*.wav")):
        info = sf.info(wav)
        lines.append(
            json.dumps(
                {
                    "audio_filepath": str(wav),
                    "duration": info.duration,
                    "text": refs[wav.stem],
                    "utt_id": wav.stem,
                    "speaker": "x",
                }
            )
        )
    path = tmp_path / "manifest.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_transcribe_manifest_matches_nemo_and_writes_everything(tmp_path, manifest):
    out = tmp_path / "out"
    proc = run("transcribe", str(manifest), "--model", str(MODEL), "--out", str(out), "device=cpu")
    rows = {r["utt_id"]: r for r in read_jsonl(out / "transcripts.jsonl")}
    assert {k: v["pred_text"] for k, v in rows.items()} == reference_texts()
    first = next(iter(rows.values()))
    assert first["speaker"] == "x" and "text" in first  # input record echoed
    for r in rows.values():
        for w in r["words"]:
            assert 0 <= w["start"] < w["end"] <= r["duration"] + 0.1
    kaldi = dict(
        line.split(" ", 1) if " " in line else (line, "") for line in (out / "text").read_text().splitlines()
    )
    assert {k: v.strip() for k, v in kaldi.items()} == reference_texts()
    ctm_words = [line.split()[4] for line in (out / "hyp.ctm").read_text().splitlines()]
    assert ctm_words == [w["word"] for r in read_jsonl(out / "transcripts.jsonl") for w in r["words"]]
    report = json.loads((out / "report.json").read_text())
    assert report["utterances"] == 6 and report["failed"] == 0 and report["decoded_this_run"] == 6
    assert report["wer"] is not None and report["wer"] > 0.5  # random weights: gibberish
    assert set(report["rtfx_per_stage"]) == {"load", "features", "model", "decode"}
    assert "WER" in proc.stdout and "RTFx" in proc.stdout


def test_folder_and_kaldi_dir_inputs(tmp_path):
    out1 = tmp_path / "o1"
    run("transcribe", str(AUDIO), "--model", str(MODEL), "--out", str(out1))
    rows = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out1 / "transcripts.jsonl")}
    assert rows == reference_texts()
    kdir = tmp_path / "kaldi"
    kdir.mkdir()
    wavs = sorted(AUDIO.glob("*.wav"))
    (kdir / "wav.scp").write_text("".join(f"{w.stem} {w}\n" for w in wavs))
    shutil.copy(AUDIO / "text", kdir / "text")
    out2 = tmp_path / "o2"
    run("transcribe", str(kdir), "--model", str(MODEL), "--out", str(out2))
    rows2 = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out2 / "transcripts.jsonl")}
    assert rows2 == reference_texts()
    assert json.loads((out2 / "report.json").read_text())["scored_utterances"] == 6


def test_kaldi_segments_give_a_recording_level_ctm(tmp_path):
    """Segments of one recording: hyp.ctm is Kaldi's recording-level CTM (file, channel from
    reco2file_and_channel, times from the recording's start: each word of transcripts.jsonl shifted
    by its segment's start), in segment order, and a resumed run rebuilds it the same."""
    wave, rate = sf.read(AUDIO / "ps_goforward.wav", dtype="int16")
    rec = tmp_path / "meeting.wav"
    sf.write(rec, np.concatenate([wave, wave, wave]), rate)
    seconds = len(wave) / rate
    kdir = tmp_path / "kaldi"
    kdir.mkdir()
    (kdir / "wav.scp").write_text(f"meeting {rec}\n")
    starts = [0.0, seconds, 2 * seconds]
    (kdir / "segments").write_text(
        "".join(f"s{i} meeting {t:.3f} {t + seconds:.3f}\n" for i, t in enumerate(starts))
    )
    (kdir / "reco2file_and_channel").write_text("meeting meeting_file A\n")
    out = tmp_path / "o"
    run("transcribe", str(kdir), "--model", str(MODEL), "--out", str(out))
    want = []
    for row in read_jsonl(out / "transcripts.jsonl"):
        assert row["recording_id"] == "meeting"
        shift = row.get("offset", 0.0)
        want += [(f"{shift + w['start']:.3f}", w["word"]) for w in row["words"]]
    ctm = (out / "hyp.ctm").read_text().splitlines()
    assert ctm and [tuple(line.split()[2:5:2]) for line in ctm] == want
    assert {tuple(line.split()[:2]) for line in ctm} == {("meeting_file", "A")}
    first = (out / "hyp.ctm").read_text()
    (out / "hyp.ctm").write_text(first[: len(first) // 2])  # as a killed run leaves it
    run("transcribe", str(kdir), "--model", str(MODEL), "--out", str(out))
    assert (out / "hyp.ctm").read_text() == first


def test_save_logprobs_then_decoder_only(tmp_path, manifest):
    out = tmp_path / "a"
    run("transcribe", str(manifest), "--model", str(MODEL), "--out", str(out), "--save-logprobs")
    z = np.load(FIX / "reference" / "ctc_bpe.npz", allow_pickle=False)
    for b, utt in enumerate(z["utt_ids"]):
        saved = np.load(out / "logprobs" / f"{utt}.npy", allow_pickle=False)
        assert saved.shape == (int(z["encoder_len"][b]), 129)
        np.testing.assert_allclose(saved, z["log_probs"][b, : saved.shape[0]], atol=1e-3)
    out2 = tmp_path / "b"
    run("transcribe", str(out / "logprobs"), "--out", str(out2))
    rows = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out2 / "transcripts.jsonl")}
    assert rows == reference_texts()


def test_bad_files_are_reported_skipped_and_counted(tmp_path, manifest):
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    (bad_dir / "empty.wav").write_bytes(b"")
    (bad_dir / "notaudio.wav").write_text("hello, I am not audio\n" * 20)
    data = (AUDIO / "ps_goforward.wav").read_bytes()
    (bad_dir / "truncated.wav").write_bytes(data[:30])
    lines = manifest.read_text().splitlines()
    for name in ("empty.wav", "notaudio.wav", "truncated.wav", "missing.wav"):
        lines.append(json.dumps({"audio_filepath": str(bad_dir / name), "duration": 1.0, "text": "x"}))
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = run("transcribe", str(manifest), "--model", str(MODEL), "--out", str(out))
    errors = read_jsonl(out / "errors.jsonl")
    assert len(errors) == 4
    assert all(any(n in e["error"] for n in ("empty", "notaudio", "truncated", "missing")) for e in errors)
    report = json.loads((out / "report.json").read_text())
    assert report["failed"] == 4 and report["decoded_this_run"] == 6
    assert "Traceback" not in proc.stderr and "missing.wav" in proc.stderr
    strict = run(
        "transcribe",
        str(manifest),
        "--model",
        str(MODEL),
        "--out",
        str(tmp_path / "s"),
        "--strict",
        check=False,
    )
    assert strict.returncode != 0 and "Traceback" not in strict.stderr
    assert len(strict.stderr.strip().splitlines()[-1]) > 0


def test_a_long_or_bracketed_file_name_stays_whole_on_its_line(tmp_path, manifest):
    """A skipped file's message and a fatal error name the file in full on one line, whatever the
    console width (rich would wrap and shorten a long path) and with brackets (not markup)."""
    deep = tmp_path / ("long-folder-name-" * 6) / "[take 2] recordings"
    deep.mkdir(parents=True)
    missing = deep / "[bad] missing.wav"
    lines = manifest.read_text().splitlines()[:1]
    lines.append(json.dumps({"audio_filepath": str(missing), "duration": 1.0, "text": "x"}))
    manifest.write_text("\n".join(lines) + "\n")
    proc = run("transcribe", str(manifest), "--model", str(MODEL), "--out", str(tmp_path / "o"))
    assert any(str(missing) in line and "skipped" in line for line in proc.stderr.splitlines())
    bad = deep / "[x] bad.yaml"
    bad.write_text("decoder: [unclosed\n")
    proc = run("transcribe", str(manifest), "--config", str(bad), "--out", str(tmp_path / "p"), check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert any(str(bad) in line and "error:" in line for line in proc.stderr.splitlines())


def test_one_line_errors(tmp_path, manifest):
    bad_manifest = tmp_path / "m.jsonl"
    bad_manifest.write_text(manifest.read_text().splitlines()[0] + "\n{not json\n")
    proc = run(
        "transcribe", str(bad_manifest), "--model", str(MODEL), "--out", str(tmp_path / "o"), check=False
    )
    assert proc.returncode != 0 and "m.jsonl:2" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(
        "transcribe",
        str(manifest),
        "--model",
        str(tmp_path / "nope.nemo"),
        "--out",
        str(tmp_path / "o"),
        check=False,
    )
    assert proc.returncode != 0 and "nope.nemo" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("transcribe", str(manifest), "batch.max_secs=3", "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode != 0 and "batch.max_seconds" in proc.stderr and "Traceback" not in proc.stderr
    garbage = tmp_path / "garbage.nemo"
    garbage.write_bytes(os.urandom(2000))
    proc = run(
        "transcribe", str(manifest), "--model", str(garbage), "--out", str(tmp_path / "o"), check=False
    )
    assert proc.returncode != 0 and "garbage.nemo" in proc.stderr and "Traceback" not in proc.stderr
    cmd = ("transcribe", str(manifest), "--model", str(MODEL), "features.type=kaldi-fbank")
    proc = run(*cmd, "--out", str(tmp_path / "o2"), check=False)
    assert proc.returncode != 0 and "features.type=kaldi-fbank: use auto" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_print_config_shows_merged_values():
    proc = run("transcribe", "x", "--print-config", "batch.max_seconds=12", "--decoder", "ctc-greedy")
    assert "max_seconds: 12.0" in proc.stdout and "type: ctc-greedy" in proc.stdout


def test_score_command(tmp_path):
    ref = tmp_path / "ref.txt"
    hyp = tmp_path / "hyp.jsonl"
    ref.write_text("u1 the cat sat on the mat\nu2 hello world\n")
    hyp.write_text(
        json.dumps({"utt_id": "u1", "pred_text": "The cat sat on mat"})
        + "\n"
        + json.dumps({"utt_id": "u2", "pred_text": "hello, world!"})
        + "\n"
    )
    proc = run("score", "--ref", str(ref), "--hyp", str(hyp), "--json", str(tmp_path / "s.json"))
    d = json.loads((tmp_path / "s.json").read_text())
    assert d["deletions"] == 1 and d["substitutions"] == 0 and d["insertions"] == 0
    assert d["wer"] == pytest.approx(1 / 8)
    assert "12.50%" in proc.stdout


def test_info_model_and_dataset(manifest):
    proc = run("info", str(MODEL))
    assert "128" in proc.stdout  # vocabulary size of the fixture model
    proc = run("info", str(manifest))
    assert "6" in proc.stdout and "jsonl" in proc.stdout.lower()


def test_info_lm_files(tmp_path):
    """`info` on an ARPA file and on pocketsphinx's binary LM: order, counts, vocabulary; a damaged
    one is a one-line error naming it."""
    from asrdecode.lm.arpa import check_arpa
    from asrdecode.lm.sphinx_trie import read_trie_lm
    from asrdecode.models.loading import resolve_packaged_path

    arpa = Path(__file__).resolve().parents[1] / "data/demo/graph/lm.arpa"
    counts = check_arpa(arpa).counts
    proc = run("info", str(arpa))
    assert "ARPA LM" in proc.stdout and "order" in proc.stdout
    assert f"{counts[1]:,} 1-grams" in proc.stdout and f"{counts[3]:,} 3-grams" in proc.stdout
    binary = Path(resolve_packaged_path("embedded:sphinx-en-us/../en-us.lm.bin"))
    trie = read_trie_lm(binary)
    proc = run("info", str(binary))
    assert "pocketsphinx binary trie LM" in proc.stdout
    assert f"{len(trie.orders[1].words):,} 2-grams" in proc.stdout
    bad = tmp_path / "bad.arpa"
    bad.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0 a\n\\end\\\n")
    proc = run("info", str(bad), check=False)
    assert proc.returncode != 0 and "bad.arpa:" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_resume_after_kill_minus_9(tmp_path):
    wavs = sorted(AUDIO.glob("*.wav"))
    lines = []
    for i in range(240):
        w = wavs[i % len(wavs)]
        lines.append(
            json.dumps({"audio_filepath": str(w), "duration": sf.info(w).duration, "utt_id": f"u{i:03d}"})
        )
    manifest = tmp_path / "many.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asrdecode.cli",
            "transcribe",
            str(manifest),
            "--model",
            str(MODEL),
            "--out",
            str(out),
            "batch.max_utterances=2",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    transcripts = out / "transcripts.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if transcripts.exists() and transcripts.stat().st_size > 0:
            break
        time.sleep(0.01)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = (
        len([x for x in transcripts.read_text().splitlines() if x.strip()]) if transcripts.exists() else 0
    )
    run("transcribe", str(manifest), "--model", str(MODEL), "--out", str(out), "batch.max_utterances=2")
    rows = read_jsonl(transcripts)
    ids = [r["utt_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 240
    assert killed and 0 < partial < 240
    text_ids = [line.split(" ", 1)[0] for line in (out / "text").read_text().splitlines()]
    assert sorted(text_ids) == sorted(ids)
    report = json.loads((out / "report.json").read_text())
    assert report["resumed"] >= partial and report["resumed"] + report["decoded_this_run"] == 240
    by_clip = {}
    for i, r in enumerate(sorted(rows, key=lambda r: r["utt_id"])):
        by_clip.setdefault(i % len(wavs), set()).add(r["pred_text"])
    assert all(len(v) == 1 for v in by_clip.values())  # same clip, same text, whichever run decoded it


@pytest.mark.parametrize("name", ["rnnt_bpe", "tdt_bpe"])
def test_transducer_models_decode_like_nemo_with_auto_decoder(tmp_path, name):
    out = tmp_path / name
    run("transcribe", str(AUDIO), "--model", str(FIX / f"{name}.nemo"), "--out", str(out), "threads=1")
    rows = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out / "transcripts.jsonl")}
    z = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    assert rows == {str(u): str(t) for u, t in zip(z["utt_ids"], z["greedy_text"], strict=True)}
    assert json.loads((out / "report.json").read_text())["decoder"] == "transducer-greedy"


def test_log_file_has_the_runs_events(tmp_path):
    """--log-file: one JSON object per line (start, status, progress, report), appended."""
    log = tmp_path / "logs" / "run.jsonl"
    run("transcribe", str(AUDIO), "--model", str(MODEL), "--out", str(tmp_path / "o"), "--log-file", str(log))
    events = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "report" and "status" in kinds and "progress" in kinds
    assert events[-1]["decoded_this_run"] == 6 and all(isinstance(e["time"], float) for e in events)
    assert events[0]["config"]["model"]["path"] == str(MODEL)


@pytest.mark.parametrize(
    ("model", "decoder"), [("ctc_bpe.nemo", "ctc-beam"), ("rnnt_bpe.nemo", "transducer-beam")]
)
def test_a_beam_too_large_for_memory_is_one_line(tmp_path, model, decoder):
    """A beam whose hypotheses cannot be allocated ends the run with one line naming what to lower,
    not torch's traceback."""
    proc = run("transcribe", str(AUDIO), "--model", str(FIX / model), "--out", str(tmp_path / "o"),
               f"decoder.type={decoder}", "decoder.beam_size=1000000000000", check=False)  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert "out of memory (tried to allocate" in line and "decoder's beam" in line


def test_boost_lists_a_decoder_does_not_apply_are_said(tmp_path, manifest):
    """A manifest's boost lists with a decoder that has no word boosting: one warning naming the
    decoders that have it; the transcripts are those of the run without them."""
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]
    boosted = tmp_path / "boosted.jsonl"
    boosted.write_text(
        "".join(json.dumps(r | {"boost": ["forward"]}) + "\n" for r in lines[:2])
        + "".join(json.dumps(r) + "\n" for r in lines[2:])
    )
    proc = run("transcribe", str(boosted), "--model", str(MODEL), "--out", str(tmp_path / "o"))
    warning = [x for x in (proc.stdout + proc.stderr).splitlines() if "boost lists" in x]
    assert len(warning) == 1
    assert "2 input(s) carry boost lists, which decoder.type=ctc-greedy does not apply" in warning[0]
    assert "wfst, wfst-otf" in warning[0]
    rows = {r["utt_id"]: r["pred_text"] for r in read_jsonl(tmp_path / "o" / "transcripts.jsonl")}
    assert rows == reference_texts()
