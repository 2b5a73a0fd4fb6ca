"""NeMo's ``ConvASREncoder`` (QuartzNet / Jasper / Citrinet) with NeMo's parameter names.

Written from the QuartzNet (Kriman et al. 2020) and Citrinet (Majumdar et al. 2021) papers and the
layout of NeMo checkpoints: a stack of blocks (``jasper`` list in the config), each

* ``repeat`` sub-blocks of [conv (``separable``: depthwise k + pointwise 1x1) -> BatchNorm (eps 1e-3)
  -> activation -> dropout], the last without activation; with ``stride_last`` only the last
  sub-block strides;
* optional squeeze-and-excitation (Citrinet): the mean over each utterance's valid frames (padding
  zeroed), Linear(C, C / r) -> activation -> Linear -> sigmoid, times the input (global context
  only), computed for each utterance on its own (below);
* optional residual: 1x1 conv -> BatchNorm of the block input (strided with ``residual_mode:
  stride_add``), added before the block's final activation and dropout.

Every convolution first zeroes the input frames past each utterance's length (NeMo's MaskedConv1d),
uses "same" padding (dilation x (k - 1) / 2 each side) and strides lengths as
``(L + 2p - dilation x (k - 1) - 1) // stride + 1``. Input ``[B, F, T]`` + lengths, output
``[B, C, T']`` + lengths (channels first, like NeMo; frames past the lengths are not meaningful).
Options a checkpoint uses that are not implemented are one-line ModelErrors.

Batches round as single utterances: convolutions, BatchNorm and activations are the same operations
per frame whatever the batch, and the squeeze-and-excitation sums each utterance over the frames its
input would have alone (`frames_alone`: the front end's frames padded to ``pad_to``, through the
strides) and applies its Linear layers to that utterance alone, so a batched utterance's output is
its lone output bit for bit on the CPU (and NeMo's own, given NeMo's features).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.features.nemo_mel import frames_alone

_ACTIVATIONS = {
    "relu": nn.ReLU,
    "swish": nn.SiLU,
    "silu": nn.SiLU,
    "hardtanh": lambda: nn.Hardtanh(0.0, 20.0),
}
_ENCODER_KEYS = {
    "_target_", "jasper", "activation", "feat_in", "normalization_mode", "residual_mode", "norm_groups",
    "conv_mask", "frame_splicing", "init_mode", "quantize",
}  # fmt: skip
_BLOCK_KEYS = {
    "filters", "repeat", "kernel", "stride", "dilation", "dropout", "residual", "separable", "se",
    "se_context_size", "se_reduction_ratio", "kernel_size_factor", "stride_last", "residual_mode",
    "groups", "heads", "residual_dense", "se_interpolation_mode", "future_context",
}  # fmt: skip


def _first(value: Any) -> int:
    return int(value[0]) if isinstance(value, (list, tuple)) else int(value)


def _kernel(size: int, factor: float) -> int:
    """NeMo's kernel_size_factor: scaled, at least 1, odd."""
    k = max(int(size * factor), 1)
    return k + 1 if k % 2 == 0 else k


class MaskedConv(nn.Module):
    """A Conv1d (as ``.conv``, NeMo's name) whose input frames past the lengths are zeroed first."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, dilation: int, groups: int) -> None:
        super().__init__()
        self.padding = dilation * (kernel - 1) // 2
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride, self.padding, dilation, groups, bias=False)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        c = self.conv
        if c.stride[0] == 1 and 2 * self.padding == c.dilation[0] * (c.kernel_size[0] - 1):
            return lengths
        span = lengths + 2 * self.padding - c.dilation[0] * (c.kernel_size[0] - 1) - 1
        return torch.div(span, c.stride[0], rounding_mode="trunc") + 1

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        valid = torch.arange(x.shape[2], device=x.device).unsqueeze(0) < lengths.unsqueeze(1)
        return self.conv(x * valid.unsqueeze(1).to(x.dtype)), self.output_lengths(lengths)


class SqueezeExcite(nn.Module):
    """Global squeeze-and-excitation over each utterance's valid frames (``fc``: NeMo's names)."""

    def __init__(self, channels: int, reduction: int, activation: nn.Module) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(channels, channels // reduction, bias=False),
            activation,
            nn.Linear(channels // reduction, channels, bias=False),
        )

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, extents: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``extents[b]``: the frames utterance b's input has alone (its sum runs over them)."""
        valid = (torch.arange(x.shape[2], device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1)
        x = x.masked_fill(~valid, 0.0)
        count = valid.sum(-1, keepdim=True).to(x.dtype)  # [B, 1, 1]
        scales = []
        for b, extent in enumerate(extents):
            mean = x[b : b + 1, :, : min(extent, x.shape[2])].sum(-1, keepdim=True) / count[b : b + 1]
            scales.append(torch.sigmoid(self.fc(mean.transpose(1, 2)).transpose(1, 2)))  # [1, C, 1]
        return x * torch.cat(scales), lengths


class ConvBlock(nn.Module):
    """One JasperBlock; module lists indexed exactly as NeMo's (``mconv``, ``res``, ``mout``)."""

    def __init__(self, c_in: int, spec: dict[str, Any], activation: str, residual_mode: str) -> None:
        super().__init__()
        for key in spec:
            if key not in _BLOCK_KEYS:
                raise ModelError(f"unsupported encoder.jasper option {key}={spec[key]!r}")
        unsupported = {
            "groups": (spec.get("groups", 1), 1),
            "heads": (spec.get("heads", -1), -1),
            "residual_dense": (spec.get("residual_dense", False), False),
            "future_context": (spec.get("future_context", -1), -1),
            "se_context_size": (spec.get("se_context_size", -1), -1),
        }
        for key, (value, supported) in unsupported.items():
            if value != supported:
                raise ModelError(f"unsupported encoder.jasper.{key}={value!r} (supported: {supported!r})")
        self.residual_mode = spec.get("residual_mode", residual_mode)
        if self.residual_mode not in ("add", "stride_add"):
            raise ModelError(
                f"unsupported encoder.jasper.residual_mode={self.residual_mode!r} (add, stride_add)"
            )
        c_out = int(spec["filters"])
        kernel = _kernel(_first(spec["kernel"]), float(spec.get("kernel_size_factor", 1.0)))
        stride, dilation = _first(spec["stride"]), _first(spec["dilation"])
        if stride > 1 and dilation > 1:
            raise ModelError("unsupported encoder.jasper: stride and dilation both > 1")
        separable = bool(spec.get("separable", False))
        repeat = int(spec["repeat"])
        act = _ACTIVATIONS[activation]

        def conv_bn(c_a: int, stride_here: int) -> list[nn.Module]:
            if separable:
                convs = [
                    MaskedConv(c_a, c_a, kernel, stride_here, dilation, c_a),
                    MaskedConv(c_a, c_out, 1, 1, 1, 1),
                ]
            else:
                convs = [MaskedConv(c_a, c_out, kernel, stride_here, dilation, 1)]
            return [*convs, nn.BatchNorm1d(c_out, eps=1e-3)]

        layers: list[nn.Module] = []
        c_a = c_in
        for _ in range(repeat - 1):
            layers += [*conv_bn(c_a, 1 if spec.get("stride_last", False) else stride), act(), nn.Dropout(0.0)]
            c_a = c_out
        layers += conv_bn(c_a, stride)
        if spec.get("se", False):
            layers.append(SqueezeExcite(c_out, int(spec.get("se_reduction_ratio", 8)), act()))
        self.mconv = nn.ModuleList(layers)
        if spec.get("residual", False):
            res_stride = stride if self.residual_mode == "stride_add" else 1
            self.res: nn.ModuleList | None = nn.ModuleList(
                [
                    nn.ModuleList(
                        [MaskedConv(c_in, c_out, 1, res_stride, 1, 1), nn.BatchNorm1d(c_out, eps=1e-3)]
                    )
                ]
            )
        else:
            self.res = None
        self.mout = nn.Sequential(act(), nn.Dropout(0.0))

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, extents: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """-> (output, its lengths, each utterance's frames alone after the block's strides)."""
        out, out_lengths, out_extents = x, lengths, extents
        for layer in self.mconv:
            if isinstance(layer, MaskedConv):
                out, out_lengths = layer(out, out_lengths)
                out_extents = layer.output_lengths(torch.tensor(out_extents)).tolist()
            elif isinstance(layer, SqueezeExcite):
                out, out_lengths = layer(out, out_lengths, out_extents)
            else:
                out = layer(out)
        if self.res is not None:
            res = x
            for layer in self.res[0]:
                res = layer(res, lengths)[0] if isinstance(layer, MaskedConv) else layer(res)
            out = out + res
        return self.mout(out), out_lengths, out_extents


class ConvASREncoder(nn.Module):
    """The block stack (``encoder``, NeMo's name): [B, F, T] -> [B, C, T'] + lengths."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        for key in cfg:
            if key not in _ENCODER_KEYS:
                raise ModelError(f"unsupported encoder option {key}={cfg[key]!r}")
        self.cfg = dict(cfg)
        activation = str(cfg.get("activation", "relu"))
        if activation not in _ACTIVATIONS:
            raise ModelError(f"unsupported encoder.activation={activation!r} ({', '.join(_ACTIVATIONS)})")
        checks = {
            "normalization_mode": (cfg.get("normalization_mode", "batch"), "batch"),
            "frame_splicing": (cfg.get("frame_splicing", 1), 1),
            "conv_mask": (cfg.get("conv_mask", True), True),
            "quantize": (cfg.get("quantize", False), False),
        }
        for key, (value, supported) in checks.items():
            if value != supported:
                raise ModelError(f"unsupported encoder.{key}={value!r} (supported: {supported!r})")
        blocks = cfg.get("jasper")
        if not isinstance(blocks, list) or not blocks:
            raise ModelError("encoder.jasper must be a non-empty list of blocks")
        layers, c_in, factor = [], int(cfg["feat_in"]), 1
        for spec in blocks:
            if not isinstance(spec, dict):
                raise ModelError("encoder.jasper entries must be mappings")
            layers.append(ConvBlock(c_in, spec, activation, str(cfg.get("residual_mode", "add"))))
            c_in, factor = int(spec["filters"]), factor * _first(spec["stride"])
        self.encoder = nn.Sequential(*layers)
        #: the front end's ``pad_to`` (`frames_alone`), set with the preprocessor it follows
        self.input_pad_to = 0
        self.feat_in = int(cfg["feat_in"])
        self.output_dim = c_in
        self.subsampling_factor = factor

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ConvASREncoder:
        try:
            return cls(cfg)
        except (KeyError, TypeError, ValueError) as err:
            raise ModelError(f"invalid encoder config ({type(err).__name__}: {err})") from None

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        for block in self.encoder:
            for layer in block.mconv:
                if isinstance(layer, MaskedConv):
                    lengths = layer.output_lengths(lengths)
        return lengths

    def describe(self) -> dict:
        blocks = self.cfg["jasper"]
        return {
            "type": "convasr",
            "family": "Citrinet" if any(b.get("se") for b in blocks) else "QuartzNet/Jasper",
            "blocks": len(blocks),
            "channels": [int(b["filters"]) for b in blocks],
            "activation": self.cfg.get("activation", "relu"),
            "subsampling_factor": self.subsampling_factor,
        }

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = features, lengths.to(device=features.device, dtype=torch.int64)
        extents = frames_alone(lengths.tolist(), self.input_pad_to)
        for block in self.encoder:
            x, lengths, extents = block(x, lengths, extents)
        return x, lengths


def encoder_from_config(cfg: dict[str, Any]) -> nn.Module:
    """ConformerEncoder or ConvASREncoder by the section's ``_target_``."""
    from asrdecode.models.conformer import ConformerEncoder

    target = str(cfg.get("_target_", "")).rsplit(".", 1)[-1]
    if target == "ConvASREncoder":
        return ConvASREncoder.from_config(cfg)
    if target in ("ConformerEncoder", ""):
        return ConformerEncoder.from_config(cfg)
    raise ModelError(
        f"unsupported encoder._target_={cfg.get('_target_')!r} (ConformerEncoder, ConvASREncoder)"
    )
