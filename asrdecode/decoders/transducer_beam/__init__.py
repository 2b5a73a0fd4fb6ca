"""`transducer-beam`: batched ALSD++ / AES++ beam search for RNN-T and TDT models (paper 004)."""

from asrdecode.decoders.transducer_beam.aes import aes_search
from asrdecode.decoders.transducer_beam.alsd import FusionConfig, alsd_search
from asrdecode.decoders.transducer_beam.decoder import TransducerBeamConfig, TransducerBeamDecoder
from asrdecode.decoders.transducer_beam.hyps import BatchedBeamHyps, rolling_hash

__all__ = [
    "BatchedBeamHyps",
    "FusionConfig",
    "TransducerBeamConfig",
    "TransducerBeamDecoder",
    "aes_search",
    "alsd_search",
    "rolling_hash",
]
