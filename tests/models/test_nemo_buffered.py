"""NeMo's buffered chunked inference (`model.chunk_seconds`, `model.buffer_seconds`) on a 80 s
input: for a CTC model the kept log-probs and the greedy text equal NeMo 3.0.0's FrameBatchASR
(scripts/make_nemo_fixtures.py --set buffered); for an RNN-T model every window's greedy tokens and
frames, the merged tokens and the text equal its BatchedFrameASRRNNT with the middle-token merge
(--set buffered-rnnt); word times line up with the whole-input decode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asrdecode.decoders import DecoderContext, make_decoder
from asrdecode.decoders.transducer_greedy import merge_windows
from asrdecode.errors import ModelError
from asrdecode.models.loading import load_model

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "nemo"


def long_input() -> np.ndarray:
    """The fixture clips (sorted by name) four times over, each followed by 0.3 s of silence: the
    input of the NeMo reference (make_nemo_fixtures.long_input)."""
    clips = [sf.read(p, dtype="float32")[0] for p in sorted((FIX / "audio").glob("*.wav"))]
    gap = np.zeros(4800, dtype=np.float32)
    return np.concatenate([piece for _ in range(4) for clip in clips for piece in (clip, gap)])


def test_buffered_inference_equals_nemo():
    ref = np.load(FIX / "reference" / "ctc_bpe_buffered.npz", allow_pickle=False)
    audio = long_input()
    assert len(audio) / 16000 == pytest.approx(float(ref["seconds"])) and 60 <= len(audio) / 16000 <= 90
    model = load_model(str(FIX / "ctc_bpe.nemo"), chunk_seconds=1.6, buffer_seconds=4.0)
    with torch.inference_mode():
        out = model(torch.from_numpy(audio)[None], torch.tensor([len(audio)]))
    n = int(out.lengths[0])
    assert n == ref["log_probs"].shape[0]
    np.testing.assert_allclose(out.log_probs[0, :n].numpy(), ref["log_probs"], atol=1e-4, rtol=1e-5)
    blank = model.blank_id
    expected, previous = [], blank  # NeMo's greedy_merge of the kept argmax tokens
    for t in ref["unmerged"].tolist():
        if t != blank and (t != previous or previous == blank):
            expected.append(t)
        previous = t
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    (result,) = make_decoder({"type": "ctc-greedy"}, ctx).decode(out)
    assert result.tokens == expected and len(expected) > 50
    assert model.tokenizer.decode(result.tokens) == str(ref["text"])


def test_buffered_transducer_equals_nemo():
    ref = np.load(FIX / "reference" / "rnnt_bpe_buffered.npz", allow_pickle=False)
    audio = long_input()
    assert len(audio) / 16000 == pytest.approx(float(ref["seconds"]))
    model = load_model(str(FIX / "rnnt_bpe.nemo"), chunk_seconds=1.6, buffer_seconds=4.0)
    with torch.inference_mode():
        out = model(torch.from_numpy(audio)[None], torch.tensor([len(audio)]))
    windows = out.extra["windows"]
    assert len(windows.owner) == int(ref["windows"]) and set(windows.owner) == {0}
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    results = make_decoder({"type": "transducer-greedy"}, ctx).decode(out)
    got = [(k, t, f) for k, r in enumerate(results) for t, f in zip(r.tokens, r.token_frames, strict=True)]
    keys = ("window_index", "window_tokens", "window_frames")
    expected = list(zip(*(ref[key].tolist() for key in keys), strict=True))
    assert got == expected and len(expected) > 100
    (merged,) = merge_windows(windows, results, model.tokens_to_words)
    assert merged.tokens == ref["unmerged"].tolist() and len(merged.tokens) > 50
    assert model.tokenizer.decode(merged.tokens) == str(ref["text"])
    assert merged.token_frames == sorted(merged.token_frames)
    assert all(0 <= w.start <= w.end <= len(audio) / 16000 for w in merged.words)


def test_info_names_buffered_inference():
    path = str(FIX / "ctc_bpe.nemo")
    assert load_model(path).describe()["buffered_inference"].startswith("off")
    on = load_model(path, chunk_seconds=1.6, buffer_seconds=4.0).describe()["buffered_inference"]
    assert on == "chunks of 1.6 s in windows of 4 s"
    rnnt = load_model(str(FIX / "rnnt_bpe.nemo"), chunk_seconds=1.6, buffer_seconds=4.0)
    assert rnnt.describe()["buffered_inference"] == on


def test_options_that_cannot_work_are_one_line():
    with pytest.raises(ModelError, match="need 0 < chunk_seconds <= buffer_seconds"):
        load_model(str(FIX / "ctc_bpe.nemo"), chunk_seconds=5.0, buffer_seconds=4.0)
    with pytest.raises(ModelError, match="buffered inference is for CTC and RNN-T models, not TDT"):
        load_model(str(FIX / "tdt_bpe.nemo"), chunk_seconds=1.6)
    with pytest.raises(ModelError, match="too short"):
        load_model(str(FIX / "ctc_bpe.nemo"), chunk_seconds=0.08, buffer_seconds=0.16)


def test_lag_maps_joined_rows_back_to_the_audio():
    """A marker feature column at every position goes through the windows: the joined row that keeps
    it, minus `lag`, is the marker's own encoder frame (column // subsampling), for NeMo's 1.6 / 4 s
    and another chunking (encoder frame r of a window = its columns [r*s, (r+1)*s))."""
    from asrdecode.models.buffered import BufferedInference

    for chunk, buffer in ((1.6, 4.0), (0.8, 3.2)):
        plan = BufferedInference(chunk, buffer, 0.01, 8)
        rows = plan.buffer_frames // 8
        kept, lag = plan.kept_rows(rows), plan.lag(rows)
        length = 3000
        padded = length + plan.pad_samples(16000) // 160  # the silence appended to the audio
        for column in range(0, length, 37):
            features = torch.zeros(1, padded)
            features[0, column] = 1.0
            windows = plan.windows(features)
            found = []
            for k, window in enumerate(windows):
                row = int(torch.argmax(window[0])) // 8
                if kept.start <= row < kept.stop and window[0].max() > window[0].min():
                    found.append(k * plan.tokens_per_chunk + row - kept.start)
            assert len(found) == 1, (chunk, column, found)
            assert found[0] - lag == column // 8, (chunk, column)


def test_transcribe_in_buffered_mode_gives_nemos_text(tmp_path):
    ref = np.load(FIX / "reference" / "ctc_bpe_buffered.npz", allow_pickle=False)
    (tmp_path / "in").mkdir()
    sf.write(tmp_path / "in" / "long.wav", long_input(), 16000, subtype="FLOAT")
    cli = [sys.executable, "-m", "asrdecode.cli"]
    cmd = [*cli, "transcribe", str(tmp_path / "in"), "--out", str(tmp_path / "o")]
    cmd += ["--model", str(FIX / "ctc_bpe.nemo"), "model.chunk_seconds=1.6", "batch.segment_seconds=0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "o" / "transcripts.jsonl").read_text().splitlines()]
    assert row["pred_text"] == str(ref["text"])
    assert all(w["end"] <= len(long_input()) / 16000 for w in row["words"])  # not in the appended silence


def test_transcribe_a_transducer_in_buffered_mode_gives_nemos_text(tmp_path):
    """Through the CLI with the default decoder of a transducer (greedy) and with beam search:
    greedy gives NeMo's text; the beam decode of the same windows gives a transcript too."""
    ref = np.load(FIX / "reference" / "rnnt_bpe_buffered.npz", allow_pickle=False)
    (tmp_path / "in").mkdir()
    sf.write(tmp_path / "in" / "long.wav", long_input(), 16000, subtype="FLOAT")
    cli = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(tmp_path / "in")]
    common = ["--model", str(FIX / "rnnt_bpe.nemo"), "model.chunk_seconds=1.6", "batch.segment_seconds=0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for out, extra in (("greedy", []), ("beam", ["--decoder", "transducer-beam"])):
        cmd = [*cli, "--out", str(tmp_path / out), *common, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        (row,) = [json.loads(x) for x in (tmp_path / out / "transcripts.jsonl").read_text().splitlines()]
        assert row["words"] and all(w["end"] <= len(long_input()) / 16000 for w in row["words"])
        if out == "greedy":
            assert row["pred_text"] == str(ref["text"])
