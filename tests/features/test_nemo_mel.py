"""NeMo log-mel front end: parity with NeMo 3.0.0 reference features and behaviour of the options."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.nemo_audio import audio_batch

from asrdecode.errors import ModelError
from asrdecode.features.nemo_mel import NemoMelConfig, NemoMelPreprocessor, nemo_mel_filterbank

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"

# The preprocessor section of tests/fixtures/nemo/ctc_bpe.nemo (model_config.yaml).
CFG = {
    "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
    "sample_rate": 16000,
    "normalize": "per_feature",
    "window_size": 0.025,
    "window_stride": 0.01,
    "window": "hann",
    "features": 80,
    "n_fft": 512,
    "log": True,
    "frame_splicing": 1,
    "dither": 1.0e-05,
    "pad_to": 0,
    "pad_value": 0.0,
}


@pytest.fixture(scope="module")
def audio() -> tuple[torch.Tensor, torch.Tensor]:
    a = audio_batch()
    return torch.from_numpy(a["audio"]), torch.from_numpy(a["audio_len"])


@pytest.fixture(scope="module")
def ref() -> dict[str, np.ndarray]:
    z = np.load(FIX / "reference" / "ctc_bpe.npz", allow_pickle=False)
    return {k: z[k] for k in ("features", "features_len")}


@pytest.fixture(scope="module")
def checkpoint_buffers() -> dict[str, torch.Tensor]:
    with tarfile.open(FIX / "ctc_bpe.nemo") as tf:
        raw = tf.extractfile("./model_weights.ckpt").read()
    sd = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    return {k.removeprefix("preprocessor."): v for k, v in sd.items() if k.startswith("preprocessor.")}


def make(**overrides) -> NemoMelPreprocessor:
    return NemoMelPreprocessor.from_config({**CFG, **overrides}).eval()


def test_buffer_names_match_nemo(checkpoint_buffers):
    pre = make()
    assert set(pre.state_dict()) == {"featurizer.window", "featurizer.fb"} == set(checkpoint_buffers)
    for k, v in pre.state_dict().items():
        assert v.shape == checkpoint_buffers[k].shape


def test_computed_filterbank_and_window_equal_checkpoint(checkpoint_buffers):
    fb = nemo_mel_filterbank(16000, 512, 80)
    assert fb.shape == (1, 80, 257)
    torch.testing.assert_close(fb, checkpoint_buffers["featurizer.fb"], atol=1e-6, rtol=0)
    torch.testing.assert_close(make().featurizer.window, checkpoint_buffers["featurizer.window"])


@pytest.mark.parametrize("use_checkpoint", [False, True])
def test_features_match_nemo(audio, ref, checkpoint_buffers, use_checkpoint):
    pre = make()
    if use_checkpoint:
        pre.load_state_dict(checkpoint_buffers)
    with torch.no_grad():
        feats, lens = pre(*audio)
    assert feats.shape == ref["features"].shape
    assert lens.tolist() == ref["features_len"].tolist()
    assert lens.tolist() == (audio[1] // 160).tolist()
    np.testing.assert_allclose(feats.numpy(), ref["features"], atol=1e-4, rtol=0)


def test_padding_frames_zero_and_batch_equals_single(audio):
    pre = make()
    wav, n = audio
    with torch.no_grad():
        feats, lens = pre(wav, n)
        for b in (0, 4):
            assert torch.all(feats[b, :, lens[b] :] == 0)
            one, one_len = pre(wav[b : b + 1, : n[b]], n[b : b + 1])
            assert one_len.item() == lens[b].item()
            torch.testing.assert_close(one[0], feats[b, :, : one.shape[-1]], atol=1e-5, rtol=0)


def test_samples_past_length_do_not_leak(audio):
    pre = make()
    wav, n = audio
    noisy = wav.clone()
    for b in range(wav.shape[0]):
        noisy[b, n[b] :] = torch.randn(wav.shape[1] - n[b])
    with torch.no_grad():
        torch.testing.assert_close(pre(noisy, n)[0], pre(wav, n)[0], atol=0, rtol=0)


def test_dither_only_in_training(audio):
    wav, n = audio[0][:2, :16000], torch.tensor([16000, 12000])
    pre = make(dither=1e-3)
    with torch.no_grad():
        a, b = pre(wav, n)[0], pre(wav, n)[0]
        assert torch.equal(a, b)
        pre.train()
        c = pre(wav, n)[0]
    assert not torch.equal(a, c)
    no_dither = make(dither=0.0).train()
    with torch.no_grad():
        torch.testing.assert_close(no_dither(wav, n)[0], a, atol=0, rtol=0)


def test_normalize_none_is_log_mel(audio):
    wav, n = audio[0][:1, :8000], torch.tensor([8000])
    with torch.no_grad():
        feats, lens = make(normalize="none")(wav, n)
        x = torch.cat((wav[:, :1], wav[:, 1:] - 0.97 * wav[:, :-1]), dim=1)
        spec = torch.stft(
            x,
            512,
            160,
            400,
            torch.hann_window(400, periodic=False),
            center=True,
            pad_mode="constant",
            return_complex=True,
        )
        expected = torch.log(nemo_mel_filterbank(16000, 512, 80) @ spec.abs().pow(2) + 2**-24)
    assert lens.item() == 50
    torch.testing.assert_close(feats[..., :50], expected[..., :50], atol=1e-4, rtol=0)
    assert torch.all(feats[..., 50:] == 0)


def test_normalize_all_features(audio):
    wav, n = audio
    with torch.no_grad():
        feats, lens = make(normalize="all_features")(wav[:3], n[:3])
    for b in range(3):
        valid = feats[b, :, : lens[b]]
        assert abs(valid.mean().item()) < 1e-4
        assert abs(valid.std().item() - 1.0) < 1e-3  # unbiased std (+1e-5 guard)
    per_feature = make()(wav[:1], n[:1])[0][0, :, : lens[0]]
    torch.testing.assert_close(per_feature.mean(dim=1), torch.zeros(80), atol=1e-4, rtol=0)
    torch.testing.assert_close(per_feature.std(dim=1), torch.ones(80), atol=1e-3, rtol=0)


def test_pad_to_multiple(audio):
    wav, n = audio
    with torch.no_grad():
        feats, lens = make(pad_to=16)(wav[:2], n[:2])
    assert feats.shape[-1] % 16 == 0 and feats.shape[-1] >= int(n[:2].max()) // 160 + 1
    assert torch.all(feats[1, :, lens[1] :] == 0)


def test_gradients_flow_to_waveform(audio):
    wav = audio[0][:2, :8000].clone().requires_grad_(True)
    feats, _ = make().train()(wav, torch.tensor([8000, 6000]))
    feats.sum().backward()
    assert wav.grad is not None and torch.isfinite(wav.grad).all()
    assert wav.grad[1, 6000:].abs().sum() == 0


def test_config_defaults_and_errors():
    cfg = NemoMelConfig.from_dict({"window_size": 0.025, "window_stride": 0.01})
    assert (cfg.win_length, cfg.hop_length, cfg.fft_size) == (400, 160, 512)
    with pytest.raises(ModelError, match="frame_splicing"):
        make(frame_splicing=3)
    with pytest.raises(ModelError, match="normalize"):
        make(normalize={"fixed_mean": [0.0]})
    with pytest.raises(ModelError, match="no_such_option"):
        make(no_such_option=1)


def whole_transform_mel_power(feat, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The mel power as one centred STFT over the whole batch (the computation before it was made
    piece by piece), written out here as the reference."""
    if feat.preemph is not None:
        x = torch.cat((x[:, :1], x[:, 1:] - float(feat.preemph) * x[:, :-1]), dim=1)
    x = x.masked_fill(torch.arange(x.shape[1]) >= lengths.unsqueeze(1), 0.0)
    spec = torch.stft(
        x, n_fft=feat.n_fft, hop_length=feat.hop_length, win_length=feat.win_length,
        window=feat.window, center=True, pad_mode="constant", return_complex=True,
    )  # fmt: skip
    power = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1))  # NeMo's |X|, then its power
    if feat.mag_power != 1.0:
        power = power.pow(feat.mag_power)
    return torch.matmul(feat.fb, power)


@pytest.mark.parametrize(
    "options",
    [{}, {"preemph": None}, {"mag_power": 1.0}, {"n_fft": 512, "window_size": 0.02}, {"window_stride": 0.01}],
)
@pytest.mark.parametrize("piece", [1, 7, 64, 10_000])
def test_stft_in_pieces_gives_the_whole_transforms_frames(monkeypatch, options, piece):
    """Pieces of 1, 7, 64 and all frames give the frames of one transform of the whole batch, for
    utterances of different lengths (one shorter than a window), with and without pre-emphasis,
    magnitude or power, a window shorter than the FFT and another hop: bit for bit in one piece (an
    input shorter than `STFT_PIECE_FRAMES` gets the values of before), to float rounding in pieces
    (the narrowest pieces take other FFT and matrix kernels); through `forward` too."""
    import asrdecode.features.nemo_mel as nemo_mel

    feat = NemoMelPreprocessor(NemoMelConfig(**options)).featurizer.eval()  # no dither
    torch.manual_seed(piece)
    lengths = torch.tensor([16000, 12345, 300, 9999])
    x = torch.randn(4, 16000) * 0.1
    want = whole_transform_mel_power(feat, x, lengths)
    frames = want.shape[-1]
    pieces = [feat._mel_power(x, lengths, a, min(a + piece, frames)) for a in range(0, frames, piece)]
    got = torch.cat(pieces, dim=-1)
    assert got.shape == want.shape
    if piece >= frames:
        assert torch.equal(got, want)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-12)
    whole, _ = feat(x, lengths)
    monkeypatch.setattr(nemo_mel, "STFT_PIECE_FRAMES", piece)
    torch.testing.assert_close(feat(x, lengths)[0], whole, rtol=1e-5, atol=1e-5)


def test_a_long_input_in_default_pieces_is_bit_for_bit_one_transform():
    """Three minutes (5 pieces of `STFT_PIECE_FRAMES`): the same frames as one transform, bit for bit."""
    feat = NemoMelPreprocessor(NemoMelConfig()).featurizer
    torch.manual_seed(0)
    n = 16000 * 180
    lengths = torch.tensor([n, n - 12345])
    x = torch.randn(2, n) * 0.1
    want = whole_transform_mel_power(feat, x, lengths)
    frames = want.shape[-1]
    step = 4096
    pieces = [feat._mel_power(x, lengths, a, min(a + step, frames)) for a in range(0, frames, step)]
    assert len(pieces) == 5 and torch.equal(torch.cat(pieces, dim=-1), want)
