"""A (Fast)Conformer encoder whose parameter names match NeMo's ``ConformerEncoder`` state_dict.

Written from the Conformer / FastConformer papers and the conventions of the NeMo fixtures:

* subsampling: ``dw_striding`` (conv3x3/2 then [depthwise conv3x3/2 + pointwise 1x1] blocks, ReLU) or
  ``striding`` (conv3x3/2 blocks, ReLU), factor 2^k, time frames past each utterance's length are
  zeroed before every conv (batch == single utterance); ``pre_encode.out`` maps channels x freq to d_model.
  ``subsampling_factor: 1`` uses a plain Linear (``pre_encode``), as NeMo does.
* x-scaling by sqrt(d_model), relative sinusoidal position encoding (positions T-1 ... -(T-1)).
* blocks: x + FF/2, x + MHSA(rel_pos, pos_bias_u/v, linear_pos), x + Conv, x + FF/2, LayerNorm.
* conv module: pointwise(2D) -> GLU -> mask padding -> depthwise(k) -> BatchNorm|LayerNorm -> Swish
  -> pointwise.
* attention masks padded keys and queries; output frames past ``lengths`` are junk (ignore them).

Input ``[B, F, T]`` features + lengths, output ``[B, D, T']`` + lengths (channels first, like NeMo).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.typed_config import dataclass_from_dict

__all__ = ["ConformerConfig", "ConformerEncoder", "conv_output_lengths", "relative_positions"]

_MASK_FILL = -10000.0

# Options of NeMo's ConformerEncoder that do not change inference here (training-only or memory knobs);
# they are accepted with any value.
_IGNORED_KEYS = {
    "_target_",
    "subsampling_conv_chunking_factor",
    "stochastic_depth_drop_prob",
    "stochastic_depth_mode",
    "stochastic_depth_start_layer",
    "att_context_probs",
    "use_pytorch_sdpa",
    "use_pytorch_sdpa_backends",
    "sync_max_audio_length",
    "pos_emb_max_len",
}


@dataclass
class ConformerConfig:
    """The subset of NeMo ``ConformerEncoder`` options implemented here (same names and defaults)."""

    feat_in: int = 80
    n_layers: int = 17
    d_model: int = 512
    feat_out: int = -1
    causal_downsampling: bool = False
    subsampling: str = "striding"
    subsampling_factor: int = 4
    subsampling_conv_channels: int = -1
    reduction: str | None = None
    reduction_position: int | None = None
    reduction_factor: int = 1
    ff_expansion_factor: int = 4
    self_attention_model: str = "rel_pos"
    n_heads: int = 4
    att_context_size: list | None = None
    att_context_style: str = "regular"
    xscaling: bool = True
    untie_biases: bool = True
    conv_kernel_size: int = 31
    conv_norm_type: str = "batch_norm"
    conv_context_size: Any = None
    use_bias: bool = True
    dropout: float = 0.1
    dropout_pre_encoder: float = 0.1
    dropout_emb: float = 0.1
    dropout_att: float = 0.0
    global_tokens: int = 0
    global_tokens_spacing: int = 1
    global_attn_separate: bool = False

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> ConformerConfig:
        """Build from a NeMo ``encoder`` config section; unknown keys raise ModelError."""
        out = dataclass_from_dict(cls, cfg, "encoder.", ignore=_IGNORED_KEYS, error=ModelError)
        out.validate()
        return out

    @property
    def conv_channels(self) -> int:
        return self.subsampling_conv_channels if self.subsampling_conv_channels > 0 else self.d_model

    @property
    def context(self) -> tuple[int, int]:
        """(left, right) attention context in frames, -1 = unlimited."""
        size = self.att_context_size
        if size is None:
            return (-1, -1)
        if len(size) and isinstance(size[0], (list, tuple)):  # multi-lookahead models: first is the default
            size = size[0]
        return (int(size[0]), int(size[1]))

    @property
    def conv_padding(self) -> tuple[int, int]:
        """(left, right) padding of the depthwise conv."""
        k = int(self.conv_kernel_size)
        ctx = self.conv_context_size
        if ctx is None:
            return ((k - 1) // 2, (k - 1) // 2)
        if ctx == "causal":
            return (k - 1, 0)
        return (int(ctx[0]), int(ctx[1]))

    def validate(self) -> None:
        """Raise ModelError naming the first unsupported option."""

        def bad(name: str, value: Any, supported: str = "") -> ModelError:
            hint = f" (supported: {supported})" if supported else ""
            return ModelError(f"unsupported encoder.{name}={value!r}{hint}")

        if self.self_attention_model not in ("rel_pos", "rel_pos_local_attn"):
            raise bad("self_attention_model", self.self_attention_model, "rel_pos, rel_pos_local_attn")
        if self.self_attention_model == "rel_pos_local_attn":
            left, right = self.context
            if left <= 0 or left != right or self.att_context_style != "regular":
                raise bad(
                    "att_context_size",
                    self.att_context_size,
                    "[w, w] with w > 0 for rel_pos_local_attn (NeMo's sliding window pairs position "
                    "terms with other offsets when left != right), att_context_style regular",
                )
        if self.subsampling_factor > 1 and self.subsampling not in ("dw_striding", "striding"):
            raise bad("subsampling", self.subsampling, "dw_striding, striding")
        f = int(self.subsampling_factor)
        if f < 1 or f & (f - 1):
            raise bad("subsampling_factor", self.subsampling_factor, "a power of 2")
        if self.reduction is not None or self.reduction_position is not None:
            raise bad("reduction", self.reduction, "null")
        if self.conv_norm_type not in ("batch_norm", "layer_norm"):
            raise bad("conv_norm_type", self.conv_norm_type, "batch_norm, layer_norm")
        if self.att_context_style not in ("regular", "chunked_limited"):
            raise bad("att_context_style", self.att_context_style, "regular, chunked_limited")
        if self.global_tokens:
            raise bad("global_tokens", self.global_tokens, "0")
        if self.d_model % self.n_heads:
            raise bad("n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")
        left, right = self.conv_padding
        if left < 0 or right < 0 or left + right != int(self.conv_kernel_size) - 1:
            raise bad(
                "conv_context_size", self.conv_context_size, "null, 'causal' or [l, r] with l+r = kernel-1"
            )


def conv_output_lengths(
    lengths: torch.Tensor, n_convs: int, kernel: int = 3, stride: int = 2, padding: int = 1
) -> torch.Tensor:
    """Length after ``n_convs`` convolutions: L -> floor((L + 2p - k) / s) + 1 each time."""
    for _ in range(n_convs):
        lengths = _padded_length(lengths, kernel, stride, (padding, padding))
    return lengths


def relative_positions(
    length: int, d_model: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Sinusoidal encodings of relative positions length-1, ..., -(length-1): [1, 2*length-1, d_model]."""
    pos = torch.arange(length - 1, -length, -1, dtype=torch.float32, device=device).unsqueeze(1)
    inv = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32, device=device) * -(math.log(10000.0) / d_model)
    )
    pe = torch.zeros(pos.shape[0], d_model, device=device)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)
    return pe.unsqueeze(0).to(dtype)


def _time_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """[B, T] bool, True on valid frames."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def _padded_length(lengths: torch.Tensor, kernel: int, stride: int, pad: tuple[int, int]) -> torch.Tensor:
    """Length after one convolution with (left, right) padding: floor((L + l + r - k) / s) + 1."""
    return torch.div(lengths + pad[0] + pad[1] - kernel, stride, rounding_mode="floor") + 1


class ConvSubsampling(nn.Module):
    """Stride-2 conv stack over (time, freq) with per-layer time masking, then ``out`` Linear.

    Each conv pads explicitly (`pads`: time (left, right), freq (left, right)): centred (1, 1) for
    the 3x3 convs, or NeMo's ``causal_downsampling`` (its CausalConv2D: k - 1 = 2 before, s - 1 = 1
    after, on both axes, so a frame never sees later input)."""

    def __init__(
        self, kind: str, factor: int, feat_in: int, d_model: int, channels: int, causal: bool = False
    ) -> None:
        super().__init__()
        self.n_stages = int(math.log2(factor))
        wide = (2, 1) if causal else (1, 1)
        layers: list[nn.Module] = []
        pads: list[tuple[int, int]] = []  # per Conv2d, in order; the same on time and freq
        if kind == "dw_striding":
            layers += [nn.Conv2d(1, channels, 3, stride=2), nn.ReLU()]
            pads.append(wide)
            for _ in range(self.n_stages - 1):
                layers += [
                    nn.Conv2d(channels, channels, 3, stride=2, groups=channels),
                    nn.Conv2d(channels, channels, 1),
                    nn.ReLU(),
                ]
                pads += [wide, (0, 0)]
        else:  # striding
            in_ch = 1
            for _ in range(self.n_stages):
                layers += [nn.Conv2d(in_ch, channels, 3, stride=2), nn.ReLU()]
                pads.append(wide)
                in_ch = channels
        self.conv = nn.Sequential(*layers)
        self.pads = pads
        freq = int(self._lengths_after(torch.tensor(feat_in)))
        self.out = nn.Linear(channels * freq, d_model)

    def _convs(self) -> list[tuple[nn.Conv2d, tuple[int, int]]]:
        return list(zip([m for m in self.conv if isinstance(m, nn.Conv2d)], self.pads, strict=True))

    def _lengths_after(self, lengths: torch.Tensor) -> torch.Tensor:
        for conv, pad in self._convs():
            lengths = _padded_length(lengths, conv.kernel_size[0], conv.stride[0], pad)
        return lengths

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Output frames for the given input frame counts."""
        return self._lengths_after(lengths)

    #: bytes of the first conv's output a chunk of `forward` may take (it would otherwise be
    #: [B, channels, T/2, F/2] at once: 1.8 GB for an hour with 64 channels, 7 GB with 256)
    chunk_bytes = 32 << 20
    #: output frames per chunk; None: as many as `chunk_bytes` allows (at least 64)
    chunk_frames: int | None = None

    def _frames_per_chunk(self, batch: int, feat_in: int) -> int:
        if self.chunk_frames is not None:
            return self.chunk_frames
        first = next(m for m in self.conv if isinstance(m, nn.Conv2d))
        per_frame = batch * first.out_channels * (feat_in // 2 + 1) * (1 << (self.n_stages - 1)) * 4
        return max(64, self.chunk_bytes // per_frame)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T, F] -> ([B, T', d_model], lengths'), a chunk of output frames at a time (`_chunk`,
        `out` applied per chunk): memory bounded by the chunk whatever the input length."""
        total = int(self._lengths_after(torch.tensor(x.shape[1])))
        step = self._frames_per_chunk(x.shape[0], x.shape[2])
        out = x.new_empty(x.shape[0], total, self.out.out_features)
        for a in range(0, total, step):
            b = min(a + step, total)
            out[:, a:b] = self.out(self._chunk(x, lengths, a, b))
        return out, self._lengths_after(lengths)

    def _chunk(self, x: torch.Tensor, lengths: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Output frames [a, b) of the conv stack (before `out`), computed from the input frames they
        depend on: each conv's time range is traced back (output [a, b) of a conv with kernel k,
        stride s and left padding p needs input [a*s - p, (b-1)*s - p + k)), frames outside the
        input or past an utterance's length are the zeros the full computation pads or masks with,
        and every conv runs without time padding over exactly that range."""
        convs = self._convs()
        ranges = [(a, b)]
        for conv, pad in reversed(convs):
            k, st = conv.kernel_size[0], conv.stride[0]
            lo, hi = ranges[0]
            ranges.insert(0, (lo * st - pad[0], (hi - 1) * st - pad[0] + k))
        lo, hi = ranges[0]
        t = x.shape[1]
        piece = x[:, max(lo, 0) : min(hi, t)]
        piece = F.pad(piece, (0, 0, max(0, -lo), max(0, hi - t))).unsqueeze(1)  # [B, 1, hi-lo, F]
        layer_lengths = lengths
        i = 0
        for layer in self.conv:
            if not isinstance(layer, nn.Conv2d):
                piece = layer(piece)
                continue
            lo, hi = ranges[i]
            pad = self.pads[i]
            index = torch.arange(lo, hi, device=piece.device)
            keep = (index >= 0).unsqueeze(0) & (index.unsqueeze(0) < layer_lengths.unsqueeze(1))
            piece = piece * keep.to(piece.dtype)[:, None, :, None]
            piece = layer(F.pad(piece, (pad[0], pad[1], 0, 0)))  # freq padded, time already in range
            layer_lengths = _padded_length(layer_lengths, layer.kernel_size[0], layer.stride[0], pad)
            i += 1
        index = torch.arange(a, b, device=piece.device)
        keep = index.unsqueeze(0) < layer_lengths.unsqueeze(1)
        piece = piece * keep.to(piece.dtype)[:, None, :, None]
        bsz, c, n, f = piece.shape
        return piece.transpose(1, 2).reshape(bsz, n, c * f)


class FeedForward(nn.Module):
    """Linear -> Swish -> dropout -> Linear."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool = True) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(F.silu(self.linear1(x))))


class ConvModule(nn.Module):
    """Pointwise(2D) -> GLU -> mask -> depthwise(k) -> norm (named ``batch_norm``) -> Swish -> pointwise."""

    def __init__(
        self, d_model: int, kernel: int, padding: tuple[int, int], norm: str, bias: bool = True
    ) -> None:
        super().__init__()
        self.padding = padding
        self.norm_type = norm
        self.pointwise_conv1 = nn.Conv1d(d_model, 2 * d_model, 1, bias=bias)
        self.depthwise_conv = nn.Conv1d(d_model, d_model, kernel, groups=d_model, bias=bias)
        self.batch_norm = nn.BatchNorm1d(d_model) if norm == "batch_norm" else nn.LayerNorm(d_model)
        self.pointwise_conv2 = nn.Conv1d(d_model, d_model, 1, bias=bias)

    #: output frames computed at a time in eval mode (its [T, 2 d_model] and [T, d_model]
    #: temporaries are a piece's); training keeps the whole input (batch norm's statistics)
    frames = 1024

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, T, D]; pad_mask [B, T] True on padding."""
        t = x.shape[1]
        if self.training or t <= self.frames:
            return self._frames(x, pad_mask, 0, t)
        out = torch.empty_like(x)
        for a in range(0, t, self.frames):
            b = min(a + self.frames, t)
            out[:, a:b] = self._frames(x, pad_mask, a, b)
        return out

    def _frames(self, x: torch.Tensor, pad_mask: torch.Tensor | None, a: int, b: int) -> torch.Tensor:
        """Output frames [a, b) from input frames [a - left, b + right): every step but the
        depthwise conv acts on each frame alone, and frames outside the input are the zeros the
        conv's padding gives, so any split gives the whole input's frames."""
        left, right = self.padding
        lo, hi = max(a - left, 0), min(b + right, x.shape[1])
        y = F.glu(self.pointwise_conv1(x[:, lo:hi].transpose(1, 2)), dim=1)
        if pad_mask is not None:
            y = y.masked_fill(pad_mask[:, lo:hi].unsqueeze(1), 0.0)
        y = self.depthwise_conv(F.pad(y, (lo - (a - left), b + right - hi)))
        if self.norm_type == "layer_norm":
            y = self.batch_norm(y.transpose(1, 2)).transpose(1, 2)
        else:
            y = self.batch_norm(y)
        y = self.pointwise_conv2(F.silu(y))
        return y.transpose(1, 2)


class RelPositionSelfAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (content + position terms)."""

    def __init__(
        self, d_model: int, n_heads: int, dropout: float, own_biases: bool, bias: bool = True
    ) -> None:
        super().__init__()
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.linear_q = nn.Linear(d_model, d_model, bias=bias)
        self.linear_k = nn.Linear(d_model, d_model, bias=bias)
        self.linear_v = nn.Linear(d_model, d_model, bias=bias)
        self.linear_out = nn.Linear(d_model, d_model, bias=bias)
        self.linear_pos = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)
        if own_biases:
            self.pos_bias_u = nn.Parameter(torch.zeros(n_heads, self.d_k))
            self.pos_bias_v = nn.Parameter(torch.zeros(n_heads, self.d_k))
        else:
            self.pos_bias_u = None
            self.pos_bias_v = None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, h, T, d_k]."""
        return x.view(x.shape[0], x.shape[1], self.h, self.d_k).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        mask: torch.Tensor | None,
        bias_u: torch.Tensor | None = None,
        bias_v: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B, T, D], pos_emb [1, 2T-1, D], mask [B, T, T] True where attention is not allowed.
        With a `LocalWindow` as ``mask``: each query sees only its window (`_banded`); ``pos_emb``
        is then [1, left + right + 1, D] (relative positions left .. -right)."""
        bias_u = self.pos_bias_u if self.pos_bias_u is not None else bias_u
        bias_v = self.pos_bias_v if self.pos_bias_v is not None else bias_v
        b, t, _ = x.shape
        if isinstance(mask, LocalWindow):
            return self._banded(x, self._heads(self.linear_pos(pos_emb)), mask, bias_u, bias_v)
        q = self.linear_q(x).view(b, t, self.h, self.d_k)  # [B, T, h, d_k]
        k = self._heads(self.linear_k(x))
        v = self._heads(self.linear_v(x))
        p = self._heads(self.linear_pos(pos_emb))  # [1, h, 2T-1, d_k]
        content = torch.matmul((q + bias_u).transpose(1, 2), k.transpose(-2, -1))  # [B, h, T, T]
        position = torch.matmul((q + bias_v).transpose(1, 2), p.transpose(-2, -1))  # [B, h, T, 2T-1]
        # pos_emb column c holds relative position (T-1-c); query i, key j needs i-j -> column T-1-i+j.
        idx = (t - 1) - torch.arange(t, device=x.device).unsqueeze(1) + torch.arange(t, device=x.device)
        position = position.gather(-1, idx.expand(b, self.h, t, t))
        scores = (content + position) / math.sqrt(self.d_k)
        if mask is not None:
            m = mask.unsqueeze(1)
            attn = torch.softmax(scores.masked_fill(m, _MASK_FILL), dim=-1).masked_fill(m, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(self.dropout(attn), v)  # [B, h, T, d_k]
        return self.linear_out(out.transpose(1, 2).reshape(b, t, self.h * self.d_k))

    def _banded(
        self,
        x: torch.Tensor,
        p: torch.Tensor,
        window: LocalWindow,
        bias_u: torch.Tensor,
        bias_v: torch.Tensor,
    ) -> torch.Tensor:
        """Attention of each query i over keys i-left .. i+right only (the same scores, masking and
        softmax as the full computation with that band masked, as NeMo's sliding-window
        ``rel_pos_local_attn`` computes for a symmetric window), in blocks of queries, each block's
        queries, keys and values projected from its own frames of x (keys past the input are the
        zeros of padding): memory grows with the block and window, not with T (nor T²). x [B, T, D],
        p [1, h, L, d_k] with L = left + right + 1, column c = relative position left - c.
        Returns the attention's output [B, T, D] (after ``linear_out``)."""
        b, t, _ = x.shape
        h = self.h
        left, right = window.left, window.right
        width = left + right + 1
        key_ok = F.pad(window.valid, (left, right), value=False)  # [B, T + L - 1]
        out = x.new_empty(b, t, self.linear_out.out_features)
        block = max(1, min(t, window.block))
        rows = torch.arange(block, device=x.device).unsqueeze(1)
        band = rows + torch.arange(width, device=x.device)  # [block, L]: key slot of (row, column)
        scale = math.sqrt(self.d_k)
        for s in range(0, t, block):
            n = min(block, t - s)
            idx = band[:n]
            span = n + width - 1  # key slots s - left .. s + n - 1 + right
            lo, hi = max(s - left, 0), min(s + n + right, t)
            edges = (0, 0, lo - (s - left), s + n + right - hi)
            k = F.pad(self._heads(self.linear_k(x[:, lo:hi])), edges)  # [B, h, span, d_k]
            v = F.pad(self._heads(self.linear_v(x[:, lo:hi])), edges)
            qb = self._heads(self.linear_q(x[:, s : s + n]))  # [B, h, n, d_k]
            content = torch.matmul(qb + bias_u.unsqueeze(1), k.transpose(-2, -1))
            content = content.gather(-1, idx.expand(b, h, n, width))  # [B, h, n, L]
            position = torch.matmul(qb + bias_v.unsqueeze(1), p.transpose(-2, -1))  # [B, h, n, L]
            scores = (content + position) / scale
            masked = ~key_ok[:, s : s + span].gather(-1, idx.reshape(1, -1).expand(b, -1)).view(
                b, 1, n, width
            )
            attn = torch.softmax(scores.masked_fill(masked, _MASK_FILL), dim=-1).masked_fill(masked, 0.0)
            attn = self.dropout(attn)
            spread = attn.new_zeros(b, h, n, span).scatter_(-1, idx.expand(b, h, n, width), attn)
            heads = torch.matmul(spread, v)  # [B, h, n, d_k]
            out[:, s : s + n] = self.linear_out(heads.transpose(1, 2).reshape(b, n, h * self.d_k))
        return out


@dataclass
class LocalWindow:
    """Banded attention instead of a [B, T, T] mask: keys left .. right of each query, `valid`
    [B, T] True on frames within the lengths; queries are processed `block` at a time."""

    left: int
    right: int
    valid: torch.Tensor
    block: int = 256


class ConformerLayer(nn.Module):
    """Macaron block: ½FF, MHSA, conv, ½FF, LayerNorm (pre-norm residuals)."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d, d_ff = cfg.d_model, cfg.d_model * cfg.ff_expansion_factor
        self.norm_feed_forward1 = nn.LayerNorm(d)
        self.feed_forward1 = FeedForward(d, d_ff, cfg.dropout, cfg.use_bias)
        self.norm_conv = nn.LayerNorm(d)
        self.conv = ConvModule(d, cfg.conv_kernel_size, cfg.conv_padding, cfg.conv_norm_type, cfg.use_bias)
        self.norm_self_att = nn.LayerNorm(d)
        self.self_attn = RelPositionSelfAttention(
            d, cfg.n_heads, cfg.dropout_att, cfg.untie_biases, cfg.use_bias
        )
        self.norm_feed_forward2 = nn.LayerNorm(d)
        self.feed_forward2 = FeedForward(d, d_ff, cfg.dropout, cfg.use_bias)
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_out = nn.LayerNorm(d)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        att_mask: torch.Tensor | None,
        pad_mask: torch.Tensor | None,
        bias_u: torch.Tensor | None = None,
        bias_v: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self._half_feed_forward(x, self.norm_feed_forward1, self.feed_forward1)
        x = x + self.dropout(self.self_attn(self.norm_self_att(x), pos_emb, att_mask, bias_u, bias_v))
        x = x + self.dropout(self.conv(self.norm_conv(x), pad_mask))
        x = self._half_feed_forward(x, self.norm_feed_forward2, self.feed_forward2)
        return self.norm_out(x)

    #: frames of a feed-forward module computed at a time: its [T, 4 d_model] hidden layer is a
    #: piece's (an hour of a 1024-wide model's: 737 MB, twice), whatever the input's length
    ff_frames = 1024

    def _half_feed_forward(self, x: torch.Tensor, norm: nn.Module, ff: FeedForward) -> torch.Tensor:
        """x + ½ ff(norm(x)), frame by frame (both act on each frame alone), `ff_frames` at a time."""
        if x.shape[1] <= self.ff_frames:
            return x + 0.5 * self.dropout(ff(norm(x)))
        out = torch.empty_like(x)
        for a in range(0, x.shape[1], self.ff_frames):
            piece = x[:, a : a + self.ff_frames]
            out[:, a : a + self.ff_frames] = piece + 0.5 * self.dropout(ff(norm(piece)))
        return out


@dataclass
class StreamingChunks:
    """How NeMo's cache-aware streaming cuts features into chunks (its ``setup_streaming_params``
    for ``chunked_limited`` attention with causal downsampling by ``factor``, right context
    ``lookahead``): a first chunk of ``1 + factor * lookahead`` features, then chunks of
    ``factor * (1 + lookahead)``, each after ``factor + 1`` cached features of the one before,
    whose first ``1 + factor // factor`` subsampled frames are dropped."""

    factor: int
    lookahead: int

    @classmethod
    def of(cls, encoder: ConformerEncoder) -> StreamingChunks:
        cfg = encoder.cfg
        if not (cfg.causal_downsampling and isinstance(encoder.pre_encode, ConvSubsampling)):
            raise ModelError(
                "model.streaming=cache-aware needs a cache-aware streaming model (causal_downsampling)"
            )
        if cfg.att_context_style != "chunked_limited":
            raise ModelError(
                "model.streaming=cache-aware needs att_context_style chunked_limited, "
                f"not {cfg.att_context_style}"
            )
        return cls(encoder.subsampling_factor, max(int(cfg.context[1]), 0))

    @property
    def cache(self) -> int:
        return self.factor + 1

    @property
    def drop(self) -> int:
        return 1 + (self.cache - 1) // self.factor

    def chunks(self, n: int) -> list[tuple[int, int, int]]:
        """(start, end, frames to drop) per chunk of an `n`-frame utterance; start < 0 where the
        cache reaches before the first frame (those positions are zeros)."""
        first = 1 + self.factor * self.lookahead
        size = self.factor * (1 + self.lookahead)
        out = [(0, min(first, n), 0)] if n > 0 else []
        pos = first
        while pos < n and min(pos + size, n) - pos >= self.factor:
            out.append((pos - self.cache, min(pos + size, n), self.drop))
            pos += size
        return out


class ConformerEncoder(nn.Module):
    """FastConformer/Conformer encoder: ``[B, F, T]`` + lengths -> ``[B, D, T']`` + lengths."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.d_model = cfg.d_model
        self.subsampling_factor = int(cfg.subsampling_factor)
        self.xscale = math.sqrt(cfg.d_model) if cfg.xscaling else None
        if self.subsampling_factor > 1:
            self.pre_encode: nn.Module = ConvSubsampling(
                cfg.subsampling,
                self.subsampling_factor,
                cfg.feat_in,
                cfg.d_model,
                cfg.conv_channels,
                causal=bool(cfg.causal_downsampling),
            )
        else:
            self.pre_encode = nn.Linear(cfg.feat_in, cfg.d_model)
        if not cfg.untie_biases:
            d_k = cfg.d_model // cfg.n_heads
            self.pos_bias_u = nn.Parameter(torch.zeros(cfg.n_heads, d_k))
            self.pos_bias_v = nn.Parameter(torch.zeros(cfg.n_heads, d_k))
        else:
            self.pos_bias_u = None
            self.pos_bias_v = None
        self.pre_dropout = nn.Dropout(cfg.dropout_pre_encoder)
        self.pos_dropout = nn.Dropout(cfg.dropout_emb)
        self.layers = nn.ModuleList(ConformerLayer(cfg) for _ in range(cfg.n_layers))
        if cfg.feat_out > 0 and cfg.feat_out != cfg.d_model:
            self.out_proj: nn.Linear | None = nn.Linear(cfg.d_model, cfg.feat_out)
            self.output_dim = cfg.feat_out
        else:
            self.out_proj = None
            self.output_dim = cfg.d_model

    @property
    def feat_in(self) -> int:
        return int(self.cfg.feat_in)

    def describe(self) -> dict:
        """Encoder facts for ``asrdecode info``."""
        enc = self.cfg
        fast = enc.subsampling == "dw_striding" and int(enc.subsampling_factor) == 8
        streaming = bool(enc.causal_downsampling) or enc.att_context_style == "chunked_limited"
        family = ("FastConformer" if fast else "Conformer") + (
            " (cache-aware streaming)" if streaming else ""
        )
        return {
            "type": "conformer",
            "family": family,
            "layers": enc.n_layers,
            "d_model": enc.d_model,
            "heads": enc.n_heads,
            "ff_expansion_factor": enc.ff_expansion_factor,
            "subsampling": enc.subsampling,
            "subsampling_factor": enc.subsampling_factor,
            "self_attention_model": enc.self_attention_model,
            "att_context_size": list(enc.context),
            "conv_kernel_size": enc.conv_kernel_size,
            # model.streaming: cache-aware needs causal downsampling and chunked_limited attention
            "streaming": self.streaming
            + (" (model.streaming=cache-aware runs NeMo's streaming mode)" if self._can_stream() else ""),
        }

    def _can_stream(self) -> bool:
        try:
            StreamingChunks.of(self)
        except ModelError:
            return False
        return True

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ConformerEncoder:
        """From a NeMo ``encoder`` config section."""
        return cls(ConformerConfig.from_dict(cfg))

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Encoder frames for the given feature frame counts."""
        if isinstance(self.pre_encode, ConvSubsampling):
            return self.pre_encode.output_lengths(lengths)
        return lengths

    def local_window(self, lengths: torch.Tensor, t: int) -> LocalWindow | None:
        """Banded attention when every query sees a bounded window of keys on both sides (the
        ``regular`` context style with left and right >= 0, and ``rel_pos_local_attn``, NeMo's
        sliding-window attention): the same result as the masked full attention without a [T, T]
        matrix. None for full or chunked context."""
        left, right = self.cfg.context
        if self.cfg.att_context_style != "regular" or left < 0 or right < 0:
            return None
        return LocalWindow(left, right, _time_mask(lengths, t))

    def attention_mask(self, lengths: torch.Tensor, t: int) -> torch.Tensor:
        """[B, T, T] bool, True where query i may NOT attend key j (padding or outside the context)."""
        valid = _time_mask(lengths, t)
        allowed = valid.unsqueeze(1) & valid.unsqueeze(2)
        left, right = self.cfg.context
        if left >= 0 or right >= 0:
            i = torch.arange(t, device=lengths.device).unsqueeze(1)
            j = torch.arange(t, device=lengths.device).unsqueeze(0)
            if self.cfg.att_context_style == "regular":
                ctx = torch.ones(t, t, dtype=torch.bool, device=lengths.device)
                if left >= 0:
                    ctx &= j >= i - left
                if right >= 0:
                    ctx &= j <= i + right
            else:  # chunked_limited: chunks of right+1 frames, see `left // chunk` chunks back
                if right < 0:
                    ctx = (
                        (j >= i - left)
                        if left >= 0
                        else torch.ones(t, t, dtype=torch.bool, device=lengths.device)
                    )
                else:
                    chunk = right + 1
                    back = left // chunk if left >= 0 else t
                    diff = i // chunk - j // chunk
                    ctx = (diff >= 0) & (diff <= back)
            allowed = allowed & ctx.unsqueeze(0)
        return ~allowed

    #: ``offline`` (the whole input at once) or ``cache-aware`` (NeMo's cache-aware streaming mode,
    #: `use_streaming`)
    streaming = "offline"

    def use_streaming(self, mode: str) -> None:
        """``cache-aware``: encode as NeMo's cache-aware streaming inference does (its
        ``CacheAwareStreamingAudioBuffer`` + ``cache_aware_stream_step``, one utterance at a time),
        for models with causal downsampling and ``chunked_limited`` attention; ``offline``: the
        whole input at once. In NeMo's streaming mode each chunk of features is subsampled with
        the last features of the previous chunk in front of it (`StreamingChunks`). The layers'
        attention and convolution caches then reproduce the offline ``chunked_limited`` layers on
        the joined subsampled frames, so only the subsampling runs chunk by chunk here
        (`streaming_pre_encode`)."""
        if mode not in ("offline", "cache-aware"):
            raise ModelError(f"model.streaming={mode}: use offline or cache-aware")
        if mode == "cache-aware":
            StreamingChunks.of(self)  # one-line error for models that cannot stream
        self.streaming = mode

    def streaming_pre_encode(
        self, x: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T, F] features -> ([B, T', D] subsampled frames, lengths) as NeMo's cache-aware
        streaming produces them per utterance: the first chunk alone, then every chunk after
        ``cache`` features of the one before (zeros where there are fewer), the first ``drop``
        outputs of each later chunk dropped, a last chunk shorter than the subsampling factor left
        out. The chunks of all utterances are subsampled together, `group` at a time."""
        plan = StreamingChunks.of(self)
        # NeMo's buffer holds every frame its preprocessor returns: one more than the length, a
        # frame of zeros (the featurizer's padding value)
        lengths = lengths + 1
        x = F.pad(x, (0, 0, 0, max(0, int(lengths.max()) - x.shape[1])))
        frame = torch.arange(x.shape[1], device=x.device)
        x = x * (frame.unsqueeze(0) < (lengths - 1).unsqueeze(1)).to(x.dtype).unsqueeze(2)
        windows: list[torch.Tensor] = []
        owners: list[tuple[int, int]] = []  # (utterance, frames dropped at the start)
        for b, n in enumerate(lengths.tolist()):
            for start, end, drop in plan.chunks(int(n)):
                lo = max(start, 0)
                piece = x[b, lo:end]
                if start < 0:
                    piece = F.pad(piece, (0, 0, -start, 0))  # NeMo's zeros before a short cache
                windows.append(piece)
                owners.append((b, drop))
        outputs: list[list[torch.Tensor]] = [[] for _ in range(x.shape[0])]
        group = 256
        for g in range(0, len(windows), group):
            part = windows[g : g + group]
            sizes = torch.tensor([w.shape[0] for w in part], device=x.device)
            batch = torch.nn.utils.rnn.pad_sequence(part, batch_first=True)
            out, out_len = self.pre_encode(batch, sizes)
            for k, (b, drop) in enumerate(owners[g : g + group]):
                outputs[b].append(out[k, drop : int(out_len[k])])
        joined = [torch.cat(o) if o else x.new_zeros(0, self.d_model) for o in outputs]
        new_lengths = torch.tensor([j.shape[0] for j in joined], device=x.device, dtype=torch.int64)
        return torch.nn.utils.rnn.pad_sequence(joined, batch_first=True), new_lengths

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, F, T] features + [B] frame counts -> ([B, D, T'] encodings, [B] int64 lengths)."""
        x = features.transpose(1, 2)
        lengths = lengths.to(device=x.device, dtype=torch.int64)
        if self.streaming == "cache-aware":
            x, lengths = self.streaming_pre_encode(x, lengths)
        elif isinstance(self.pre_encode, ConvSubsampling):
            x, lengths = self.pre_encode(x, lengths)
        else:
            x = self.pre_encode(x)
        t = x.shape[1]
        if self.xscale is not None:
            x = x * self.xscale
        x = self.pre_dropout(x)
        pad_mask = ~_time_mask(lengths, t)
        window = self.local_window(lengths, t)
        if window is not None:
            n = max(window.left, window.right) + 1  # positions n-1 .. -(n-1); keep left .. -right
            pos = relative_positions(n, self.d_model, x.device, x.dtype)
            pos_emb = self.pos_dropout(pos[:, n - 1 - window.left : n + window.right])
            att_mask: torch.Tensor | LocalWindow = window
        else:
            pos_emb = self.pos_dropout(relative_positions(t, self.d_model, x.device, x.dtype))
            att_mask = self.attention_mask(lengths, t)
        for layer in self.layers:
            x = layer(x, pos_emb, att_mask, pad_mask, self.pos_bias_u, self.pos_bias_v)
        if self.out_proj is not None:
            x = self.out_proj(x)
        return x.transpose(1, 2), lengths
