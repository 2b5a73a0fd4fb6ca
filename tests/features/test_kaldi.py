"""Batched Kaldi fbank/MFCC wrappers: shapes, lengths, batch == per-utterance, no padding leakage."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchaudio.compliance.kaldi as tak
from helpers.nemo_audio import audio_batch

from asrdecode.errors import ConfigError
from asrdecode.features.kaldi import (
    KaldiFbank,
    KaldiFbankConfig,
    KaldiMfcc,
    KaldiMfccConfig,
    kaldi_num_frames,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three real clips cut to 0.4-1.0 s, zero padded, plus one too short for a single window."""
    a = audio_batch()["audio"]
    lens = torch.tensor([16000, 9000, 6403, 300])
    wav = torch.zeros(4, 16000)
    for b, n in enumerate(lens.tolist()):
        wav[b, :n] = torch.from_numpy(a[b, 4000 : 4000 + n])
    return wav, lens


@pytest.mark.parametrize(
    "module, n_feats",
    [
        (KaldiFbank(), 23),
        (KaldiFbank(KaldiFbankConfig(num_mel_bins=40, use_energy=True)), 41),
        (KaldiMfcc(), 13),
        (KaldiMfcc(KaldiMfccConfig(num_ceps=20, num_mel_bins=30)), 20),
    ],
)
def test_shapes_and_lengths(batch, module, n_feats):
    wav, lens = batch
    feats, out_len = module(wav, lens)
    expected = [kaldi_num_frames(n, 400, 160, True) for n in lens.tolist()]
    assert out_len.tolist() == expected == [98, 54, 38, 0]
    assert feats.shape == (4, n_feats, 98) and feats.dtype == torch.float32
    assert module.num_features == n_feats


@pytest.mark.parametrize("module", [KaldiFbank(), KaldiMfcc()])
def test_batch_equals_single_calls_and_padding_is_zero(batch, module):
    wav, lens = batch
    feats, out_len = module(wav, lens)
    fn = tak.fbank if isinstance(module, KaldiFbank) else tak.mfcc
    for b in range(3):
        n = int(lens[b])
        single = fn(wav[b : b + 1, :n] * 32768.0, **module.cfg.kaldi_kwargs())
        assert single.shape[0] == out_len[b]
        torch.testing.assert_close(feats[b, :, : out_len[b]], single.T, atol=0, rtol=0)
        one, one_len = module(wav[b : b + 1, :n], lens[b : b + 1])
        torch.testing.assert_close(one[0], feats[b, :, : one_len[0]], atol=0, rtol=0)
        assert torch.all(feats[b, :, out_len[b] :] == 0)
    assert torch.all(feats[3] == 0)


def test_samples_past_length_do_not_leak(batch):
    wav, lens = batch
    noisy = wav.clone()
    for b, n in enumerate(lens.tolist()):
        noisy[b, n:] = torch.randn(wav.shape[1] - n)
    for module in (KaldiFbank(), KaldiMfcc()):
        torch.testing.assert_close(module(noisy, lens)[0], module(wav, lens)[0], atol=0, rtol=0)


def test_snip_edges_false_lengths(batch):
    wav, lens = batch
    cfg = KaldiFbankConfig(snip_edges=False, frame_shift=20.0)
    _, out_len = KaldiFbank(cfg)(wav, lens)
    expected = [kaldi_num_frames(n, 400, 320, False) for n in lens.tolist()]
    assert out_len.tolist() == expected == [50, 28, 20, 0]


def test_input_scale(batch):
    wav, lens = batch
    a = KaldiFbank(KaldiFbankConfig(input_scale=1.0))(wav[:1] * 32768.0, lens[:1])[0]
    b = KaldiFbank()(wav[:1], lens[:1])[0]
    torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_config_from_dict():
    cfg = KaldiMfccConfig.from_dict({"num_ceps": 13, "frame_shift": 10.0, "snip_edges": False})
    assert cfg.window_size == 400 and cfg.window_shift == 160 and not cfg.snip_edges
    with pytest.raises(ConfigError, match="num_cepz"):
        KaldiMfccConfig.from_dict({"num_cepz": 13})
    with pytest.raises(ConfigError, match="num_ceps"):
        KaldiFbankConfig.from_dict({"num_ceps": 13})
