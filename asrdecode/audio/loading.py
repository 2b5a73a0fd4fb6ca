"""Read one utterance's samples (soundfile) and resample a batch on the device (torchaudio).

Every failure becomes AudioError("path: problem") so the pipeline can log it and go on.
"""

from __future__ import annotations

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
    data = f.read(n, dtype="float32", always_2d=True)
    got = data.shape[0]
    # Compressed formats may report an estimated length; allow a small shortfall, not a cut file.
    if got < n - max(n // 100, int(0.02 * sr)):
        raise AudioError(f"{path}: truncated or corrupt: expected {n} samples, could read {got}")
    if got == 0:
        raise AudioError(f"{path}: contains no audio samples (empty or truncated file)")
    if utt.channel is not None:
        mono = data[:, utt.channel]
    elif channels == 1:
        mono = data[:, 0]
    else:
        mono = data.mean(axis=1, dtype=np.float64).astype(np.float32)
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    if not np.isfinite(mono).all():
        raise AudioError(f"{path}: contains NaN or infinite sample values")
    return mono, sr


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
    """Resample 1-D waveforms to `target_sr` on `device`, one torchaudio call per distinct input rate.

    Returns one entry per input: a float32 tensor on the device, or, when that utterance could not
    be resampled, an AudioError naming names[i] (the caller reports it and drops the utterance).
    """
    import torchaudio.functional as AF  # noqa: N812  (heavy import, only needed here)

    dev = torch.device(device) if device is not None else torch.device("cpu")
    n = len(waves)
    if len(rates) != n or (names is not None and len(names) != n):
        raise ValueError("waves, rates and names must have the same length")
    label = list(names) if names is not None else [f"utterance {i}" for i in range(n)]
    out: list[torch.Tensor | AudioError | None] = [None] * n
    tensors: list[torch.Tensor | None] = [None] * n
    groups: dict[int, list[int]] = {}
    for i, (w, r) in enumerate(zip(waves, rates, strict=True)):
        try:
            t = torch.as_tensor(w, dtype=torch.float32)
            if t.dim() != 1:
                raise ValueError(f"expected a 1-D waveform, got shape {tuple(t.shape)}")
            rate = int(r)
            if rate <= 0 or rate != r:
                raise ValueError(f"invalid sample rate {r!r}")
            tensors[i] = t.to(dev)
        except Exception as e:
            out[i] = AudioError(f"{label[i]}: cannot resample to {target_sr} Hz: {one_line(e)}")
            continue
        if rate == target_sr:
            out[i] = tensors[i]
        else:
            groups.setdefault(rate, []).append(i)

    for rate, idx in groups.items():
        lens = [tensors[i].shape[0] for i in idx]
        try:
            padded = torch.zeros(len(idx), max(lens), dtype=torch.float32, device=dev)
            for row, i in enumerate(idx):
                padded[row, : lens[row]] = tensors[i]
            res = AF.resample(padded, rate, target_sr)
            for row, i in enumerate(idx):
                out[i] = res[row, : math.ceil(lens[row] * target_sr / rate)].contiguous()
        except Exception:
            # Isolate the failing utterance(s): redo this group one at a time.
            for i in idx:
                try:
                    out[i] = AF.resample(tensors[i].unsqueeze(0), rate, target_sr)[0]
                except Exception as e:
                    out[i] = AudioError(
                        f"{label[i]}: cannot resample from {rate} Hz to {target_sr} Hz: {one_line(e)}"
                    )
    return out  # type: ignore[return-value]  (every slot is filled above)


