"""What every acoustic model hands to a decoder."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass
class DeferredScores:
    """Log-probs not made yet: made one utterance at a time, by whoever needs them.

    inputs: the model's input frames of each utterance (e.g. [T_b, D] features), frames first.
    columns: V, the columns of the log-probs.
    score: ``score(inputs[b], out)`` writes utterance b's [T_b, V] float32 log-probs into ``out``;
        callable from any thread.
    score_wide: the same on all of the model's own threads (None: the model has none), for an
        utterance scored while nothing else runs: one whose search is the batch's critical path.
    chunk: frames that ``score`` can take at a time with the arithmetic of a whole utterance
        (parts starting at multiples of it give the same scores bit for bit; 0: whole utterances
        only), so that a search can have an utterance scored part by part as it goes.

    A decoder that searches the utterances of a batch on worker threads scores each one there,
    right before its search: scoring and searching overlap across utterances instead of one
    waiting for the other at every batch, no padded [B, T, V] tensor is made (a batch of telephone
    prompts padded to 240 s of 5,126 senones is 490 MB), and each worker's memory is one
    utterance's scores, reused.
    """

    inputs: list[torch.Tensor]
    columns: int
    score: Callable[[torch.Tensor, torch.Tensor], None]
    score_wide: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    chunk: int = 0

    def materialize(self) -> torch.Tensor:
        """The [B, T, V] log-probs (padding frames 0), as a model's ``forward_features`` gives them."""
        t = max((x.shape[0] for x in self.inputs), default=0)
        device = self.inputs[0].device if self.inputs else torch.device("cpu")
        out = torch.zeros(len(self.inputs), t, self.columns, dtype=torch.float32, device=device)
        for b, x in enumerate(self.inputs):
            self.score(x, out[b, : x.shape[0]])
        return out


@dataclass
class ModelOutput:
    """A batch of model outputs, the single input type of every decoder.

    log_probs: [B, T, V] float32 frame-level log-probabilities (CTC: V = units + blank;
        HMM: senone log-likelihoods). Frames >= lengths[b] are padding.
    lengths: [B] int64 valid frames per utterance.
    frame_shift: seconds per output frame (e.g. 0.08 for 8x subsampling of 10 ms frames).
    blank_id: index of the CTC blank column (NeMo: the last one), or -1 if none.
    units: the output vocabulary without blank, index i = column i.
    encoder_out: [B, T, D] encoder states (transducers) or None.
    deferred: the log-probs not made yet (`DeferredScores`; log_probs is then None): given only to
        a decoder that takes them (``takes_deferred_scores``).
    """

    log_probs: torch.Tensor | None
    lengths: torch.Tensor
    frame_shift: float
    blank_id: int
    units: list[str]
    encoder_out: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)
    deferred: DeferredScores | None = None

    @property
    def columns(self) -> int:
        """V, the log-probs' columns (made or deferred); 0 without either."""
        if self.log_probs is not None:
            return int(self.log_probs.shape[-1])
        return self.deferred.columns if self.deferred is not None else 0

    @property
    def has_scores(self) -> bool:
        """Log-probs made or deferred."""
        return self.log_probs is not None or self.deferred is not None


class AcousticModel(Protocol):
    """Waveforms -> features -> ModelOutput; the two stages are timed separately."""

    sample_rate: int
    units: list[str]
    blank_id: int
    frame_shift: float
    default_decoder: str  # decoder.type that `auto` resolves to

    def to(self, device: torch.device) -> AcousticModel: ...

    def features(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] float32 padded waveforms at `sample_rate` -> ([B, F, T] features, [B] lengths)."""
        ...

    def forward_features(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput: ...

    def tokens_to_words(self, tokens: list[int]) -> list[tuple[str, int, int]]:
        """Token ids -> [(word, first token index, last token index)] for timestamps."""
        ...

    def describe(self) -> dict: ...


class RecycledOutput:
    """Output tensors that reuse the memory of the previous one once nothing refers to it.

    ``empty(shape, dtype, device)`` returns an uninitialised tensor: the kept memory when no
    tensor, view or numpy array of it is alive any more (its storage's use count is back to the
    one this object holds), it is large enough and was made in the same inference mode (a tensor
    made in ``torch.inference_mode`` cannot be written outside it); else fresh memory, which is
    then kept (twice the size last kept when growing: untouched pages cost nothing).

    A run of batches then writes the same pages over and over instead of faulting hundreds of
    megabytes of fresh pages in per batch: a first write to a fresh page costs several times a
    write to a mapped one on CPU, and threads that fault pages in at once queue on the process's
    page-table lock. A caller that keeps an output keeps it intact: the next call sees it in use
    and allocates.
    """

    def __init__(self) -> None:
        self._kept: torch.Tensor | None = None

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        numel = math.prod(shape)
        kept = self._kept
        same_kind = (
            kept is not None
            and kept.dtype == dtype
            and kept.device == device
            and kept.is_inference() == torch.is_inference_mode_enabled()  # else not writable here
        )
        if kept is None or not same_kind or kept.numel() < numel or _in_use(kept):
            grown = 2 * kept.numel() if same_kind and kept is not None and kept.numel() < numel else 0
            kept = torch.empty(max(numel, grown), dtype=dtype, device=device)
            self._kept = kept
        return kept[:numel].view(shape)


def _in_use(tensor: torch.Tensor) -> bool:
    """Whether anything but ``tensor`` itself refers to its memory (a view, another tensor, a numpy
    array made from it): its storage's use count above that of a tensor nothing else refers to
    (`_unshared_use_count`). Without torch's storage use count (a private function) every tensor
    counts as in use, so that memory is never handed out twice."""
    unshared = _unshared_use_count()
    return unshared is None or torch._C._storage_Use_Count(tensor.untyped_storage()._cdata) != unshared


@functools.cache
def _unshared_use_count() -> int | None:
    """The storage use count, read as `_in_use` reads it, of a tensor nothing else refers to: 1 with
    torch 2.9, 2 with 2.11 (whose storage's Python object, made by the reading, holds a reference
    of its own); None without the private function."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None:
        return None
    alone = torch.empty(1)
    return int(use_count(alone.untyped_storage()._cdata))
