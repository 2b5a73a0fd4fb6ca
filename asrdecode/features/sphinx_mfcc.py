"""CMU Sphinx (pocketsphinx 5.x) MFCC front end and dynamic features, batched in torch.

Per utterance (``waveforms [B, S]``, ``lengths [B]``), following pocketsphinx's algorithm:

1. Samples are scaled to the 16-bit range (``input_scale``), pre-emphasised over the whole
   utterance with a zero sample before the first one (``y[n] = x[n] - alpha * x[n-1]``).
2. Frames of ``round(wlen * rate)`` samples every ``round(rate / frate)`` samples; after the last
   full frame one more frame starts at the next frame position and holds whatever samples remain,
   zero-padded (pocketsphinx's end-of-utterance "overflow" frame). ``L >= size`` samples give
   ``2 + (L - size) // shift`` frames, ``0 < L < size`` give 1.
3. Symmetric Hamming window ``0.54 - 0.46 cos(2 pi n / (N - 1))`` (optional per-frame DC removal),
   zero-padded ``nfft``-point power spectrum.
4. Triangular mel filters built the sphinx way: ``mel(f) = 2595 log10(1 + f / 700)``, ``nfilt``
   filters equally spaced in mel between ``lowerf`` and ``upperf``, edge frequencies rounded to DFT
   bins, weights ``min(rising, falling) * 2 / (right - left)`` (unit area), in float32 like sphinx.
5. Optional spectral noise removal (``remove_noise``: smoothed power, lower-envelope noise and
   floor tracking, temporal masking, gains clamped to [1/20, 20] and smoothed over +-4 filters),
   state initialised from the utterance's first frame. The recursion over time runs as a numba
   loop on CPU tensors and as per-frame torch ops on other devices (equal gains, tested).
6. ``log(mel + 1e-4)``; cepstra by the ``legacy`` sphinx DCT (first bin weighted 1/2, scaled by
   1/nfilt), ``dct`` (orthogonal DCT-II) or ``htk``; sine liftering ``1 + L/2 sin(pi i / L)``.
7. ``1s_c_d_dd`` features: batch CMN (mean over the utterance's frames with c0 >= 0), then per frame
   ``[c[t], c[t+2] - c[t-2], (c[t+3] - c[t-1]) - (c[t+1] - c[t-3])]`` with the first/last frame
   replicated past the utterance edges.

Independent checks (tests/features/test_sphinx_mfcc.py): pocketsphinx's regression references for
``chan3.raw`` (cepstra and log spectra, 11,025 Hz, legacy DCT, noise removal) and ``goforward.mfc``
(the en-us model's parameters: 25 filters, DCT-II, lifter 22, noise removal).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numba
import numpy as np
import torch
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.numba_status import announce_first_compile, configure_cache
from asrdecode.typed_config import dataclass_from_dict

configure_cache()  # before any cached kernel is defined (numba_status)

__all__ = [
    "SphinxFeConfig",
    "SphinxMFCC",
    "sphinx_mel_filterbank",
    "sphinx_dct_matrix",
    "sphinx_num_frames",
    "batch_cmn",
    "deltas_1s_c_d_dd",
]

LOG_FLOOR = 1e-4
_TRANSFORMS = ("legacy", "dct", "htk")
_FEATS = ("1s_c_d_dd", "1s_c")
_CMN = ("none", "batch")

# Noise-removal constants (pocketsphinx fe_noise.c).
_SMOOTH_WINDOW = 4
_LAMBDA_POWER = 0.7
_LAMBDA_A = 0.995
_LAMBDA_B = 0.5
_LAMBDA_T = 0.85
_MU_T = 0.2
_MAX_GAIN = 20.0


@dataclass
class SphinxFeConfig:
    """Front-end options with pocketsphinx's names and defaults (``feat.params`` overrides them)."""

    samprate: int = 16000
    frate: int = 100
    wlen: float = 0.025625
    nfft: int = 0  # 0: smallest power of two >= the window
    alpha: float = 0.97
    nfilt: int = 40
    lowerf: float = 133.33334
    upperf: float = 6855.4976
    ncep: int = 13
    transform: str = "legacy"  # legacy | dct | htk
    lifter: int = 0
    unit_area: bool = True
    round_filters: bool = True
    doublebw: bool = False
    remove_dc: bool = False
    remove_noise: bool = False
    feat: str = "1s_c_d_dd"  # 1s_c_d_dd (39 dims) | 1s_c (cepstra only)
    cmn: str = "batch"  # batch | none
    input_scale: float = 32768.0  # float waveforms in [-1, 1] -> 16-bit sample values
    dtype: str = "float64"  # internal precision: float64 matches the references to 2.3e-5, float32 to 2.1e-4

    def __post_init__(self) -> None:
        if self.transform not in _TRANSFORMS:
            raise ModelError(f"sphinx front end: transform {self.transform!r} not in {_TRANSFORMS}")
        if self.feat not in _FEATS:
            raise ModelError(f"sphinx front end: feat {self.feat!r} not supported (supported: {_FEATS})")
        if self.cmn not in _CMN:
            raise ModelError(f"sphinx front end: cmn {self.cmn!r} not supported (supported: {_CMN})")
        if self.dtype not in ("float32", "float64"):
            raise ModelError(f"sphinx front end: dtype {self.dtype!r} must be float32 or float64")
        if self.samprate <= 0 or not 0 < self.frate <= self.samprate:
            raise ModelError(f"sphinx front end: bad samprate {self.samprate} / frate {self.frate}")
        if self.frame_size < self.frame_shift or self.frame_shift < 2:
            raise ModelError(
                f"sphinx front end: window {self.frame_size} samples shorter than shift {self.frame_shift}"
            )
        if self.fft_size < self.frame_size or self.fft_size & (self.fft_size - 1):
            raise ModelError(
                f"sphinx front end: nfft {self.fft_size} must be a power of 2 >= {self.frame_size}"
            )
        if not 0 <= self.lowerf < self.upperf <= self.samprate / 2 + 1.0:
            raise ModelError(f"sphinx front end: bad filter range {self.lowerf}-{self.upperf} Hz")
        if self.ncep < 1 or self.nfilt < max(2, self.ncep if self.transform != "legacy" else 1):
            raise ModelError(f"sphinx front end: bad ncep {self.ncep} / nfilt {self.nfilt}")

    @property
    def frame_shift(self) -> int:
        return int(self.samprate / self.frate + 0.5)

    @property
    def frame_size(self) -> int:
        return int(self.wlen * self.samprate + 0.5)

    @property
    def fft_size(self) -> int:
        if self.nfft > 0:
            return self.nfft
        n = 1
        while n < int(self.wlen * self.samprate):
            n <<= 1
        return n

    @property
    def feature_dim(self) -> int:
        return self.ncep * 3 if self.feat == "1s_c_d_dd" else self.ncep

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> SphinxFeConfig:
        """From a mapping (unknown keys raise ModelError)."""
        return dataclass_from_dict(cls, cfg, "features.", error=ModelError)

    @classmethod
    def from_feat_params(cls, params: dict[str, str], **overrides: Any) -> SphinxFeConfig:
        """From a parsed ``feat.params`` (``-name value``); decoder-only and unsupported keys are
        checked: ``agc`` must be none, ``varnorm`` no, ``dither`` no; ``svspec``/``model`` etc. are
        the acoustic model's business and ignored here."""
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in params.items():
            if key == "agc" and raw != "none":
                raise ModelError(f"feat.params: -agc {raw} is not supported (only none)")
            if key == "varnorm" and raw not in ("no", "false", "0"):
                raise ModelError(f"feat.params: -varnorm {raw} is not supported")
            if key == "dither" and raw not in ("no", "false", "0"):
                raise ModelError(f"feat.params: -dither {raw} is not supported")
            if key == "cmn" and raw == "live":
                raw = "batch"  # whole utterances are available: batch CMN
            if key not in known:
                continue
            typ = type(getattr(cls, key)) if hasattr(cls, key) else str
            try:
                if typ is bool:
                    values[key] = raw.lower() in ("yes", "true", "1")
                elif typ is int:
                    values[key] = int(raw)
                elif typ is float:
                    values[key] = float(raw)
                else:
                    values[key] = raw
            except ValueError:
                raise ModelError(f"feat.params: bad value for -{key}: {raw!r}") from None
        values.update(overrides)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _f32(x: float) -> np.float32:
    return np.float32(x)


def _mel(hz: np.float32) -> np.float32:
    return _f32(2595.0 * math.log10(1.0 + float(hz) / 700.0))


def _melinv(mel: np.float32) -> np.float32:
    return _f32(700.0 * (10.0 ** (float(mel) / 2595.0) - 1.0))


def sphinx_mel_filterbank(cfg: SphinxFeConfig) -> np.ndarray:
    """[nfilt, nfft/2 + 1] filter weights, constructed in float32 as sphinx does (bins past the
    right edge and the Nyquist bin are 0)."""
    nfft, nfilt = cfg.fft_size, cfg.nfilt
    melmin, melmax = _mel(_f32(cfg.lowerf)), _mel(_f32(cfg.upperf))
    melbw = _f32((melmax - melmin) / _f32(nfilt + 1))
    if cfg.doublebw:
        melmin, melmax = _f32(melmin - melbw), _f32(melmax + melbw)
        if _melinv(melmin) < 0 or _melinv(melmax) > cfg.samprate / 2:
            raise ModelError("sphinx front end: double-bandwidth filters exceed the frequency range")
    fftfreq = _f32(_f32(cfg.samprate) / _f32(nfft))
    weights = np.zeros((nfilt, nfft // 2 + 1), dtype=np.float64)
    for i in range(nfilt):
        edges = []
        for j in range(3):
            pos = (i + 2 * j) if cfg.doublebw else (i + j)
            f = _melinv(_f32(_f32(pos) * melbw + melmin))
            if cfg.round_filters:
                f = _f32(int(float(_f32(f / fftfreq)) + 0.5) * fftfreq)
            edges.append(f)
        left, centre, right = edges
        for j in range(nfft // 2 + 1):
            hz = _f32(_f32(j) * fftfreq)
            if hz < left:
                continue
            if hz > right or j == nfft // 2:
                break
            rise = _f32((hz - left) / (centre - left))
            fall = _f32((right - hz) / (right - centre))
            if cfg.unit_area:
                scale = _f32(_f32(2.0) / _f32(right - left))
                rise, fall = _f32(rise * scale), _f32(fall * scale)
            weights[i, j] = float(min(rise, fall))
    return weights


def sphinx_dct_matrix(cfg: SphinxFeConfig) -> np.ndarray:
    """[ncep, nfilt] log-spectrum -> cepstrum matrix (transform and liftering folded in)."""
    n, ncep = cfg.nfilt, cfg.ncep
    i = np.arange(ncep)[:, None]
    j = np.arange(n)[None, :]
    cos = np.cos(math.pi / n * i * (j + 0.5)).astype(np.float32).astype(np.float64)
    if cfg.transform == "legacy":
        mat = cos / n
        mat[:, 0] *= 0.5
        mat[0, :] = 1.0 / n
        mat[0, 0] = 0.5 / n
    else:
        mat = cos * math.sqrt(2.0 / n)
        mat[0, :] = math.sqrt(2.0 / n) if cfg.transform == "htk" else math.sqrt(1.0 / n)
    if cfg.lifter:
        lift = 1.0 + (cfg.lifter // 2) * np.sin(np.arange(ncep) * math.pi / cfg.lifter)
        mat = mat * lift.astype(np.float32).astype(np.float64)[:, None]
    return mat


def sphinx_num_frames(lengths: torch.Tensor, cfg: SphinxFeConfig) -> torch.Tensor:
    """Frames pocketsphinx makes from ``lengths`` samples (full frames + the final partial one)."""
    lengths = lengths.to(torch.int64)
    full = torch.div(lengths - cfg.frame_size, cfg.frame_shift, rounding_mode="floor") + 2
    return torch.where(lengths >= cfg.frame_size, full, (lengths > 0).to(torch.int64))


def batch_cmn(cep: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Subtract each utterance's cepstral mean ([B, T, D]); padding stays 0.

    As pocketsphinx's batch CMN, the mean is taken over the frames whose c0 is not negative
    (it skips "zero energy" frames: digital silence, dropouts); an utterance with no such frame
    uses all its frames (pocketsphinx would divide by zero there)."""
    valid = torch.arange(cep.shape[1], device=cep.device)[None, :] < lengths[:, None]
    counted = valid & (cep[..., 0] >= 0)
    counted = torch.where(counted.any(1, keepdim=True), counted, valid)
    weight = counted.to(cep.dtype)
    mean = (cep * weight[..., None]).sum(1) / weight.sum(1).clamp(min=1)[:, None]
    return (cep - mean[:, None, :]) * valid[..., None].to(cep.dtype)


def deltas_1s_c_d_dd(cep: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[B, T, C] -> [B, T, 3C]: cepstra, ``c[t+2] - c[t-2]``, ``(c[t+3] - c[t-1]) - (c[t+1] - c[t-3])``
    with frames past each utterance's edges replaced by its first/last frame; padding stays 0."""
    b, t, _ = cep.shape
    pos = torch.arange(t, device=cep.device)[None, :]
    last = (lengths.to(cep.device) - 1).clamp(min=0)[:, None]

    def shifted(k: int) -> torch.Tensor:
        idx = torch.minimum((pos + k).clamp(min=0), last).expand(b, t)
        return torch.gather(cep, 1, idx[..., None].expand_as(cep))

    c_m3, c_m2, c_m1, c_p1, c_p2, c_p3 = (shifted(k) for k in (-3, -2, -1, 1, 2, 3))
    out = torch.cat([cep, c_p2 - c_m2, (c_p3 - c_m1) - (c_p1 - c_m3)], dim=-1)
    mask = pos < lengths.to(cep.device)[:, None]
    return out * mask[..., None].to(out.dtype)


@numba.njit(inline="always")
def _lerp(start, end, weight):
    """torch.lerp's formula: ``start + w (end - start)`` for w < 0.5, else ``end - (end - start)(1 - w)``."""
    if weight < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1 - weight)


@numba.njit(nogil=True, cache=True, error_model="numpy")  # x / 0 = inf as in torch
def _noise_gains_kernel(mel: np.ndarray, consts: np.ndarray, gains: np.ndarray) -> None:
    """Noise-removal gains of :meth:`SphinxMFCC.noise_gains_torch` as scalar loops: per utterance
    one pass over its frames carrying per-filter state (smoothed power, noise and floor lower
    envelopes, masking peak). ``consts`` (:func:`_noise_constants`, in ``mel``'s dtype, so that
    float32 input computes in float32 as torch does)."""
    w_p, w_a, w_b, lam_t = consts[0], consts[1], consts[2], consts[3]
    mu_t, max_gain, min_gain, one = consts[4], consts[5], consts[6], consts[7]
    n_b, n_t, n_f = mel.shape
    power = np.empty(n_f, mel.dtype)
    noise = np.empty(n_f, mel.dtype)
    floor = np.empty(n_f, mel.dtype)
    peak = np.zeros(n_f, mel.dtype)
    for b in range(n_b):
        for f in range(n_f):
            power[f] = mel[b, 0, f]
            noise[f] = mel[b, 0, f] / max_gain
            floor[f] = mel[b, 0, f] / max_gain
            peak[f] = 0
        for t in range(n_t):
            for f in range(n_f):
                pw = _lerp(power[f], mel[b, t, f], w_p)
                nz = noise[f]
                nz = _lerp(nz, pw, w_a) if pw >= nz else _lerp(nz, pw, w_b)
                signal = max(pw - nz, one)
                fl = floor[f]
                fl = _lerp(fl, signal, w_a) if signal >= fl else _lerp(fl, signal, w_b)
                pk = peak[f] * lam_t
                masked = pk * mu_t if signal < lam_t * pk else signal
                peak[f] = max(pk, signal)
                gains[b, t, f] = min(max(max(masked, fl) / pw, min_gain), max_gain)
                power[f] = pw
                noise[f] = nz
                floor[f] = fl


def _noise_constants(dtype: np.dtype) -> np.ndarray:
    """The recursion's constants as torch's per-frame loop sees them (scalars cast to ``dtype``)."""
    values = [1 - _LAMBDA_POWER, 1 - _LAMBDA_A, 1 - _LAMBDA_B, _LAMBDA_T, _MU_T, _MAX_GAIN]
    return np.array([*values, 1.0 / _MAX_GAIN, 1.0], dtype=dtype)


def noise_gains_numba(mel: torch.Tensor) -> torch.Tensor:
    """[B, T, nfilt] CPU mel power -> unsmoothed noise-removal gains by :func:`_noise_gains_kernel`."""
    x = mel.detach().contiguous().numpy()
    gains = np.empty_like(x)
    announce_first_compile("sphinx front end", _noise_gains_kernel)
    _noise_gains_kernel(x, _noise_constants(x.dtype), gains)
    return torch.from_numpy(gains)


class SphinxMFCC(nn.Module):
    """pocketsphinx-compatible features: ``forward(waveforms, lengths) -> ([B, T, D], [B])``."""

    def __init__(self, cfg: SphinxFeConfig | None = None, frame_chunk: int = 256) -> None:
        super().__init__()
        self.cfg = cfg or SphinxFeConfig()
        self.frame_chunk = max(int(frame_chunk), 1)  # frames transformed at once (see mel_power)
        self.sample_rate: int = self.cfg.samprate
        self.feature_dim: int = self.cfg.feature_dim
        dtype = torch.float64 if self.cfg.dtype == "float64" else torch.float32
        size = self.cfg.frame_size
        half = torch.arange(size // 2, dtype=torch.float64)
        ham = 0.54 - 0.46 * torch.cos(2 * math.pi * half / (size - 1.0))
        window = torch.ones(size, dtype=torch.float64)
        window[: size // 2] = ham
        window[size - 1 - torch.arange(size // 2)] = ham
        self.register_buffer("window", window.to(dtype), persistent=False)
        self.register_buffer(
            "melfb", torch.from_numpy(sphinx_mel_filterbank(self.cfg)).to(dtype), persistent=False
        )
        self.register_buffer("dct", torch.from_numpy(sphinx_dct_matrix(self.cfg)).to(dtype), persistent=False)
        n = self.cfg.nfilt
        smooth = torch.zeros(n, n, dtype=torch.float64)
        for i in range(n):
            lo, hi = max(i - _SMOOTH_WINDOW, 0), min(i + _SMOOTH_WINDOW, n - 1)
            smooth[i, lo : hi + 1] = 1.0 / (hi - lo + 1)
        self.register_buffer("smooth", smooth.to(dtype), persistent=False)

    def num_frames(self, lengths: torch.Tensor) -> torch.Tensor:
        return sphinx_num_frames(lengths, self.cfg)

    def mel_power(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T, nfilt] mel-filtered power spectra (before noise removal; 0 past each utterance's
        frames) and frame counts [B].

        Only the utterances' own frames are computed (no padding frames), ``frame_chunk`` at a
        time so that the working set stays small: each frame is cut from the waveform with one
        sample before it, scaled, pre-emphasised (a zero before the first sample), zeroed past the
        utterance's length, windowed, transformed and mel-filtered."""
        cfg = self.cfg
        lengths = lengths.to(device=waveforms.device, dtype=torch.int64)
        n_frames = self.num_frames(lengths)
        t = int(n_frames.max().item()) if n_frames.numel() else 0
        dtype, device = self.window.dtype, waveforms.device
        mel = torch.zeros(len(n_frames), t, cfg.nfilt, dtype=dtype, device=device)
        # x[-1] = 0 before each utterance; frame i spans x[i*shift - 1 : i*shift + size].
        need = max(t - 1, 0) * cfg.frame_shift + cfg.frame_size
        padded = torch.nn.functional.pad(waveforms, (1, max(need - waveforms.shape[1], 0)))
        windows = padded.unfold(1, cfg.frame_size + 1, cfg.frame_shift)  # [B, >= T, size + 1] view
        utt, frame = (torch.arange(t, device=device)[None, :] < n_frames[:, None]).nonzero(as_tuple=True)
        offsets = torch.arange(cfg.frame_size, device=device)[None, :]
        for start in range(0, len(utt), self.frame_chunk):
            u, f = utt[start : start + self.frame_chunk], frame[start : start + self.frame_chunk]
            x = windows[u, f].to(dtype).mul_(cfg.input_scale)  # [P, size + 1]
            if cfg.alpha != 0.0:
                frames = x[:, 1:] - x[:, :-1] * cfg.alpha
            else:
                frames = x[:, 1:].contiguous()
            frames.masked_fill_(f[:, None] * cfg.frame_shift + offsets >= lengths[u, None], 0.0)
            if cfg.remove_dc:
                frames.sub_(frames.mean(-1, keepdim=True))
            spec = torch.fft.rfft(frames.mul_(self.window), n=cfg.fft_size, dim=-1)
            power = spec.real.square() + spec.imag.square()
            mel[u, f] = power @ self.melfb.T
        return mel, n_frames

    def remove_noise(self, mel: torch.Tensor) -> torch.Tensor:
        """pocketsphinx's spectral noise removal over time, state from each utterance's first frame:
        per-frame gains (a recursion over time, independent per utterance and filter) smoothed over
        +-4 filters. CPU tensors run the recursion as a compiled loop (:func:`_noise_gains_kernel`),
        other devices as torch ops per frame (:meth:`noise_gains_torch`); both give the same gains."""
        if mel.shape[1] == 0:
            return mel
        if mel.device.type == "cpu":
            gains = noise_gains_numba(mel)
        else:
            gains = self.noise_gains_torch(mel)
        return mel * (gains @ self.smooth.T)

    @staticmethod
    def noise_gains_torch(mel: torch.Tensor) -> torch.Tensor:
        """[B, T, nfilt] mel power -> [B, T, nfilt] unsmoothed noise-removal gains, one frame per
        step with batched torch ops (any device)."""
        first = mel[:, 0]
        power = first.clone()
        noise = first / _MAX_GAIN
        floor = first / _MAX_GAIN
        peak = torch.zeros_like(first)
        gains = torch.empty_like(mel)
        for t in range(mel.shape[1]):
            power = power.lerp(mel[:, t], 1 - _LAMBDA_POWER)
            # Lower envelopes: slow rise (lambda_a), fast fall (lambda_b).
            noise = torch.where(
                power >= noise, noise.lerp(power, 1 - _LAMBDA_A), noise.lerp(power, 1 - _LAMBDA_B)
            )
            signal = (power - noise).clamp_(min=1.0)
            floor = torch.where(
                signal >= floor, floor.lerp(signal, 1 - _LAMBDA_A), floor.lerp(signal, 1 - _LAMBDA_B)
            )
            # Temporal masking against a decaying peak, then the floor.
            peak = peak * _LAMBDA_T
            masked = torch.where(signal < _LAMBDA_T * peak, peak * _MU_T, signal)
            peak = torch.maximum(peak, signal)
            # gain = signal / power clamped to [1/20, 20] (power 0 gives 20, as in sphinx).
            gains[:, t] = torch.maximum(masked, floor).div_(power).clamp_(1.0 / _MAX_GAIN, _MAX_GAIN)
        return gains

    def log_spectrum(
        self, waveforms: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T, nfilt] ``log(mel + 1e-4)`` after optional noise removal (sphinx_fe ``-logspec``)."""
        mel, n_frames = self.mel_power(waveforms, lengths)
        if self.cfg.remove_noise:
            mel = self.remove_noise(mel)
        logspec = torch.log(mel + LOG_FLOOR)
        mask = torch.arange(logspec.shape[1], device=logspec.device)[None, :] < n_frames[:, None]
        return logspec * mask[..., None], n_frames

    def cepstra(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T, ncep] cepstra (what sphinx_fe writes to .mfc files), float32."""
        logspec, n_frames = self.log_spectrum(waveforms, lengths)
        return (logspec @ self.dct.T).to(torch.float32), n_frames

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] waveforms in [-1, 1] -> ([B, T, D] float32 features, [B] frame counts; padding 0).
        Each utterance is computed from its own samples alone, so that its features are the same
        bit for bit whatever else is in the batch and however long the padding (as pocketsphinx,
        one file at a time): batched, the transforms' row grouping and the CMN sums over the padded
        length move the last float digits."""
        lengths = lengths.to(device=waveforms.device, dtype=torch.int64)
        n_frames = self.num_frames(lengths)
        t = int(n_frames.max()) if n_frames.numel() else 0
        out = torch.zeros(waveforms.shape[0], t, self.feature_dim, device=waveforms.device)
        for b, n in enumerate(lengths.tolist()):
            one = self._features(waveforms[b : b + 1, :n], lengths[b : b + 1])
            out[b, : one.shape[1]] = one[0]
        return out, n_frames

    def _features(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The features of a batch computed together ([B, T, D] float32)."""
        cep, n_frames = self.cepstra(waveforms, lengths)
        return self.dynamic_features(cep, n_frames)

    def dynamic_features(self, cep: torch.Tensor, n_frames: torch.Tensor) -> torch.Tensor:
        """Cepstra [B, T, ncep] -> CMN + ``feat`` ([B, T, D])."""
        if self.cfg.cmn == "batch":
            cep = batch_cmn(cep, n_frames)
        if self.cfg.feat == "1s_c_d_dd":
            return deltas_1s_c_d_dd(cep, n_frames)
        return cep
