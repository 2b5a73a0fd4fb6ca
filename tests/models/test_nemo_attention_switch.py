"""`model.attention: local` (NeMo's change_attention_model("rel_pos_local_attn", window)) on models
trained with full attention: encoder outputs, CTC log-probs and RNN-T greedy tokens equal NeMo's
after its own switch (reference/<name>_local8.npz, scripts/make_nemo_fixtures.py --set attention)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.nemo_audio import audio_batch

from asrdecode.config import dataclass_from_dict
from asrdecode.decoders.base import DecoderContext
from asrdecode.decoders.transducer_greedy import TransducerGreedyConfig, TransducerGreedyDecoder
from asrdecode.errors import ModelError
from asrdecode.models.loading import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"


@pytest.fixture(scope="module")
def audio() -> tuple[torch.Tensor, torch.Tensor]:
    data = audio_batch()
    return torch.from_numpy(data["audio"]), torch.from_numpy(data["audio_len"])


@pytest.mark.parametrize("name", ["ctc_bpe", "rnnt_bpe"])
def test_local_attention_equals_nemo_switch(name, audio):
    ref = dict(np.load(FIX / "reference" / f"{name}_local8.npz", allow_pickle=False))
    model = load_model(str(FIX / f"{name}.nemo"), attention="local", att_context_size=[8, 8])
    info = model.describe()["encoder"]
    assert info["self_attention_model"] == "rel_pos_local_attn" and info["att_context_size"] == [8, 8]
    full = load_model(str(FIX / f"{name}.nemo"))
    with torch.inference_mode():
        out, out_full = model(*audio), full(*audio)
    enc_ref = torch.from_numpy(ref["encoder_out"]).transpose(1, 2)
    lengths = ref["encoder_len"].tolist()
    assert out.lengths.tolist() == lengths
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out.encoder_out[b, :n], enc_ref[b, :n], atol=1e-3, rtol=0)
        # the window matters on these inputs: full attention gives other encodings
        assert (out_full.encoder_out[b, :n] - enc_ref[b, :n]).abs().max() > 1e-2
    if name == "ctc_bpe":
        for b, n in enumerate(lengths):
            ref_lp = torch.from_numpy(ref["log_probs"][b, :n])
            torch.testing.assert_close(out.log_probs[b, :n], ref_lp, atol=1e-3, rtol=0)
        return
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    greedy = TransducerGreedyDecoder(dataclass_from_dict(TransducerGreedyConfig, {}, prefix="decoder."), ctx)
    for b, res in enumerate(greedy.decode(out)):
        n = int(ref["greedy_tokens_len"][b])
        assert res.tokens == ref["greedy_tokens"][b, :n].tolist(), b
        assert res.token_frames == ref["greedy_timestamps"][b, :n].tolist(), b


def test_attention_options_errors():
    path = str(FIX / "ctc_bpe.nemo")
    with pytest.raises(ModelError, match="model.attention=sparse: use one of auto, full, local"):
        load_model(path, attention="sparse")
    with pytest.raises(ModelError, match="full attention has no window"):
        load_model(path, attention="full", att_context_size=[8, 8])
    with pytest.raises(ModelError, match=r"att_context_size.*rel_pos_local_attn"):
        load_model(path, attention="local", att_context_size=[8, 2])
    with pytest.raises(ModelError, match="only NeMo models"):
        load_model("embedded:sphinx-en-us", attention="local")
    default = load_model(path, attention="local").describe()["encoder"]
    assert default["att_context_size"] == [128, 128]


def test_cli_local_attention(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(FIX / "audio"), "--model"]
    cmd += [str(FIX / "ctc_bpe.nemo"), "model.attention=local", "model.att_context_size=[8, 8]"]
    proc = subprocess.run([*cmd, "--out", str(tmp_path)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert len(rows) == 6
