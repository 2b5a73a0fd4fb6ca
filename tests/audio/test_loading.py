"""load_audio: exact slicing/down-mix and one-line AudioErrors; resample_batch."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.fuzz import only_asrdecode_errors

from asrdecode.audio import load_audio, resample_batch
from asrdecode.audio.loading import (
    _mpeg_frame_bytes,
    audio_blocks,
    cut_short_warning,
    describe_audio_file,
    mpeg_cut_short,
)
from asrdecode.errors import AudioError
from asrdecode.io import Utterance


def utt(path: Path | str, **kw) -> Utterance:
    return Utterance("u", str(path), **kw)


def ramp_wav(path: Path, n: int = 16000, sr: int = 16000, fmt: str | None = None) -> np.ndarray:
    x = (np.arange(n, dtype=np.float32) / n) - 0.5
    sf.write(path, x, sr, subtype="FLOAT" if fmt is None else fmt)
    return x


def assert_audio_error(u: Utterance, *words: str) -> str:
    with pytest.raises(AudioError) as e:
        load_audio(u)
    msg = str(e.value)
    assert u.audio_path in msg and "\n" not in msg and "Traceback" not in msg
    for w in words:
        assert w in msg, msg
    return msg


def test_whole_file_and_exact_offset_duration_slice(tmp_path):
    p = tmp_path / "ramp.wav"
    x = ramp_wav(p)
    y, sr = load_audio(utt(p))
    assert sr == 16000 and y.dtype == np.float32 and y.ndim == 1
    np.testing.assert_array_equal(y, x)
    y, _ = load_audio(utt(p, offset=0.5, duration=0.25))
    np.testing.assert_array_equal(y, x[8000:12000])
    y, _ = load_audio(utt(p, offset=0.25))
    np.testing.assert_array_equal(y, x[4000:])


def test_segment_overshoot(tmp_path):
    p = tmp_path / "ramp.wav"
    x = ramp_wav(p)
    y, _ = load_audio(utt(p, offset=0.9, duration=0.3))  # 0.2 s past the end: rounding slack, cut
    np.testing.assert_array_equal(y, x[14400:])
    assert_audio_error(utt(p, offset=0.5, duration=2.0), "past the end")
    assert_audio_error(utt(p, offset=1.5), "past the end")
    assert_audio_error(utt(p, offset=0.5, duration=0.0), "zero duration")


def test_stereo_downmix_and_channel_select(tmp_path):
    p = tmp_path / "st.wav"
    left = np.linspace(-0.5, 0.5, 1000, dtype=np.float32)
    right = np.full(1000, 0.25, dtype=np.float32)
    sf.write(p, np.stack([left, right], axis=1), 8000, subtype="FLOAT")
    y, sr = load_audio(utt(p))
    assert sr == 8000
    np.testing.assert_allclose(y, (left + right) / 2, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(load_audio(utt(p, channel=1))[0], right)
    np.testing.assert_array_equal(load_audio(utt(p, channel=0))[0], left)
    assert_audio_error(utt(p, channel=2), "channel 2", "2 channel")


def test_missing_empty_and_non_audio_files(tmp_path):
    assert_audio_error(utt(tmp_path / "missing.wav"), "not found")
    (tmp_path / "empty.wav").write_bytes(b"")
    assert_audio_error(utt(tmp_path / "empty.wav"), "empty")
    sf.write(tmp_path / "zero.wav", np.zeros(0, np.float32), 16000)
    assert_audio_error(utt(tmp_path / "zero.wav"), "no audio samples")
    (tmp_path / "text.wav").write_text("hello, I am not audio\n" * 20)
    assert_audio_error(utt(tmp_path / "text.wav"), "not a readable audio file")
    (tmp_path / "garbage.flac").write_bytes(np.random.default_rng(0).bytes(3000))
    assert_audio_error(utt(tmp_path / "garbage.flac"))
    (tmp_path / "dir.wav").mkdir()
    assert_audio_error(utt(tmp_path / "dir.wav"), "a folder, not a regular file")
    with pytest.raises(AudioError, match="^wav.scp:3: pipe not run$"):
        load_audio(Utterance("u", str(tmp_path / "x.wav"), error="wav.scp:3: pipe not run"))
    with pytest.raises(AudioError, match="no audio file"):
        load_audio(Utterance("u9", None))


@pytest.mark.parametrize(("ext", "subtype"), [("wav", "PCM_16"), ("wav", "FLOAT"), ("flac", "PCM_16")])
def test_truncated_files(tmp_path, ext, subtype):
    p = tmp_path / f"cut.{ext}"
    x = np.sin(np.arange(32000) * 0.01).astype(np.float32) * 0.5
    sf.write(p, x, 16000, subtype=subtype)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    assert_audio_error(utt(p), "truncated")
    p.write_bytes(data[:30])  # header cut
    assert_audio_error(utt(p))


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    """Opening a named pipe would wait for a writer forever: it is refused by its type (the
    time-limited harness fails the test should that ever block)."""
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    only_asrdecode_errors(lambda: load_audio(utt(fifo)))
    assert_audio_error(utt(fifo), "a FIFO (named pipe), not a regular file")
    assert describe_audio_file(str(fifo)) == "unreadable"


def test_a_sample_rate_outside_audio_is_a_damaged_header(tmp_path):
    """A header that says 1 Hz would make an 89 KB file 12 hours long."""
    sf.write(tmp_path / "one.wav", np.zeros(44000, np.int16), 1, subtype="PCM_16")
    assert_audio_error(utt(tmp_path / "one.wav"), "sample rate 1 Hz in its header", "damaged header")


def test_float_samples_far_outside_audio_are_a_damaged_file(tmp_path):
    x = np.zeros(16000, np.float32)
    x[100] = 1e30
    sf.write(tmp_path / "huge.wav", x, 16000, subtype="FLOAT")
    assert_audio_error(utt(tmp_path / "huge.wav"), "sample values up to 1e+30")
    x[100] = 1.5  # clipped float audio is still audio
    sf.write(tmp_path / "loud.wav", x, 16000, subtype="FLOAT")
    assert load_audio(utt(tmp_path / "loud.wav"))[0].max() == 1.5


def mp3_without_length_header(path: Path) -> bytes:
    """An MP3 as libsndfile writes it, less its first frame (the Xing header that declares the
    length): what many encoders write, whose length a reader estimates from its size."""
    x = (0.3 * np.sin(np.arange(48000) * 0.05)).astype(np.float32)
    sf.write(path, x, 16000, format="MP3")
    data = path.read_bytes()
    first = _mpeg_frame_bytes(data[:4])
    assert b"Xing" in data[:first]
    return data


def test_a_cut_mp3_is_an_error_with_a_length_header_and_a_warning_without(tmp_path):
    data = mp3_without_length_header(tmp_path / "whole.mp3")
    (tmp_path / "half.mp3").write_bytes(data[: len(data) // 2 + 37])
    assert_audio_error(utt(tmp_path / "half.mp3"), "truncated")
    plain = data[_mpeg_frame_bytes(data[:4]) :]
    (tmp_path / "plain.mp3").write_bytes(plain)
    assert not mpeg_cut_short(str(tmp_path / "plain.mp3"))
    assert cut_short_warning(utt(tmp_path / "whole.mp3")) is None
    (tmp_path / "cut.mp3").write_bytes(plain[: len(plain) // 2 + 37])
    load_audio(utt(tmp_path / "cut.mp3"))  # reads as whole: its length is estimated from its size
    warning = cut_short_warning(utt(tmp_path / "cut.mp3"))
    assert warning is not None and "ends inside an MP3 frame" in warning


def test_libmpg123s_own_lines_stay_off_the_terminal(tmp_path):
    data = mp3_without_length_header(tmp_path / "whole.mp3")
    (tmp_path / "half.mp3").write_bytes(data[: len(data) // 2])
    code = (
        "import sys; from asrdecode.audio.loading import load_audio; from asrdecode.io import Utterance\n"
        "try: load_audio(Utterance('u', sys.argv[1]))\nexcept Exception as e: print(e)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "half.mp3")], capture_output=True, text=True, check=True
    )
    assert "truncated" in proc.stdout and proc.stderr == ""


def test_nan_samples_are_rejected(tmp_path):
    p = tmp_path / "nan.wav"
    sf.write(p, np.array([0.0, np.nan, 0.1], np.float32), 16000, subtype="FLOAT")
    assert_audio_error(utt(p), "NaN")


# ------------------------------------------------------------------------------ resampling


def peak_hz(x: np.ndarray, sr: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / sr)[int(np.argmax(spec))])


def test_resample_8k_to_16k_keeps_length_ratio_and_frequency():
    sr, f = 8000, 440.0
    t = np.arange(8000) / sr
    x = torch.from_numpy(np.sin(2 * np.pi * f * t).astype(np.float32))
    (y,) = resample_batch([x], [sr], 16000, "cpu")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (16000,)
    assert abs(peak_hz(y.numpy(), 16000) - f) < 2.0
    assert abs(peak_hz(x.numpy(), sr) - f) < 2.0


def test_resample_groups_by_rate_and_matches_one_by_one():
    import torchaudio.functional as AF  # noqa: N812

    rng = np.random.default_rng(0)
    waves = [rng.standard_normal(n).astype(np.float32) for n in (8000, 4001, 16000, 22050, 12345)]
    rates = [8000, 8000, 16000, 44100, 22050]
    out = resample_batch([torch.from_numpy(w) for w in waves], rates, 16000)
    for w, r, y in zip(waves, rates, out, strict=True):
        assert isinstance(y, torch.Tensor)
        assert y.shape[0] == math.ceil(len(w) * 16000 / r)
        ref = torch.from_numpy(w) if r == 16000 else AF.resample(torch.from_numpy(w)[None], r, 16000)[0]
        torch.testing.assert_close(y, ref, atol=1e-5, rtol=0)


def test_resample_failure_is_reported_for_that_utterance_only():
    ok = torch.zeros(800)
    out = resample_batch(
        [ok, ok, torch.zeros(2, 5)], [8000, 0, 8000], 16000, names=["a.wav", "b.wav", "c.wav"]
    )
    assert isinstance(out[0], torch.Tensor) and out[0].shape == (1600,)
    assert isinstance(out[1], AudioError) and "b.wav" in str(out[1]) and "sample rate" in str(out[1])
    assert isinstance(out[2], AudioError) and "c.wav" in str(out[2])


def test_reading_in_blocks_gives_the_samples_of_one_read(tmp_path, monkeypatch):
    """Blocks of 1,000 frames (down-mixed, channel picked, spans cut) give the samples of reading
    the span at once; a NaN in a later block is still found."""
    import asrdecode.audio.loading as loading

    rng = np.random.default_rng(3)
    data = rng.uniform(-0.9, 0.9, (4567, 3)).astype(np.float32)
    p = tmp_path / "three.wav"
    sf.write(p, data, 8000, subtype="FLOAT")
    whole = {
        "mix": data.mean(axis=1, dtype=np.float64).astype(np.float32),
        "ch2": data[:, 2],
    }
    monkeypatch.setattr(loading, "READ_BLOCK_FRAMES", 1000)
    np.testing.assert_array_equal(load_audio(utt(p))[0], whole["mix"])
    np.testing.assert_array_equal(load_audio(utt(p, channel=2))[0], whole["ch2"])
    span = load_audio(utt(p, offset=0.1, duration=0.4))[0]  # frames 800 .. 4000
    np.testing.assert_array_equal(span, whole["mix"][800:4000])
    data[3500, 1] = np.nan
    sf.write(p, data, 8000, subtype="FLOAT")
    assert_audio_error(utt(p), "NaN")


def test_long_recording_resampled_in_pieces(monkeypatch):
    """A recording longer than a piece is resampled piece by piece: every call of the kernel gets a
    piece and its context, not the recording; the samples equal one torchaudio call up to float
    rounding, the length is ceil(len * 16000 / rate); one shorter than a piece is that call's
    samples exactly."""
    import torchaudio.functional as AF  # noqa: N812

    import asrdecode.audio.loading as loading

    monkeypatch.setattr(loading, "RESAMPLE_PIECE_SECONDS", 1)
    g = torch.Generator().manual_seed(0)
    made = loading._resampler

    def watched(rate: int, seen: list[int]):
        kernel = made(rate, 16000, torch.device("cpu"))

        def call(x: torch.Tensor) -> torch.Tensor:
            seen.append(x.shape[-1])
            return kernel(x)

        return lambda *_: call

    for rate in (8000, 22050, 44100, 12345):
        longest: list[int] = []
        monkeypatch.setattr(loading, "_resampler", watched(rate, longest))
        for n in (int(rate * 5.3) + 7, rate // 2 + 3):
            x = torch.randn(n, generator=g) * 0.1
            got = loading.resample(x, rate, 16000)
            want = AF.resample(x[None], rate, 16000)[0]
            assert got.shape[0] == math.ceil(n * 16000 / rate)
            k = min(len(want), len(got))
            if n > rate:
                torch.testing.assert_close(got[:k], want[:k], atol=1e-6, rtol=0)
                assert max(longest) < n / 2  # pieces of about a second, not the 5.3 s
            else:
                assert torch.equal(got[:k], want[:k])


@pytest.mark.parametrize(("rate", "seconds", "channels"), [(44100, 3.3, 2), (8000, 2.6, 1), (12345, 4.1, 3)])
def test_long_input_resampled_as_it_is_read(tmp_path, monkeypatch, rate, seconds, channels):
    """With a target rate, a span longer than a resampling piece comes resampled, piece by piece as
    its blocks are read: the samples of `resample` over the whole span, bit for bit, whatever the
    block size, without the span's own samples ever all held; a shorter span comes at the file's
    rate."""
    import asrdecode.audio.loading as loading

    monkeypatch.setattr(loading, "RESAMPLE_PIECE_SECONDS", 1)
    rng = np.random.default_rng(rate)
    p = tmp_path / "long.wav"
    sf.write(
        p, (rng.standard_normal((int(rate * seconds), channels)) * 0.1).astype(np.float32), rate, "FLOAT"
    )
    for span in ({}, {"offset": 0.2, "duration": seconds - 0.7}):
        whole, _ = load_audio(utt(p, **span))
        want = loading.resample(torch.from_numpy(whole), rate, 16000).numpy()
        for block in (1 << 20, 1000):
            monkeypatch.setattr(loading, "READ_BLOCK_FRAMES", block)
            got, got_rate = load_audio(utt(p, **span), target_sr=16000)
            assert got_rate == 16000 and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    held = []
    real = loading.np.concatenate
    with monkeypatch.context() as patched:
        patched.setattr(
            loading.np, "concatenate", lambda xs: held.append(sum(len(x) for x in xs)) or real(xs)
        )
        streamed = list(audio_blocks(utt(p), 16000))
    assert max(held) < 0.8 * rate * seconds  # a piece, its context and a block of 1,000 frames
    np.testing.assert_array_equal(np.concatenate(streamed), load_audio(utt(p), target_sr=16000)[0])
    short, short_rate = load_audio(utt(p, duration=0.5), target_sr=16000)
    assert short_rate == rate and short.shape == (rate // 2,)
