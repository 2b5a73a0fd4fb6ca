"""Feature extraction front ends: NeMo log-mel, Kaldi fbank/MFCC and CMU Sphinx MFCC."""

from asrdecode.features.kaldi import (
    KaldiFbank,
    KaldiFbankConfig,
    KaldiMfcc,
    KaldiMfccConfig,
    kaldi_num_frames,
)
from asrdecode.features.nemo_mel import (
    FilterbankFeatures,
    NemoMelConfig,
    NemoMelPreprocessor,
    nemo_mel_filterbank,
    normalize_features,
)
from asrdecode.features.sphinx_mfcc import SphinxFeConfig, SphinxMFCC

__all__ = [
    "FilterbankFeatures",
    "KaldiFbank",
    "KaldiFbankConfig",
    "KaldiMfcc",
    "KaldiMfccConfig",
    "NemoMelConfig",
    "NemoMelPreprocessor",
    "SphinxFeConfig",
    "SphinxMFCC",
    "kaldi_num_frames",
    "nemo_mel_filterbank",
    "normalize_features",
]
