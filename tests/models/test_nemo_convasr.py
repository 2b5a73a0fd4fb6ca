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
#: float64 rounding through the deep stacks (their log-probs move by 4e-10 when the features change
#: by a relative 1e-15), with a wide margin
FLOAT64_ATOL = 1e-7


def _deep(name: str):
    ref = dict(np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False))
    info = json.loads((FIX / "reference" / f"{name}.json").read_text())
    return ref, info, load_nemo(FIX / f"{name}.nemo")


def _padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """[F, T_b] rows (or [S_b] waveforms) zero-padded into one batch, with their lengths."""
    lengths = torch.tensor([r.shape[-1] for r in rows])
    batch = rows[0].new_zeros(len(rows), *rows[0].shape[:-1], int(lengths.max()))
    for b, r in enumerate(rows):
        batch[b, ..., : r.shape[-1]] = r
    return batch, lengths


@pytest.mark.parametrize("name", DEEP)
def test_deep_stacks_equal_nemo_in_float64_alone_and_batched(name):
    """QuartzNet 15x5's and Citrinet's depth (78 and 23 blocks, dilation 2, squeeze-excitation,
    strided residuals), every BatchNorm's statistics far from 0 and 1 (scripts/make_nemo_fixtures.py
    --set deep), in float64 (--set deep-float64): NeMo's features of the two long inputs through our
    encoder and CTC head give NeMo's float64 log-probs within `FLOAT64_ATOL`, each utterance alone
    and both in one padded batch, and NeMo's greedy CTC text. The exact check is in float64 because
    these stacks are ill-conditioned: in float32 the result depends on the CPU's summation order."""
    ref, info, model = _deep(name)
    model = model.double()
    assert model.describe()["encoder"]["blocks"] == len(info["encoder"]["jasper"])
    utts = range(len(info["input_samples"]))
    feats = [torch.from_numpy(ref[f"features_{b}"]).double() for b in utts]  # as NeMo pads them
    batch, _ = _padded(feats)
    lengths = torch.tensor([int(ref[f"features_len_{b}"]) for b in utts])
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    greedy = CtcGreedyDecoder(CtcGreedyConfig(), ctx)
    with torch.inference_mode():
        alone = [model.forward_features(f[None], lengths[b : b + 1]) for b, f in enumerate(feats)]
        together = model.forward_features(batch, lengths)
    for b in range(len(feats)):
        want = ref[f"log_probs64_{b}"]
        n = want.shape[0]
        assert int(alone[b].lengths[0]) == int(together.lengths[b]) == n == info["encoder_len"][b]
        for out, row in ((alone[b], 0), (together, b)):
            assert out.log_probs.dtype == torch.float64
            np.testing.assert_allclose(out.log_probs[row, :n].numpy(), want, atol=FLOAT64_ATOL, rtol=0)
        results = [greedy.decode(alone[b])[0], greedy.decode(together)[b]]
        set_model_texts(results, model.tokens_to_text)  # NeMo's text, its spaces as they come
        assert [r.text for r in results] == [info["greedy64_single"][b]] * 2


@pytest.mark.parametrize("name", DEEP)
def test_deep_stacks_float32_from_audio(name):
    """The float32 run from the waveforms: our front end gives NeMo's features of each long input
    (QuartzNet's 64 mels, within 1e-4), and the log-probs, each utterance alone and in one padded
    batch, are within float32's own error on these stacks of NeMo's float64 ones: at most twice
    NeMo's own float32 distance from them, measured on two CPUs (`nemo_float32_vs_float64_max_abs`).
    Bit equality with NeMo's float32 holds only where the CPU's convolution kernels add in the same
    order, so it is not asked for."""
    ref, info, model = _deep(name)
    waves = [torch.from_numpy(w) for w in long_inputs()]
    assert [len(w) for w in waves] == info["input_samples"] and min(len(w) for w in waves) >= 10 * 16000
    gap = info["nemo_float32_vs_float64_max_abs"]
    tolerance = 2 * max(gap["committed"], gap["here"])
    batch, lengths = _padded(waves)
    with torch.inference_mode():
        feats, feat_len = model.features(batch, lengths)
        alone = [model(w[None], lengths[b : b + 1]) for b, w in enumerate(waves)]
        together = model(batch, lengths)
    for b in range(len(waves)):
        want = ref[f"features_{b}"]
        assert int(feat_len[b]) == int(ref[f"features_len_{b}"])
        np.testing.assert_allclose(feats[b, :, : want.shape[1]].numpy(), want, atol=1e-4, rtol=0)
        want = ref[f"log_probs64_{b}"]
        n = want.shape[0]
        for out, row in ((alone[b], 0), (together, b)):
            assert out.log_probs.dtype == torch.float32
            np.testing.assert_allclose(out.log_probs[row, :n].double().numpy(), want, atol=tolerance, rtol=0)
