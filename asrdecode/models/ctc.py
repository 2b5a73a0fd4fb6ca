"""NeMo-style CTC acoustic model: mel front end -> Conformer encoder -> Conv1d head -> log-softmax."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.models.base import ModelOutput
from asrdecode.models.convasr import encoder_from_config
from asrdecode.models.nemo_base import NemoModelBase, preprocessor_and_encoder, tokenizer_files_for
from asrdecode.models.tokenizer import Tokenizer

__all__ = ["CTCHead", "NemoCTCModel", "CTC_CLASSES", "HYBRID_CLASSES", "model_class_name"]

CTC_CLASSES = ("EncDecCTCModelBPE", "EncDecCTCModel")
HYBRID_CLASSES = ("EncDecHybridRNNTCTCBPEModel", "EncDecHybridRNNTCTCModel")

_DECODER_KEYS = {"_target_", "feat_in", "num_classes", "vocabulary", "init_mode", "add_blank"}


def _short(target: Any) -> str:
    return str(target).rsplit(".", 1)[-1]


def model_class_name(cfg: dict[str, Any]) -> str | None:
    """Class name from the top-level ``target`` (or ``_target_``) of a NeMo model config, if any."""
    target = cfg.get("target", cfg.get("_target_"))
    return _short(target) if target else None


def _check_target(section: dict[str, Any], name: str, expected: str) -> None:
    target = section.get("_target_")
    if target is not None and _short(target) != expected:
        raise ModelError(f"unsupported {name}._target_={target!r} (supported: {expected})")


def ctc_decoder_config(cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(config path, section) of the CTC head: ``decoder``, or ``aux_ctc.decoder`` in hybrid models."""
    cls = model_class_name(cfg)
    if cls is not None and cls not in CTC_CLASSES + HYBRID_CLASSES:
        raise ModelError(
            f"unsupported model class target={cfg.get('target', cfg.get('_target_'))!r} "
            f"(supported: {', '.join(CTC_CLASSES + HYBRID_CLASSES)})"
        )
    if cls in HYBRID_CLASSES:
        section = (cfg.get("aux_ctc") or {}).get("decoder")
        path = "aux_ctc.decoder"
    else:
        section = cfg.get("decoder")
        path = "decoder"
    if not isinstance(section, dict):
        raise ModelError(f"model config has no {path} section")
    return path, section


class CTCHead(nn.Module):
    """NeMo ``ConvASRDecoder``: Conv1d(feat_in, V+1, k=1) named ``decoder_layers.0``, then log-softmax."""

    def __init__(self, feat_in: int, num_classes: int) -> None:
        super().__init__()
        self.num_classes_with_blank = num_classes + 1
        self.decoder_layers = nn.Sequential(nn.Conv1d(feat_in, num_classes + 1, kernel_size=1, bias=True))
        nn.init.xavier_uniform_(self.decoder_layers[0].weight)
        nn.init.zeros_(self.decoder_layers[0].bias)

    def forward(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """[B, D, T] -> [B, T, V+1] log-probabilities."""
        return torch.log_softmax(self.decoder_layers(encoder_out).transpose(1, 2), dim=-1)


class NemoCTCModel(NemoModelBase):
    """A NeMo CTC model (``EncDecCTCModel[BPE]`` or a hybrid's CTC head) as an ``AcousticModel``."""

    default_decoder = "ctc-greedy"  # what `decoder.type: auto` picks
    head = "ctc"

    decoder: CTCHead

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_config(
        cls, cfg: dict[str, Any], tokenizer: Tokenizer, tokenizer_files: dict[str, bytes] | None = None
    ) -> NemoCTCModel:
        """Build (randomly initialised) from a NeMo model config dict and a tokenizer.

        Raises ModelError naming the first unsupported option. ``tokenizer_files`` (name -> bytes) are
        kept for :func:`asrdecode.models.nemo.save_nemo`; for a sentencepiece tokenizer whose config
        says ``model_path: nemo:<name>`` the model bytes are filled in automatically.
        """
        cfg = copy.deepcopy(cfg)
        for key in ("preprocessor", "encoder"):
            if not isinstance(cfg.get(key), dict):
                raise ModelError(f"model config has no {key} section")
        _check_target(cfg["preprocessor"], "preprocessor", "AudioToMelSpectrogramPreprocessor")
        dec_path, dec_cfg = ctc_decoder_config(cfg)
        _check_target(dec_cfg, dec_path, "ConvASRDecoder")
        for key, value in dec_cfg.items():
            if key not in _DECODER_KEYS:
                raise ModelError(f"unsupported {dec_path} option {key}={value!r}")
        if not dec_cfg.get("add_blank", True):
            raise ModelError(f"unsupported {dec_path}.add_blank=False")

        preprocessor, encoder = preprocessor_and_encoder(cfg, encoder_from_config)
        num_classes = int(dec_cfg.get("num_classes", -1))
        if num_classes < 1:
            num_classes = tokenizer.vocab_size
        if num_classes != tokenizer.vocab_size:
            raise ModelError(
                f"{dec_path}.num_classes={num_classes} does not match the vocabulary size "
                f"{tokenizer.vocab_size}"
            )
        vocabulary = dec_cfg.get("vocabulary")
        if isinstance(vocabulary, list) and len(vocabulary) != num_classes:
            raise ModelError(
                f"{dec_path}.vocabulary has {len(vocabulary)} entries, num_classes={num_classes}"
            )
        feat_in = int(dec_cfg.get("feat_in", encoder.output_dim))
        if feat_in != encoder.output_dim:
            raise ModelError(
                f"{dec_path}.feat_in={feat_in} does not match the encoder output size {encoder.output_dim}"
            )
        files = tokenizer_files_for(cfg, tokenizer, tokenizer_files)
        return cls(preprocessor, encoder, CTCHead(feat_in, num_classes), tokenizer, cfg, files)

    # ----------------------------------------------------------------- AcousticModel protocol
    @property
    def model_class(self) -> str:
        return model_class_name(self.config) or (
            "EncDecCTCModelBPE" if self.tokenizer.kind == "bpe" else "EncDecCTCModel"
        )

    def forward_features(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput:
        """Features -> ModelOutput with ``log_probs`` [B, T', V+1] and ``encoder_out`` [B, T', D]."""
        if self.buffered is not None:
            return self._buffered_output(feats, feat_lengths)
        enc, enc_len = self.encoder(feats, feat_lengths)
        return self.model_output(enc_len, enc.transpose(1, 2), self.decoder(enc))

    def _buffered_output(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput:
        """Buffered inference on unnormalized features: each utterance's windows through the
        encoder and CTC head (`buffered_windows`), their kept rows joined."""
        plan = self.buffered
        window_rows = self.buffered_window_rows()
        rows, lag = plan.kept_rows(window_rows), plan.lag(window_rows)
        n = feat_lengths.shape[0]
        kept_lp: list[list[torch.Tensor]] = [[] for _ in range(n)]
        kept_enc: list[list[torch.Tensor]] = [[] for _ in range(n)]
        for b, enc in self.buffered_windows(feats, feat_lengths):
            lp = self.decoder(enc.transpose(1, 2))[:, rows]
            kept_lp[b].append(lp.reshape(-1, lp.shape[-1]))
            kept_enc[b].append(enc[:, rows].reshape(-1, enc.shape[2]))
        log_probs = [torch.cat(x) for x in kept_lp]
        encoded = [torch.cat(x) for x in kept_enc]
        lengths = torch.tensor([lp.shape[0] for lp in log_probs], dtype=torch.int64, device=feats.device)
        pad = torch.nn.utils.rnn.pad_sequence
        return self.model_output(
            lengths,
            pad(encoded, batch_first=True),
            pad(log_probs, batch_first=True),
            time_offset=-lag * self.frame_shift,
            time_limit=self.buffered_audio_seconds(feat_lengths),
        )

    def describe(self) -> dict:
        """Summary for ``asrdecode info``."""
        return {
            "type": "nemo-ctc",
            "class": self.model_class,
            **self._describe_common(),
            "buffered_inference": self.describe_buffered(),
        }
