"""Acoustic models: NeMo CTC and transducer (Conformer) loading/saving, tokenizers, the model protocol."""

from asrdecode.models.base import AcousticModel, ModelOutput
from asrdecode.models.conformer import ConformerConfig, ConformerEncoder
from asrdecode.models.ctc import CTCHead, NemoCTCModel
from asrdecode.models.nemo import load_nemo, read_nemo_archive, save_nemo
from asrdecode.models.tokenizer import Tokenizer
from asrdecode.models.transducer import NemoTransducerModel

__all__ = [
    "AcousticModel",
    "ModelOutput",
    "ConformerConfig",
    "ConformerEncoder",
    "CTCHead",
    "NemoCTCModel",
    "NemoTransducerModel",
    "Tokenizer",
    "load_nemo",
    "read_nemo_archive",
    "save_nemo",
]
