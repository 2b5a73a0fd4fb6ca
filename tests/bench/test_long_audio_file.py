"""`asrdecode bench long-audio`'s input file: the demo clips cycled to the length asked for, at the
rate (torchaudio, a minute at a time), with the channels and in the format asked for."""

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


def test_long_file_as_a_voice_memo(tmp_path):
    """`--format m4a`: the same audio as AAC in MP4 (read back by FFmpeg), aligned with the WAV."""
    from asrdecode.audio.loading import load_audio
    from asrdecode.io.manifests import Utterance, probe_duration

    long_file(0.25, tmp_path / "memo.m4a")
    long_file(0.25, tmp_path / "plain.wav")
    assert abs(probe_duration(tmp_path / "memo.m4a") - 15.0) < 0.01
    memo, rate = load_audio(Utterance("m", str(tmp_path / "memo.m4a")))
    plain, _ = sf.read(tmp_path / "plain.wav", dtype="float32")
    n = min(len(memo), len(plain))
    assert rate == 16000 and abs(len(memo) - len(plain)) <= 1024
    assert 10 * np.log10(np.sum(plain[:n] ** 2) / np.sum((memo[:n] - plain[:n]) ** 2)) > 15
