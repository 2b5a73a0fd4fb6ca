"""NeMo-style transducer (RNN-T / TDT) acoustic model: mel front end -> Conformer encoder, plus the
LSTM prediction network and the joint network that a transducer decoder runs step by step.

Module and parameter names equal NeMo's (``decoder.prediction.embed``, ``decoder.prediction.dec_rnn.lstm``,
``joint.enc``, ``joint.pred``, ``joint.joint_net.<i>``) so a NeMo ``model_weights.ckpt`` loads strictly.

How a decoder reaches the networks: :meth:`NemoTransducerModel.forward_features` returns a
:class:`~asrdecode.models.base.ModelOutput` with ``log_probs=None``, ``encoder_out`` [B, T, D] and
``extra["transducer"]`` = the model itself, which implements :class:`TransducerNetwork` — the small
step interface used by ``asrdecode.decoders.transducer_greedy`` (encoder/prediction projections are
separate methods so a decoder can precompute them, paper 003 section 3.4).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from asrdecode.errors import ModelError
from asrdecode.features.nemo_mel import NemoMelPreprocessor
from asrdecode.models.base import ModelOutput
from asrdecode.models.buffered import WindowRows
from asrdecode.models.conformer import ConformerEncoder
from asrdecode.models.ctc import model_class_name
from asrdecode.models.nemo_base import NemoModelBase, preprocessor_and_encoder, tokenizer_files_for
from asrdecode.models.tokenizer import Tokenizer

__all__ = [
    "TRANSDUCER_CLASSES",
    "HYBRID_TRANSDUCER_CLASSES",
    "PredictionNetwork",
    "PredictionWorkspace",
    "TransducerJoint",
    "TransducerNetwork",
    "NemoTransducerModel",
    "transducer_durations",
]

TRANSDUCER_CLASSES = ("EncDecRNNTBPEModel", "EncDecRNNTModel")
# Hybrid RNNT-CTC models also load as transducers (their CTC head is dropped).
HYBRID_TRANSDUCER_CLASSES = ("EncDecHybridRNNTCTCBPEModel", "EncDecHybridRNNTCTCModel")

PredState = tuple[torch.Tensor, torch.Tensor]  # LSTM (h, c), each [layers, B, H]

_DECODER_KEYS = {
    "_target_", "prednet", "vocab_size", "normalization_mode", "random_state_sampling", "blank_as_pad",
}  # fmt: skip
_PREDNET_KEYS = {
    "pred_hidden", "pred_rnn_layers", "t_max", "dropout", "forget_gate_bias", "weights_init_scale",
    "hidden_hidden_bias_scale", "rnn_hidden_size",
}  # fmt: skip
_JOINT_KEYS = {
    "_target_", "log_softmax", "preserve_memory", "fuse_loss_wer", "fused_batch_size", "jointnet",
    "num_extra_outputs", "num_classes", "vocabulary", "experimental_fuse_loss_wer", "masking_prob",
}  # fmt: skip
_JOINTNET_KEYS = {"joint_hidden", "activation", "dropout", "encoder_hidden", "pred_hidden"}
_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def _short(target: Any) -> str:
    return str(target).rsplit(".", 1)[-1]


def _check_target(section: dict[str, Any], name: str, expected: str) -> None:
    target = section.get("_target_")
    if target is not None and _short(target) != expected:
        raise ModelError(f"unsupported {name}._target_={target!r} (supported: {expected})")


def _check_keys(section: dict[str, Any], allowed: set[str], name: str) -> None:
    for key, value in section.items():
        if key not in allowed:
            raise ModelError(f"unsupported {name} option {key}={value!r}")


def transducer_durations(cfg: dict[str, Any]) -> list[int] | None:
    """TDT durations from a NeMo transducer config, or None for a conventional RNN-T.

    Looked up in ``model_defaults.tdt_durations``, ``loss.tdt_kwargs.durations`` and ``decoding.durations``
    (with ``decoding.model_type: tdt``); all that are present must agree. Multi-blank transducers
    (``loss.loss_name: multiblank_rnnt`` / ``decoding.big_blank_durations``) raise ModelError.
    """
    loss = cfg.get("loss") or {}
    decoding = cfg.get("decoding") or {}
    loss_name = loss.get("loss_name")
    if loss_name not in (None, "default", "rnnt", "warprnnt", "warprnnt_numba", "pytorch", "tdt"):
        raise ModelError(f"unsupported loss.loss_name={loss_name!r} (supported: rnnt, tdt)")
    if decoding.get("big_blank_durations"):
        raise ModelError(f"unsupported decoding.big_blank_durations={decoding['big_blank_durations']!r}")
    model_type = decoding.get("model_type", "rnnt")
    if model_type not in ("rnnt", "tdt"):
        raise ModelError(f"unsupported decoding.model_type={model_type!r} (supported: rnnt, tdt)")
    found: dict[str, Any] = {}
    if (cfg.get("model_defaults") or {}).get("tdt_durations") is not None:
        found["model_defaults.tdt_durations"] = cfg["model_defaults"]["tdt_durations"]
    if loss_name == "tdt":
        found["loss.tdt_kwargs.durations"] = (loss.get("tdt_kwargs") or {}).get("durations")
    if model_type == "tdt":
        found["decoding.durations"] = decoding.get("durations")
    is_tdt = loss_name == "tdt" or model_type == "tdt"
    if not is_tdt:
        return None
    values = {k: v for k, v in found.items() if v is not None}
    if not values:
        raise ModelError("TDT model config has no durations (decoding.durations / loss.tdt_kwargs.durations)")
    first_key, first = next(iter(values.items()))
    for key, value in values.items():
        if list(value) != list(first):
            raise ModelError(f"{key}={list(value)} disagrees with {first_key}={list(first)}")
    if not isinstance(first, list) or not first or not all(isinstance(d, int) and d >= 0 for d in first):
        raise ModelError(f"{first_key}={first!r} must be a non-empty list of non-negative integers")
    if max(first) == 0:
        raise ModelError(f"{first_key}={first!r} has no positive duration")
    return [int(d) for d in first]


@dataclass
class PredictionWorkspace:
    """Preallocated buffers of one batched prediction-network step (:meth:`PredictionNetwork.step_into`):
    embedding ``x`` [B, E], LSTM ``gates`` [B, 4 H_cell], ``cell_out`` [B, H_cell], new state ``h``
    [layers, B, H] and ``c`` [layers, B, H_cell]."""

    x: torch.Tensor
    index: torch.Tensor
    not_blank: torch.Tensor
    gates: torch.Tensor
    cell_out: torch.Tensor
    h: torch.Tensor
    c: torch.Tensor

    @property
    def state(self) -> PredState:
        return self.h, self.c


class _LSTMDropout(nn.Module):
    """Holds the LSTM as ``.lstm`` (NeMo's ``dec_rnn.lstm`` naming); dropout is a no-op at inference."""

    def __init__(self, input_size: int, hidden: int, layers: int, rnn_hidden: int) -> None:
        super().__init__()
        if rnn_hidden > hidden:  # NeMo: a projected LSTM (proj_size = pred_hidden)
            self.lstm = nn.LSTM(input_size, rnn_hidden, num_layers=layers, proj_size=hidden, batch_first=True)
        else:
            self.lstm = nn.LSTM(input_size, hidden, num_layers=layers, batch_first=True)


class PredictionNetwork(nn.Module):
    """NeMo ``RNNTDecoder``: Embedding(V+1, H, padding_idx=blank) (or Embedding(V, H) without
    ``blank_as_pad``) followed by an LSTM of any number of layers.

    The start-of-sequence input is the blank id: with ``blank_as_pad`` its embedding is the padding row
    (zero), otherwise the zero vector is used directly; LSTM states start at zero.
    """

    def __init__(
        self, vocab_size: int, hidden: int, layers: int, blank_as_pad: bool = True, rnn_hidden: int = -1
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.blank_id = vocab_size
        self.hidden = hidden
        self.layers = layers
        self.blank_as_pad = blank_as_pad
        rows = vocab_size + 1 if blank_as_pad else vocab_size
        self.prediction = nn.ModuleDict(
            {
                "embed": nn.Embedding(rows, hidden, padding_idx=vocab_size if blank_as_pad else None),
                "dec_rnn": _LSTMDropout(hidden, hidden, layers, rnn_hidden),
            }
        )

    @property
    def state_hidden(self) -> int:
        lstm = self.prediction["dec_rnn"].lstm
        return int(lstm.hidden_size)

    def initial_state(
        self, batch: int, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> PredState:
        """Zero LSTM state ([layers, B, H] h and [layers, B, H_cell] c)."""
        lstm = self.prediction["dec_rnn"].lstm
        h_size = lstm.proj_size if lstm.proj_size > 0 else lstm.hidden_size
        h = torch.zeros(self.layers, batch, h_size, device=device, dtype=dtype)
        c = torch.zeros(self.layers, batch, lstm.hidden_size, device=device, dtype=dtype)
        return h, c

    def embed(self, labels: torch.Tensor) -> torch.Tensor:
        """[B] label ids (blank = SOS) -> [B, H] embeddings."""
        if self.blank_as_pad:
            return self.prediction["embed"](labels)
        is_blank = labels == self.blank_id
        emb = self.prediction["embed"](torch.where(is_blank, torch.zeros_like(labels), labels))
        return emb * (~is_blank).unsqueeze(-1).to(emb.dtype)

    def forward(self, labels: torch.Tensor, state: PredState) -> tuple[torch.Tensor, PredState]:
        """One step: [B] labels + state -> ([B, H] output, new state)."""
        x = self.embed(labels).unsqueeze(1)
        out, (h, c) = self.prediction["dec_rnn"].lstm(x, state)
        return out.squeeze(1), (h, c)

    def workspace(
        self, batch: int, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> PredictionWorkspace:
        """Buffers for :meth:`step_into` (one batched step without allocating)."""
        lstm = self.prediction["dec_rnn"].lstm
        h, c = self.initial_state(batch, device, dtype)
        return PredictionWorkspace(
            x=torch.zeros(batch, self.prediction["embed"].embedding_dim, device=device, dtype=dtype),
            index=torch.zeros(batch, device=device, dtype=torch.long),
            not_blank=torch.zeros(batch, 1, device=device, dtype=torch.bool),
            gates=torch.zeros(batch, 4 * lstm.hidden_size, device=device, dtype=dtype),
            cell_out=torch.zeros(batch, lstm.hidden_size, device=device, dtype=dtype),
            h=h,
            c=c,
        )

    def step_into(self, labels: torch.Tensor, state: PredState, ws: PredictionWorkspace) -> torch.Tensor:
        """One LSTM step for [B] labels from ``state`` into ``ws.h`` / ``ws.c`` with ``out=`` and in-place
        ops only (no new tensors; CUDA-graph friendly). Same maths as :meth:`forward` (the LSTM cell
        equations: i, f, g, o gates; c' = f c + i g; h' = o tanh(c'), projected when ``proj_size``).
        Returns the output (a view of ``ws.h[-1]``)."""
        lstm = self.prediction["dec_rnn"].lstm
        weight = self.prediction["embed"].weight
        if self.blank_as_pad:  # blank (<SOS>) = the zero padding row
            torch.index_select(weight, 0, labels, out=ws.x)
        else:  # no row for blank: look up a valid row, then zero it
            torch.index_select(
                weight, 0, torch.clamp(labels, max=self.vocab_size - 1, out=ws.index), out=ws.x
            )
            torch.ne(labels.unsqueeze(-1), self.blank_id, out=ws.not_blank)
            ws.x.mul_(ws.not_blank)
        h_old, c_old = state
        inp = ws.x
        for layer in range(self.layers):
            w_ih = getattr(lstm, f"weight_ih_l{layer}")
            w_hh = getattr(lstm, f"weight_hh_l{layer}")
            if lstm.bias:
                torch.addmm(getattr(lstm, f"bias_ih_l{layer}"), inp, w_ih.t(), out=ws.gates)
                ws.gates.add_(getattr(lstm, f"bias_hh_l{layer}"))
            else:
                torch.mm(inp, w_ih.t(), out=ws.gates)
            ws.gates.addmm_(h_old[layer], w_hh.t())
            i, f, g, o = ws.gates.chunk(4, dim=1)
            i.sigmoid_()
            f.sigmoid_()
            g.tanh_()
            o.sigmoid_()
            c_new = ws.c[layer]
            torch.mul(f, c_old[layer], out=c_new)
            c_new.addcmul_(i, g)
            torch.tanh(c_new, out=ws.cell_out)
            if lstm.proj_size > 0:
                ws.cell_out.mul_(o)
                torch.mm(ws.cell_out, getattr(lstm, f"weight_hr_l{layer}").t(), out=ws.h[layer])
            else:
                torch.mul(o, ws.cell_out, out=ws.h[layer])
            inp = ws.h[layer]
        return ws.h[self.layers - 1]

    def forward_sequence(
        self, labels: torch.Tensor, state: PredState | None = None
    ) -> tuple[torch.Tensor, PredState]:
        """[B, U] label ids -> ([B, U, H] outputs, final state) (teacher forcing; blank = SOS/zero)."""
        if self.blank_as_pad:
            x = self.prediction["embed"](labels)
        else:
            is_blank = labels == self.blank_id
            x = self.prediction["embed"](torch.where(is_blank, torch.zeros_like(labels), labels))
            x = x * (~is_blank).unsqueeze(-1).to(x.dtype)
        out, (h, c) = self.prediction["dec_rnn"].lstm(x, state)
        return out, (h, c)


class TransducerJoint(nn.Module):
    """NeMo ``RNNTJoint``: ``joint_net(act(enc(f) + pred(g)))`` with ``joint_net = [act, (dropout), Linear]``.

    Output width = V + 1 (+ number of TDT durations): token logits, blank (= V), then duration logits.
    """

    def __init__(
        self,
        enc_hidden: int,
        pred_hidden: int,
        joint_hidden: int,
        num_classes: int,
        num_extra_outputs: int = 0,
        activation: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.num_extra_outputs = num_extra_outputs
        self.enc = nn.Linear(enc_hidden, joint_hidden)
        self.pred = nn.Linear(pred_hidden, joint_hidden)
        layers: list[nn.Module] = [_ACTIVATIONS[activation]()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(joint_hidden, num_classes + 1 + num_extra_outputs))
        self.joint_net = nn.Sequential(*layers)

    def project_encoder(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """[..., D] encoder frames -> [..., J] (encoder half of the joint)."""
        return self.enc(encoder_out)

    def project_prediction(self, pred_out: torch.Tensor) -> torch.Tensor:
        """[..., H] prediction-net outputs -> [..., J]."""
        return self.pred(pred_out)

    def joint_after_projection(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor:
        """Raw logits [..., V+1(+durations)] from broadcastable projections."""
        return self.joint_net(enc_proj + pred_proj)

    @property
    def hidden_size(self) -> int:
        return int(self.enc.out_features)

    def project_prediction_into(self, pred_out: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """:meth:`project_prediction` of [B, H] into ``out`` [B, J] (no new tensors)."""
        return torch.addmm(self.pred.bias, pred_out, self.pred.weight.t(), out=out)

    def joint_after_projection_into(
        self, enc_proj: torch.Tensor, pred_proj: torch.Tensor, hidden: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`joint_after_projection` of [B, J] rows into ``out`` [B, V+1(+durations)], using ``hidden``
        [B, J] as scratch (in-place activation, ``addmm`` into ``out``; dropout is off at inference)."""
        torch.add(enc_proj, pred_proj, out=hidden)
        act = self.joint_net[0]
        if isinstance(act, nn.ReLU):
            hidden.relu_()
        elif isinstance(act, nn.Sigmoid):
            hidden.sigmoid_()
        else:
            hidden.tanh_()
        final = self.joint_net[-1]
        return torch.addmm(final.bias, hidden, final.weight.t(), out=out)

    def forward(self, encoder_out: torch.Tensor, pred_out: torch.Tensor) -> torch.Tensor:
        """Full joint lattice: [B, T, D] x [B, U, H] -> [B, T, U, V+1(+durations)] raw logits."""
        f = self.project_encoder(encoder_out).unsqueeze(2)
        g = self.project_prediction(pred_out).unsqueeze(1)
        return self.joint_after_projection(f, g)


class TransducerNetwork(Protocol):
    """What a transducer decoder needs from a model (implemented by :class:`NemoTransducerModel`).

    ``blank_id`` = V (last token column); ``durations`` = TDT durations (joint columns V+1..) or None.
    """

    blank_id: int
    durations: list[int] | None

    def project_encoder(self, encoder_out: torch.Tensor) -> torch.Tensor: ...

    def initial_prediction_state(self, batch: int, device: torch.device) -> PredState: ...

    def predict(self, labels: torch.Tensor, state: PredState) -> tuple[torch.Tensor, PredState]: ...

    def project_prediction(self, pred_out: torch.Tensor) -> torch.Tensor: ...

    def joint_after_projection(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor: ...

    # buffer versions (no new tensors) for the preallocated label-looping runner / CUDA graphs
    joint_hidden_size: int

    def prediction_workspace(self, batch: int, device: torch.device) -> PredictionWorkspace: ...

    def predict_into(
        self, labels: torch.Tensor, state: PredState, ws: PredictionWorkspace
    ) -> torch.Tensor: ...

    def project_prediction_into(self, pred_out: torch.Tensor, out: torch.Tensor) -> torch.Tensor: ...

    def joint_after_projection_into(
        self, enc_proj: torch.Tensor, pred_proj: torch.Tensor, hidden: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor: ...


class NemoTransducerModel(NemoModelBase):
    """A NeMo RNN-T or TDT model (``EncDecRNNTModel[BPE]``; a hybrid's transducer part) as an
    ``AcousticModel`` and a :class:`TransducerNetwork`."""

    head = "transducer"

    default_decoder = "transducer-greedy"  # what `decoder.type: auto` picks

    def __init__(
        self,
        preprocessor: NemoMelPreprocessor,
        encoder: ConformerEncoder,
        decoder: PredictionNetwork,
        joint: TransducerJoint,
        tokenizer: Tokenizer,
        durations: list[int] | None = None,
        config: dict[str, Any] | None = None,
        tokenizer_files: dict[str, bytes] | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__(preprocessor, encoder, decoder, tokenizer, config, tokenizer_files, source)
        self.joint = joint
        self.durations: list[int] | None = list(durations) if durations else None

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_config(
        cls, cfg: dict[str, Any], tokenizer: Tokenizer, tokenizer_files: dict[str, bytes] | None = None
    ) -> NemoTransducerModel:
        """Build (randomly initialised) from a NeMo transducer model config and a tokenizer.

        Raises ModelError naming the first unsupported option or the size that does not match the
        tokenizer's vocabulary.
        """
        cfg = copy.deepcopy(cfg)
        cls_name = model_class_name(cfg)
        if cls_name is not None and cls_name not in TRANSDUCER_CLASSES + HYBRID_TRANSDUCER_CLASSES:
            raise ModelError(
                f"unsupported model class target={cfg.get('target', cfg.get('_target_'))!r} "
                f"(supported: {', '.join(TRANSDUCER_CLASSES + HYBRID_TRANSDUCER_CLASSES)})"
            )
        for key in ("preprocessor", "encoder", "decoder", "joint"):
            if not isinstance(cfg.get(key), dict):
                raise ModelError(
                    f"model config has no {key} section (needed by {cls_name or 'a transducer'})"
                )
        _check_target(cfg["preprocessor"], "preprocessor", "AudioToMelSpectrogramPreprocessor")
        _check_target(cfg["encoder"], "encoder", "ConformerEncoder")
        dec_cfg, joint_cfg = cfg["decoder"], cfg["joint"]
        _check_target(dec_cfg, "decoder", "RNNTDecoder")
        _check_target(joint_cfg, "joint", "RNNTJoint")
        _check_keys(dec_cfg, _DECODER_KEYS, "decoder")
        prednet = dec_cfg.get("prednet") or {}
        if not isinstance(prednet, dict):
            raise ModelError("decoder.prednet must be a mapping")
        _check_keys(prednet, _PREDNET_KEYS, "decoder.prednet")
        _check_keys(joint_cfg, _JOINT_KEYS, "joint")
        jointnet = joint_cfg.get("jointnet") or {}
        if not isinstance(jointnet, dict):
            raise ModelError("joint.jointnet must be a mapping")
        _check_keys(jointnet, _JOINTNET_KEYS, "joint.jointnet")
        if dec_cfg.get("normalization_mode") is not None:
            raise ModelError(f"unsupported decoder.normalization_mode={dec_cfg['normalization_mode']!r}")
        if prednet.get("t_max") is not None:
            raise ModelError(f"unsupported decoder.prednet.t_max={prednet['t_max']!r} (chrono init)")

        preprocessor, encoder = preprocessor_and_encoder(cfg, ConformerEncoder.from_config)
        vocab = tokenizer.vocab_size
        for path, value in (
            ("decoder.vocab_size", dec_cfg.get("vocab_size")),
            ("joint.num_classes", joint_cfg.get("num_classes")),
        ):
            if value is not None and int(value) != vocab:
                raise ModelError(f"{path}={value} does not match the vocabulary size {vocab}")
        vocabulary = joint_cfg.get("vocabulary")
        if isinstance(vocabulary, list) and len(vocabulary) != vocab:
            raise ModelError(f"joint.vocabulary has {len(vocabulary)} entries, the tokenizer {vocab}")

        durations = transducer_durations(cfg)
        extra = int(joint_cfg.get("num_extra_outputs", 0) or 0)
        n_dur = len(durations) if durations else 0
        if extra != n_dur:
            what = f"{n_dur} TDT durations" if durations else "an RNN-T model (no TDT durations)"
            raise ModelError(f"joint.num_extra_outputs={extra} but the config describes {what}")

        pred_hidden = int(prednet.get("pred_hidden", (cfg.get("model_defaults") or {}).get("pred_hidden", 0)))
        layers = int(prednet.get("pred_rnn_layers", 1))
        rnn_hidden = int(prednet.get("rnn_hidden_size", -1) or -1)
        if pred_hidden < 1 or layers < 1:
            raise ModelError(f"bad decoder.prednet pred_hidden={pred_hidden} / pred_rnn_layers={layers}")
        if 0 < rnn_hidden < pred_hidden:
            raise ModelError(f"unsupported decoder.prednet.rnn_hidden_size={rnn_hidden} < pred_hidden")
        enc_hidden = int(jointnet.get("encoder_hidden", encoder.output_dim))
        if enc_hidden != encoder.output_dim:
            raise ModelError(
                f"joint.jointnet.encoder_hidden={enc_hidden} does not match the encoder output size "
                f"{encoder.output_dim}"
            )
        j_pred = int(jointnet.get("pred_hidden", pred_hidden))
        if j_pred != pred_hidden:
            raise ModelError(
                f"joint.jointnet.pred_hidden={j_pred} does not match decoder pred_hidden {pred_hidden}"
            )
        activation = str(jointnet.get("activation", "relu")).lower()
        if activation not in _ACTIVATIONS:
            raise ModelError(
                f"unsupported joint.jointnet.activation={activation!r} (supported: {', '.join(_ACTIVATIONS)})"
            )
        joint_hidden = int(jointnet.get("joint_hidden", 0))
        if joint_hidden < 1:
            raise ModelError(f"bad joint.jointnet.joint_hidden={jointnet.get('joint_hidden')!r}")
        decoder = PredictionNetwork(
            vocab,
            pred_hidden,
            layers,
            blank_as_pad=bool(dec_cfg.get("blank_as_pad", True)),
            rnn_hidden=rnn_hidden,
        )
        joint = TransducerJoint(
            encoder.output_dim,
            pred_hidden,
            joint_hidden,
            vocab,
            num_extra_outputs=extra,
            activation=activation,
            dropout=float(jointnet.get("dropout", 0.0) or 0.0),
        )
        files = tokenizer_files_for(cfg, tokenizer, tokenizer_files)
        return cls(preprocessor, encoder, decoder, joint, tokenizer, durations, cfg, files)

    # ----------------------------------------------------------------- AcousticModel protocol
    @property
    def is_tdt(self) -> bool:
        return self.durations is not None

    @property
    def model_class(self) -> str:
        return model_class_name(self.config) or (
            "EncDecRNNTBPEModel" if self.tokenizer.kind == "bpe" else "EncDecRNNTModel"
        )

    buffered_norm_eps = 1e-8  # NeMo's BatchedFeatureFrameBufferer

    def use_buffered(self, chunk_seconds: float, buffer_seconds: float) -> None:
        """NeMo's buffered inference for RNN-T models (`asrdecode.models.buffered.WindowRows`);
        TDT models are refused: NeMo's ``BatchedFrameASRTDT`` picks a window's tokens by decoding
        step, not by frame (docs/models.md), and a time-correct merge would not equal it."""
        if chunk_seconds > 0 and self.is_tdt:
            raise ModelError(
                f"{self.source}: model.chunk_seconds: buffered inference is for CTC and RNN-T models, "
                "not TDT; use model.attention=local or batch.segment_seconds"
            )
        super().use_buffered(chunk_seconds, buffer_seconds)

    def forward_features(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput:
        """Features -> ModelOutput with ``encoder_out`` [B, T', D], ``log_probs=None`` and
        ``extra["transducer"] = self`` (the prediction and joint networks for the decoder). In
        buffered mode one row per window, described by ``extra["windows"]`` (`WindowRows`)."""
        if self.buffered is not None:
            return self._buffered_output(feats, feat_lengths)
        enc, enc_len = self.encoder(feats, feat_lengths)
        return self.model_output(enc_len, enc.transpose(1, 2), transducer=self)

    def _buffered_output(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput:
        """Every window of every utterance as a row (`buffered_windows`), for the decoder to
        decode one by one; the pipeline joins their kept tokens (`WindowRows.merge`)."""
        plan = self.buffered
        window_rows = self.buffered_window_rows()
        owner, encoded = [], []
        for b, enc in self.buffered_windows(feats, feat_lengths):
            owner += [b] * enc.shape[0]
            encoded.append(enc)
        enc = torch.cat(encoded)
        windows = WindowRows(
            owner=owner,
            kept=plan.kept_rows(window_rows),
            tokens_per_chunk=plan.tokens_per_chunk,
            lag=plan.lag(window_rows),
            frame_shift=self.frame_shift,
            audio_seconds=self.buffered_audio_seconds(feat_lengths),
        )
        lengths = torch.full((enc.shape[0],), enc.shape[1], dtype=torch.int64, device=enc.device)
        return self.model_output(lengths, enc, transducer=self, windows=windows)

    # ----------------------------------------------------------------- TransducerNetwork protocol
    def project_encoder(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, T, J] (precomputed once per batch, paper 003 section 3.4)."""
        return self.joint.project_encoder(encoder_out)

    def initial_prediction_state(self, batch: int, device: torch.device) -> PredState:
        return self.decoder.initial_state(batch, device, self.joint.pred.weight.dtype)

    def predict(self, labels: torch.Tensor, state: PredState) -> tuple[torch.Tensor, PredState]:
        """One prediction-network step for a batch of labels (blank = SOS)."""
        return self.decoder(labels, state)

    def project_prediction(self, pred_out: torch.Tensor) -> torch.Tensor:
        return self.joint.project_prediction(pred_out)

    def joint_after_projection(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor:
        return self.joint.joint_after_projection(enc_proj, pred_proj)

    @property
    def joint_hidden_size(self) -> int:
        return self.joint.hidden_size

    def prediction_workspace(self, batch: int, device: torch.device) -> PredictionWorkspace:
        return self.decoder.workspace(batch, device, self.joint.pred.weight.dtype)

    def predict_into(self, labels: torch.Tensor, state: PredState, ws: PredictionWorkspace) -> torch.Tensor:
        """:meth:`predict` into preallocated buffers (new state in ``ws.state``); returns the output."""
        return self.decoder.step_into(labels, state, ws)

    def project_prediction_into(self, pred_out: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return self.joint.project_prediction_into(pred_out, out)

    def joint_after_projection_into(
        self, enc_proj: torch.Tensor, pred_proj: torch.Tensor, hidden: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor:
        return self.joint.joint_after_projection_into(enc_proj, pred_proj, hidden, out)

    def describe(self) -> dict:
        """Summary for ``asrdecode info``."""
        lstm = self.decoder.prediction["dec_rnn"].lstm
        return {
            "type": "nemo-transducer",
            "class": self.model_class,
            "transducer": "tdt" if self.is_tdt else "rnnt",
            **self._describe_common(),
            "prediction_network": {"type": "lstm", "layers": lstm.num_layers, "hidden": lstm.hidden_size},
            "joint": {
                "hidden": self.joint.enc.out_features,
                "outputs": self.joint.joint_net[-1].out_features,
            },
            "durations": self.durations,
            "buffered_inference": self.describe_buffered()
            if not self.is_tdt
            else "not for TDT models (model.attention=local or batch.segment_seconds instead)",
        }
