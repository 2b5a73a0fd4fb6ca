"""NeMo's buffered chunked inference: for CTC models its ``FrameBatchASR`` with
``speech_to_text_buffered_infer_ctc.py``, for RNN-T models its ``BatchedFrameASRRNNT`` with
``speech_to_text_buffered_infer_rnnt.py`` ("middle" merge): long audio in bounded memory for models
without local attention, with NeMo's outputs.

The log-mel features of the whole input (no normalization, the input padded by ``delay`` encoder
frames of silence) are read in chunks of ``chunk_seconds``. Each chunk is shifted into a window
of ``buffer_seconds`` that starts as frames of `WINDOW_START_VALUE`. Each window is normalized per
feature with its own mean and standard deviation and run through the encoder and CTC head. Of its
log-probs the ``tokens_per_chunk`` rows ending ``delay`` rows before the last are kept, and the
kept rows of all windows are joined. They run `lag` frames behind the audio; the model output's
``extra["time_offset"]`` takes that back out of word times.

A transducer's windows are decoded one by one instead (`WindowRows`: each window is a row of the
model output, decoded from the blank state by any transducer decoder), and the tokens each window
emits on its kept frames are joined (`asrdecode.decoders.transducer_greedy.merge_windows`): NeMo's
middle-token merge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from asrdecode.errors import ModelError

# NeMo's FeatureFrameBufferer starts its windows at -16.635 (the log-mel of silence) only for a
# preprocessor with a `log` attribute; its mel preprocessor has none, so windows start at 0.0
WINDOW_START_VALUE = 0.0


@dataclass
class BufferedInference:
    chunk_seconds: float
    buffer_seconds: float
    hop_seconds: float  # feature frame shift
    subsampling: int  # feature frames per encoder frame (NeMo's model_stride)
    norm_eps: float = 1e-5  # added to each window's standard deviation (NeMo: 1e-5 CTC, 1e-8 RNN-T)

    def __post_init__(self) -> None:
        if not 0 < self.chunk_seconds <= self.buffer_seconds:
            raise ModelError(
                f"model.chunk_seconds={self.chunk_seconds:g} / model.buffer_seconds={self.buffer_seconds:g}: "
                "need 0 < chunk_seconds <= buffer_seconds"
            )

    @property
    def stride_seconds(self) -> float:
        return self.hop_seconds * self.subsampling

    @property
    def tokens_per_chunk(self) -> int:
        return math.ceil(self.chunk_seconds / self.stride_seconds)

    @property
    def delay(self) -> int:
        """NeMo's ``mid_delay``: encoder frames from a window's kept rows to its end."""
        middle = self.chunk_seconds + (self.buffer_seconds - self.chunk_seconds) / 2
        return math.ceil(middle / self.stride_seconds)

    @property
    def chunk_frames(self) -> int:
        return int(self.chunk_seconds / self.hop_seconds)

    @property
    def buffer_frames(self) -> int:
        return int(self.buffer_seconds / self.hop_seconds)

    def pad_samples(self, rate: int) -> int:
        """Silence appended to the audio so that its end reaches a kept row."""
        return int(self.delay * self.stride_seconds * rate)

    def windows(self, features: torch.Tensor, start_value: float = WINDOW_START_VALUE) -> torch.Tensor:
        """[F, L] unnormalized features -> [N, F, buffer_frames] normalized windows, one per chunk
        (the last chunk zero-padded, as NeMo's AudioFeatureIterator pads it)."""
        per_chunk = self.chunk_seconds / self.hop_seconds
        n_feat, length = features.shape
        chunks, start = [], 0
        while True:
            last = int(start + per_chunk)
            if last <= length:
                chunks.append(features[:, start:last])
                start = last
                continue
            tail = features.new_zeros(n_feat, int(per_chunk))
            tail[:, : length - start] = features[:, start:length]
            chunks.append(tail)
            break
        window = features.new_full((n_feat, self.buffer_frames), start_value)
        out = []
        for chunk in chunks:
            window = torch.cat([window[:, chunk.shape[1] :], chunk], dim=1)
            out.append(window)
        stacked = torch.stack(out)
        mean = stacked.mean(dim=2, keepdim=True)
        std = stacked.std(dim=2, unbiased=False, keepdim=True)
        return (stacked - mean) / (std + self.norm_eps)

    def kept_rows(self, rows: int) -> slice:
        """The rows of a window's `rows` log-probs that are kept."""
        start = rows - 1 - self.delay
        if start < 0:
            raise ModelError(
                f"model.buffer_seconds={self.buffer_seconds:g} is too short for model.chunk_seconds="
                f"{self.chunk_seconds:g}: a window has {rows} frames, the delay is {self.delay}"
            )
        return slice(start, start + self.tokens_per_chunk)

    def lag(self, rows: int) -> int:
        """Encoder frames by which the joined rows run behind the audio."""
        return rows - self.kept_rows(rows).start - round(self.chunk_frames / self.subsampling)


@dataclass
class WindowRows:
    """The rows of a buffered transducer output: one window each, of input `owner[row]`, in order;
    tokens emitted on frames `kept` of a window are kept; the joined frames run `lag` frames
    behind the audio, which ends at `audio_seconds` of each input."""

    owner: list[int]
    kept: slice
    tokens_per_chunk: int
    lag: int
    frame_shift: float
    audio_seconds: list[float]
