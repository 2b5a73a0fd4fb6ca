"""Hybrid RNN-T + CTC and TDT + CTC models (NeMo's EncDecHybridRNNTCTCBPEModel) against NeMo 3.0.0:
`model.head` picks the transducer (default) or the CTC head; each head's outputs and greedy decoding
equal NeMo's on the fixture batch (built by scripts/make_nemo_fixtures.py --set tiny, random weights
with tuned heads)."""

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
from asrdecode.decoders.ctc_greedy import CtcGreedyConfig, CtcGreedyDecoder
from asrdecode.decoders.transducer_greedy import TransducerGreedyConfig, TransducerGreedyDecoder
from asrdecode.errors import ModelError
from asrdecode.models import ModelOutput
from asrdecode.models.ctc import NemoCTCModel
from asrdecode.models.loading import load_model
from asrdecode.models.transducer import NemoTransducerModel

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
HYBRIDS = ("hybrid_rnnt_ctc", "hybrid_tdt_ctc")


@pytest.fixture(scope="module")
def audio() -> dict[str, np.ndarray]:
    return audio_batch()


@pytest.fixture(scope="module", params=HYBRIDS)
def hybrid(request):
    name = request.param
    data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    return name, {k: data[k] for k in data.files}


def context(model) -> DecoderContext:
    return DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)


def collapse(ref: dict, b: int, blank: int) -> list[int]:
    """NeMo's per-frame greedy CTC labels of utterance b -> tokens (repeats merged, blanks dropped)."""
    labels = ref["ctc_greedy_frame_labels"][b, : int(ref["ctc_greedy_frame_labels_len"][b])].tolist()
    return [t for i, t in enumerate(labels) if t != blank and (i == 0 or labels[i - 1] != t)]


def tie_margin(ref: dict, b: int) -> np.ndarray:
    """Per valid frame of utterance b: NeMo's best CTC log-prob minus its second best."""
    top = np.sort(ref["ctc_logprobs"][b, : int(ref["encoder_len"][b])], axis=-1)
    return top[:, -1] - top[:, -2]


def test_head_choice_and_info(hybrid):
    name, _ = hybrid
    path = str(FIX / f"{name}.nemo")
    default, transducer = load_model(path), load_model(path, head="transducer")
    ctc = load_model(path, head="ctc")
    assert isinstance(default, NemoTransducerModel) and isinstance(transducer, NemoTransducerModel)
    assert isinstance(ctc, NemoCTCModel) and ctc.default_decoder == "ctc-greedy"
    assert default.durations == ([0, 1, 2, 3, 4] if "tdt" in name else None)
    for model in (default, ctc):
        info = model.describe()
        assert info["class"] == "EncDecHybridRNNTCTCBPEModel" and model.heads == ["transducer", "ctc"]
        assert info["head"].startswith(model.head) and "model.head" in info["head"]
    assert default.units == ctc.units and default.blank_id == ctc.blank_id == 128
    with pytest.raises(ModelError, match="model.head=rnnt: use one of auto, transducer, ctc"):
        load_model(path, head="rnnt")
    with pytest.raises(ModelError, match="contradicts model.type=nemo-ctc"):
        load_model(path, model_type="nemo-ctc", head="transducer")
    with pytest.raises(ModelError, match="only NeMo models have heads"):
        load_model("embedded:sphinx-en-us", head="ctc")


def test_both_heads_equal_nemo(hybrid, audio):
    """Our front end + encoder: NeMo's encoder output (atol 1e-3); the CTC head's log-probs (atol
    1e-3) and greedy CTC tokens; the transducer head's greedy tokens, frames (and TDT durations),
    from NeMo's encoder output and through ours."""
    name, ref = hybrid
    path = str(FIX / f"{name}.nemo")
    wav, lens = torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"])
    transducer, ctc = load_model(path), load_model(path, head="ctc")
    with torch.inference_mode():
        ours_t, ours_c = transducer(wav, lens), ctc(wav, lens)
    enc_len = ref["encoder_len"].tolist()
    enc_ref = torch.from_numpy(ref["encoder_out"]).transpose(1, 2)
    assert ours_t.lengths.tolist() == ours_c.lengths.tolist() == enc_len
    for b, n in enumerate(enc_len):
        torch.testing.assert_close(ours_t.encoder_out[b, :n], enc_ref[b, :n], atol=1e-3, rtol=0)
        torch.testing.assert_close(
            ours_c.log_probs[b, :n], torch.from_numpy(ref["ctc_logprobs"][b, :n]), atol=1e-3, rtol=0
        )
    # CTC head: greedy tokens (NeMo's ctc_decoding) from NeMo's log-probs and from ours
    nemo_lp = ModelOutput(
        torch.from_numpy(ref["ctc_logprobs"]), torch.tensor(enc_len), ctc.frame_shift, ctc.blank_id, ctc.units
    )
    decoder = CtcGreedyDecoder(CtcGreedyConfig(), context(ctc))
    expected = [collapse(ref, b, ctc.blank_id) for b in range(len(enc_len))]
    assert sum(len(t) for t in expected) >= 30  # the tuned head emits tokens
    for b, res in enumerate(decoder.decode(nemo_lp)):
        assert res.tokens == expected[b], b
        assert ctc.tokenizer.decode(res.tokens) == str(ref["ctc_greedy_text"][b])
    # through our encoder: the same per-frame argmax wherever NeMo's best two labels are apart by
    # more than the log-prob tolerance (the random head has exact ties on a few frames)
    for b, n in enumerate(enc_len):
        clear = tie_margin(ref, b) > 2e-3
        ours_best = ours_c.log_probs[b, :n].argmax(-1).numpy()
        assert (ours_best[clear] == ref["ctc_logprobs"][b, :n].argmax(-1)[clear]).all(), b
        assert clear.mean() > 0.9
    # transducer head: greedy label looping from NeMo's encoder output and from ours
    config = dataclass_from_dict(TransducerGreedyConfig, {}, prefix="decoder.")
    greedy = TransducerGreedyDecoder(config, context(transducer))
    nemo_enc = ModelOutput(
        None,
        torch.tensor(enc_len),
        transducer.frame_shift,
        transducer.blank_id,
        transducer.units,
        enc_ref.contiguous(),
        {"transducer": transducer},
    )
    assert sum(int(n) for n in ref["greedy_tokens_len"]) >= 30
    for results in (greedy.decode(nemo_enc), greedy.decode(ours_t)):
        for b, res in enumerate(results):
            n = int(ref["greedy_tokens_len"][b])
            assert res.tokens == ref["greedy_tokens"][b, :n].tolist(), b
            assert res.token_frames == ref["greedy_timestamps"][b, :n].tolist(), b
            if "tdt" in name:
                assert res.token_durations == ref["greedy_durations_single"][b, :n].tolist(), b


def test_cli_head_and_auto_decoder(tmp_path):
    """`model.head=ctc` through the CLI: decoder.type=auto follows the head (ctc-greedy), and the
    transcripts equal NeMo's greedy CTC texts; the default head gives transducer-greedy."""
    name = "hybrid_rnnt_ctc"
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    texts = {}
    for head, decoder in (("ctc", "ctc-greedy"), ("auto", "transducer-greedy")):
        out = tmp_path / head
        cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(FIX / "audio"), "--model"]
        cmd += [str(FIX / f"{name}.nemo"), f"model.head={head}", "threads=1", "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert json.loads((out / "report.json").read_text())["decoder"] == decoder
        rows = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
        texts[head] = {r["utt_id"]: r["pred_text"] for r in rows}
    clear = [str(u) for b, u in enumerate(ref["utt_ids"]) if tie_margin(ref, b).min() > 2e-3]
    assert len(clear) >= 4  # utterances without a near-tie frame: NeMo's CTC texts exactly
    assert {u: texts["ctc"][u] for u in clear} == {
        str(u): str(t) for u, t in zip(ref["utt_ids"], ref["ctc_greedy_text"], strict=True) if str(u) in clear
    }
    expected_t = dict(
        zip((str(u) for u in ref["utt_ids"]), (str(t) for t in ref["greedy_text"]), strict=True)
    )
    assert texts["auto"] == expected_t
