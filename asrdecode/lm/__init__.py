"""Language models: ARPA reading and checks (`arpa`), training (kaldingram, `train`), the batched
tensor n-gram LM (`ngram_tensor`), the LM difference of on-the-fly rescoring (`difference`),
pocketsphinx's binary trie (`sphinx_trie`) and the exact and cheapest-path readings of a backoff LM
(`backoff`)."""

from asrdecode.lm.train import train_arpa

__all__ = ["train_arpa"]
