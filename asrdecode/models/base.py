"""What every acoustic model hands to a decoder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


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
    """

    log_probs: torch.Tensor | None
    lengths: torch.Tensor
    frame_shift: float
    blank_id: int
    units: list[str]
    encoder_out: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)


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
