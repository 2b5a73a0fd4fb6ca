"""Read one utterance's samples (soundfile; FFmpeg for the containers it cannot open) and resample
them (torchaudio).

Every failure becomes AudioError("path: problem") so the pipeline can log it and go on.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import struct
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import soundfile as sf
import torch

from asrdecode.audio.containers import ContainerAudio, describe_container_error
from asrdecode.errors import AudioError, one_line
from asrdecode.io.manifests import CONTAINER_EXTENSIONS, Utterance, unreadable
from asrdecode.quiet_stderr import is_mpeg, quiet_stderr

#: A segment may run this far past the end of its file (manifest durations are rounded); the
#: read is then cut at the end of the file. Kaldi's extract-segments uses 0.5 s as well.
MAX_OVERSHOOT_SECONDS = 0.5
#: The sample rates a file may declare: a rate outside them is a damaged header (1 Hz would make
#: an 89 KB file hours long).
MIN_RATE, MAX_RATE = 1000, 768000
#: The largest sample value read: float files hold audio within [-1, 1] (a little over when
#: clipped; some tools write 16-bit integer values as floats); far beyond is a damaged file, whose
#: features would overflow.
MAX_SAMPLE = 1e6
#: Frames read (and down-mixed) at a time: 8 MB of float32 stereo.
READ_BLOCK_FRAMES = 1 << 20
#: Resampling runs over pieces of this many seconds of input (with the filter's context on both
#: sides): the same samples as one call over the whole recording up to float rounding, with the
#: temporaries of a piece, and for each utterance the same whatever else is in its batch.
RESAMPLE_PIECE_SECONDS = 30


def load_audio(utt: Utterance, target_sr: int | None = None) -> tuple[np.ndarray, int]:
    """Read utt's span [offset, offset + duration) as (float32 mono samples, sample rate).

    Multi-channel audio is averaged, or `utt.channel` is kept. With `target_sr`, a span longer than
    a resampling piece (`RESAMPLE_PIECE_SECONDS`) at another rate comes resampled to `target_sr`,
    resampled as it is read (`resample`'s pieces: its samples), so that the file's own samples are
    never all in memory; a shorter one comes at the file's rate, for `resample_batch` on the device.
    Raises AudioError naming the file for a missing, empty, truncated, corrupt or non-audio file, or
    a span outside the file.
    """
    path = _checked_path(utt)
    with _audio_errors(path), open_audio(path) as f:
        return _read_span(f, utt, path, target_sr)


def _checked_path(utt: Utterance) -> str:
    """utt's audio file, or AudioError: the utterance's own error, no file, not a regular file (a
    folder, a FIFO, which would block the read forever; nothing is opened), 0 bytes."""
    if utt.error:
        raise AudioError(utt.error)
    path = utt.audio_path
    if not path:
        raise AudioError(f"{utt.utt_id}: no audio file for this utterance")
    problem = unreadable(path)
    if problem is not None:
        raise AudioError(problem)
    return path


def open_audio(path: str) -> sf.SoundFile | ContainerAudio:
    """`path` opened by libsndfile, or, for a format it does not know, by FFmpeg (`ContainerAudio`:
    M4A/MP4, WebM/Matroska, WMA, AMR, ...). A file neither reads raises libsndfile's error, or
    FFmpeg's for a container's extension (`CONTAINER_EXTENSIONS`)."""
    try:
        with quiet_stderr(is_mpeg(path)):
            return sf.SoundFile(path)
    except sf.LibsndfileError as e:
        if "format not recognised" not in str(e).lower():
            raise
        try:
            return ContainerAudio(path)
        except Exception:
            if os.path.splitext(path)[1].lower() in CONTAINER_EXTENSIONS:
                raise
            raise e from None


def describe_audio_file(path: str) -> str:
    """``"FORMAT CODEC, RATE Hz, N ch"`` of an audio file by the library that reads it (``WAV
    PCM_16``, ``mov aac``), or ``"unreadable"``."""
    if unreadable(path) is not None:
        return "unreadable"
    try:
        with _audio_errors(path), open_audio(path) as f:
            kind = f.format.removeprefix("FFMPEG:") + (f" {f.subtype}" if f.subtype else "")
            return f"{kind}, {f.samplerate} Hz, {f.channels} ch"
    except AudioError:
        return "unreadable"


@contextlib.contextmanager
def _audio_errors(path: str) -> Iterator[None]:
    """Every failure of reading `path` as one AudioError naming it."""
    try:
        yield
    except AudioError:
        raise
    except MemoryError:
        raise AudioError(f"{path}: too large to load into memory") from None
    except PermissionError:
        raise AudioError(f"{path}: permission denied") from None
    except Exception as e:  # soundfile raises LibsndfileError, RuntimeError, TypeError, ValueError, ...
        raise AudioError(f"{path}: {describe_container_error(e) or _describe_sf_error(e)}") from None


def _read_span(
    f: sf.SoundFile | ContainerAudio, utt: Utterance, path: str, target_sr: int | None = None
) -> tuple[np.ndarray, int]:
    sr, channels, n = _open_span(f, utt, path)
    blocks = _mono_blocks(f, n, utt.channel, channels, path)
    if target_sr is not None and target_sr != sr and n > piece_samples(sr, target_sr):
        return np.concatenate(list(_at_rate(blocks, sr, target_sr, n, path))), target_sr
    mono, got = np.empty(n, np.float32), 0
    for block in blocks:
        mono[got : got + block.shape[0]] = block
        got += block.shape[0]
    _check_count(path, n, got, sr)
    return (mono if got == n else mono[:got].copy()), sr


def audio_blocks(utt: Utterance, target_sr: int) -> Iterator[np.ndarray]:
    """utt's span as float32 mono blocks at `target_sr`, read (and resampled, `PieceResampler`) as
    they are taken: the samples of `load_audio(utt)` resampled with `resample`, bit for bit,
    without the recording ever all in memory. Raises AudioError (`load_audio`'s) as a block is
    taken."""
    path = _checked_path(utt)
    with _audio_errors(path), open_audio(path) as f:
        sr, channels, n = _open_span(f, utt, path)
        yield from _at_rate(_mono_blocks(f, n, utt.channel, channels, path), sr, target_sr, n, path)


def _at_rate(
    blocks: Iterator[np.ndarray], sr: int, target_sr: int, n: int, path: str
) -> Iterator[np.ndarray]:
    """The `n` samples of `blocks` (at `sr`) at `target_sr`, as `resample` makes them from the
    whole span: piece by piece as the blocks come (`PieceResampler.stream`), or, for a span of one
    piece, in one call; the count read checked (`_check_count`) before the last samples go out."""
    got = [0]

    def counted() -> Iterator[np.ndarray]:
        for block in blocks:
            got[0] += block.shape[0]
            yield block

    if sr == target_sr:
        yield from counted()
    elif n <= piece_samples(sr, target_sr):
        mono = np.concatenate([np.empty(0, np.float32), *counted()])
        _check_count(path, n, got[0], sr)
        yield resample(torch.from_numpy(mono), sr, target_sr).numpy()
        return
    else:
        yield from PieceResampler(sr, target_sr).stream(counted(), n)
    _check_count(path, n, got[0], sr)


def _check_count(path: str, n: int, got: int, sr: int) -> None:
    # Compressed formats may report an estimated length; allow a small shortfall, not a cut file.
    if got < n - max(n // 100, int(0.02 * sr)):
        raise AudioError(f"{path}: truncated or corrupt: expected {n} samples, could read {got}")
    if got == 0:
        raise AudioError(f"{path}: contains no audio samples (empty or truncated file)")


def _open_span(f: sf.SoundFile | ContainerAudio, utt: Utterance, path: str) -> tuple[int, int, int]:
    """(sample rate, channels, frames) of utt's span in `f`, positioned at its start."""
    sr = int(f.samplerate)
    frames = int(f.frames)
    channels = int(f.channels)
    if not MIN_RATE <= sr <= MAX_RATE:
        raise AudioError(
            f"{path}: sample rate {sr} Hz in its header, outside {MIN_RATE}-{MAX_RATE} Hz: a damaged header"
        )
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
    return sr, channels, n


def _mono_blocks(
    f: sf.SoundFile | ContainerAudio, n: int, channel: int | None, channels: int, path: str
) -> Iterator[np.ndarray]:
    """The next `n` frames of `f` (fewer at the end of the file) as float32 mono blocks of
    `READ_BLOCK_FRAMES`: the temporaries are a block's, whatever the recording's length."""
    got, mpeg = 0, getattr(f, "format", "") == "MP3"
    while got < n:
        with quiet_stderr(mpeg):
            data = f.read(min(READ_BLOCK_FRAMES, n - got), dtype="float32", always_2d=True)
        k = data.shape[0]
        if k == 0:
            return
        if channel is not None:
            block = data[:, channel]
        elif channels == 1:
            block = data[:, 0]
        else:
            block = data.mean(axis=1, dtype=np.float64).astype(np.float32)
        if not np.isfinite(block).all():
            raise AudioError(f"{path}: contains NaN or infinite sample values")
        peak = float(np.abs(block).max()) if block.size else 0.0
        if peak > MAX_SAMPLE:
            raise AudioError(
                f"{path}: sample values up to {peak:.3g} (audio samples lie within [-1, 1]): a damaged file"
            )
        got += k
        yield np.ascontiguousarray(block)


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


# MPEG audio frame headers: kbit/s by (MPEG-1?, layer) and bitrate index; Hz by version
_MPEG_KBPS = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MPEG_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _mpeg_frame_bytes(head: bytes) -> int:
    """The length in bytes of the MPEG audio frame whose 4-byte header is `head`; 0 if it is no
    frame header (or a free-format one, whose length it does not say)."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return 0
    version, layer = (head[1] >> 3) & 3, 4 - ((head[1] >> 1) & 3)
    index, rate_index, padding = head[2] >> 4, (head[2] >> 2) & 3, (head[2] >> 1) & 1
    if version == 1 or layer == 4 or index in (0, 15) or rate_index == 3:
        return 0
    mpeg1 = version == 3
    kbps = _MPEG_KBPS[(mpeg1, layer if mpeg1 or layer == 1 else 2)][index]
    rate = _MPEG_RATES[version][rate_index]
    if layer == 1:
        return (12000 * kbps // rate + padding) * 4
    return (144000 if mpeg1 or layer == 2 else 72000) * kbps // rate + padding


def mpeg_cut_short(path: str) -> bool:
    """Whether an MP3 file ends inside a frame: cut short, though a file without a length header
    (Xing/Info) reads as whole (its length is estimated from its size). Frames are walked from the
    first after an ID3v2 tag to the end (an ID3v1 or APE tag there is allowed); a file whose frames
    cannot be walked (free format, damage midway) is not judged: False."""
    import mmap

    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            end = len(data) - (128 if data[-128:-125] == b"TAG" else 0)
            pos = 0
            if data[:3] == b"ID3" and len(data) >= 10:
                pos = 10 + sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(data[6:10]))
                pos += 10 if data[5] & 0x10 else 0
            while pos < end:
                if end - pos < 4:
                    return True  # less than a frame header left
                length = _mpeg_frame_bytes(data[pos : pos + 4])
                if not length:
                    return False  # a tag (APE, Lyrics3) or damage: not judged
                if pos + length > end:
                    return True
                pos += length
            return False
    except (OSError, ValueError):
        return False


def cut_short_warning(utt: Utterance) -> str | None:
    """A warning for an input that may be cut short though it reads as whole: an MP3 ending inside
    a frame (`mpeg_cut_short`; a file whose length header says more is an error when read)."""
    path = utt.audio_path
    if path and is_mpeg(path) and mpeg_cut_short(path):
        return f"{path}: ends inside an MP3 frame: the file may be cut short (its last words may be missing)"
    return None


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
    `RESAMPLE_PIECE_SECONDS` is resampled piece by piece (`PieceResampler`), so that the
    temporaries stay a piece's: the same samples as one call up to float rounding (the
    convolution's summation order depends on its length)."""
    if rate == target_sr:
        return wave
    resampler = PieceResampler(rate, target_sr, wave.device)
    n = wave.shape[0]
    total = resampler.length(n)
    if n <= resampler.step:
        y = resampler.kernel(wave[None])[0]
        if y.shape[0] < total:  # torchaudio's length rounds down now and then: its zeros past the end
            y = resampler.kernel(torch.nn.functional.pad(wave, (0, resampler.reach))[None])[0]
        return y[:total]
    pieces = []
    for lo in range(0, n, resampler.step):
        a, b = resampler.span(lo, n)
        pieces.append(resampler.piece(wave[a:b], lo, a, n))
    return torch.cat(pieces)


class PieceResampler:
    """torchaudio's resampling of one recording from `rate` to `target_sr`, a piece of `step` input
    samples (`RESAMPLE_PIECE_SECONDS`) at a time: each piece is resampled with `reach` input samples
    of context on both sides (the filter's reach: torchaudio's lowpass_filter_width 6 and rolloff
    0.99, plus a period) and the recording's end padded with zeros, as torchaudio pads it; its
    outputs are the piece's own. Pieces start at multiples of `step`, a multiple of the period
    (``o`` input samples make ``m`` output samples), so their outputs meet."""

    def __init__(self, rate: int, target_sr: int, device: torch.device | str = "cpu") -> None:
        g = math.gcd(rate, target_sr)
        self.o, self.m = rate // g, target_sr // g
        self.step = piece_samples(rate, target_sr)
        width = math.ceil(6 * self.o / (min(self.o, self.m) * 0.99))
        self.reach = self.o * (-(-(width + self.o) // self.o) + 1)
        self.kernel = _resampler(rate, target_sr, torch.device(device))

    def length(self, n: int) -> int:
        """Output samples of `n` input samples: ``ceil(n * target_sr / rate)``."""
        return -(-n * self.m // self.o)

    def span(self, lo: int, n: int) -> tuple[int, int]:
        """The input range [a, b) that the piece starting at `lo` of a recording of `n` reads."""
        return max(0, lo - self.reach), min(n, lo + self.step + self.reach)

    def piece(self, x: torch.Tensor, lo: int, a: int, n: int) -> torch.Tensor:
        """The outputs of the piece starting at `lo` (from output sample ``lo / o * m`` on), from
        its input span `x` (starting at sample `a`) of a recording of `n` samples."""
        if a + x.shape[0] == n:  # the zeros torchaudio pads the recording's end with
            x = torch.nn.functional.pad(x, (0, self.reach))
        first = lo // self.o * self.m
        skip, keep = (lo - a) // self.o * self.m, min(self.step // self.o * self.m, self.length(n) - first)
        return self.kernel(x[None])[0, skip : skip + keep]

    def stream(self, blocks: Iterable[np.ndarray], n: int) -> Iterator[np.ndarray]:
        """The resampled samples of a recording of (at most) `n` samples read as `blocks`, a
        piece at a time, each once its span has been read: the same pieces as `resample` over the
        whole recording, holding only a piece's span of input."""
        held = np.empty(0, np.float32)  # input samples from `start` on
        start = lo = got = 0
        for block in blocks:
            held = np.concatenate([held, block])
            got += block.shape[0]
            while lo + self.step + self.reach < n and lo + self.step + self.reach <= got:
                a, b = self.span(lo, n)
                yield self.piece(torch.from_numpy(held[a - start : b - start]), lo, a, n).numpy()
                lo += self.step
                keep_from = max(0, lo - self.reach)
                held, start = held[keep_from - start :], keep_from
        n = got  # the end of the recording (a compressed file may hold fewer samples than announced)
        while lo < n:
            a, b = self.span(lo, n)
            yield self.piece(torch.from_numpy(held[a - start : b - start]), lo, a, n).numpy()
            lo += self.step


def piece_samples(rate: int, target_sr: int) -> int:
    """Input samples of a `PieceResampler` piece: `RESAMPLE_PIECE_SECONDS`, rounded down to whole
    periods (``rate / gcd`` input samples), at least one period."""
    period = rate // math.gcd(rate, target_sr)
    return period * max(1, RESAMPLE_PIECE_SECONDS * rate // period)


@functools.lru_cache(maxsize=16)
def _resampler(rate: int, target_sr: int, device: torch.device) -> torch.nn.Module:
    """torchaudio's `Resample` (its kernel made once per pair of rates and device)."""
    import torchaudio.transforms as T  # noqa: N812  (heavy import, only needed here)

    return T.Resample(rate, target_sr, dtype=torch.float32).to(device)  # its kernel as `AF.resample` makes it
