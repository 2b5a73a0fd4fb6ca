"""Resolve `model.path` (a file or `embedded:<name>`) and load the right model class."""

from __future__ import annotations

from pathlib import Path

from asrdecode.errors import ModelError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
REPO_MODELS = Path(__file__).resolve().parent.parent.parent / "data" / "models"


def resolve_model_path(spec: str) -> Path:
    """`embedded:demo_ctc_bpe` → the shipped file; anything else is a path that must exist."""
    if spec.startswith("embedded:"):
        name = spec.split(":", 1)[1]
        for folder in (ASSETS, REPO_MODELS):
            candidate = folder / f"{name}.nemo"
            if candidate.is_file():
                return candidate
        raise ModelError(
            f"{spec}: embedded model not found (looked in {ASSETS} and {REPO_MODELS}); "
            "run scripts/train_demo_model.py or pass --model PATH"
        )
    path = Path(spec).expanduser()
    if not path.exists():
        raise ModelError(f"{path}: model file not found")
    return path


def load_model(spec: str, model_type: str = "auto"):
    """Load an acoustic model implementing `asrdecode.models.base.AcousticModel`.

    model_type: ``auto`` (a ``.nemo`` file: CTC or transducer by the class in its config; hybrid
    RNNT-CTC models load their CTC head), ``nemo-ctc`` or ``nemo-transducer`` (RNN-T/TDT, or a hybrid's
    transducer part).
    """
    path = resolve_model_path(spec)
    kind = model_type
    if kind == "auto":
        if path.suffix == ".nemo":
            kind = "nemo"
        else:
            raise ModelError(f"{path}: cannot tell the model type from the name; set model.type")
    nemo_kinds = {"nemo": "auto", "nemo-ctc": "ctc", "nemo-transducer": "transducer"}
    if kind in nemo_kinds:
        from asrdecode.models.nemo import load_nemo

        return load_nemo(path, nemo_kinds[kind])
    raise ModelError(f"{path}: unsupported model.type '{kind}' (supported: auto, nemo-ctc, nemo-transducer)")
