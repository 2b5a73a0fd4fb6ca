"""Resolve `model.path` (a file, a sphinx model folder or `embedded:<name>`); load the model class."""

from __future__ import annotations

import re
from pathlib import Path

from asrdecode.errors import ModelError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
CHECKOUT = Path(__file__).resolve().parent.parent.parent  # a source checkout: asrdecode/, configs/, data/
REPO_MODELS = CHECKOUT / "data" / "models"
SPHINX_EMBEDDED = {"sphinx-en-us": ("en-us", "en-us")}  # name -> path inside pocketsphinx/model
HAMA_SUFFIX = ".safetensors"  # converted hama models (scripts/convert_hama_model.py)
# model.type of NeMo checkpoints -> the head they load (auto: as the checkpoint's class says)
NEMO_KINDS = {"nemo": "auto", "nemo-ctc": "ctc", "nemo-transducer": "transducer", "nemo-aed": "aed"}
# a model hub's name (`nvidia/parakeet-tdt-0.6b-v2`): an owner and a model, no file suffix
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _pocketsphinx_model(name: str) -> Path:
    """`embedded:sphinx-en-us` -> the installed pocketsphinx package's model folder."""
    import importlib.util

    spec = importlib.util.find_spec("pocketsphinx")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"embedded:{name}: the pocketsphinx package is not installed")
    folder = Path(list(spec.submodule_search_locations)[0], "model", *SPHINX_EMBEDDED[name])
    if not (folder / "mdef").is_file():
        raise ModelError(f"embedded:{name}: {folder} has no sphinx model (mdef missing)")
    return folder


def resolve_packaged_path(value: str) -> str:
    """`embedded:` paths of files that ship with asrdecode or pocketsphinx -> real paths:
    `embedded:sphinx-en-us` = the pocketsphinx acoustic model folder, `embedded:sphinx-en-us/../X` =
    files beside it (`cmudict-en-us.dict`, `en-us.lm.bin`); `embedded:NAME` = an embedded model
    (`resolve_model_path`); `embedded:DIR/FILE` = a file under
    asrdecode's assets (`embedded:configs/sphinx-en-us-otf.yaml`, `embedded:lm/...`). A relative
    path that is not there from the current folder but is in asrdecode's source checkout (the
    shipped configs name its `configs/` and `data/` files so) -> that file (`in_checkout`). Any other
    value is returned unchanged."""
    for name in SPHINX_EMBEDDED:
        prefix = f"embedded:{name}"
        if value == prefix or value.startswith(prefix + "/"):
            folder = _pocketsphinx_model(name)
            rest = value[len(prefix) :].lstrip("/")
            return str((folder / rest).resolve()) if rest else str(folder)
    if value.startswith("embedded:") and "/" not in value:
        return str(resolve_model_path(value))  # an embedded model: `embedded:hama-ipa-ctc`
    if value.startswith("embedded:") and "/" in value:
        rest = value.split(":", 1)[1]
        candidate = (ASSETS / rest).resolve()
        if ASSETS.resolve() not in candidate.parents or not candidate.is_file():
            raise ModelError(f"{value}: no such file among asrdecode's assets ({ASSETS})")
        return str(candidate)
    return in_checkout(value)


def in_checkout(value: str) -> str:
    """`value` if it names something from the current folder (or is absolute); else, if asrdecode
    runs from a source checkout that has it (`configs/...`, `data/...`), that path; else `value`."""
    try:
        path = Path(value)
        if not value or path.is_absolute() or path.exists() or not (CHECKOUT / "pyproject.toml").is_file():
            return value
        candidate = CHECKOUT / path
        return str(candidate) if candidate.exists() else value
    except (OSError, ValueError):  # not a usable path (a NUL byte, too long): the caller reports it
        return value


def is_sphinx_folder(path: Path) -> bool:
    """A folder holding a sphinx model definition (`mdef`)."""
    return path.is_dir() and (path / "mdef").is_file()


def resolve_model_path(spec: str) -> Path:
    """`embedded:demo_ctc_bpe` → the shipped file; anything else is a path that must exist."""
    if spec.startswith("embedded:"):
        name = spec.split(":", 1)[1]
        if name in SPHINX_EMBEDDED:
            return _pocketsphinx_model(name)
        for folder in (ASSETS, REPO_MODELS):
            for suffix in (".nemo", HAMA_SUFFIX):
                candidate = folder / f"{name}{suffix}"
                if candidate.is_file():
                    return candidate
        known = sorted(
            {
                p.stem
                for folder in (ASSETS, REPO_MODELS)
                for p in [*folder.glob("*.nemo"), *folder.glob("*" + HAMA_SUFFIX)]
            }
            | set(SPHINX_EMBEDDED)
        )
        raise ModelError(
            f"{spec}: no such embedded model (embedded models: {', '.join(known)}); "
            "pass --model PATH for a file"
        )
    from asrdecode.io.manifests import user_path

    path = user_path(spec)
    if not path.exists():
        if HUB_NAME.fullmatch(spec) and not spec.endswith((".nemo", HAMA_SUFFIX)):
            raise ModelError(
                f"{spec}: no such model file; models are files here, not hub names: download the "
                "checkpoint (a .nemo file) and pass its path (which models load: docs/models.md)"
            )
        raise ModelError(f"{path}: model file not found")
    return path


def load_model(
    spec: str,
    model_type: str = "auto",
    topn: int = 4,
    threads: int = 1,
    density_floor: float = -1.0,
    head: str = "auto",
    attention: str = "auto",
    att_context_size: list[int] | None = None,
    streaming: str = "offline",
    chunk_seconds: float = 0.0,
    buffer_seconds: float = 4.0,
    source_lang: str = "",
    target_lang: str = "",
    pnc: bool | str | None = None,
    timestamps: bool | str | None = None,
):
    """Load an acoustic model implementing `asrdecode.models.base.AcousticModel`.

    model_type: ``auto`` (a ``.nemo`` file: CTC or transducer by the class in its config; hybrid
    RNN-T/TDT + CTC models their transducer unless ``head`` says ctc; a folder with an ``mdef``:
    sphinx), ``nemo-ctc``,
    ``nemo-transducer`` (RNN-T/TDT, or a hybrid's transducer part), ``hama`` (a converted hama phoneme
    CTC model, ``.safetensors``, e.g. ``embedded:hama-ipa-ctc``) or ``sphinx`` (a pocketsphinx
    PTM model folder, e.g. ``embedded:sphinx-en-us``; ``topn`` = its Gaussian selection, 0 = full;
    ``threads`` = CPU threads scoring chunks of frames, 0 = all cores; ``density_floor`` = nats,
    -1 = pocketsphinx's, 0 = none). ``head``: which output of a NeMo hybrid RNN-T/TDT + CTC model
    (``auto`` = transducer, ``transducer``, ``ctc``); other models accept ``auto`` or their own head.
    ``attention`` / ``att_context_size``: NeMo encoders' attention (`nemo.switch_attention`).
    ``streaming``: ``cache-aware`` encodes as NeMo's cache-aware streaming mode does
    (`ConformerEncoder.use_streaming`), ``offline`` the whole input at once.
    ``chunk_seconds`` > 0 / ``buffer_seconds``: NeMo's buffered chunked inference for CTC and RNN-T
    models (`NemoModelBase.use_buffered`).
    ``source_lang`` / ``target_lang`` / ``pnc`` / ``timestamps``: the prompt of a NeMo AED (Canary) model
    (`NemoAEDModel.set_prompt`); empty = the checkpoint's defaults.
    """
    prompt = {"source_lang": source_lang, "target_lang": target_lang, "pnc": pnc, "timestamps": timestamps}
    path, kind = check_model_settings(
        spec, model_type, head, attention, att_context_size, streaming, chunk_seconds, density_floor, prompt
    )
    if kind in NEMO_KINDS:
        from asrdecode.models.nemo import load_nemo

        kind_of_head = head if head != "auto" else NEMO_KINDS[kind]
        model = load_nemo(path, kind_of_head, attention, att_context_size, streaming)
        if hasattr(model, "set_prompt"):
            try:
                model.set_prompt(
                    source_lang=source_lang, target_lang=target_lang, pnc=pnc, timestamp=timestamps
                )
            except ModelError as err:
                raise ModelError(f"{path}: {err}") from None
        elif any(v not in (None, "") for v in prompt.values()):
            set_keys = ", ".join(f"model.{k}" for k, v in prompt.items() if v not in (None, ""))
            raise ModelError(f"{path}: {set_keys}: only AED models (Canary) take a prompt")
        if chunk_seconds > 0:
            model.use_buffered(chunk_seconds, buffer_seconds)
        return model
    if kind == "hama":
        from asrdecode.models.hama import load_hama

        return load_hama(path)
    from asrdecode.models.sphinx import POCKETSPHINX_DENSITY_FLOOR, load_sphinx

    floor = POCKETSPHINX_DENSITY_FLOOR if density_floor == -1.0 else density_floor
    return load_sphinx(path, topn=topn, threads=threads, density_floor=floor)


def check_model_settings(
    spec: str,
    model_type: str = "auto",
    head: str = "auto",
    attention: str = "auto",
    att_context_size: list[int] | None = None,
    streaming: str = "offline",
    chunk_seconds: float = 0.0,
    density_floor: float = -1.0,
    prompt: dict | None = None,
) -> tuple[Path, str]:
    """(the model's file or folder, its kind: `NEMO_KINDS`, ``hama`` or ``sphinx``) for the
    settings of `load_model`, checked as far as they can be without reading the model: the file
    exists (or the embedded name is known), its type is known and the options are its family's
    (one-line ModelErrors)."""
    path = resolve_model_path(spec)
    kind = model_type
    if kind == "auto":
        if path.suffix == ".nemo":
            kind = "nemo"
        elif path.suffix == HAMA_SUFFIX:
            kind = "hama"
        elif is_sphinx_folder(path):
            kind = "sphinx"
        else:
            raise ModelError(f"{path}: cannot tell the model type from the name; set model.type")
    heads = ("auto", "transducer", "ctc")
    if head not in heads:
        raise ModelError(f"model.head={head}: use one of {', '.join(heads)}")
    if kind in NEMO_KINDS:
        if head != "auto" and NEMO_KINDS[kind] not in ("auto", head):
            raise ModelError(f"model.head={head} contradicts model.type={kind}")
        return path, kind
    if kind not in ("hama", "sphinx"):
        raise ModelError(
            f"{path}: unsupported model.type '{kind}' "
            "(supported: auto, nemo-ctc, nemo-transducer, nemo-aed, sphinx, hama)"
        )
    if attention != "auto" or att_context_size or streaming != "offline" or chunk_seconds > 0:
        raise ModelError(
            "model.attention / att_context_size / streaming / chunk_seconds: only NeMo models "
            f"(model.type={kind})"
        )
    if head not in ("auto",):
        raise ModelError(f"model.head={head}: only NeMo models have heads to choose (model.type={kind})")
    if any(v not in (None, "") for v in (prompt or {}).values()):
        raise ModelError(
            "model.source_lang / target_lang / pnc / timestamps: only NeMo AED (Canary) models take a "
            f"prompt; this model is model.type={kind}"
        )
    if kind == "sphinx" and density_floor < 0 and density_floor != -1.0:
        raise ModelError(f"model.density_floor={density_floor}: use -1 (pocketsphinx's), 0 (none) or nats")
    return path, kind
