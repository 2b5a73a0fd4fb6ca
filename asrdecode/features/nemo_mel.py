"""NeMo-compatible log-mel front end (``AudioToMelSpectrogramPreprocessor``) on plain torch.

Pipeline per batch (``waveforms [B, S]``, ``lengths [B]``):
dither (training only) -> pre-emphasis with samples past the length zeroed -> centred STFT with a
symmetric window -> power spectrum -> mel filterbank (these four piece by piece over time,
`STFT_PIECE_FRAMES`) -> log(x + guard) -> normalisation over the valid frames -> padding frames set
to ``pad_value`` -> optional padding of T to a multiple of ``pad_to``.

The buffers ``featurizer.window`` and ``featurizer.fb`` use NeMo's names, so a NeMo state_dict
(``preprocessor.featurizer.window``, ``preprocessor.featurizer.fb``) loads into
``NemoMelPreprocessor`` unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import torchaudio
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.typed_config import dataclass_from_dict

__all__ = [
    "NemoMelConfig",
    "FilterbankFeatures",
    "NemoMelPreprocessor",
    "nemo_mel_filterbank",
    "frames_alone",
    "normalize_features",
]

NORMALIZE_EPS = 1e-5
#: Frames of the power spectrum made at a time (41 s at a 10 ms hop): an hour-long input's STFT
#: temporaries (1.8 GB at once) are a piece's; the frames are those of one whole transform.
STFT_PIECE_FRAMES = 4096

_WINDOWS = {
    "hann": torch.hann_window,
    "hamming": torch.hamming_window,
    "blackman": torch.blackman_window,
    "bartlett": torch.bartlett_window,
}

# Config keys of NeMo's AudioToMelSpectrogramPreprocessor that are accepted but have no effect here
# (they only matter for training-time augmentation, implementation choices or other devices).
_IGNORED_KEYS = {"_target_", "use_torchaudio", "stft_conv", "rng", "use_grads", "nb_max_freq"}


@dataclass
class NemoMelConfig:
    """Settings of NeMo's ``AudioToMelSpectrogramPreprocessor`` (same names and defaults)."""

    sample_rate: int = 16000
    window_size: float | None = 0.02
    window_stride: float | None = 0.01
    n_window_size: int | None = None
    n_window_stride: int | None = None
    window: str = "hann"
    normalize: str | None = "per_feature"
    n_fft: int | None = None
    preemph: float | None = 0.97
    features: int = 64
    lowfreq: float = 0.0
    highfreq: float | None = None
    log: bool = True
    log_zero_guard_type: str = "add"
    log_zero_guard_value: float | str = 2**-24
    dither: float = 1e-5
    pad_to: int | str = 16
    frame_splicing: int = 1
    exact_pad: bool = False
    stft_exact_pad: bool = False
    pad_value: float = 0.0
    mag_power: float = 2.0
    mel_norm: str | None = "slaney"
    nb_augmentation_prob: float = 0.0

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> NemoMelConfig:
        """Build from a NeMo ``preprocessor`` config section; unknown keys raise ModelError."""
        return dataclass_from_dict(cls, cfg, "preprocessor.", ignore=_IGNORED_KEYS, error=ModelError)

    @property
    def win_length(self) -> int:
        if self.n_window_size:
            return int(self.n_window_size)
        return int(round(float(self.window_size) * self.sample_rate))

    @property
    def hop_length(self) -> int:
        if self.n_window_stride:
            return int(self.n_window_stride)
        return int(round(float(self.window_stride) * self.sample_rate))

    @property
    def fft_size(self) -> int:
        return int(self.n_fft) if self.n_fft else 2 ** math.ceil(math.log2(self.win_length))

    @property
    def normalize_type(self) -> str:
        """'per_feature', 'all_features' or 'none'."""
        if self.normalize in (None, False, "", "none", "None", "NA", "na"):
            return "none"
        return str(self.normalize)

    def validate(self) -> None:
        """Raise ModelError for settings this implementation does not support."""
        if self.normalize_type not in ("per_feature", "all_features", "none"):
            raise ModelError(f"unsupported preprocessor.normalize={self.normalize!r}")
        if self.window not in _WINDOWS and self.window not in ("none", "ones", None):
            raise ModelError(f"unsupported preprocessor.window={self.window!r}")
        if int(self.frame_splicing) != 1:
            raise ModelError(f"unsupported preprocessor.frame_splicing={self.frame_splicing!r}")
        if self.log_zero_guard_type not in ("add", "clamp"):
            raise ModelError(f"unsupported preprocessor.log_zero_guard_type={self.log_zero_guard_type!r}")
        if self.mel_norm not in ("slaney", None):
            raise ModelError(f"unsupported preprocessor.mel_norm={self.mel_norm!r}")
        if not isinstance(self.pad_to, int) or self.pad_to < 0:
            raise ModelError(f"unsupported preprocessor.pad_to={self.pad_to!r}")
        if self.exact_pad or self.stft_exact_pad:
            raise ModelError("unsupported preprocessor.exact_pad=True")
        if self.fft_size < self.win_length:
            raise ModelError(
                f"preprocessor.n_fft={self.fft_size} is smaller than the window ({self.win_length})"
            )


def nemo_mel_filterbank(
    sample_rate: int,
    n_fft: int,
    n_mels: int,
    fmin: float = 0.0,
    fmax: float | None = None,
    norm: str | None = "slaney",
) -> torch.Tensor:
    """librosa.filters.mel(htk=False) equivalent as a [1, n_mels, n_fft // 2 + 1] float32 tensor."""
    fmax = float(sample_rate) / 2 if fmax is None else float(fmax)
    bank = torchaudio.functional.melscale_fbanks(
        n_fft // 2 + 1, float(fmin), fmax, int(n_mels), int(sample_rate), norm=norm, mel_scale="slaney"
    )
    return bank.T.contiguous().unsqueeze(0).to(torch.float32)


def _valid_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """[B, T] bool, True on frames < lengths[b]."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def frames_alone(lengths: Sequence[int], pad_to: int) -> list[int]:
    """Each utterance's feature frames when it is processed alone: the centred STFT's ``length + 1``
    frames, padded up to a multiple of ``pad_to``. Sums over an utterance's frames run over this
    extent (zeros past the length included), so that a batch rounds as NeMo does each utterance alone."""
    frames = [int(n) + 1 for n in lengths]
    return [-(-n // pad_to) * pad_to for n in frames] if pad_to > 0 else frames


def normalize_features(
    x: torch.Tensor, lengths: torch.Tensor, kind: str, frames: Sequence[int] | None = None
) -> torch.Tensor:
    """NeMo ``normalize_batch``: statistics over valid frames only, unbiased std, ``std += 1e-5``.

    per_feature: one mean/std per (utterance, feature); all_features: one per utterance. Each
    utterance's sums run over its first ``frames[b]`` frames (default: all; `frames_alone` for a
    batch), the operations in NeMo's order, so a batched utterance gets its lone features bit for bit.
    """
    if kind == "none":
        return x
    if kind not in ("per_feature", "all_features"):
        raise ValueError(f"unknown normalisation {kind!r}")
    out = torch.empty_like(x)
    dims = 2 if kind == "per_feature" else (1, 2)
    for b in range(x.shape[0]):
        xb = x[b : b + 1, :, : (x.shape[-1] if frames is None else min(int(frames[b]), x.shape[-1]))]
        valid = _valid_mask(lengths[b : b + 1], xb.shape[-1]).unsqueeze(1)  # [1, 1, T]
        count = lengths[b : b + 1].to(x.dtype) * (1 if kind == "per_feature" else x.shape[1])
        if kind == "per_feature":
            count = count.unsqueeze(1)
        mean = torch.where(valid, xb, 0.0).sum(dim=dims) / count
        mean = mean.view(1, -1, 1) if kind == "per_feature" else mean.view(1, 1, 1)
        centred = torch.where(valid, xb - mean, 0.0)
        std = torch.sqrt(centred.pow(2).sum(dim=dims) / (count - 1.0))
        std = std.masked_fill(std.isnan(), 0.0) + NORMALIZE_EPS
        std = std.view(1, -1, 1) if kind == "per_feature" else std.view(1, 1, 1)
        out[b : b + 1] = (x[b : b + 1] - mean) / std
    return out


class FilterbankFeatures(nn.Module):
    """The computation; holds the ``window`` and ``fb`` buffers (NeMo's ``featurizer``)."""

    def __init__(self, cfg: NemoMelConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.win_length = cfg.win_length
        self.hop_length = cfg.hop_length
        self.n_fft = cfg.fft_size
        self.nfilt = int(cfg.features)
        self.preemph = cfg.preemph
        self.dither = float(cfg.dither)
        self.normalize = cfg.normalize_type
        self.log = bool(cfg.log)
        self.mag_power = float(cfg.mag_power)
        self.pad_to = int(cfg.pad_to)
        self.pad_value = float(cfg.pad_value)
        if cfg.window in _WINDOWS:
            window = _WINDOWS[cfg.window](self.win_length, periodic=False)
        else:
            window = torch.ones(self.win_length)
        self.register_buffer("window", window.to(torch.float32))
        fb = nemo_mel_filterbank(
            cfg.sample_rate, self.n_fft, self.nfilt, cfg.lowfreq, cfg.highfreq, cfg.mel_norm
        )
        self.register_buffer("fb", fb)

    def _log_guard(self, x: torch.Tensor) -> float:
        value = self.cfg.log_zero_guard_value
        if value == "tiny":
            return torch.finfo(x.dtype).tiny
        if value == "eps":
            return torch.finfo(x.dtype).eps
        return float(value)

    def get_seq_len(self, lengths: torch.Tensor) -> torch.Tensor:
        """Valid output frames per utterance: ``(len + 2 * (n_fft // 2) - n_fft) // hop`` (= len // hop)."""
        pad = self.n_fft // 2 * 2
        return torch.div(lengths.to(torch.int64) + pad - self.n_fft, self.hop_length, rounding_mode="floor")

    def _mel_power(self, x: torch.Tensor, lengths: torch.Tensor, first: int, last: int) -> torch.Tensor:
        """Mel power of frames [first, last) of the centred STFT: their samples (with the zeros of
        centring past the ends) pre-emphasised, zeroed past each length, transformed uncentred.
        Frame j reads padded samples [j * hop, j * hop + n_fft), so any split into pieces gives the
        frames of one transform of the whole input, with the temporaries of a piece."""
        half, hop, n_samples = self.n_fft // 2, self.hop_length, x.shape[1]
        lo, hi = first * hop - half, (last - 1) * hop + self.n_fft - half  # in input samples
        a, b = max(lo, 0), min(hi, n_samples)
        piece = x[:, max(a - 1, 0) : b]  # one sample before, for the pre-emphasis
        if self.preemph is not None:
            emph = piece[:, 1:] - float(self.preemph) * piece[:, :-1]
            piece = emph if a > 0 else torch.cat((piece[:, :1], emph), dim=1)
        elif a > 0:
            piece = piece[:, 1:]
        piece = piece.masked_fill(torch.arange(a, b, device=x.device) >= lengths.unsqueeze(1), 0.0)
        piece = F.pad(piece, (a - lo, hi - b))
        spec = torch.stft(
            piece,
            n_fft=self.n_fft,
            hop_length=hop,
            win_length=self.win_length,
            window=self.window.to(x.dtype),
            center=False,
            return_complex=True,
        )
        # |X| then its power, in NeMo's operations (the same rounding); a guard only under autograd
        power = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + (1e-5 if spec.requires_grad else 0.0))
        if self.mag_power != 1.0:
            power = power.pow(self.mag_power)
        return torch.matmul(self.fb.to(power.dtype), power)  # [1, F, K] @ [B, K, T] -> [B, F, T]

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, normalize: str | None = None, pad_to: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] float waveforms + [B] sample counts -> ([B, nfilt, T] features, [B] int64 frame counts).
        ``normalize`` / ``pad_to`` override the configured ones (buffered inference: none, 0)."""
        if x.dim() != 2:
            raise ValueError(f"expected waveforms [B, S], got shape {tuple(x.shape)}")
        lengths = lengths.to(device=x.device, dtype=torch.int64)
        seq_len = self.get_seq_len(lengths)
        x = x.to(torch.float32)
        if self.training and self.dither > 0:
            x = x + self.dither * torch.randn_like(x)
        feats = x.new_empty(x.shape[0], self.nfilt, x.shape[1] // self.hop_length + 1)
        for first in range(0, feats.shape[-1], STFT_PIECE_FRAMES):
            last = min(first + STFT_PIECE_FRAMES, feats.shape[-1])
            feats[:, :, first:last] = self._mel_power(x, lengths, first, last)
        if self.log:
            guard = self._log_guard(feats)
            if self.cfg.log_zero_guard_type == "add":
                feats = torch.log(feats + guard)
            else:
                feats = torch.log(torch.clamp(feats, min=guard))
        pad_to = self.pad_to if pad_to is None else pad_to
        frames = frames_alone(seq_len.tolist(), 0)
        feats = normalize_features(feats, seq_len, self.normalize if normalize is None else normalize, frames)
        feats = feats.masked_fill(~_valid_mask(seq_len, feats.shape[-1]).unsqueeze(1), self.pad_value)
        if pad_to > 0:
            rest = feats.shape[-1] % pad_to
            if rest:
                feats = F.pad(feats, (0, pad_to - rest), value=self.pad_value)
        return feats, seq_len


class NemoMelPreprocessor(nn.Module):
    """NeMo ``AudioToMelSpectrogramPreprocessor`` equivalent: ``preprocessor.featurizer.{window,fb}``."""

    def __init__(self, cfg: NemoMelConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or NemoMelConfig()
        self.featurizer = FilterbankFeatures(self.cfg)
        self.sample_rate = int(self.cfg.sample_rate)
        self.hop_length: int = self.featurizer.hop_length
        self.num_features: int = self.featurizer.nfilt

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> NemoMelPreprocessor:
        """From a NeMo ``preprocessor`` config section (``_target_`` is ignored)."""
        return cls(NemoMelConfig.from_dict(cfg))

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] waveforms + [B] lengths -> ([B, F, T] log-mel features, [B] frame counts)."""
        return self.featurizer(waveforms, lengths)
