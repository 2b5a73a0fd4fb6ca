"""What NeMo CTC and transducer models share: preprocessor + FastConformer encoder + tokenizer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.features.nemo_mel import NemoMelPreprocessor
from asrdecode.models.base import ModelOutput
from asrdecode.models.buffered import BufferedInference
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


def preprocessor_and_encoder(
    cfg: dict[str, Any], build_encoder: Callable[[dict[str, Any]], nn.Module]
) -> tuple[NemoMelPreprocessor, nn.Module]:
    """A NeMo model config's log-mel preprocessor and its encoder (``build_encoder`` of the
    ``encoder`` section), the encoder's input checked against the preprocessor's features."""
    preprocessor = NemoMelPreprocessor.from_config(cfg["preprocessor"])
    encoder = build_encoder(cfg["encoder"])
    if int(encoder.feat_in) != preprocessor.num_features:
        raise ModelError(
            f"encoder.feat_in={encoder.feat_in} does not match "
            f"preprocessor.features={preprocessor.num_features}"
        )
    if hasattr(encoder, "input_pad_to"):
        encoder.input_pad_to = preprocessor.featurizer.pad_to
    return preprocessor, encoder


class NemoModelBase(nn.Module):
    """AcousticModel surface common to NeMo models: rates, units, blank, features, word grouping.

    Subclasses add their output networks and implement `forward_features`.
    """

    preprocessor: nn.Module
    encoder: nn.Module
    tokenizer: Tokenizer
    source: str | None
    head: str  # the output this model decodes: "ctc" or "transducer"
    heads: list[str]  # every output the checkpoint has (a hybrid: transducer and ctc), set by the loader
    #: NeMo's buffered chunked inference (`use_buffered`), or None: the whole input at once
    buffered: BufferedInference | None = None
    #: added to each buffered window's standard deviation (NeMo's value for this kind of model)
    buffered_norm_eps: float = 1e-5

    def __init__(
        self,
        preprocessor: nn.Module,
        encoder: nn.Module,
        decoder: nn.Module,
        tokenizer: Tokenizer,
        config: dict[str, Any] | None = None,
        tokenizer_files: dict[str, bytes] | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__()
        self.preprocessor = preprocessor
        self.encoder = encoder
        self.decoder = decoder  # the CTC head or the prediction network
        self.tokenizer = tokenizer
        self.config: dict[str, Any] = config or {}
        self.tokenizer_files: dict[str, bytes] = dict(tokenizer_files or {})
        self.source = source

    def model_output(
        self,
        lengths: torch.Tensor,
        encoder_out: torch.Tensor,
        log_probs: torch.Tensor | None = None,
        **extra: Any,
    ) -> ModelOutput:
        """A ModelOutput with this model's frame shift, blank and units."""
        return ModelOutput(
            log_probs=log_probs,
            lengths=lengths,
            frame_shift=self.frame_shift,
            blank_id=self.blank_id,
            units=self.units,
            encoder_out=encoder_out,
            extra=extra,
        )

    def use_buffered(self, chunk_seconds: float, buffer_seconds: float) -> None:
        """Decode as NeMo's buffered inference does (`asrdecode.models.buffered`): windows of
        ``buffer_seconds`` sliding by ``chunk_seconds``; ``chunk_seconds`` 0 turns it off."""
        if chunk_seconds <= 0:
            self.buffered = None
            return
        hop = self.preprocessor.hop_length / self.sample_rate
        self.buffered = BufferedInference(
            chunk_seconds, buffer_seconds, hop, self.subsampling_factor, self.buffered_norm_eps
        )
        self.buffered.kept_rows(self.buffered_window_rows())  # one line for a window too short

    def buffered_window_rows(self) -> int:
        """Encoder frames of one buffered window."""
        return int(self.encoder.output_lengths(torch.tensor([self.buffered.buffer_frames]))[0])

    def buffered_windows(self, feats: torch.Tensor, feat_lengths: torch.Tensor, group: int = 16):
        """Each utterance's buffered windows through the encoder, `group` at a time: yields
        (utterance, [N, rows, D] encoder outputs of its next windows)."""
        for b, n in enumerate(feat_lengths.tolist()):
            windows = self.buffered.windows(feats[b, :, : int(n)])
            for g in range(0, windows.shape[0], group):
                part = windows[g : g + group]
                sizes = torch.full((part.shape[0],), part.shape[2], dtype=torch.int64, device=part.device)
                enc, _ = self.encoder(part, sizes)
                yield b, enc.transpose(1, 2)

    def buffered_audio_seconds(self, feat_lengths: torch.Tensor) -> list[float]:
        """Seconds of each utterance's audio before the silence buffered inference appends."""
        appended = self.buffered.pad_samples(self.sample_rate) // self.preprocessor.hop_length
        return [max(int(n) - appended, 0) * self.buffered.hop_seconds for n in feat_lengths.tolist()]

    def describe_buffered(self) -> str:
        plan = self.buffered
        if plan is None:
            return "off (model.chunk_seconds > 0 runs NeMo's buffered inference)"
        return f"chunks of {plan.chunk_seconds:g} s in windows of {plan.buffer_seconds:g} s"

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
        """[B, S] padded waveforms at ``sample_rate`` -> ([B, F, T] log-mel features, [B] frame
        counts); in buffered mode unnormalized, of the audio followed by the silence buffered
        inference appends."""
        if self.buffered is None:
            return self.preprocessor(waveforms, lengths)
        pad = self.buffered.pad_samples(self.sample_rate)
        waveforms = torch.nn.functional.pad(waveforms, (0, pad))
        return self.preprocessor.featurizer(waveforms, lengths + pad, normalize="none", pad_to=0)

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> ModelOutput:
        """Waveforms -> ModelOutput (differentiable in training mode)."""
        feats, feat_len = self.features(waveforms, lengths)
        return self.forward_features(feats, feat_len)

    def tokens_to_words(self, tokens: list[int]) -> list[tuple[str, int, int]]:
        """Unit ids -> [(word, first token index, last token index)]."""
        return self.tokenizer.words_of(tokens)

    def tokens_to_text(self, tokens: list[int]) -> str:
        """Unit ids -> NeMo's text (`Tokenizer.decode`: its whitespace as it comes)."""
        return self.tokenizer.decode(tokens)

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
