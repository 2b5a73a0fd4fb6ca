"""Read and write NeMo ``.nemo`` archives safely, without NeMo.

A ``.nemo`` file is a (plain or gzip) tar holding ``model_config.yaml``, ``model_weights.ckpt`` (a torch
state_dict) and the tokenizer files referenced from the config as ``nemo:<name>``. Members are read in
memory (nothing is extracted); links, devices and paths that are absolute or escape the archive are
refused; the config is parsed with ``yaml.safe_load`` and the weights with ``torch.load(weights_only=True)``
so no pickled code can run.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import tarfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from asrdecode.atomic_files import atomic_target
from asrdecode.errors import ModelError, one_line, shown
from asrdecode.io.schema import NEMO_CONFIG, problem
from asrdecode.models.aed import AED_CLASSES, NemoAEDModel
from asrdecode.models.ctc import (
    CTC_CLASSES,
    HYBRID_CLASSES,
    NemoCTCModel,
    ctc_decoder_config,
    model_class_name,
)
from asrdecode.models.tokenizer import AggregateTokenizer, Tokenizer
from asrdecode.models.transducer import HYBRID_TRANSDUCER_CLASSES, TRANSDUCER_CLASSES, NemoTransducerModel

__all__ = ["NemoArchive", "read_nemo_archive", "load_nemo", "save_nemo"]

CONFIG_MEMBER = "model_config.yaml"
WEIGHTS_MEMBER = "model_weights.ckpt"
_MAX_SMALL_MEMBER = 64 * 1024 * 1024  # config / tokenizer files larger than this are refused
# Keys of NeMo CTC checkpoints that carry no inference weights of this model.
_IGNORED_PREFIXES = ("spec_augmentation.", "loss.", "wer.", "ctc_wer.", "ctc_loss.")
# What building a model from a config raises on values of the wrong type or size (a string for a
# size, no attention heads, a negative or odd width, a size torch cannot allocate): one-line errors.
CONFIG_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError, RuntimeError)
# Buffers that are recomputed from the config when a checkpoint lacks them.
_OPTIONAL_KEYS = ("preprocessor.featurizer.window", "preprocessor.featurizer.fb")


def _member_path(name: str) -> str | None:
    """Normalised relative path of a tar member name, or None if it is absolute or escapes the archive."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or "\x00" in name:
        return None
    norm = posixpath.normpath(name.replace("\\", "/"))
    if norm == ".." or norm.startswith("../") or norm.startswith("/"):
        return None
    return norm


class NemoArchive:
    """The validated members of a ``.nemo`` tar, read on demand from the open file."""

    def __init__(self, tf: tarfile.TarFile, label: str) -> None:
        self._tf = tf
        self.label = label
        self.members: dict[str, tarfile.TarInfo] = {}
        for info in tf.getmembers():
            path = _member_path(info.name)
            if path is None:
                raise ModelError(
                    f"{label}: unsafe archive member {info.name!r} (absolute path or outside the archive)"
                )
            if info.isdir():
                continue
            if not info.isreg():
                kind = "link" if (info.issym() or info.islnk()) else "special file"
                raise ModelError(
                    f"{label}: unsafe archive member {info.name!r} ({kind}; only regular files are allowed)"
                )
            if path in self.members:
                raise ModelError(f"{label}: duplicate archive member {info.name!r}")
            self.members[path] = info

    def close(self) -> None:
        """Close the underlying tar file."""
        self._tf.close()

    def has(self, name: str) -> bool:
        return _member_path(name) in self.members

    def read(self, name: str, max_bytes: int | None = None) -> bytes:
        """Bytes of a member (``./`` prefix optional)."""
        path = _member_path(name)
        info = self.members.get(path) if path else None
        if info is None:
            raise ModelError(f"{self.label}: archive has no member {name!r}")
        if max_bytes is not None and info.size > max_bytes:
            raise ModelError(f"{self.label}: archive member {name!r} is too large ({info.size} bytes)")
        fh = self._tf.extractfile(info)
        if fh is None:
            raise ModelError(f"{self.label}: cannot read archive member {name!r}")
        try:
            data = fh.read()
        except (OSError, EOFError, tarfile.TarError) as err:
            reason = one_line(err, 200)
            raise ModelError(f"{self.label}: archive member {name!r} is corrupt ({reason})") from None
        if len(data) != info.size:
            raise ModelError(f"{self.label}: archive member {name!r} is truncated")
        return data


def read_nemo_archive(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor], NemoArchive]:
    """Open and validate a ``.nemo`` file: (config dict, state_dict, archive for further members).

    The returned archive stays open for reading further members; the caller closes it.
    Raises ModelError on any problem.
    """
    label = str(path)
    try:
        tf = tarfile.open(path, mode="r:*")  # noqa: SIM115 - handed to NemoArchive, closed by the caller
    except FileNotFoundError:
        raise ModelError(f"{label}: model file not found") from None
    except (tarfile.TarError, OSError, EOFError, ValueError):
        raise ModelError(f"{label}: not a .nemo archive (not a readable tar/tar.gz file)") from None
    try:
        try:
            archive = NemoArchive(tf, label)
        except (tarfile.TarError, OSError, EOFError, ValueError) as err:
            raise ModelError(f"{label}: corrupt .nemo archive ({one_line(err, 200)})") from None
        for member in (CONFIG_MEMBER, WEIGHTS_MEMBER):
            if not archive.has(member):
                raise ModelError(f"{label}: not a NeMo model archive (no {member})")
        cfg = _parse_config(archive.read(CONFIG_MEMBER, _MAX_SMALL_MEMBER), label)
        state = _parse_weights(archive.read(WEIGHTS_MEMBER), label)
    except BaseException:
        tf.close()
        raise
    return cfg, state, archive


def _parse_config(raw: bytes, label: str) -> dict[str, Any]:
    try:
        cfg = yaml.safe_load(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ModelError(f"{label}: {CONFIG_MEMBER} is not valid YAML ({one_line(err, 120)})") from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{label}: {CONFIG_MEMBER} is not a mapping")
    if (wrong := problem(cfg, NEMO_CONFIG)) is not None:
        raise ModelError(f"{label}: {CONFIG_MEMBER}: {wrong}")
    return cfg


def _parse_weights(raw: bytes, label: str) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError, ... all mean a bad checkpoint
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = one_line(ValueError(first), 160)
        raise ModelError(f"{label}: {WEIGHTS_MEMBER} cannot be loaded safely ({reason})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ModelError(f"{label}: {WEIGHTS_MEMBER} is not a state_dict of tensors")
    return state


def _nemo_refs(section: dict[str, Any] | None) -> dict[str, str]:
    """{config key: member name} for every ``nemo:<name>`` value of a config section."""
    refs = {}
    for key, value in (section or {}).items():
        if isinstance(value, str) and value.startswith("nemo:"):
            refs[key] = value.removeprefix("nemo:")
    return refs


# (config section, key, state_dict prefix of the numbered layers): sizes a model is built with before its
# weights are compared, checked against the weights first (a huge count would build for ever)
LAYER_COUNTS = (
    (("encoder",), "n_layers", "encoder.layers."),
    (("transf_decoder", "config_dict"), "num_layers", "transf_decoder._decoder.layers."),
    (("head",), "num_layers", "log_softmax.mlp.layer"),
)


def check_layer_counts(cfg: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    """ModelError when a config asks for more numbered layers than the weights hold (a head's MLP
    numbers its Linear layers 0, 2, 4, ...)."""
    for path, key, prefix in LAYER_COUNTS:
        section: Any = cfg
        for name in path:
            section = section.get(name) if isinstance(section, dict) else None
        value = section.get(key) if isinstance(section, dict) else None
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        numbers = {
            int(k[len(prefix) :].split(".", 1)[0])
            for k in state
            if k.startswith(prefix) and k[len(prefix) :].split(".", 1)[0].isdigit()
        }
        held = len(numbers)
        if value > max(held, 1):
            raise ModelError(f"{'.'.join((*path, key))}={value} but the weights hold {held} such layers")


def _member_named(model_path: str) -> str:
    """The archive member a config's tokenizer path names: ``nemo:<name>``, or an absolute path of
    the machine that built it, looked for by its file name."""
    if model_path.startswith("nemo:"):
        return model_path.removeprefix("nemo:")
    return posixpath.basename(model_path)


def _tokenizer(cfg: dict[str, Any], archive: NemoArchive) -> tuple[Tokenizer, dict[str, bytes]]:
    """Tokenizer from the archive's ``nemo:`` members (BPE) or the config's label list (chars)."""
    tok_cfg = cfg.get("tokenizer")
    if tok_cfg:
        kind = tok_cfg.get("type")
        if kind != "bpe":
            raise ModelError(f"unsupported tokenizer.type={kind!r} (supported: bpe)")
        model_path = str(tok_cfg.get("model_path") or "")
        name = _member_named(model_path)
        if not name or not archive.has(name):
            raise ModelError(f"tokenizer.model_path={model_path!r} is not in the archive")
        refs = [n for n in _nemo_refs(tok_cfg).values() if archive.has(n)]
        files = {n: archive.read(n, _MAX_SMALL_MEMBER) for n in refs}
        files[name] = archive.read(name, _MAX_SMALL_MEMBER)
        try:
            return Tokenizer.from_sentencepiece(files[name]), files
        except Exception as err:  # sentencepiece raises RuntimeError/OSError on bad protos
            reason = one_line(err, 200)
            raise ModelError(f"tokenizer model {name!r} is not a sentencepiece model ({reason})") from None
    if model_class_name(cfg) in TRANSDUCER_CLASSES:
        dec_cfg = cfg.get("joint") if isinstance(cfg.get("joint"), dict) else {}
    else:
        _, dec_cfg = ctc_decoder_config(cfg)
    labels = dec_cfg.get("vocabulary")
    if not isinstance(labels, list) or not labels:
        labels = cfg.get("labels")
    if not isinstance(labels, list) or not labels:
        raise ModelError("model config has neither a tokenizer nor labels")
    try:
        return Tokenizer.from_labels(labels), {}
    except ValueError as err:
        raise ModelError(f"bad label list: {one_line(err, 200)}") from None


def _aggregate_tokenizer(cfg: dict[str, Any], archive: NemoArchive) -> AggregateTokenizer:
    """Canary's aggregate tokenizer: ``tokenizer.langs`` names one sentencepiece model per language
    and ``spl_tokens`` (the special tokens), in the order their ids follow each other."""
    tok_cfg = cfg.get("tokenizer") or {}
    if tok_cfg.get("type") != "agg":
        raise ModelError(
            f"unsupported tokenizer.type={tok_cfg.get('type')!r} for an EncDecMultiTaskModel (supported: "
            "agg, Canary's aggregate tokenizer, and bpe)"
        )
    langs = tok_cfg.get("langs")
    if not isinstance(langs, dict) or "spl_tokens" not in langs:
        raise ModelError("tokenizer.langs must map languages (and spl_tokens) to sentencepiece models")
    models = {}
    for lang, section in langs.items():
        if not isinstance(section, dict) or section.get("type", "bpe") != "bpe":
            raise ModelError(f"tokenizer.langs.{lang}: a sentencepiece (type: bpe) model is needed")
        model_path = str(section.get("model_path") or "")
        name = _member_named(model_path)
        if not name or not archive.has(name):
            raise ModelError(f"tokenizer.langs.{lang}.model_path={model_path!r} is not in the archive")
        models[str(lang)] = archive.read(name, _MAX_SMALL_MEMBER)
    try:
        return AggregateTokenizer(models)
    except Exception as err:  # sentencepiece raises RuntimeError/OSError on bad protos
        raise ModelError(f"tokenizer: a model is not a sentencepiece model ({one_line(err, 200)})") from None


def _fit_state_dict(
    model: NemoCTCModel | NemoTransducerModel | NemoAEDModel,
    state: dict[str, torch.Tensor],
    hybrid: bool,
    transducer: bool = False,
) -> None:
    """Load a NeMo state_dict strictly (NeMo names), with one-line errors.

    CTC: a hybrid's ``ctc_decoder.*`` becomes ``decoder.*``; transducer: a hybrid's CTC head is dropped.
    """
    if transducer:
        state = {k: v for k, v in state.items() if not k.startswith("ctc_decoder.")}
    elif hybrid:  # keep the CTC head (ctc_decoder.*) as decoder.*, drop the transducer parts
        state = {
            ("decoder." + k.removeprefix("ctc_decoder.") if k.startswith("ctc_decoder.") else k): v
            for k, v in state.items()
            if not k.startswith(("decoder.", "joint."))
        }
    state = {k: v for k, v in state.items() if not k.startswith(_IGNORED_PREFIXES)}
    own = model.state_dict()
    missing = [k for k in own if k not in state and k not in _OPTIONAL_KEYS]
    unexpected = [k for k in state if k not in own]
    wrong = [
        f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]

    def few(items: list[str]) -> str:
        more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
        return ", ".join(shown(x) for x in items[:3]) + more

    if missing:
        raise ModelError(f"weights do not match the config: missing {few(missing)}")
    if unexpected:
        raise ModelError(f"weights do not match the config: unexpected {few(unexpected)}")
    if wrong:
        raise ModelError(f"weights do not match the config: shape {few(wrong)}")
    model.load_state_dict(state, strict=False)


ATTENTION_MODES = ("auto", "full", "local")
DEFAULT_LOCAL_WINDOW = (128, 128)  # NeMo's recommended window for long audio (parakeet's att_context_size)


def switch_attention(cfg: dict[str, Any], attention: str, window: list[int] | None) -> None:
    """NeMo's ``change_attention_model`` on the config (weights are unchanged): ``local`` = sliding-
    window ``rel_pos_local_attn`` over ``window`` frames each side (default 128, 128), ``full`` =
    ``rel_pos`` over the whole input, ``auto`` = as the checkpoint says (``window`` alone replaces
    its att_context_size; for a cache-aware streaming model trained with several, one of them)."""
    if attention not in ATTENTION_MODES:
        raise ModelError(f"model.attention={attention}: use one of {', '.join(ATTENTION_MODES)}")
    encoder = cfg.get("encoder")
    if not isinstance(encoder, dict):
        raise ModelError("model_config.yaml has no encoder section")
    if attention == "local":
        size = list(window) if window else list(DEFAULT_LOCAL_WINDOW)
        encoder["self_attention_model"] = "rel_pos_local_attn"
        encoder["att_context_size"] = size
    elif attention == "full":
        if window:
            raise ModelError(
                "model.att_context_size: full attention has no window (use model.attention=local)"
            )
        encoder["self_attention_model"] = "rel_pos"
        encoder["att_context_size"] = [-1, -1]
    elif window:
        choices = encoder.get("att_context_size")
        multi = isinstance(choices, list) and choices and isinstance(choices[0], list)  # multi-lookahead
        if multi and list(window) not in [list(c) for c in choices]:
            raise ModelError(
                f"model.att_context_size={list(window)}: this model was trained for {choices} only"
            )
        encoder["att_context_size"] = list(window)


def load_nemo(
    path: str | os.PathLike,
    kind: str = "auto",
    attention: str = "auto",
    att_context_size: list[int] | None = None,
    streaming: str = "offline",
) -> NemoCTCModel | NemoTransducerModel:
    """Load a NeMo model in eval mode.

    ``kind``: ``"auto"`` (by the config's class: CTC classes -> :class:`NemoCTCModel`, RNN-T/TDT
    classes and hybrids -> :class:`NemoTransducerModel`, as NeMo decodes a hybrid with its transducer
    unless told otherwise), ``"ctc"`` (a CTC model or a hybrid's CTC head) or ``"transducer"`` (an
    RNN-T/TDT model or a hybrid's transducer part).
    ``attention`` / ``att_context_size``: `switch_attention` (e.g. ``local`` for hour-long inputs).
    ``streaming``: ``cache-aware`` for NeMo's cache-aware streaming mode (`ConformerEncoder.use_streaming`).
    Raises ModelError with a one-line message naming the file and the offending option or member.
    """
    label = str(path)
    if kind not in ("auto", "ctc", "transducer", "aed"):
        raise ModelError(f"{label}: unknown NeMo model kind {kind!r} (auto, ctc, transducer, aed)")
    cfg, state, archive = read_nemo_archive(path)
    try:
        cls = model_class_name(cfg)
        if cls is None:
            raise ModelError("model_config.yaml has no 'target' (model class)")
        every = CTC_CLASSES + HYBRID_CLASSES + TRANSDUCER_CLASSES + AED_CLASSES
        if kind == "auto":
            if cls not in every:
                raise ModelError(
                    f"unsupported model class target={cfg.get('target', cfg.get('_target_'))!r} "
                    f"(supported: {', '.join(every)})"
                )
            kind = "ctc" if cls in CTC_CLASSES else "aed" if cls in AED_CLASSES else "transducer"
        supported = {
            "ctc": CTC_CLASSES + HYBRID_CLASSES,
            "transducer": TRANSDUCER_CLASSES + HYBRID_TRANSDUCER_CLASSES,
            "aed": AED_CLASSES,
        }[kind]
        if cls not in supported:
            raise ModelError(
                f"unsupported model class target={cfg.get('target', cfg.get('_target_'))!r} for a {kind} "
                f"model (supported: {', '.join(supported)})"
            )
        switch_attention(cfg, attention, att_context_size)
        check_layer_counts(cfg, state)
        if kind == "aed":
            model = _load_aed(cfg, state, archive)
            if streaming != "offline":
                raise ModelError(f"model.streaming={streaming}: AED models decode whole inputs")
            model.source = label
            return model.eval()
        tokenizer, files = _tokenizer(cfg, archive)
        model_type = NemoCTCModel if kind == "ctc" else NemoTransducerModel
        try:
            model = model_type.from_config(cfg, tokenizer, files)
        except CONFIG_ERRORS as err:
            raise ModelError(f"invalid model config ({one_line(err, 200)})") from None
        _fit_state_dict(model, state, hybrid=cls in HYBRID_CLASSES, transducer=kind == "transducer")
        model.heads = ["transducer", "ctc"] if cls in HYBRID_CLASSES else [kind]
        if streaming != "offline":
            if not hasattr(model.encoder, "use_streaming"):
                raise ModelError(f"model.streaming={streaming}: only Conformer encoders stream")
            model.encoder.use_streaming(streaming)
    except ModelError as err:
        raise ModelError(f"{label}: {err}") from None
    finally:
        archive.close()
    model.source = label
    return model.eval()


def _load_aed(cfg: dict[str, Any], state: dict[str, torch.Tensor], archive: NemoArchive) -> NemoAEDModel:
    """An ``EncDecMultiTaskModel``: its tokenizer, the model from its config, its weights (the
    output layer's weight tied to the token embedding, as NeMo ties them)."""
    kind = (cfg.get("tokenizer") or {}).get("type")
    # Canary's aggregate tokenizer, or one sentencepiece model holding the special tokens (canary-1b-v2);
    # NeMo's multitask decoding writes the detokenised text as it is
    if kind == "bpe":
        tokenizer = _tokenizer(cfg, archive)[0].without_punctuation_rule()
    else:
        tokenizer = _aggregate_tokenizer(cfg, archive)
    try:
        model = NemoAEDModel.from_config(cfg, tokenizer)
    except CONFIG_ERRORS as err:
        raise ModelError(f"invalid model config ({one_line(err, 200)})") from None
    head = "log_softmax.mlp." + model.log_softmax._linears[-1] + ".weight"
    if head not in state and "transf_decoder._embedding.token_embedding.weight" in state:
        state = {**state, head: state["transf_decoder._embedding.token_embedding.weight"]}
    _fit_state_dict(model, state, hybrid=False)
    model.heads = ["aed"]
    return model


def _check_file_name(name: str) -> None:
    if not name or "/" in name or "\\" in name or name in (".", "..", CONFIG_MEMBER, WEIGHTS_MEMBER):
        raise ModelError(f"bad tokenizer file name {name!r} for a .nemo archive")


def save_nemo(
    model: NemoCTCModel | NemoTransducerModel,
    cfg: dict[str, Any] | None,
    path: str | os.PathLike,
    tokenizer_files: dict[str, bytes] | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write ``model`` (CTC or transducer) as a NeMo-compatible ``.nemo`` tar (plain, members ``./<name>``).

    ``dtype`` (e.g. ``torch.float16``) stores the floating-point tensors in that type (loading casts
    them back to the model's float32, as NeMo's ``restore_from`` does).
    ``cfg`` defaults to ``model.config`` and ``tokenizer_files`` to ``model.tokenizer_files``. Every
    ``nemo:<name>`` reference of ``cfg['tokenizer']`` must be among ``tokenizer_files``. A missing
    ``target`` is filled in (EncDecCTCModelBPE / EncDecRNNTBPEModel with a tokenizer section, else
    EncDecCTCModel / EncDecRNNTModel). The file is written atomically. Returns the path.
    """
    cfg = dict(model.config if cfg is None else cfg)
    files = dict(model.tokenizer_files if tokenizer_files is None else tokenizer_files)
    transducer = isinstance(model, NemoTransducerModel)
    cls = model_class_name(cfg)
    if cls is None:
        bpe = bool(cfg.get("tokenizer"))
        if transducer:
            cls = "EncDecRNNTBPEModel" if bpe else "EncDecRNNTModel"
            module = "rnnt_bpe_models" if bpe else "rnnt_models"
        else:
            cls = "EncDecCTCModelBPE" if bpe else "EncDecCTCModel"
            module = "ctc_bpe_models" if bpe else "ctc_models"
        cfg["target"] = f"nemo.collections.asr.models.{module}.{cls}"
    allowed = TRANSDUCER_CLASSES if transducer else CTC_CLASSES
    if cls not in allowed:
        kind = "transducer" if transducer else "CTC"
        raise ModelError(f"save_nemo writes a {kind} model as {', '.join(allowed)}, not target={cls!r}")
    for key, name in _nemo_refs(cfg.get("tokenizer")).items():
        if name not in files:
            raise ModelError(f"tokenizer.{key}=nemo:{name} but no such file was given to save_nemo")
    for name in files:
        _check_file_name(name)

    buf = io.BytesIO()
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    torch.save(state, buf)
    payload: list[tuple[str, bytes]] = [
        (CONFIG_MEMBER, yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True).encode("utf-8")),
        (WEIGHTS_MEMBER, buf.getvalue()),
    ]
    payload += sorted(files.items())

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    with (
        atomic_target(out) as tmp,
        open(tmp, "wb") as fh,
        tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT) as tf,
    ):
        root = tarfile.TarInfo(".")
        root.type, root.mode, root.mtime = tarfile.DIRTYPE, 0o755, now
        tf.addfile(root)
        for name, data in payload:
            info = tarfile.TarInfo("./" + name)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tf.addfile(info, io.BytesIO(data))
    return out
