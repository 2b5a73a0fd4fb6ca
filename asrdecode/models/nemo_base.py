"""What NeMo CTC and transducer models share: preprocessor + FastConformer encoder + tokenizer."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from asrdecode.models.base import ModelOutput
from asrdecode.models.tokenizer import Tokenizer


def tokenizer_files_for(
    cfg: dict[str, Any], tokenizer: Tokenizer, files: dict[str, bytes] | None
) -> dict[str, bytes]:
    """Tokenizer members to save with the model: a sentencepiece model referenced as `nemo:<name>`."""
    out = dict(files or {})
    model_path = str((cfg.get("tokenizer") or {}).get("model_path", ""))
    if tokenizer.model_bytes is not None and model_path.startswith("nemo:"):
        out.setdefault(model_path.removeprefix("nemo:"), tokenizer.model_bytes)
    return out


class NemoModelBase(nn.Module):
    """AcousticModel surface common to NeMo models: rates, units, blank, features, word grouping.

    Subclasses set `preprocessor`, `encoder`, `tokenizer`, `config`, `source` and implement
    `forward_features`.
    """

    preprocessor: nn.Module
    encoder: nn.Module
    tokenizer: Tokenizer
    source: str | None
    head: str  # the output this model decodes: "ctc" or "transducer"
    heads: list[str]  # every output the checkpoint has (a hybrid: transducer and ctc), set by the loader

    @property
    def sample_rate(self) -> int:
        return self.preprocessor.sample_rate

    @property
    def units(self) -> list[str]:
        return self.tokenizer.units

    @property
    def blank_id(self) -> int:
        """NeMo puts blank after the vocabulary (the last output)."""
        return len(self.tokenizer.units)

    @property
    def subsampling_factor(self) -> int:
        return self.encoder.subsampling_factor

    @property
    def frame_shift(self) -> float:
        """Seconds per encoder frame: hop seconds x subsampling factor."""
        return self.preprocessor.hop_length / self.sample_rate * self.subsampling_factor

    def features(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] padded waveforms at ``sample_rate`` -> ([B, F, T] log-mel features, [B] frame counts)."""
        return self.preprocessor(waveforms, lengths)

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> ModelOutput:
        """Waveforms -> ModelOutput (differentiable in training mode)."""
        feats, feat_len = self.features(waveforms, lengths)
        return self.forward_features(feats, feat_len)

    def tokens_to_words(self, tokens: list[int]) -> list[tuple[str, int, int]]:
        """Unit ids -> [(word, first token index, last token index)]."""
        return self.tokenizer.words_of(tokens)

    def _describe_common(self) -> dict:
        """Front end, encoder and vocabulary facts for ``asrdecode info``."""
        fe = self.preprocessor.featurizer
        return {
            "file": self.source,
            "parameters": sum(p.numel() for p in self.parameters()),
            "sample_rate": self.sample_rate,
            "features": {
                "type": "nemo-mel",
                "n_mels": fe.nfilt,
                "n_fft": fe.n_fft,
                "win_length": fe.win_length,
                "hop_length": fe.hop_length,
                "normalize": fe.normalize,
            },
            "encoder": self.encoder.describe(),
            "head": self.head
            + (
                f" (this hybrid also has: {', '.join(h for h in self.heads if h != self.head)}; model.head)"
                if len(getattr(self, "heads", [])) > 1
                else ""
            ),
            "tokenizer": self.tokenizer.describe(),
            "num_outputs": self.blank_id + 1,
            "blank_id": self.blank_id,
            "frame_shift": self.frame_shift,
        }
