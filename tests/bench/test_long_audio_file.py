"""`asrdecode bench long-audio`'s input file: the demo clips cycled to the length asked for, at the
rate (torchaudio, a minute at a time) and with the channels asked for."""

from __future__ import annotations

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF  # noqa: N812

from asrdecode.bench.long_audio import long_file


def test_long_file_at_another_rate_with_channels(tmp_path):
    long_file(0.5, tmp_path / "mono.wav")
    long_file(0.5, tmp_path / "stereo.wav", rate=44100, channels=2)
    mono, rate = sf.read(tmp_path / "mono.wav", dtype="float32")
    assert rate == 16000 and mono.shape == (30 * 16000,)
    stereo, rate = sf.read(tmp_path / "stereo.wav", dtype="float32")
    assert (
        rate == 44100
        and stereo.shape == (30 * 44100, 2)
        and sf.info(tmp_path / "stereo.wav").subtype == "PCM_16"
    )
    want = AF.resample(torch.from_numpy(mono)[None], 16000, 44100)[0].numpy()
    inside = np.abs(want) < 0.99  # 16-bit PCM: rounded, and clipped at full scale
    np.testing.assert_allclose(stereo[inside, 0], want[inside], atol=2 / 32768)
    np.testing.assert_allclose(stereo[inside, 1], 0.9 * want[inside], atol=2 / 32768)
