"""hama's multilingual phoneme CTC model (IPA phones + a word boundary), as torch modules.

The acoustic model of PyPI `hama` 1.7.0 (hamanlp; `hama/assets/asr_waveform.hama`, run there by its
own native engine), rebuilt here so that it runs batched on any torch device. Its structure was
read from the weight table (names and shapes) and confirmed against the engine's output:

* front end (float32): reflect padding of 200 samples, a 400-point STFT as two convolutions with
  the model's own windowed DFT kernels (hop 160 = 10 ms), power, the model's 80-band mel matrix,
  ``log(max(x, 1e-10))``, rounded to float16 (as the exported graph casts there);
* stem: Conv1d(80 -> 144, k3, stride 2) + erf-GELU: 20 ms frames;
* 4 Conformer blocks (Gulati et al. 2020): d 144, 4 heads, FF 576 with SiLU, depthwise kernel 31,
  no position encoding;
* Conv1d(144 -> 191, k1) and log-softmax: 189 IPA phone tokens, ``<wb>`` (word boundary), blank.

The weights are float16 values; the arithmetic is float32, as in hama's engine. Frames past an
utterance's length are zeroed before every convolution and left out of every attention, so an
utterance gives in a batch what it gives alone. hama's engine cuts its input at 3000 spectrogram
frames (30 s); this module takes any length (long recordings are cut at quiet moments by the
pipeline, `batch.segment_seconds`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.models.base import ModelOutput

__all__ = ["HamaCTCModel", "HamaFrontEnd", "load_hama", "HAMA_WORD_BOUNDARY"]

HAMA_WORD_BOUNDARY = "<wb>"
SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
GELU_SQRT2 = 1.4140625  # the graph's float16 sqrt(2) in its erf-GELU


def frames_valid(lengths: torch.Tensor, frames: int) -> torch.Tensor:
    """[B, frames] True where a frame is inside its utterance."""
    return torch.arange(frames, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """The graph's GELU: ``x * (1 + erf(x / 1.4140625)) / 2``."""
    return x * (1.0 + torch.erf(x / GELU_SQRT2)) * 0.5


class HamaFrontEnd(nn.Module):
    """Waveforms -> log-mel spectrogram [B, 80, T] with T = samples // 160 + 1 per utterance."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("stft_real", torch.zeros(N_FFT // 2 + 1, 1, N_FFT))
        self.register_buffer("stft_imag", torch.zeros(N_FFT // 2 + 1, 1, N_FFT))
        self.register_buffer("mel", torch.zeros(N_FFT // 2 + 1, 80))

    def output_lengths(self, samples: torch.Tensor) -> torch.Tensor:
        return torch.div(samples, HOP, rounding_mode="floor") + 1

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pad = N_FFT // 2
        n = waveforms.shape[1]
        padded = waveforms.new_zeros(waveforms.shape[0], n + 2 * pad)
        for b, length in enumerate(lengths.tolist()):  # reflect at each utterance's own end
            x = waveforms[b, :length]
            if length > pad:
                padded[b, : length + 2 * pad] = F.pad(x.view(1, 1, -1), (pad, pad), mode="reflect").view(-1)
            elif length > 0:
                padded[b, pad : pad + length] = x
        frames = self.output_lengths(lengths)
        x = padded.unsqueeze(1)
        real = F.conv1d(x, self.stft_real, stride=HOP)
        imag = F.conv1d(x, self.stft_imag, stride=HOP)
        power = (real * real + imag * imag)[:, :, : int(frames.max()) if frames.numel() else 0]
        mel = torch.matmul(power.transpose(1, 2), self.mel).clamp_min(1e-10).log()
        return mel.half().to(mel.dtype).transpose(1, 2), frames


class FeedForward(nn.Module):
    """LayerNorm -> Linear(d, 4d) -> SiLU -> Linear(4d, d); the block adds half of it (macaron)."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-5)
        self.fc1 = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(self.norm(x))))


class SelfAttention(nn.Module):
    """LayerNorm -> multi-head self-attention (no position encoding), padded keys masked."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d_model, eps=1e-5)
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D]; key_valid: [B, 1, 1, T] True for frames inside the utterance."""
        b, t, d = x.shape
        qkv = self.in_proj(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=key_valid)
        return self.out_proj(context.transpose(1, 2).reshape(b, t, d))


class ConvModule(nn.Module):
    """LayerNorm -> pointwise (d -> 2d) -> GLU -> depthwise (k31, BatchNorm folded into its bias)
    -> SiLU -> pointwise (d -> d); frames past the length are zeroed before the depthwise conv."""

    def __init__(self, d_model: int, kernel: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-5)
        self.pointwise1 = nn.Conv1d(d_model, 2 * d_model, 1)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2, groups=d_model)
        self.pointwise2 = nn.Conv1d(d_model, d_model, 1)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D]; valid: [B, 1, T] (1.0 inside the utterance)."""
        y = F.glu(self.pointwise1(self.norm(x).transpose(1, 2)), dim=1) * valid
        return self.pointwise2(F.silu(self.depthwise(y))).transpose(1, 2)


class ConformerBlock(nn.Module):
    """Gulati et al. 2020 (Conformer), eq. 1: x + FF/2, + MHSA, + Conv, + FF/2, then LayerNorm."""

    def __init__(self, d_model: int, heads: int, ff_hidden: int, kernel: int) -> None:
        super().__init__()
        self.ffn1 = FeedForward(d_model, ff_hidden)
        self.attn = SelfAttention(d_model, heads)
        self.conv = ConvModule(d_model, kernel)
        self.ffn2 = FeedForward(d_model, ff_hidden)
        self.norm = nn.LayerNorm(d_model, eps=1e-5)

    def forward(self, x: torch.Tensor, key_valid: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ffn1(x)
        x = x + self.attn(x, key_valid)
        x = x + self.conv(x, valid)
        x = x + 0.5 * self.ffn2(x)
        return self.norm(x)


class HamaConformerNet(nn.Module):
    """Log-mel [B, 80, T] -> log-probs [B, T', V], T' = (T + 1) // 2: a stride-2 Conv1d stem with
    erf-GELU, Conformer blocks, a Conv1d(k1) projection and log-softmax."""

    def __init__(
        self, num_outputs: int, n_mels: int = 80, d_model: int = 144, layers: int = 4, heads: int = 4,
        ff_hidden: int = 576, kernel: int = 31,
    ) -> None:  # fmt: skip
        super().__init__()
        self.stem = nn.Conv1d(n_mels, d_model, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(ConformerBlock(d_model, heads, ff_hidden, kernel) for _ in range(layers))
        self.proj = nn.Conv1d(d_model, num_outputs, 1)

    @staticmethod
    def output_lengths(frames: torch.Tensor) -> torch.Tensor:
        return torch.div(frames + 1, 2, rounding_mode="floor")

    def forward(self, mel: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mel = mel * frames_valid(frames, mel.shape[2]).unsqueeze(1)
        lengths = self.output_lengths(frames)
        h = gelu_erf(self.stem(mel)).transpose(1, 2)
        valid = frames_valid(lengths, h.shape[1])
        key_valid = valid.view(valid.shape[0], 1, 1, -1)
        valid_c = valid.unsqueeze(1).to(h.dtype)
        for block in self.blocks:
            h = block(h, key_valid, valid_c)
        logits = self.proj(h.transpose(1, 2)).transpose(1, 2)
        return torch.log_softmax(logits, dim=-1), lengths


class HamaCTCModel(nn.Module):
    """hama's phoneme CTC model as an ``AcousticModel``: 16 kHz waveform -> [B, T, 191] log-probs
    every 20 ms; units = its 189 IPA phone tokens and ``<wb>``, blank last.

    Its natural decoder is a WFST over a phone lexicon (``configs/hama-en-us-otf.yaml``); alone,
    ``ctc-greedy`` gives phones, a "word" per run of phones between word boundaries."""

    default_decoder = "ctc-greedy"
    sample_rate = SAMPLE_RATE
    frame_shift = 2 * HOP / SAMPLE_RATE

    def __init__(self, units: list[str], provenance: dict | None = None, source: str | None = None) -> None:
        super().__init__()
        self.front_end = HamaFrontEnd()
        self.net = HamaConformerNet(num_outputs=len(units) + 1)
        self._units = list(units)
        self.provenance = dict(provenance or {})
        self.source = source

    @property
    def units(self) -> list[str]:
        return self._units

    @property
    def blank_id(self) -> int:
        return len(self._units)

    def features(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.front_end(waveforms, lengths)

    def forward_features(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput:
        log_probs, lengths = self.net(feats, feat_lengths)
        return ModelOutput(log_probs, lengths, self.frame_shift, self.blank_id, self.units)

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> ModelOutput:
        return self.forward_features(*self.features(waveforms, lengths))

    def tokens_to_words(self, tokens: list[int]) -> list[tuple[str, int, int]]:
        """Phones between word boundaries -> one "word" each (the phones joined)."""
        boundary = self._units.index(HAMA_WORD_BOUNDARY)
        words: list[tuple[str, int, int]] = []
        start = None
        for i, tok in enumerate([*tokens, boundary]):
            if tok == boundary:
                if start is not None:
                    words.append(("".join(self._units[t] for t in tokens[start:i]), start, i - 1))
                start = None
            elif start is None:
                start = i
        return words

    def describe(self) -> dict:
        return {
            "type": "hama",
            "file": self.source,
            "parameters": sum(p.numel() for p in self.net.parameters()),
            "sample_rate": self.sample_rate,
            "features": {"type": "hama log-mel", "n_mels": 80, "n_fft": N_FFT, "hop_length": HOP},
            "num_outputs": self.blank_id + 1,
            "blank_id": self.blank_id,
            "frame_shift": self.frame_shift,
            "units": f"{len(self.units) - 1} IPA phone tokens and {HAMA_WORD_BOUNDARY}",
            **{k: v for k, v in self.provenance.items() if k in ("source", "license", "weights", "upstream")},
        }


def load_hama(path: str | Path) -> HamaCTCModel:
    """A converted hama model file (safetensors: weights, units and provenance in its metadata)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            tensors = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelError(f"{path}: not a readable safetensors model ({err})") from None
    if meta.get("format") != "asrdecode-hama-ctc":
        raise ModelError(f"{path}: not a converted hama model (metadata format {meta.get('format')!r})")
    try:
        units = json.loads(meta["units"])
        provenance = json.loads(meta.get("provenance", "{}"))
    except (KeyError, json.JSONDecodeError) as err:
        raise ModelError(f"{path}: bad hama model metadata ({err})") from None
    if not (
        isinstance(units, list) and all(isinstance(u, str) for u in units) and HAMA_WORD_BOUNDARY in units
    ):
        raise ModelError(
            f"{path}: bad hama model metadata (units must list the phones and {HAMA_WORD_BOUNDARY})"
        )
    model = HamaCTCModel(units, provenance, source=str(path))
    state = model.state_dict()
    missing = sorted(set(state) - set(tensors))
    unexpected = sorted(set(tensors) - set(state))
    if missing or unexpected:
        raise ModelError(
            f"{path}: weights do not fit the hama network "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for name, value in tensors.items():
        if tuple(value.shape) != tuple(state[name].shape):
            raise ModelError(
                f"{path}: weight {name} has shape {tuple(value.shape)}, expected {tuple(state[name].shape)}"
            )
        state[name] = value.float()
    model.load_state_dict(state)
    return model.eval()
