"""Language models: training ARPA n-grams (kaldingram) for graph building."""

from asrdecode.lm.train import train_arpa

__all__ = ["train_arpa"]
