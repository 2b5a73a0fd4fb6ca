"""Audio that libsndfile cannot open (M4A/MP4/AAC, WebM/Matroska, WMA, AMR, AC-3, video files'
sound tracks), demuxed and decoded by FFmpeg through PyAV.

`ContainerAudio` offers the part of `soundfile.SoundFile` that reading uses (`samplerate`,
`channels`, `frames`, `format`, `seek`, `read`), so a file reaches the rest of the pipeline the
same way whichever library opened it. Files are untrusted: only local files are read (FFmpeg's
`protocol_whitelist`) and only the demuxers of single-file audio and video formats are allowed
(`format_whitelist`): no playlists (HLS, concat), no image sequences, no network.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator

import numpy as np

#: FFmpeg demuxers a file may be read with (matched against each name of a demuxer's list, as
#: FFmpeg's `format_whitelist` does). Everything else, playlists above all, is refused.
ALLOWED_DEMUXERS = (
    "mov", "matroska", "asf", "aac", "amr", "amrnb", "amrwb", "ac3", "eac3", "mp3", "ogg", "wav",
    "flac", "avi", "caf", "aiff", "au", "w64", "wv", "ape", "tta", "dts", "mpeg", "mpegts", "flv",
)  # fmt: skip
#: Demuxers whose files record their length exactly (a sample table, a duration element); for the
#: others (raw AAC, MP3 and AC-3 streams, MPEG-TS, ...) FFmpeg estimates it from the bitrate, so the
#: samples are counted by decoding the stream once when it is opened.
EXACT_LENGTH_DEMUXERS = ("mov", "matroska", "ogg", "wav", "flac", "caf", "aiff", "w64", "asf")
#: Decoded before a span's start after a seek, so that codecs with memory (the MDCT overlap of
#: AAC, Opus's pre-roll) have converged when the span begins.
SEEK_PREROLL_SECONDS = 0.5


def _open_options() -> dict[str, str]:
    return {"protocol_whitelist": "file", "format_whitelist": ",".join(ALLOWED_DEMUXERS)}


class ContainerAudio:
    """The first audio stream of a media file as float32 frames ``[n, channels]`` (soundfile's
    interface: ``read(k)`` returns the next k frames, fewer at the end). Integer samples are scaled
    as libsndfile scales them (s16 / 2^15, s32 / 2^31). `frames` is the container's length: exact
    for MP4/M4A, at most a millisecond over for Matroska/WebM (a read stops at the stream's end);
    for raw streams (AAC, AC-3, AMR, MP3 without a container, MPEG-TS), whose length FFmpeg only
    estimates, the decoded samples counted when the file is opened.
    Raises ValueError if the file has no audio stream, av.FFmpegError if FFmpeg cannot read it."""

    def __init__(self, path: str) -> None:
        import av

        self._av, self._path = av, path
        self._container = av.open(path, options=_open_options())
        try:
            audio = self._container.streams.audio
            if not audio:
                raise ValueError("no audio stream in the file")
            self._stream = audio[0]
            ctx = self._stream.codec_context
            self.samplerate = int(ctx.sample_rate or self._stream.rate or 0)
            self.channels = int(ctx.channels or 0)
            if self.samplerate <= 0 or self.channels <= 0:
                raise ValueError("the audio stream gives no sample rate or channel count")
            demuxers = self._container.format.name.split(",")
            self.format = f"FFMPEG:{demuxers[0]}"
            self.subtype = str(ctx.name or "")  # the codec, where soundfile names the sample format
            self._pending: list[np.ndarray] = []  # decoded [channels, m] arrays not yet read
            self._decoded: Iterator[np.ndarray] | None = None
            self._skip = 0  # samples still to drop before the first read (a seek's pre-roll)
            self._indexed = not set(demuxers).isdisjoint(EXACT_LENGTH_DEMUXERS)
            self.frames = self._frame_count() if self._indexed else self._counted_frames()
        except BaseException:
            self._container.close()
            raise

    def _samples_per_tick(self) -> float:
        """Samples per tick of the stream's timestamps (1 in MP4/M4A, 16 in Matroska at 16 kHz)."""
        base = self._stream.time_base
        return float(base) * self.samplerate if base is not None else math.inf

    def _frame_count(self) -> int:
        """The stream's length in samples; where its timestamps are coarser than a sample (Matroska's
        milliseconds) one tick more, so that a read to the end is cut by the end of the stream,
        not by a rounded length."""
        stream, rate = self._stream, self.samplerate
        if stream.duration is not None and stream.time_base is not None:
            tick = self._samples_per_tick()
            ticks = stream.duration - min(stream.start_time or 0, 0) + (1 if tick > 1.0 else 0)
            return int(math.ceil(ticks * tick - 1e-9))
        if self._container.duration is not None:  # microseconds
            return int(math.ceil((self._container.duration + 1000) * rate / 1_000_000))
        return 0

    def _counted_frames(self) -> int:
        """The stream's length in samples, counted by decoding it; the file is then opened again."""
        count = sum(block.shape[1] for block in self._frames(seeking=False))
        self._container.close()
        self._container = self._av.open(self._path, options=_open_options())
        self._stream = self._container.streams.audio[0]
        return count

    # ----------------------------------------------------------- soundfile's interface
    def seek(self, start: int) -> None:
        """Position at frame `start`. In a file with an index and timestamps of sample precision
        (MP4/M4A: one tick per sample) it seeks to `SEEK_PREROLL_SECONDS` before it and drops the
        decoded samples up to `start`; otherwise (raw streams seek by bytes, inexactly), or if the
        seek lands past that point, it decodes from the file's start and drops `start` samples."""
        self._pending, self._skip = [], start
        tick = self._samples_per_tick()
        target = start - int(SEEK_PREROLL_SECONDS * self.samplerate)
        seeking = self._indexed and tick <= 1.0 and target > 0
        if seeking:
            origin = self._stream.start_time or 0
            self._container.seek(int(target / tick) + origin, stream=self._stream, backward=True)
        elif self._decoded is not None:
            self._container.seek(0)
        self._decoded = self._frames(seeking)

    def read(self, k: int, dtype: str = "float32", always_2d: bool = True) -> np.ndarray:
        """The next `k` frames (fewer at the end of the stream) as ``[m, channels]`` float32."""
        if self._decoded is None:
            self._decoded = self._frames(seeking=False)
        have = sum(a.shape[1] for a in self._pending)
        while have < k:
            block = next(self._decoded, None)
            if block is None:
                break
            self._pending.append(block)
            have += block.shape[1]
        joined = np.concatenate(self._pending, axis=1) if self._pending else np.zeros((self.channels, 0))
        out, rest = joined[:, :k], joined[:, k:]
        self._pending = [rest] if rest.shape[1] else []
        return np.ascontiguousarray(out.T, dtype=np.float32)

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> ContainerAudio:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------- decoding
    def _frames(self, seeking: bool) -> Iterator[np.ndarray]:
        """Decoded samples as float32 ``[channels, m]`` arrays from the current position, the first
        `self._skip` frames of the stream dropped. After a seek the first frame's timestamp tells
        where it starts (a seek that lands past the skip point starts over from the file's start);
        from the file's start, the samples are counted."""
        stream = self._stream
        convert = self._av.AudioResampler(format="flt", layout=stream.layout, rate=self.samplerate)
        position = 0
        if seeking:
            frames = self._decoded_frames()
            first = next(frames, None)
            if first is None or first.pts is None:
                position = -1
            else:
                position = int(round((first.pts - (stream.start_time or 0)) * self._samples_per_tick()))
            if not 0 <= position <= self._skip:
                self._container.seek(0)
                frames, position = self._decoded_frames(), 0
            else:
                frames = itertools.chain([first], frames)
        else:
            frames = self._decoded_frames()
        for frame in itertools.chain(frames, [None]):
            for out in convert.resample(frame):
                data = out.to_ndarray().reshape(-1, self.channels).T  # packed flt: [1, m * channels]
                drop = min(max(self._skip - position, 0), data.shape[1])
                position += data.shape[1]
                if drop < data.shape[1]:
                    yield data[:, drop:]

    def _decoded_frames(self) -> Iterator:
        for packet in self._container.demux(self._stream):
            yield from packet.decode()


def describe_container_error(e: BaseException) -> str | None:
    """A one-line description of PyAV's error `e` (None if it is not one)."""
    try:
        import av
    except ImportError:
        return None
    if not isinstance(e, av.FFmpegError):
        return None
    text = " ".join((e.strerror or str(e)).split())
    low = text.lower()
    if "invalid data" in low or "end of file" in low:
        return f"cannot decode audio: not a media file, or truncated or corrupt ({text})"
    if "not permitted" in low or "invalid argument" in low:
        return "not a readable audio file (format not recognised or not allowed)"
    return f"cannot read audio: {text}"


def container_duration(path: str) -> float | None:
    """The first audio stream's duration in seconds, or None if FFmpeg cannot open the file."""
    try:
        with ContainerAudio(path) as f:
            return f.frames / f.samplerate if f.frames > 0 else None
    except Exception:
        return None


#: The codec and FFmpeg muxer each container extension is written with by `encode_audio`.
CONTAINER_CODECS = {
    ".m4a": ("mp4", "aac"), ".mp4": ("mp4", "aac"), ".webm": ("webm", "libopus"),
    ".mka": ("matroska", "pcm_s16le"),
}  # fmt: skip


def encode_audio(
    path: str,
    blocks: Iterable[np.ndarray],
    rate: int,
    codec: str | None = None,
    bit_rate: int | None = None,
) -> None:
    """Write float32 ``[n, channels]`` blocks at `rate` to a media file, as a phone or a browser
    would (the benches' and tests' inputs): the codec from the extension (`CONTAINER_CODECS`)
    unless given (``"alac"`` for lossless M4A), at the encoder's default bitrate unless given (bits
    per second). Samples are rounded to 16 bits first; Opus is encoded at 48 kHz (FFmpeg
    resamples)."""
    import av

    fmt, default_codec = CONTAINER_CODECS["." + path.rsplit(".", 1)[-1].lower()]
    codec = codec or default_codec
    out_rate = 48000 if codec == "libopus" else rate
    with av.open(path, "w", format=fmt) as out:
        stream, written = None, 0
        for block in blocks:
            channels = block.shape[1]
            layout = {1: "mono", 2: "stereo"}[channels]
            if stream is None:
                stream = out.add_stream(codec, rate=out_rate, layout=layout)
                if bit_rate:
                    stream.bit_rate = bit_rate
            pcm = np.clip(np.round(block * 32768), -32768, 32767).astype(np.int16).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout=layout)
            frame.sample_rate, frame.pts = rate, written
            written += block.shape[0]
            out.mux(stream.encode(frame))
        if stream is not None:
            out.mux(stream.encode(None))
