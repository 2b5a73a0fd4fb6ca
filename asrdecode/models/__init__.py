"""Acoustic models: NeMo CTC (Conformer) loading/saving, tokenizers, and the model protocol."""

from asrdecode.models.base import AcousticModel, ModelOutput
from asrdecode.models.conformer import ConformerConfig, ConformerEncoder
from asrdecode.models.ctc import CTCHead, NemoCTCModel
from asrdecode.models.nemo import load_nemo, read_nemo_archive, save_nemo
from asrdecode.models.tokenizer import Tokenizer

__all__ = [
    "AcousticModel",
    "ModelOutput",
    "ConformerConfig",
    "ConformerEncoder",
    "CTCHead",
    "NemoCTCModel",
    "Tokenizer",
    "load_nemo",
    "read_nemo_archive",
    "save_nemo",
]
