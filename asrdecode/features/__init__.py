"""Feature extraction front ends: NeMo log-mel and Kaldi fbank/MFCC."""

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

__all__ = [
    "FilterbankFeatures",
    "KaldiFbank",
    "KaldiFbankConfig",
    "KaldiMfcc",
    "KaldiMfccConfig",
    "NemoMelConfig",
    "NemoMelPreprocessor",
    "kaldi_num_frames",
    "nemo_mel_filterbank",
    "normalize_features",
]
