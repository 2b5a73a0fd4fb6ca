"""ConvASR encoders (NeMo's ConvASREncoder): QuartzNet (separable convolutions, residual repeats,
ReLU, char labels) and Citrinet (squeeze-excitation, stride_last + stride_add residuals, swish,
BPE) against NeMo 3.0.0 on NeMo-built random-weight fixtures (scripts/make_nemo_fixtures.py --set
ctc): encoder output, log-probs, greedy CTC; unsupported block options are one-line errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.nemo_audio import audio_batch, long_inputs

from asrdecode.decoders.base import DecoderContext, set_model_texts
from asrdecode.decoders.ctc_greedy import CtcGreedyConfig, CtcGreedyDecoder
from asrdecode.errors import ModelError
from asrdecode.models import load_nemo
from asrdecode.models.convasr import ConvASREncoder
from asrdecode.models.nemo import read_nemo_archive

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
FAMILIES = {"quartznet_char": ("QuartzNet/Jasper", 2, "char"), "citrinet_bpe": ("Citrinet", 4, "bpe")}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_convasr_equals_nemo(name):
    family, factor, vocab = FAMILIES[name]
    ref = dict(np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False))
    model = load_nemo(FIX / f"{name}.nemo")
    info = model.describe()
    assert info["encoder"]["family"] == family and model.subsampling_factor == factor
    assert model.tokenizer.kind == vocab and info["head"] == "ctc"
    audio = audio_batch()
    with torch.inference_mode():
        out = model(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    assert out.lengths.tolist() == ref["encoder_len"].tolist()
    scale = float(ref["encoder_out"].std())  # random BatchNorm statistics keep these activations small
    for b, n in enumerate(ref["encoder_len"].tolist()):
        enc = out.encoder_out[b, :n].numpy()
        np.testing.assert_allclose(enc, ref["encoder_out"][b, :, :n].T, atol=1e-4 * scale, rtol=0)
        np.testing.assert_allclose(out.log_probs[b, :n].numpy(), ref["log_probs"][b, :n], atol=1e-3, rtol=0)
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    results = CtcGreedyDecoder(CtcGreedyConfig(), ctx).decode(out)
    emitted = 0
    for b, res in enumerate(results):
        labels = ref["greedy_frame_labels"][b, : int(ref["greedy_frame_labels_len"][b])].tolist()
        blank = model.blank_id
        tokens = [t for i, t in enumerate(labels) if t != blank and (i == 0 or labels[i - 1] != t)]
        top = np.sort(ref["log_probs"][b, : int(ref["encoder_len"][b])], axis=-1)
        if (top[:, -1] - top[:, -2]).min() > 2e-3:  # no near-tie frame: NeMo's labels exactly
            assert res.tokens == tokens, b
            assert model.tokenizer.decode(res.tokens) == str(ref["greedy_text"][b])
        emitted += len(tokens)
    assert emitted >= 30


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda b: b.update(groups=2), "jasper.groups=2"),
        (lambda b: b.update(se_context_size=128), "jasper.se_context_size=128"),
        (lambda b: b.update(residual_dense=True), "jasper.residual_dense=True"),
        (lambda b: b.update(future_context=3), "jasper.future_context=3"),
        (lambda b: b.update(some_option=1), "jasper option some_option"),
    ],
)
def test_unsupported_block_options(change, message):
    cfg, _, archive = read_nemo_archive(FIX / "citrinet_bpe.nemo")
    archive.close()
    encoder = copy.deepcopy(cfg["encoder"])
    change(encoder["jasper"][1])
    with pytest.raises(ModelError, match=message):
        ConvASREncoder.from_config(encoder)


DEEP = ("quartznet_deep", "citrinet_deep")


@pytest.fixture()
def one_thread():
    """NeMo's references were made on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", DEEP)
def test_deep_stacks_equal_nemo_alone_and_batched(name, one_thread):
    """QuartzNet 15x5's and Citrinet's depth (78 and 23 blocks, dilation 2, squeeze-excitation,
    strided residuals), every BatchNorm's statistics far from 0 and 1 (scripts/make_nemo_fixtures.py
    --set deep), QuartzNet's 64-mel front end, two real inputs of 12.6 and 11.5 s: log-probs within
    1e-4 of NeMo's for each utterance alone, decoded alone and in one padded batch (on the CPU they
    are NeMo's bit for bit: its front end's operations, each utterance's statistics and squeeze over
    its own frames), and the greedy text is NeMo's ``transcribe`` text of each utterance alone, alone
    and batched (NeMo's own batched log-probs are up to `nemo_batched_vs_single_max_abs` away from
    them on these stacks, and its batched text can differ)."""
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    info = json.loads((FIX / "reference" / f"{name}.json").read_text())
    model = load_nemo(FIX / f"{name}.nemo")
    assert model.describe()["encoder"]["blocks"] == len(info["encoder"]["jasper"])
    waves = long_inputs()
    assert [len(w) for w in waves] == info["input_samples"] and min(len(w) for w in waves) >= 10 * 16000
    lengths = torch.tensor([len(w) for w in waves])
    batch = torch.zeros(len(waves), int(lengths.max()))
    for b, w in enumerate(waves):
        batch[b, : len(w)] = torch.from_numpy(w)
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    greedy = CtcGreedyDecoder(CtcGreedyConfig(), ctx)
    with torch.inference_mode():
        alone = [model(batch[b : b + 1, : len(w)], lengths[b : b + 1]) for b, w in enumerate(waves)]
        together = model(batch, lengths)
    for b in range(len(waves)):
        want = ref[f"log_probs_{b}"]
        n = want.shape[0]
        assert int(alone[b].lengths[0]) == int(together.lengths[b]) == n == info["encoder_len"][b]
        for out, row in ((alone[b], 0), (together, b)):
            np.testing.assert_allclose(out.log_probs[row, :n].numpy(), want, atol=1e-4, rtol=0)
        results = [greedy.decode(alone[b])[0], greedy.decode(together)[b]]
        set_model_texts(results, model.tokens_to_text)  # NeMo's text, its spaces as they come
        assert [r.text for r in results] == [info["transcribe_single"][b]] * 2
