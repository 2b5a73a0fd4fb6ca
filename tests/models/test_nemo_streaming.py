"""`model.streaming=cache-aware`: the cache-aware streaming fixture encoded as NeMo 3.0.0's cache-aware
streaming simulation does (CacheAwareStreamingAudioBuffer + cache_aware_stream_step, one utterance at
a time; scripts/make_nemo_fixtures.py --set streaming), for both trained contexts: encoder outputs
and greedy tokens (NeMo's conformer_stream_step carrying its hypotheses across chunks) equal NeMo's.
The offline encoding of the same model differs from it (so the mode matters)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.nemo_audio import audio_batch

from asrdecode.config import dataclass_from_dict
from asrdecode.decoders.base import DecoderContext
from asrdecode.decoders.transducer_greedy import TransducerGreedyConfig, TransducerGreedyDecoder
from asrdecode.errors import ModelError
from asrdecode.models.conformer import StreamingChunks
from asrdecode.models.loading import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
CONTEXTS = ([16, 3], [16, 0])


@pytest.fixture(scope="module")
def streams() -> dict[str, np.ndarray]:
    data = np.load(FIX / "reference" / "rnnt_streaming_stream.npz", allow_pickle=False)
    return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def audio() -> dict[str, np.ndarray]:
    return audio_batch()


@pytest.mark.parametrize("i", [0, 1])
def test_cache_aware_streaming_equals_nemo(streams, audio, i):
    model = load_model(
        str(FIX / "rnnt_streaming.nemo"), att_context_size=CONTEXTS[i], streaming="cache-aware"
    )
    offline = load_model(str(FIX / "rnnt_streaming.nemo"), att_context_size=CONTEXTS[i])
    with torch.inference_mode():
        out = model(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
        off = offline(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    lengths = streams[f"encoder_len_ctx{i}"]
    assert out.lengths.tolist() == lengths.tolist()
    enc_ref = torch.from_numpy(streams[f"encoder_out_ctx{i}"]).transpose(1, 2)
    differs = False
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(out.encoder_out[b, :n], enc_ref[b, :n], atol=1e-3, rtol=0)
        m = min(n, int(off.lengths[b]))
        differs |= not torch.allclose(off.encoder_out[b, :m], enc_ref[b, :m], atol=1e-3)
    assert differs or i == 0  # with right context 0 NeMo's streaming subsampling differs from offline
    config = dataclass_from_dict(TransducerGreedyConfig, {}, prefix="decoder.")
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    results = TransducerGreedyDecoder(config, ctx).decode(out)
    for b, res in enumerate(results):
        expected = [t for t in streams[f"greedy_ctx{i}_tokens"][b].tolist() if t >= 0]
        assert res.tokens == expected
    assert sum(len(r.tokens) for r in results) >= 30


def test_chunks_follow_nemo_streaming_config():
    """NeMo's setup_streaming_params for this fixture (printed by NeMo 3.0.0: chunk_size [25, 32] /
    [1, 8], pre_encode_cache_size [0, 9], drop_extra_pre_encoded 2); a last chunk shorter than the
    subsampling factor is left out, as its CacheAwareStreamingAudioBuffer does."""
    three, zero = StreamingChunks(8, 3), StreamingChunks(8, 0)
    assert (three.cache, three.drop) == (9, 2)
    assert three.chunks(70) == [(0, 25, 0), (16, 57, 2), (48, 70, 2)]  # a last chunk of 13 frames
    assert three.chunks(64) == [(0, 25, 0), (16, 57, 2)]  # 57..64 is 7 frames: left out
    assert zero.chunks(20) == [(0, 1, 0), (-8, 9, 2), (0, 17, 2)]


def test_info_names_the_streaming_mode():
    path = str(FIX / "rnnt_streaming.nemo")
    assert (
        load_model(path).describe()["encoder"]["streaming"].startswith("offline (model.streaming=cache-aware")
    )
    assert (
        load_model(path, streaming="cache-aware").describe()["encoder"]["streaming"].startswith("cache-aware")
    )
    assert load_model(str(FIX / "rnnt_bpe.nemo")).describe()["encoder"]["streaming"] == "offline"


def test_models_that_cannot_stream_are_one_line():
    with pytest.raises(ModelError, match="model.streaming=cache-aware needs a cache-aware streaming model"):
        load_model(str(FIX / "rnnt_bpe.nemo"), streaming="cache-aware")
    with pytest.raises(ModelError, match="model.streaming=sometimes: use offline or cache-aware"):
        load_model(str(FIX / "rnnt_streaming.nemo"), streaming="sometimes")


def test_transcribe_in_cache_aware_mode_gives_nemos_streaming_text(streams, audio, tmp_path):
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(FIX / "audio"), "--out", str(out)]
    cmd += ["--model", str(FIX / "rnnt_streaming.nemo"), "model.streaming=cache-aware"]
    cmd += ["model.att_context_size=[16, 0]", "threads=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    rows = {json.loads(x)["utt_id"]: json.loads(x)["pred_text"] for x in (out / "transcripts.jsonl").open()}
    expected = dict(zip(audio["utt_ids"].tolist(), streams["greedy_ctx1_text"].tolist(), strict=True))
    assert rows == expected
