"""NeMo attention encoder-decoder (AED) models: Canary (``EncDecMultiTaskModel``).

A FastConformer encoder, a projection to the decoder's width, and a Transformer decoder
(Vaswani et al. 2017, "Attention is all you need", section 3: masked self-attention, attention
over the encoder states, a position-wise feed-forward net, sinusoidal positions; pre- or
post-LayerNorm) that writes the text token by token after a prompt of special tokens naming the
task (``<|startoftranscript|><|en|><|transcribe|><|en|><|pnc|>``, or Canary 2's
``<|startofcontext|><|startoftranscript|><|emo:undefined|><|en|><|en|><|pnc|><|noitn|>...``).

The module names are NeMo's, so that a checkpoint's state_dict loads as it is. The decoders
(`asrdecode.decoders.aed`) run the network through :class:`AedNetwork`: one call over the prompt,
then one call per token, with the keys and values of every layer's attention kept from step to
step (NeMo recomputes them from the layers' inputs at every step; the arithmetic per position is
the same).
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.features.nemo_mel import NemoMelPreprocessor
from asrdecode.models.conformer import ConformerEncoder
from asrdecode.models.ctc import _check_target, model_class_name
from asrdecode.models.nemo_base import NemoModelBase, preprocessor_and_encoder
from asrdecode.models.tokenizer import AggregateTokenizer, Tokenizer

__all__ = ["AED_CLASSES", "AedState", "NemoAEDModel", "canary_prompt"]

AED_CLASSES = ("EncDecMultiTaskModel",)
#: NeMo's additive attention mask value (``form_attention_mask``)
MASK_VALUE = -10000.0
_ACTIVATIONS = {"relu": torch.relu, "gelu": nn.functional.gelu}

# Canary prompt slots (NeMo's canary / canary2 prompt formats) and the values they take
_TRUE = {"yes", "true", "1"}
_FALSE = {"no", "false", "0"}
PROMPT_FORMATS = ("canary", "canary2")
#: input record fields that set an utterance's prompt slots
#: a frame token, as Canary writes them around each word with a ``<|timestamp|>`` prompt
FRAME_TOKEN = re.compile(r"<\|(\d+)\|>")
PROMPT_KEYS = (
    "source_lang",
    "target_lang",
    "pnc",
    "task",
    "taskname",
    "itn",
    "timestamp",
    "diarize",
    "emotion",
)


def _flag(value: Any, name: str) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE or text in (name, f"<|{name}|>"):
        return True
    if text in _FALSE or text in (f"no{name}", f"<|no{name}|>"):
        return False
    raise ModelError(f"prompt slot {name}={value!r}: use yes or no")


def _lang_token(value: Any, name: str) -> str:
    text = str(value).strip()
    if not text:
        raise ModelError(f"prompt slot {name} is empty: name a language (e.g. en)")
    return text if text.startswith("<|") and text.endswith("|>") else f"<|{text}|>"


def canary_prompt(prompt_format: str, slots: dict[str, Any]) -> list[str]:
    """The special tokens of a Canary prompt for inference, as NeMo's ``CanaryPromptFormatter`` /
    ``Canary2PromptFormatter`` write them: canary ``<|startoftranscript|>`` source, task, target,
    pnc; canary2 ``<|startofcontext|><|startoftranscript|>`` emotion, source, target, pnc, itn,
    timestamp, diarize (no decoder context). ``slots``: source_lang and target_lang (required),
    pnc (default yes), task (canary: transcribe if the languages are equal, else translate), itn,
    timestamp, diarize (canary2, default no) and emotion (default ``<|emo:undefined|>``)."""
    for name in ("source_lang", "target_lang"):
        if slots.get(name) in (None, ""):
            raise ModelError(
                f"the {prompt_format} prompt needs {name} (model.source_lang / model.target_lang)"
            )
    source = _lang_token(slots["source_lang"], "source_lang")
    target = _lang_token(slots["target_lang"], "target_lang")
    pnc = "<|pnc|>" if _flag(slots.get("pnc", "yes"), "pnc") else "<|nopnc|>"
    if prompt_format == "canary":
        task = str(slots.get("task") or slots.get("taskname") or "").strip().lower()
        if not task:
            task = "transcribe" if source == target else "translate"
        if task in ("asr", "transcribe", "<|transcribe|>"):
            task_token = "<|transcribe|>"
        elif task in ("ast", "translate", "s2t_translation", "<|translate|>"):
            task_token = "<|translate|>"
        else:
            raise ModelError(f"prompt slot task={task!r}: use transcribe or translate")
        if _flag(slots.get("timestamp", "no"), "timestamp"):
            raise ModelError("the canary prompt has no timestamps (canary2 models write them)")
        return ["<|startoftranscript|>", source, task_token, target, pnc]
    if prompt_format == "canary2":
        emotion = str(slots.get("emotion") or "<|emo:undefined|>").strip()
        if not emotion.startswith("<|"):
            emotion = f"<|emo:{emotion}|>"
        return [
            "<|startofcontext|>",
            "<|startoftranscript|>",
            emotion,
            source,
            target,
            pnc,
            "<|itn|>" if _flag(slots.get("itn", "no"), "itn") else "<|noitn|>",
            "<|timestamp|>" if _flag(slots.get("timestamp", "no"), "timestamp") else "<|notimestamp|>",
            "<|diarize|>" if _flag(slots.get("diarize", "no"), "diarize") else "<|nodiarize|>",
        ]
    raise ModelError(f"unsupported prompt_format={prompt_format!r} (supported: {', '.join(PROMPT_FORMATS)})")


# ------------------------------------------------------------------------------------------------
# Transformer decoder modules (NeMo's names)


class FixedPositionalEncoding(nn.Module):
    """Sinusoidal positions (Vaswani et al. 2017, section 3.5), divided by sqrt(hidden) as NeMo's."""

    def __init__(self, hidden_size: int, max_sequence_length: int) -> None:
        super().__init__()
        pos_enc = torch.zeros(max_sequence_length, hidden_size)
        position = torch.arange(0.0, max_sequence_length).unsqueeze(1)
        coef = -math.log(10000.0) / hidden_size
        div_term = torch.exp(coef * torch.arange(0.0, hidden_size, 2))
        pos_enc[:, 0::2] = torch.sin(position * div_term)
        pos_enc[:, 1::2] = torch.cos(position * div_term)
        pos_enc.div_(math.sqrt(hidden_size))
        self.register_buffer("pos_enc", pos_enc)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return torch.embedding(self.pos_enc, position_ids)


class TransformerEmbedding(nn.Module):
    """Token embedding + position encoding (+ token type), then LayerNorm."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        max_sequence_length: int,
        num_token_types: int,
        learn_positional_encodings: bool,
    ) -> None:
        super().__init__()
        self.max_sequence_length = max_sequence_length
        self.token_embedding = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        if learn_positional_encodings:
            self.position_embedding: nn.Module = nn.Embedding(max_sequence_length, hidden_size)
        else:
            self.position_embedding = FixedPositionalEncoding(hidden_size, max_sequence_length)
        if num_token_types > 0:
            self.token_type_embedding = nn.Embedding(num_token_types, hidden_size)
        self.layer_norm = nn.LayerNorm(hidden_size, eps=1e-5)

    def forward(self, input_ids: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        length = input_ids.shape[1]
        if start_pos + length > self.max_sequence_length:
            raise ValueError(f"decoder position {start_pos + length} beyond max_sequence_length")
        positions = torch.arange(start_pos, start_pos + length, device=input_ids.device)
        positions = positions.unsqueeze(0).expand(input_ids.shape[0], -1)
        return self.layer_norm(self.token_embedding(input_ids) + self.position_embedding(positions))


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over heads (Vaswani et al. 2017, eq. 1), queries and keys each
    divided by d_head ** 0.25 as NeMo's. Keys and values are projected by :meth:`project` so that a
    caller can keep them."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ModelError(f"hidden size {hidden_size} is not a multiple of {num_heads} attention heads")
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        self.scale = math.sqrt(math.sqrt(self.head_size))
        self.query_net = nn.Linear(hidden_size, hidden_size)
        self.key_net = nn.Linear(hidden_size, hidden_size)
        self.value_net = nn.Linear(hidden_size, hidden_size)
        self.out_projection = nn.Linear(hidden_size, hidden_size)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.num_heads, self.head_size).transpose(1, 2)

    def project(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[N, L, H] -> scaled keys and values [N, heads, L, d_head]."""
        return self._heads(self.key_net(keys)) / self.scale, self._heads(self.value_net(keys))

    def attend(
        self, queries: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """[N, Lq, H] queries over projected keys/values ([N, heads, Lk, d]); ``bias`` is added to
        the scores ([N or 1, 1, Lq or 1, Lk]: 0 or MASK_VALUE)."""
        query = self._heads(self.query_net(queries)) / self.scale
        scores = torch.matmul(query, key.transpose(-1, -2))
        if bias is not None:
            scores = scores + bias
        context = torch.matmul(torch.softmax(scores, dim=-1), value)
        context = context.transpose(1, 2).reshape(*queries.shape[:-1], -1)
        return self.out_projection(context)


class PositionWiseFF(nn.Module):
    def __init__(self, hidden_size: int, inner_size: int, hidden_act: str) -> None:
        super().__init__()
        self.dense_in = nn.Linear(hidden_size, inner_size)
        self.dense_out = nn.Linear(inner_size, hidden_size)
        self.act_fn = _ACTIVATIONS[hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_out(self.act_fn(self.dense_in(x)))


@dataclass
class LayerCache:
    """One decoder layer's kept attention inputs: self-attention keys/values of the positions so
    far and the cross-attention keys/values of the encoder states ([N, heads, L, d_head])."""

    self_key: torch.Tensor
    self_value: torch.Tensor
    cross_key: torch.Tensor
    cross_value: torch.Tensor


class TransformerDecoderBlock(nn.Module):
    """Self-attention, attention over the encoder, feed-forward; LayerNorm before each (pre_ln)
    or after each residual sum (post-LN), as NeMo's ``TransformerDecoderBlock``."""

    def __init__(
        self, hidden_size: int, inner_size: int, num_heads: int, hidden_act: str, pre_ln: bool
    ) -> None:
        super().__init__()
        self.pre_ln = pre_ln
        self.layer_norm_1 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.first_sub_layer = MultiHeadAttention(hidden_size, num_heads)
        self.layer_norm_2 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.second_sub_layer = MultiHeadAttention(hidden_size, num_heads)
        self.layer_norm_3 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.third_sub_layer = PositionWiseFF(hidden_size, inner_size, hidden_act)

    def forward(
        self, x: torch.Tensor, cache: LayerCache, self_bias: torch.Tensor | None, cross_bias: torch.Tensor
    ) -> torch.Tensor:
        """New positions ``x`` [N, L, H] -> their outputs; their keys and values are appended to
        ``cache`` first (they attend to themselves and to what came before)."""
        keys = self.layer_norm_1(x) if self.pre_ln else x
        key, value = self.first_sub_layer.project(keys)
        cache.self_key = torch.cat((cache.self_key, key), dim=2)
        cache.self_value = torch.cat((cache.self_value, value), dim=2)
        if self.pre_ln:
            h = self.first_sub_layer.attend(keys, cache.self_key, cache.self_value, self_bias) + x
            a = self.second_sub_layer.attend(
                self.layer_norm_2(h), cache.cross_key, cache.cross_value, cross_bias
            )
            a = a + h
            return self.third_sub_layer(self.layer_norm_3(a)) + a
        h = self.layer_norm_1(self.first_sub_layer.attend(x, cache.self_key, cache.self_value, self_bias) + x)
        a = self.layer_norm_2(
            self.second_sub_layer.attend(h, cache.cross_key, cache.cross_value, cross_bias) + h
        )
        return self.layer_norm_3(self.third_sub_layer(a) + a)


class TransformerDecoder(nn.Module):
    def __init__(
        self,
        num_layers: int,
        hidden_size: int,
        inner_size: int,
        num_heads: int,
        hidden_act: str,
        pre_ln: bool,
        pre_ln_final_layer_norm: bool,
    ) -> None:
        super().__init__()
        self.final_layer_norm = (
            nn.LayerNorm(hidden_size, eps=1e-5) if pre_ln and pre_ln_final_layer_norm else None
        )
        layer = TransformerDecoderBlock(hidden_size, inner_size, num_heads, hidden_act, pre_ln)
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerDecoderNM(nn.Module):
    """NeMo's ``TransformerDecoderNM``: ``_embedding`` and ``_decoder``."""

    def __init__(self, cfg: dict[str, Any], vocab_size: int) -> None:
        super().__init__()
        hidden = int(cfg["hidden_size"])
        act = str(cfg.get("hidden_act", "relu")).lower()
        if act not in _ACTIVATIONS:
            raise ModelError(f"unsupported transf_decoder hidden_act={act!r} (supported: relu, gelu)")
        self.max_sequence_length = int(cfg.get("max_sequence_length", 512))
        self._embedding = TransformerEmbedding(
            vocab_size,
            hidden,
            self.max_sequence_length,
            int(cfg.get("num_token_types", 0) or 0),
            bool(cfg.get("learn_positional_encodings", False)),
        )
        self._decoder = TransformerDecoder(
            int(cfg["num_layers"]),
            hidden,
            int(cfg["inner_size"]),
            int(cfg["num_attention_heads"]),
            act,
            bool(cfg.get("pre_ln", False)),
            bool(cfg.get("pre_ln_final_layer_norm", True)),
        )


class TokenClassifier(nn.Module):
    """NeMo's ``TokenClassifier``: an MLP (``mlp.layer0`` ...) whose last Linear gives the logits."""

    def __init__(self, hidden_size: int, num_classes: int, num_layers: int, activation: str) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ModelError(f"unsupported head activation={activation!r} (supported: relu, gelu)")
        self.mlp = nn.Module()
        self._act = _ACTIVATIONS[activation]
        self._linears: list[str] = []
        for i in range(num_layers - 1):
            setattr(self.mlp, f"layer{2 * i}", nn.Linear(hidden_size, hidden_size))
            self._linears.append(f"layer{2 * i}")
        last = f"layer{2 * (num_layers - 1)}"
        setattr(self.mlp, last, nn.Linear(hidden_size, num_classes))
        self._linears.append(last)

    @property
    def num_classes(self) -> int:
        return getattr(self.mlp, self._linears[-1]).out_features

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for i, name in enumerate(self._linears):
            hidden = getattr(self.mlp, name)(hidden)
            if i + 1 < len(self._linears):
                hidden = self._act(hidden)
        return torch.log_softmax(hidden, dim=-1)


# ------------------------------------------------------------------------------------------------
# The model


@dataclass
class AedState:
    """The decoder's state for N hypotheses: per-layer caches, the encoder mask as an additive
    bias [N, 1, 1, T], and the next position."""

    layers: list[LayerCache]
    cross_bias: torch.Tensor
    position: int = 0

    def select(self, index: torch.Tensor, same_utterances: bool = False) -> AedState:
        """The state of hypotheses ``index`` (rows of this one; beam search's reordering).
        ``same_utterances``: each row takes a row of its own utterance, whose encoder keys and
        values are its own already: only the self-attention caches are reordered."""
        layers = [
            LayerCache(
                c.self_key[index],
                c.self_value[index],
                c.cross_key if same_utterances else c.cross_key[index],
                c.cross_value if same_utterances else c.cross_value[index],
            )
            for c in self.layers
        ]
        return AedState(layers, self.cross_bias if same_utterances else self.cross_bias[index], self.position)


_DECODER_CFG_KEYS = {
    "max_sequence_length", "num_token_types", "embedding_dropout", "learn_positional_encodings",
    "hidden_size", "inner_size", "num_layers", "num_attention_heads", "ffn_dropout", "attn_score_dropout",
    "attn_layer_dropout", "hidden_act", "pre_ln", "vocab_size", "pre_ln_final_layer_norm",
}  # fmt: skip


class NemoAEDModel(NemoModelBase):
    """A NeMo Canary model (``EncDecMultiTaskModel``) as an ``AcousticModel`` whose output is the
    projected encoder states, and the network its decoders run (``extra["aed"] = self``)."""

    head = "aed"
    default_decoder = "aed-greedy"  # what `decoder.type: auto` picks
    #: longer inputs are cut into segments (Canary is trained on at most 40 s; NeMo cuts long inputs
    #: into chunks of 30-40 s)
    longest_input_seconds = 40.0

    def __init__(
        self,
        preprocessor: NemoMelPreprocessor,
        encoder: ConformerEncoder,
        encoder_decoder_proj: nn.Module,
        transf_decoder: TransformerDecoderNM,
        log_softmax: TokenClassifier,
        tokenizer: AggregateTokenizer | Tokenizer,
        prompt_format: str,
        prompt_defaults: dict[str, Any],
        config: dict[str, Any] | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__(preprocessor, encoder, transf_decoder, tokenizer, config, {}, source)
        del self.decoder  # NeMo names it transf_decoder
        self.encoder_decoder_proj = encoder_decoder_proj
        self.transf_decoder = transf_decoder
        self.log_softmax = log_softmax
        self.prompt_format = prompt_format
        self.prompt_slots: dict[str, Any] = dict(prompt_defaults)
        try:
            self.eos_id = tokenizer.special_id("<|endoftext|>")
            self.pad_id = tokenizer.special_id("<pad>")
        except KeyError as err:
            raise ModelError(f"the tokenizer has no {err.args[0]} (not a Canary tokenizer)") from None
        self._check_prompt()

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_config(cls, cfg: dict[str, Any], tokenizer: AggregateTokenizer | Tokenizer) -> NemoAEDModel:
        """Build (randomly initialised) from an ``EncDecMultiTaskModel`` config and its tokenizer."""
        cfg = copy.deepcopy(cfg)
        for key in ("preprocessor", "encoder", "transf_decoder", "head"):
            if not isinstance(cfg.get(key), dict):
                raise ModelError(f"model config has no {key} section (needed by EncDecMultiTaskModel)")
        _check_target(cfg["preprocessor"], "preprocessor", "AudioToMelSpectrogramPreprocessor")
        _check_target(cfg["encoder"], "encoder", "ConformerEncoder")
        _check_target(cfg["head"], "head", "TokenClassifier")
        transf_encoder = cfg.get("transf_encoder") or {}
        if int(transf_encoder.get("num_layers", 0) or 0) > 0:
            raise ModelError(
                f"unsupported transf_encoder.num_layers={transf_encoder['num_layers']} "
                "(a Transformer encoder after the Conformer: not supported yet)"
            )
        dec = cfg["transf_decoder"]
        if dec.get("model_name") not in (None, "", "nemo"):
            raise ModelError(f"unsupported transf_decoder.model_name={dec['model_name']!r} (NeMo's own only)")
        dec_cfg = dec.get("config_dict")
        if not isinstance(dec_cfg, dict):
            raise ModelError("transf_decoder has no config_dict")
        for key, value in dec_cfg.items():
            if key not in _DECODER_CFG_KEYS:
                raise ModelError(f"unsupported transf_decoder.config_dict option {key}={value!r}")
        dec_cfg = {**dec_cfg, "pre_ln_final_layer_norm": dec.get("pre_ln_final_layer_norm", True)}
        prompt_format = str(cfg.get("prompt_format") or "")
        if prompt_format not in PROMPT_FORMATS:
            raise ModelError(
                f"unsupported prompt_format={prompt_format!r} (supported: {', '.join(PROMPT_FORMATS)})"
            )

        preprocessor, encoder = preprocessor_and_encoder(cfg, ConformerEncoder.from_config)
        hidden = int(dec_cfg["hidden_size"])
        defaults = cfg.get("model_defaults") or {}
        enc_hidden = int(defaults.get("asr_enc_hidden", encoder.output_dim))
        if enc_hidden != encoder.output_dim:
            raise ModelError(
                f"model_defaults.asr_enc_hidden={enc_hidden} does not match the encoder output "
                f"{encoder.output_dim}"
            )
        proj: nn.Module = nn.Linear(enc_hidden, hidden) if enc_hidden != hidden else nn.Identity()
        vocab = 8 * math.ceil(tokenizer.vocab_size / 8)  # NeMo rounds the output layer up to 8
        transf_decoder = TransformerDecoderNM(dec_cfg, vocab)
        head = cfg["head"]
        if int(head.get("hidden_size", hidden)) != hidden:
            raise ModelError(f"head.hidden_size={head['hidden_size']} does not match the decoder's {hidden}")
        if head.get("log_softmax", True) is not True:
            raise ModelError("unsupported head.log_softmax=false")
        classifier = TokenClassifier(
            hidden, vocab, int(head.get("num_layers", 1)), str(head.get("activation", "relu")).lower()
        )
        return cls(
            preprocessor,
            encoder,
            proj,
            transf_decoder,
            classifier,
            tokenizer,
            prompt_format,
            _prompt_defaults(cfg.get("prompt_defaults")),
            cfg,
        )

    # ----------------------------------------------------------------- prompt
    def set_prompt(self, **slots: Any) -> None:
        """Override prompt slots (source_lang, target_lang, pnc, task, itn, ...); None keeps the
        checkpoint's default."""
        merged = dict(self.prompt_slots)
        merged.update({k: v for k, v in slots.items() if v not in (None, "")})
        self.prompt_slots = merged
        self._check_prompt()

    @property
    def aligns_words(self) -> bool:
        """Whether its words get times: the prompt asks for Canary's frame tokens (``<|timestamp|>``)."""
        return self.prompt_format == "canary2" and _flag(
            self.prompt_slots.get("timestamp", "no"), "timestamp"
        )

    def has_languages(self) -> bool:
        """Whether the model's own prompt names both languages (else each input must)."""
        return all(self.prompt_slots.get(k) not in (None, "") for k in ("source_lang", "target_lang"))

    def _check_prompt(self) -> None:
        """A one-line error now for a prompt the tokenizer cannot write (a checkpoint without
        prompt_defaults names no languages: then every input must, or model.source_lang /
        model.target_lang)."""
        if self.has_languages():
            self.prompt_ids()

    def prompt_tokens(self, slots: dict[str, Any] | None = None) -> list[str]:
        """The prompt's special tokens: the model's slots, updated by ``slots`` (an utterance's)."""
        return canary_prompt(self.prompt_format, {**self.prompt_slots, **(slots or {})})

    def prompt_ids(self, slots: dict[str, Any] | None = None) -> list[int]:
        """The decoder's input before the text (NeMo's ``context_ids``)."""
        tokens = self.prompt_tokens(slots)
        for token in tokens:
            try:
                self.tokenizer.special_id(token)
            except KeyError:
                raise ModelError(
                    f"the tokenizer has no special token {token} (the prompt {''.join(tokens)})"
                ) from None
        return self.tokenizer.prompt_ids(tokens)

    @staticmethod
    def utterance_prompt(record: dict[str, Any]) -> dict[str, Any]:
        """The prompt slots an input record sets (a NeMo Canary manifest's ``source_lang``,
        ``target_lang``, ``pnc``, ``taskname``, ...): they override the model's for that utterance."""
        return {k: record[k] for k in PROMPT_KEYS if record.get(k) not in (None, "")}

    def prompt_batch(
        self, per_row: list[dict[str, Any]] | None, rows: int, device: torch.device
    ) -> torch.Tensor:
        """[rows, P] prompt ids: the model's prompt, or each row's own (``per_row``: slots per row)."""
        if not per_row:
            return torch.tensor(self.prompt_ids(), dtype=torch.long, device=device).expand(rows, -1)
        ids = [self.prompt_ids(slots) for slots in per_row]
        if len({len(x) for x in ids}) != 1:
            raise ModelError("the utterances' prompts differ in length")
        return torch.tensor(ids, dtype=torch.long, device=device)

    # ----------------------------------------------------------------- AcousticModel protocol
    @property
    def units(self) -> list[str]:
        return self.tokenizer.units

    @property
    def blank_id(self) -> int:
        """No blank: -1."""
        return -1

    @property
    def model_class(self) -> str:
        return model_class_name(self.config) or "EncDecMultiTaskModel"

    def use_buffered(self, chunk_seconds: float, buffer_seconds: float) -> None:
        if chunk_seconds > 0:
            raise ModelError(
                f"{self.source}: model.chunk_seconds: buffered inference is for CTC and RNN-T models; "
                "long inputs of an AED model are cut into segments (batch.segment_seconds)"
            )
        self.buffered = None

    def forward_features(self, feats: torch.Tensor, feat_lengths: torch.Tensor):
        """Features -> ModelOutput with ``encoder_out`` [B, T', H] (projected to the decoder's width),
        ``log_probs=None`` and ``extra["aed"] = self``."""
        enc, enc_len = self.encoder(feats, feat_lengths)
        states = self.encoder_decoder_proj(enc.transpose(1, 2))
        return self.model_output(enc_len, states, aed=self)

    # ----------------------------------------------------------------- the network, for decoders
    @property
    def max_sequence_length(self) -> int:
        return self.transf_decoder.max_sequence_length

    def start(self, encoder_out: torch.Tensor, lengths: torch.Tensor) -> AedState:
        """The state before the prompt: each layer's cross-attention keys and values, projected
        once from the encoder states [N, T, H]; frames past ``lengths`` masked."""
        layers = []
        n, t, _ = encoder_out.shape
        for layer in self.transf_decoder._decoder.layers:
            cross = layer.second_sub_layer
            key, value = cross.project(encoder_out)
            empty = key.new_zeros(n, cross.num_heads, 0, cross.head_size)
            layers.append(LayerCache(empty, empty.clone(), key, value))
        valid = torch.arange(t, device=encoder_out.device)[None, :] < lengths.to(encoder_out.device)[:, None]
        bias = (1.0 - valid.to(encoder_out.dtype)) * MASK_VALUE
        return AedState(layers, bias[:, None, None, :])

    def step(self, state: AedState, tokens: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens`` [N, L] (the prompt, then one token at a time) at the state's position;
        returns the log-probabilities [N, V] of the token after the last one fed (NeMo's
        ``_one_step_forward``). Positions attend causally to the ones before them."""
        x = self.transf_decoder._embedding(tokens, start_pos=state.position)
        length = tokens.shape[1]
        self_bias = None
        if length > 1:  # causal mask within the new positions; earlier ones are all visible
            total = state.position + length
            future = torch.ones(length, total, dtype=torch.bool, device=tokens.device).triu(
                state.position + 1
            )
            self_bias = torch.zeros(length, total, dtype=x.dtype, device=tokens.device)
            self_bias = self_bias.masked_fill(future, MASK_VALUE)[None, None]
        for layer, cache in zip(self.transf_decoder._decoder.layers, state.layers, strict=True):
            x = layer(x, cache, self_bias, state.cross_bias)
        state.position += length
        last = x[:, -1]
        final = self.transf_decoder._decoder.final_layer_norm
        if final is not None:
            last = final(last)
        return self.log_softmax(last)

    tokens_to_text = None  # the multitask decoding's text is written as its words joined

    def tokens_to_words(self, tokens: list[int]) -> list[tuple[str, int, int]]:
        return self.tokenizer.words_of(tokens)

    def timed_words(
        self, tokens: list[int], probs: list[float] | None = None
    ) -> list[tuple[str, float | None, float | None, float | None]]:
        """(word, start, end, confidence) of a hypothesis. Where it has Canary's frame tokens, the
        tokens between a start and an end frame token (``<|12|> word<|15|>``) are timed by those
        frames (frame x the encoder's frame shift) and tokens outside such a pair are left out, as
        NeMo's ``process_aed_timestamp_outputs`` reads the text (frame tokens paired in turn); a
        timed text of several words gives each the span. Without frame tokens the words are untimed.
        ``probs``: each token's probability; a word's confidence is its tokens' least (else None)."""
        units = self.tokenizer.units
        frames = [
            (i, int(m.group(1)))
            for i, t in enumerate(tokens)
            if 0 <= t < len(units) and (m := FRAME_TOKEN.fullmatch(units[t]))
        ]

        def words_in(lo: int, hi: int, start: float | None, end: float | None) -> list[tuple]:
            found = self.tokenizer.words_of(tokens[lo:hi])
            return [(w, start, end, min(probs[lo + a : lo + b + 1]) if probs else None) for w, a, b in found]

        if len(frames) < 2:
            return words_in(0, len(tokens), None, None)
        words = []
        for (first, start), (last, end) in zip(frames[0::2], frames[1::2], strict=False):
            words += words_in(
                first + 1, last, round(start * self.frame_shift, 3), round(end * self.frame_shift, 3)
            )
        return words

    def describe(self) -> dict:
        """Summary for ``asrdecode info``."""
        layers = self.transf_decoder._decoder.layers
        first = layers[0] if len(layers) else None
        return {
            "type": "nemo-aed",
            "class": self.model_class,
            **self._describe_common(),
            "num_outputs": self.log_softmax.num_classes,
            "blank_id": None,
            "text_decoder": {
                "type": "transformer",
                "layers": len(layers),
                "hidden": self.transf_decoder._embedding.layer_norm.weight.numel(),
                "heads": first.first_sub_layer.num_heads if first is not None else 0,
                "pre_ln": bool(first.pre_ln) if first is not None else False,
                "max_sequence_length": self.max_sequence_length,
            },
            "prompt": "".join(self.prompt_tokens())
            if self.has_languages()
            else "no languages by default (model.source_lang / model.target_lang, or per input)",
            "languages": self.tokenizer.langs,
        }


def _prompt_defaults(section: Any) -> dict[str, Any]:
    """The user turn's slots of a config's ``prompt_defaults`` (a list of {role, slots})."""
    if not isinstance(section, list):
        return {}
    for turn in section:
        if isinstance(turn, dict) and turn.get("role") == "user" and isinstance(turn.get("slots"), dict):
            return dict(turn["slots"])
    return {}
