"""`transducer-beam`: batched ALSD++ / AES++ beam search for RNN-T and TDT models (paper 004)."""

from asrdecode.decoders.beam_hyps import BatchedBeamHyps, rolling_hash
from asrdecode.decoders.transducer_beam.aes import aes_search
from asrdecode.decoders.transducer_beam.alsd import FusionConfig, alsd_search
from asrdecode.decoders.transducer_beam.decoder import TransducerBeamConfig, TransducerBeamDecoder

__all__ = [
    "BatchedBeamHyps",
    "FusionConfig",
    "TransducerBeamConfig",
    "TransducerBeamDecoder",
    "aes_search",
    "alsd_search",
    "rolling_hash",
]
