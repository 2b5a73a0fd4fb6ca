"""Group utterances into batches by padded seconds, and pad a batch of waveforms."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from asrdecode.io.manifests import Utterance


def plan_batches(
    utts: Sequence[Utterance], max_seconds: float, max_utterances: int | None = None
) -> list[list[Utterance]]:
    """Split utterances into batches, longest first (like NeMo's presort).

    Each batch's padded size, len(batch) x its longest duration, stays <= max_seconds, and
    len(batch) <= max_utterances when given; an utterance longer than max_seconds gets a batch of
    its own. Utterances of unknown duration (usually unreadable files) come last, in batches of
    max_utterances (or one by one). Ties keep input order. Every utterance appears exactly once.
    """
    if not max_seconds > 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
    if max_utterances is not None and max_utterances < 1:
        raise ValueError(f"max_utterances must be >= 1, got {max_utterances}")
    cap = max_utterances if max_utterances is not None else len(utts) or 1
    known = [(i, u) for i, u in enumerate(utts) if u.duration is not None]
    unknown = [u for u in utts if u.duration is None]
    known.sort(key=lambda iu: (-iu[1].duration, iu[0]))

    batches: list[list[Utterance]] = []
    current: list[Utterance] = []
    longest = 0.0
    for _, u in known:
        if current and (len(current) + 1 > cap or (len(current) + 1) * longest > max_seconds):
            batches.append(current)
            current = []
        if not current:
            longest = float(u.duration)
        current.append(u)
    if current:
        batches.append(current)
    step = max_utterances or 1
    batches.extend(unknown[i : i + step] for i in range(0, len(unknown), step))
    return batches


def pad_batch(
    waves: Sequence[torch.Tensor | np.ndarray], device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """1-D waveforms -> (zero-padded [B, S] float32, lengths [B] int64), both on `device`
    (default: the first wave's device, or CPU)."""
    tensors = [torch.as_tensor(w, dtype=torch.float32) for w in waves]
    for t in tensors:
        if t.dim() != 1:
            raise ValueError(f"expected 1-D waveforms, got shape {tuple(t.shape)}")
    if device is None:
        dev = tensors[0].device if tensors else torch.device("cpu")
    else:
        dev = torch.device(device)
    lengths = torch.tensor([t.shape[0] for t in tensors], dtype=torch.int64)
    longest = int(lengths.max()) if tensors else 0
    padded = torch.zeros(len(tensors), longest, dtype=torch.float32, device=dev)
    for b, t in enumerate(tensors):
        padded[b, : t.shape[0]] = t.to(dev, non_blocking=True)
    return padded, lengths.to(dev)
