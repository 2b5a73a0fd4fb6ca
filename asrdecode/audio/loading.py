"""Read one utterance's samples (soundfile) and resample a batch on the device (torchaudio).

Every failure becomes AudioError("path: problem") so the pipeline can log it and go on.
"""

from __future__ import annotations

import functools
import math
import os
import struct
from collections.abc import Sequence

import numpy as np
import soundfile as sf
import torch

from asrdecode.errors import AudioError, one_line
from asrdecode.io.manifests import Utterance

#: A segment may run this far past the end of its file (manifest durations are rounded); the
#: read is then cut at the end of the file. Kaldi's extract-segments uses 0.5 s as well.
MAX_OVERSHOOT_SECONDS = 0.5
#: Frames read (and down-mixed) at a time: 8 MB of float32 stereo.
READ_BLOCK_FRAMES = 1 << 20
#: Resampling runs over pieces of this many seconds of input (with the filter's context on both
#: sides): the same samples as one call over the whole recording up to float rounding, with the
#: temporaries of a piece, and for each utterance the same whatever else is in its batch.
RESAMPLE_PIECE_SECONDS = 30


def load_audio(utt: Utterance) -> tuple[np.ndarray, int]:
    """Read utt's span [offset, offset + duration) as (float32 mono samples, sample rate).

    Multi-channel audio is averaged, or `utt.channel` is kept. Raises AudioError naming the file
    for a missing, empty, truncated, corrupt or non-audio file, or a span outside the file.
    """
    if utt.error:
        raise AudioError(utt.error)
    path = utt.audio_path
    if not path:
        raise AudioError(f"{utt.utt_id}: no audio file for this utterance")
    if not os.path.exists(path):
        raise AudioError(f"{path}: file not found")
    if os.path.isdir(path):
        raise AudioError(f"{path}: is a directory, not an audio file")
    if os.path.getsize(path) == 0:
        raise AudioError(f"{path}: empty file (0 bytes)")
    try:
        with sf.SoundFile(path) as f:
            data, sr = _read_span(f, utt, path)
    except AudioError:
        raise
    except MemoryError:
        raise AudioError(f"{path}: too large to load into memory") from None
    except PermissionError:
        raise AudioError(f"{path}: permission denied") from None
    except Exception as e:  # soundfile raises LibsndfileError, RuntimeError, TypeError, ValueError, ...
        raise AudioError(f"{path}: {_describe_sf_error(e)}") from None
    return data, sr


def _read_span(f: sf.SoundFile, utt: Utterance, path: str) -> tuple[np.ndarray, int]:
    sr = int(f.samplerate)
    frames = int(f.frames)
    channels = int(f.channels)
    if sr <= 0:
        raise AudioError(f"{path}: invalid sample rate {sr}")
    if frames <= 0:
        raise AudioError(f"{path}: contains no audio samples (empty or truncated file)")
    if f.format in ("WAV", "WAVEX"):
        _check_wav_complete(path)
    if utt.channel is not None and not 0 <= utt.channel < channels:
        raise AudioError(f"{path}: channel {utt.channel} requested but the file has {channels} channel(s)")

    total = frames / sr
    start = int(round(utt.offset * sr))
    if start >= frames:
        raise AudioError(
            f"{path}: offset {utt.offset:.3f} s is at or past the end of the audio ({total:.3f} s)"
        )
    if utt.duration is None:
        n = frames - start
    else:
        n = int(round(utt.duration * sr))
        if n <= 0:
            raise AudioError(f"{path}: segment at {utt.offset:.3f} s has zero duration")
        if start + n > frames:
            if start + n - frames > MAX_OVERSHOOT_SECONDS * sr:
                raise AudioError(
                    f"{path}: segment {utt.offset:.3f}-{utt.offset + utt.duration:.3f} s extends past "
                    f"the end of the audio ({total:.3f} s)"
                )
            n = frames - start
    if start:
        f.seek(start)
    mono = np.empty(n, np.float32)
    got = 0
    while got < n:  # block by block: the temporaries are a block's, whatever the recording's length
        data = f.read(min(READ_BLOCK_FRAMES, n - got), dtype="float32", always_2d=True)
        k = data.shape[0]
        if k == 0:
            break
        if utt.channel is not None:
            block = data[:, utt.channel]
        elif channels == 1:
            block = data[:, 0]
        else:
            block = data.mean(axis=1, dtype=np.float64)
        if not np.isfinite(block).all():
            raise AudioError(f"{path}: contains NaN or infinite sample values")
        mono[got : got + k] = block
        got += k
    # Compressed formats may report an estimated length; allow a small shortfall, not a cut file.
    if got < n - max(n // 100, int(0.02 * sr)):
        raise AudioError(f"{path}: truncated or corrupt: expected {n} samples, could read {got}")
    if got == 0:
        raise AudioError(f"{path}: contains no audio samples (empty or truncated file)")
    return (mono if got == n else mono[:got].copy()), sr


def _check_wav_complete(path: str) -> None:
    """libsndfile silently reads a cut WAV; compare the header's data size with the bytes present."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return
            pos = 12
            for _ in range(64):
                fh.seek(pos)
                hdr = fh.read(8)
                if len(hdr) < 8:
                    return
                cid, csize = hdr[:4], struct.unpack("<I", hdr[4:])[0]
                if cid == b"data":
                    if csize in (0, 0xFFFFFFFF):  # streamed WAV: size unknown
                        return
                    present = size - (pos + 8)
                    if present < csize:
                        raise AudioError(
                            f"{path}: truncated: the header announces {csize} bytes of samples "
                            f"but the file holds {present}"
                        )
                    return
                pos += 8 + csize + (csize & 1)
    except AudioError:
        raise
    except (OSError, struct.error):
        return


def _describe_sf_error(e: Exception) -> str:
    msg = " ".join(str(e).split())
    low = msg.lower()
    if "format not recognised" in low or "unknown format" in low or "not a regular file" in low:
        return "not a readable audio file (format not recognised)"
    if "system error" in low:
        return "cannot open the file (system error)"
    if "lost sync" in low or "decoder" in low or "unexpected end" in low:
        return f"cannot decode audio, the file is truncated or corrupt ({msg})"
    if "error opening" in low and ": " in msg:
        return f"cannot open audio: {msg.rsplit(': ', 1)[1]}"
    return f"cannot read audio: {msg or type(e).__name__}"


def resample_batch(
    waves: Sequence[torch.Tensor | np.ndarray],
    rates: Sequence[int],
    target_sr: int,
    device: torch.device | str | None = None,
    names: Sequence[str] | None = None,
) -> list[torch.Tensor | AudioError]:
    """Resample 1-D waveforms to `target_sr` on `device`, each on its own (`resample`).

    Returns one entry per input: a float32 tensor on the device, or, when that utterance could not
    be resampled, an AudioError naming names[i] (the caller reports it and drops the utterance).
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    n = len(waves)
    if len(rates) != n or (names is not None and len(names) != n):
        raise ValueError("waves, rates and names must have the same length")
    label = list(names) if names is not None else [f"utterance {i}" for i in range(n)]
    out: list[torch.Tensor | AudioError] = []
    for i, (w, r) in enumerate(zip(waves, rates, strict=True)):
        try:
            t = torch.as_tensor(w, dtype=torch.float32)
            if t.dim() != 1:
                raise ValueError(f"expected a 1-D waveform, got shape {tuple(t.shape)}")
            rate = int(r)
            if rate <= 0 or rate != r:
                raise ValueError(f"invalid sample rate {r!r}")
            out.append(resample(t.to(dev), rate, target_sr))
        except Exception as e:
            out.append(AudioError(f"{label[i]}: cannot resample to {target_sr} Hz: {one_line(e)}"))
    return out


def resample(wave: torch.Tensor, rate: int, target_sr: int) -> torch.Tensor:
    """A 1-D float32 waveform from `rate` to `target_sr` Hz: torchaudio's band-limited sinc
    resampling (its defaults), ``ceil(len * target_sr / rate)`` samples. A recording longer than
    `RESAMPLE_PIECE_SECONDS` is resampled piece by piece, each piece with the filter's reach of
    input on both sides (zeros past the ends, as torchaudio pads), so that the temporaries stay a
    piece's: the same samples as one call up to float rounding (the convolution's summation order
    depends on its length)."""
    if rate == target_sr:
        return wave
    g = math.gcd(rate, target_sr)
    o, m = rate // g, target_sr // g  # o input samples make m output samples
    n = wave.shape[0]
    total = -(-n * m // o)
    step = o * max(1, RESAMPLE_PIECE_SECONDS * rate // o)
    kernel = _resampler(rate, target_sr, wave.device)
    # the filter reaches `width` (torchaudio's lowpass_filter_width 6, rolloff 0.99) plus one period
    width = math.ceil(6 * o / (min(o, m) * 0.99))
    reach = o * (-(-(width + o) // o) + 1)
    if n <= step:
        y = kernel(wave[None])[0]
        if y.shape[0] < total:  # torchaudio's length rounds down now and then: its zeros past the end
            y = kernel(torch.nn.functional.pad(wave, (0, reach))[None])[0]
        return y[:total]
    out = torch.empty(total, dtype=wave.dtype, device=wave.device)
    for lo in range(0, n, step):
        a, b = max(0, lo - reach), min(n, lo + step + reach)
        x = wave[a:b]
        if b == n:  # the zeros torchaudio pads the recording's end with
            x = torch.nn.functional.pad(x, (0, reach))
        first = lo // o * m
        skip, keep = (lo - a) // o * m, min(step // o * m, total - first)
        out[first : first + keep] = kernel(x[None])[0, skip : skip + keep]
    return out


@functools.lru_cache(maxsize=16)
def _resampler(rate: int, target_sr: int, device: torch.device) -> torch.nn.Module:
    """torchaudio's `Resample` (its kernel made once per pair of rates and device)."""
    import torchaudio.transforms as T  # noqa: N812  (heavy import, only needed here)

    return T.Resample(rate, target_sr, dtype=torch.float32).to(device)  # its kernel as `AF.resample` makes it
