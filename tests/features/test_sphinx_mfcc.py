"""Sphinx MFCC front end vs pocketsphinx's own reference outputs (tests/fixtures/sphinx/README.md).

Tolerance: 1e-4 absolute on cepstra and log spectra (measured: chan3 cepstra 3.8e-6 in float64 and
4.8e-6 in float32, chan3 log spectra 1.1e-6 / 2.1e-5, goforward cepstra 2.3e-5 in float64 but 2.1e-4
in float32, which is why the front end computes in float64 by default).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from asrdecode.errors import ModelError
from asrdecode.features.sphinx_mfcc import (
    SphinxFeConfig,
    SphinxMFCC,
    batch_cmn,
    deltas_1s_c_d_dd,
    noise_gains_numba,
    sphinx_num_frames,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sphinx"
TOL = 1e-4
# Frames the sphinxbase-era sphinx_fe's VAD removed from chan3's references (see README).
CHAN3_VAD_DROPPED = [218, 219, 220, 221, 222, 223, 224, 225, 226, 1304, 1688, 1689]
# The en-us model's feat.params (pocketsphinx 5.1.1 package data).
EN_US_FEAT_PARAMS = {
    "lowerf": "130",
    "upperf": "6800",
    "nfilt": "25",
    "transform": "dct",
    "lifter": "22",
    "feat": "1s_c_d_dd",
    "svspec": "0-12/13-25/26-38",
    "agc": "none",
    "cmn": "batch",
    "varnorm": "no",
    "model": "ptm",
    "remove_noise": "yes",
}


def read_raw(name: str) -> torch.Tensor:
    return torch.from_numpy(np.fromfile(FIX / name, dtype="<i2").astype(np.float32) / 32768.0)


def read_sphinx_feats(name: str, dim: int) -> np.ndarray:
    data = np.fromfile(FIX / name, dtype="<f4")
    n = np.frombuffer(data[:1].tobytes(), dtype="<i4")[0]
    assert n == data.size - 1 and n % dim == 0
    return data[1:].reshape(-1, dim)


def chan3_config(dtype: str) -> SphinxFeConfig:
    """test-sphinx_fe.sh parameters + the reference's sphinx_fe defaults (noise removal on)."""
    return SphinxFeConfig(
        samprate=11025,
        frate=105,
        wlen=0.024,
        alpha=0.97,
        ncep=13,
        nfft=512,
        nfilt=36,
        upperf=5400,
        lowerf=130,
        remove_noise=True,
        dtype=dtype,
    )


@pytest.fixture(scope="module")
def chan3() -> tuple[torch.Tensor, torch.Tensor]:
    wav = read_raw("chan3.raw")
    return wav[None], torch.tensor([wav.numel()])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_chan3_cepstra_and_logspec_match_sphinx_fe(chan3, dtype: str) -> None:
    wav, lens = chan3
    fe = SphinxMFCC(chan3_config(dtype))
    cep, n = fe.cepstra(wav, lens)
    logspec, _ = fe.log_spectrum(wav, lens)
    assert int(n[0]) == 2190  # 1 + (230108 - 265) // 105 full frames + the final partial frame
    keep = [t for t in range(int(n[0])) if t not in CHAN3_VAD_DROPPED]
    ref_cep = read_sphinx_feats("chan3.mfc", 13)
    ref_log = read_sphinx_feats("chan3.logspec", 36)
    assert len(keep) == len(ref_cep) == len(ref_log) == 2178
    err_cep = np.abs(cep[0, keep].numpy() - ref_cep).max()
    err_log = np.abs(logspec[0, keep].numpy() - ref_log).max()
    assert err_cep < TOL, err_cep
    assert err_log < TOL, err_log


def test_chan3_first_frames_need_noise_removal(chan3) -> None:
    """Without spectral noise removal the quiet start of chan3 is off by up to ~0.7 in c0."""
    wav, lens = chan3
    cfg = chan3_config("float64")
    cfg.remove_noise = False
    cep, _ = SphinxMFCC(cfg).cepstra(wav[:, :5000], torch.tensor([5000]))
    ref = read_sphinx_feats("chan3.mfc", 13)[:30]
    assert np.abs(cep[0, :30].numpy() - ref).max() > 0.3


def test_goforward_model_parameters_match_reference_mfc() -> None:
    cfg = SphinxFeConfig.from_feat_params(EN_US_FEAT_PARAMS)
    assert (cfg.frame_size, cfg.frame_shift, cfg.fft_size, cfg.nfilt) == (410, 160, 512, 25)
    assert cfg.transform == "dct" and cfg.lifter == 22 and cfg.remove_noise
    wav = read_raw("goforward.raw")
    cep, n = SphinxMFCC(cfg).cepstra(wav[None], torch.tensor([wav.numel()]))
    ref = read_sphinx_feats("goforward.mfc", 13)
    assert int(n[0]) == 278 and len(ref) == 264
    err = np.abs(cep[0, : len(ref)].numpy() - ref).max()
    assert err < TOL, err


def test_batch_equals_single_and_padding_is_zero() -> None:
    """Each utterance's features are those it gets alone, bit for bit (whatever its batchmates and
    padding: a transcript does not depend on the other files of a run); padding frames are 0."""
    fe = SphinxMFCC(SphinxFeConfig.from_feat_params(EN_US_FEAT_PARAMS))
    wav = read_raw("goforward.raw")
    parts = [wav[:20000], wav[6000:17000], wav[30000:30300]]  # the last is shorter than a window
    lens = torch.tensor([p.numel() for p in parts])
    batch = torch.zeros(len(parts), int(lens.max()))
    for i, p in enumerate(parts):
        batch[i, : p.numel()] = p
    feats, n = fe(batch, lens)
    assert feats.shape[-1] == 39
    assert n.tolist() == sphinx_num_frames(lens, fe.cfg).tolist() == [124, 68, 1]
    for i, p in enumerate(parts):
        single, n1 = fe(p[None], lens[i : i + 1])
        assert int(n1[0]) == int(n[i])
        assert torch.equal(feats[i, : n[i]], single[0])
        if n[i] < feats.shape[1]:
            assert feats[i, n[i] :].abs().max().item() == 0
    longer = torch.cat([batch, torch.full((len(parts), 777), 0.5)], 1)  # more padding, not zeros
    assert torch.equal(fe(longer, lens)[0], feats)
    assert torch.equal(fe(batch[[2, 0]], lens[[2, 0]])[0][1], feats[0])  # other batchmates


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_noise_removal_compiled_equals_torch_loop(dtype: torch.dtype, rtol: float) -> None:
    """The compiled CPU recursion (used for CPU tensors, so the reference tests above run it) gives
    the gains of the per-frame torch loop (used on other devices), on real mel spectra with
    padding, silence and an all-zero filter."""
    fe = SphinxMFCC(SphinxFeConfig.from_feat_params(EN_US_FEAT_PARAMS))
    wav = read_raw("goforward.raw")
    batch = torch.zeros(2, 30000)
    batch[0], batch[1, :12000] = wav[:30000], wav[10000:22000]
    mel, n = fe.mel_power(batch, torch.tensor([30000, 12000]))
    mel[0, :, 3] = 0.0
    mel = mel.to(dtype)
    assert int(n[1]) < mel.shape[1]
    torch.testing.assert_close(noise_gains_numba(mel), SphinxMFCC.noise_gains_torch(mel), rtol=rtol, atol=0)


def test_frame_chunking_does_not_change_features() -> None:
    cfg = SphinxFeConfig.from_feat_params(EN_US_FEAT_PARAMS)
    wav = read_raw("goforward.raw")[None, :20000]
    lens = torch.tensor([20000])
    whole, _ = SphinxMFCC(cfg).cepstra(wav, lens)
    chunked, _ = SphinxMFCC(cfg, frame_chunk=7).cepstra(wav, lens)
    assert torch.equal(whole, chunked)


def test_num_frames_edges() -> None:
    cfg = SphinxFeConfig()
    lens = torch.tensor([0, 1, 409, 410, 411, 569, 570, 571])
    # < one window: 1 partial frame; then 1 + (L - 410) // 160 full frames + 1 partial frame
    assert sphinx_num_frames(lens, cfg).tolist() == [0, 1, 1, 2, 2, 2, 3, 3]


def test_cmn_and_dynamic_features_formula() -> None:
    torch.manual_seed(0)
    cep = torch.randn(2, 9, 13)
    cep[..., 0] += 5.0  # no "zero energy" frame (c0 < 0)
    lens = torch.tensor([9, 5])
    norm = batch_cmn(cep, lens)
    assert norm[0].mean(0).abs().max() < 1e-6 and norm[1, :5].mean(0).abs().max() < 1e-6
    assert norm[1, 5:].abs().max() == 0
    feats = deltas_1s_c_d_dd(norm, lens)
    for b in range(2):
        c = norm[b, : lens[b]].numpy()
        last = int(lens[b]) - 1
        for t in range(int(lens[b])):
            at = {k: c[min(max(t + k, 0), last)] for k in (-3, -2, -1, 1, 2, 3)}  # edges replicated
            want = np.concatenate([c[t], at[2] - at[-2], (at[3] - at[-1]) - (at[1] - at[-3])])
            np.testing.assert_allclose(feats[b, t].numpy(), want, atol=1e-5)
    assert feats[1, 5:].abs().max() == 0


def test_batch_cmn_skips_negative_c0_frames_as_pocketsphinx() -> None:
    """pocketsphinx's cmn(): the mean is over frames with c0 >= 0 only, subtracted from every frame;
    with no such frame every frame counts."""
    cep = torch.tensor(
        [[[2.0, 1.0], [-3.0, 7.0], [4.0, 3.0], [9.0, 9.0]], [[-1.0, 2.0], [-3.0, 4.0], [0, 0], [0, 0]]]
    )
    lens = torch.tensor([3, 2])
    norm = batch_cmn(cep, lens)
    mean0 = torch.tensor([3.0, 2.0])  # frames 0 and 2; frame 1 has c0 < 0, frame 3 is padding
    assert torch.allclose(norm[0, :3], cep[0, :3] - mean0) and norm[0, 3].abs().max() == 0
    assert torch.allclose(norm[1, :2], cep[1, :2] - torch.tensor([-2.0, 3.0]))


def test_feat_params_validation() -> None:
    with pytest.raises(ModelError, match="agc"):
        SphinxFeConfig.from_feat_params({"agc": "max"})
    with pytest.raises(ModelError, match="lifter"):
        SphinxFeConfig.from_feat_params({"lifter": "twenty"})
    with pytest.raises(ModelError, match="transform"):
        SphinxFeConfig(transform="fft")
