"""Cut long recordings into segments at their quietest moments, and join the segments' results.

A recording longer than ``max_seconds`` is cut into consecutive segments of at most that length:
from each segment start, the cut goes at the centre of the quietest ``quiet_seconds`` window (mean
energy of 10 ms frames) within the last ``search_seconds`` before the limit and past the segment's
first quarter (so that a segment is at least a quarter of the limit long, but the last: with a
limit under 13 s a silence at a segment's start was cut a frame at a time), so words are rarely
cut and every segment can be decoded on its own (bounded memory for any model and decoder). The
segments' results are joined back into one: words and token frames shifted by each segment's
offset, scores added, word lattices concatenated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from asrdecode.decoders.base import DecodeResult, Word


def segment_bounds(
    wave: np.ndarray | torch.Tensor,
    rate: int,
    max_seconds: float,
    search_seconds: float = 10.0,
    quiet_seconds: float = 0.2,
) -> list[tuple[int, int]]:
    """[(start, end)] sample ranges covering ``wave`` in order, each at most ``max_seconds`` long
    (`cut_stream` over the whole recording)."""
    x = wave.detach().cpu().numpy() if isinstance(wave, torch.Tensor) else np.asarray(wave)
    return [
        (start, start + piece.shape[0])
        for start, piece in cut_stream([x], rate, max_seconds, search_seconds, quiet_seconds)
    ]


def cut_stream(
    blocks: Iterable[np.ndarray],
    rate: int,
    max_seconds: float,
    search_seconds: float = 10.0,
    quiet_seconds: float = 0.2,
) -> Iterator[tuple[int, np.ndarray]]:
    """The segments (start sample, samples) of the recording read as ``blocks``, each at most
    ``max_seconds`` long (module docstring), each cut as soon as the samples it depends on are in:
    up to its limit and the smoothing window past it. The same cuts as over the whole recording
    (the window's mean at a frame reads the same frames either way), holding only a segment's
    samples, a block and their frames' energies."""
    limit = int(max_seconds * rate)
    if limit <= 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
    hop = max(1, rate // 100)
    width = max(1, int(round(quiet_seconds * 100)))
    kernel = np.ones(width) / width
    search = max(1, min(int(search_seconds * 100), limit // hop * 3 // 4))  # past its first quarter

    def cut_after(start: int, smooth: Callable[[int, int], np.ndarray]) -> int:
        last = (start + limit) // hop - 1  # frames that end within the limit
        first = max(start // hop + 1, last - search)
        cut = (first + int(np.argmin(smooth(first, last + 1)))) * hop if last >= first else start + limit
        return min(max(cut, start + hop), start + limit)

    held = np.empty(0, np.float32)  # the samples from `start` on
    energy = np.empty(0, np.float64)  # each whole frame's mean square, from frame `e0` on
    start = n = e0 = 0
    frames = 0

    def window(a: int, b: int) -> np.ndarray:
        """The smoothed energies of frames a..b-1: the window's mean, zeros past the recording's
        ends (as one convolution over all its frames gives them)."""
        lo, hi = max(0, a - width), min(frames, b + width)
        return np.convolve(energy[lo - e0 : hi - e0], kernel, mode="same")[a - lo : b - lo]

    def cuts(final: bool) -> Iterator[tuple[int, np.ndarray]]:
        nonlocal held, start, energy, e0
        while n - start > limit and (final or (start + limit) // hop - 1 + width < frames):
            cut = cut_after(start, window)
            yield start, held[: cut - start]
            held, start = held[cut - start :], cut
            drop = start // hop - width - e0  # frames no later window reads
            if drop > 0:
                energy, e0 = energy[drop:], e0 + drop

    for block in blocks:
        held = np.concatenate([held, block]) if held.shape[0] else block
        n += block.shape[0]
        frames = n // hop
        known = e0 + energy.shape[0]
        if frames > known:
            new = frame_energy(held[known * hop - start : frames * hop - start], hop)
            energy = np.concatenate([energy, new])
        yield from cuts(final=False)
    yield from cuts(final=True)
    yield start, held


def frame_energy(x: np.ndarray, hop: int, block_frames: int = 1 << 11) -> np.ndarray:
    """Mean square (float64) of each whole ``hop``-sample frame of ``x``, made ``block_frames``
    frames at a time: the float64 copy of the samples is one block's (2.6 MB at 10 ms frames of 16
    kHz audio), not the recording's (460 MB an hour), and each frame's value is the same."""
    frames = x.shape[0] // hop
    energy = np.empty(frames, np.float64)
    for lo in range(0, frames, block_frames):
        hi = min(lo + block_frames, frames)
        block = x[lo * hop : hi * hop].astype(np.float64).reshape(hi - lo, hop)
        energy[lo:hi] = np.square(block, out=block).mean(axis=1)
    return energy


def _shifted(seconds: float | None, offset: float) -> float | None:
    return None if seconds is None else round(seconds + offset, 3)


def join_results(parts: list[DecodeResult], offsets: list[float], frame_shift: float) -> DecodeResult:
    """One result from the results of consecutive segments starting at ``offsets`` seconds."""
    words, tokens, frames, durations = [], [], [], []
    has_durations = all(p.token_durations is not None for p in parts)
    for part, offset in zip(parts, offsets, strict=True):
        shift = int(round(offset / frame_shift))
        words += [
            Word(w.word, _shifted(w.start, offset), _shifted(w.end, offset), w.confidence) for w in part.words
        ]
        tokens += part.tokens
        frames += [f + shift for f in part.token_frames]
        if has_durations:
            durations += part.token_durations or []

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else float(sum(values))

    return DecodeResult(
        words=words,
        tokens=tokens,
        token_frames=frames,
        score=float(sum(p.score for p in parts)),
        acoustic_score=total([p.acoustic_score for p in parts]),
        lm_score=total([p.lm_score for p in parts]),
        token_durations=durations if has_durations else None,
    )


def join_lattices(parts: list[DecodeResult], offsets: list[float], frame_shift: float) -> Any:
    """One word lattice from the segments' lattices (`lattice.concatenate`: each segment's final
    states lead by an epsilon arc to the next one's start; state times shifted by each segment's
    offset in frames, as `join_results` shifts token frames). None if a segment has no lattice or
    none of its paths ends."""
    from asrdecode.decoders.wfst.lattice import CompactLattice, concatenate

    lattices = [p.lattice for p in parts]
    if not all(isinstance(lat, CompactLattice) for lat in lattices):
        return None
    return concatenate(lattices, [int(round(off / frame_shift)) for off in offsets])
