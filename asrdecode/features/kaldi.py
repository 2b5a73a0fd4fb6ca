"""Kaldi-compatible fbank and MFCC front ends (torchaudio.compliance.kaldi), batched.

Kaldi reads 16-bit audio as raw sample values, so float waveforms in [-1, 1] are multiplied by
``input_scale`` (32768 by default) before feature extraction; set it to 1.0 for audio already on that
scale. Utterances are processed one at a time (torchaudio's implementation is per-utterance) and padded
to ``[B, F, T]`` with zeros; ``lengths`` holds the valid frames of each. An utterance shorter than one
window gives 0 frames.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torchaudio.compliance.kaldi as kaldi
from torch import nn

from asrdecode.typed_config import dataclass_from_dict

__all__ = ["KaldiFbankConfig", "KaldiMfccConfig", "KaldiFbank", "KaldiMfcc", "kaldi_num_frames"]


@dataclass
class _KaldiFrameConfig:
    """Framing/windowing options shared by fbank and MFCC (Kaldi names, milliseconds for times)."""

    sample_frequency: float = 16000.0
    frame_length: float = 25.0
    frame_shift: float = 10.0
    dither: float = 0.0
    preemphasis_coefficient: float = 0.97
    remove_dc_offset: bool = True
    window_type: str = "povey"
    blackman_coeff: float = 0.42
    round_to_power_of_two: bool = True
    snip_edges: bool = True
    num_mel_bins: int = 23
    low_freq: float = 20.0
    high_freq: float = 0.0
    use_energy: bool = False
    energy_floor: float = 1.0
    raw_energy: bool = True
    htk_compat: bool = False
    subtract_mean: bool = False
    vtln_warp: float = 1.0
    vtln_low: float = 100.0
    vtln_high: float = -500.0
    input_scale: float = 32768.0

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]):
        """Build from a config mapping; unknown keys raise ConfigError."""
        return dataclass_from_dict(cls, cfg, "features.")

    @property
    def window_size(self) -> int:
        return int(self.sample_frequency * self.frame_length * 0.001)

    @property
    def window_shift(self) -> int:
        return int(self.sample_frequency * self.frame_shift * 0.001)

    def kaldi_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for torchaudio.compliance.kaldi."""
        kwargs = asdict(self)
        kwargs.pop("input_scale")
        return kwargs


@dataclass
class KaldiFbankConfig(_KaldiFrameConfig):
    """Options of Kaldi ``compute-fbank-feats`` (torchaudio.compliance.kaldi.fbank)."""

    use_log_fbank: bool = True
    use_power: bool = True

    @property
    def num_features(self) -> int:
        return self.num_mel_bins + (1 if self.use_energy else 0)


@dataclass
class KaldiMfccConfig(_KaldiFrameConfig):
    """Options of Kaldi ``compute-mfcc-feats`` (torchaudio.compliance.kaldi.mfcc)."""

    num_ceps: int = 13
    cepstral_lifter: float = 22.0

    @property
    def num_features(self) -> int:
        return self.num_ceps


def kaldi_num_frames(num_samples: int, window_size: int, window_shift: int, snip_edges: bool) -> int:
    """Frames Kaldi produces for ``num_samples`` (0 when shorter than one window)."""
    if num_samples < window_size:
        return 0
    if snip_edges:
        return 1 + (num_samples - window_size) // window_shift
    return (num_samples + window_shift // 2) // window_shift


class _KaldiBatch(nn.Module):
    """Per-utterance torchaudio Kaldi features, padded into a batch."""

    def __init__(self, cfg: _KaldiFrameConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.num_features: int = cfg.num_features
        self.hop_length: int = cfg.window_shift
        self.sample_rate = int(cfg.sample_frequency)

    def _one(self, wave: torch.Tensor) -> torch.Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] float waveforms + [B] sample counts -> ([B, F, T] features, [B] int64 frame counts)."""
        if waveforms.dim() != 2:
            raise ValueError(f"expected waveforms [B, S], got shape {tuple(waveforms.shape)}")
        feats: list[torch.Tensor] = []
        for b in range(waveforms.shape[0]):
            n = int(lengths[b])
            wave = waveforms[b, :n].to(torch.float32) * self.cfg.input_scale
            if n < self.cfg.window_size:
                feats.append(waveforms.new_zeros(0, self.num_features, dtype=torch.float32))
            else:
                feats.append(self._one(wave.unsqueeze(0)))
        out_len = torch.tensor([f.shape[0] for f in feats], dtype=torch.int64, device=waveforms.device)
        t_max = int(out_len.max()) if len(feats) else 0
        out = waveforms.new_zeros(len(feats), self.num_features, t_max, dtype=torch.float32)
        for b, f in enumerate(feats):
            out[b, :, : f.shape[0]] = f.T
        return out, out_len


class KaldiFbank(_KaldiBatch):
    """Batched Kaldi log-mel filterbank features: ``[B, num_mel_bins (+1 energy), T]``."""

    def __init__(self, cfg: KaldiFbankConfig | None = None) -> None:
        super().__init__(cfg or KaldiFbankConfig())

    def _one(self, wave: torch.Tensor) -> torch.Tensor:
        return kaldi.fbank(wave, **self.cfg.kaldi_kwargs())


class KaldiMfcc(_KaldiBatch):
    """Batched Kaldi MFCC features: ``[B, num_ceps, T]``."""

    def __init__(self, cfg: KaldiMfccConfig | None = None) -> None:
        super().__init__(cfg or KaldiMfccConfig())

    def _one(self, wave: torch.Tensor) -> torch.Tensor:
        return kaldi.mfcc(wave, **self.cfg.kaldi_kwargs())
