"""pocketsphinx's binary trie LM decoded by asrdecode vs pocketsphinx's own probabilities."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pocketsphinx
import pytest
import torch

from asrdecode.errors import InputError
from asrdecode.lm.arpa import check_arpa
from asrdecode.lm.sphinx_trie import NgramLookup, limit_vocabulary, read_trie_lm, write_arpa
from asrdecode.models.loading import resolve_packaged_path

LM_BIN = Path(resolve_packaged_path("embedded:sphinx-en-us/../en-us.lm.bin"))
SPHINX_UNIT = np.log10(1.0001)  # one pocketsphinx logmath unit in log10


@pytest.fixture(scope="module")
def trie_lm():
    return read_trie_lm(LM_BIN)


@pytest.fixture(scope="module")
def lookup(trie_lm):
    return NgramLookup(trie_lm)


def test_counts_are_the_reachable_ngrams(trie_lm):
    # data-sources.md: 72,547 / 2,051,541 / 1,669,625 (the header declares 2,051,547 bigrams)
    assert [len(t.words) for t in trie_lm.orders] == [72547, 2051541, 1669625]
    assert trie_lm.vocab[:3] == ["'bout", "'cause", "'em"]


@pytest.mark.parametrize("order", [1, 2, 3])
def test_probabilities_equal_pocketsphinx(trie_lm, lookup, order):
    """Explicit n-grams and random word tuples (which back off) vs NGramModel.prob, which rounds
    to whole logmath units."""
    reference = pocketsphinx.NGramModel.readfile(str(LM_BIN))
    rng = np.random.default_rng(order)
    table = trie_lm.orders[order - 1]
    explicit = table.words[rng.integers(0, len(table.words), 300)]
    random = rng.integers(0, len(trie_lm.vocab), (300, order))
    for words in (explicit, random):
        ours = lookup.log10_prob(words)
        theirs = np.array([reference.prob([trie_lm.vocab[w] for w in row[::-1]]) for row in words])
        assert np.abs(ours - theirs * SPHINX_UNIT).max() <= SPHINX_UNIT + 1e-6
    if order == 3:  # a trigram that is in the model, checked by name
        i = int(np.flatnonzero(table.words[:, 0] == trie_lm.vocab.index("tell"))[0])
        words = [trie_lm.vocab[w] for w in table.words[i]]
        assert lookup.log10_prob(table.words[i : i + 1])[0] == pytest.approx(
            reference.prob(words[::-1]) * SPHINX_UNIT, abs=SPHINX_UNIT
        )


def test_limited_vocabulary_distributions_sum_to_one(trie_lm):
    """After limiting the vocabulary, p(. | h) over the kept words sums to 1 for any history,
    by brute-force summation over the whole kept vocabulary."""
    uni = trie_lm.orders[0].log10_prob
    keep = {trie_lm.vocab[i] for i in np.argsort(-uni)[:1500]}
    small = limit_vocabulary(trie_lm, keep)
    assert len(small.vocab) == len(keep | {"<s>", "</s>"})
    look = NgramLookup(small)
    predicted = np.array([i for i, w in enumerate(small.vocab) if w != "<s>"])
    rng = np.random.default_rng(0)
    histories = [small.orders[1].words[i] for i in rng.integers(0, len(small.orders[1].words), 5)]
    histories += [small.orders[0].words[i] for i in rng.integers(0, len(small.vocab), 5)]
    histories += [np.array([small.vocab.index("<s>")])]
    for h in histories:
        words = np.concatenate([np.repeat(h[None, :], len(predicted), axis=0), predicted[:, None]], axis=1)
        total = np.sum(10.0 ** look.log10_prob(words))
        assert total == pytest.approx(1.0, abs=1e-6), [small.vocab[w] for w in h]


def test_write_arpa_round_trip(trie_lm, tmp_path):
    keep = {trie_lm.vocab[i] for i in np.argsort(-trie_lm.orders[0].log10_prob)[:300]}
    small = limit_vocabulary(trie_lm, keep)
    path = write_arpa(small, tmp_path / "small.arpa.gz")
    summary = check_arpa(path)
    assert summary.counts == {k + 1: len(t.words) for k, t in enumerate(small.orders)}
    # parse the text back independently and compare every explicit trigram probability
    with gzip.open(path, "rt") as f:
        lines = f.read().split("\\3-grams:\n")[1].split("\n\\end\\")[0].splitlines()
    index = {w: i for i, w in enumerate(small.vocab)}
    parsed = np.array([[index[w] for w in line.split("\t")[1].split()] for line in lines])
    probs = np.array([float(line.split("\t")[0]) for line in lines])
    assert np.abs(NgramLookup(small).log10_prob(parsed) - probs).max() < 1e-6


def test_truncated_file_is_a_one_line_error(tmp_path):
    bad = tmp_path / "cut.lm.bin"
    bad.write_bytes(LM_BIN.read_bytes()[:200_000])
    with pytest.raises(InputError, match="cut.lm.bin: truncated"):
        read_trie_lm(bad)
    other = tmp_path / "other.lm.bin"
    other.write_bytes(b"not an LM at all")
    with pytest.raises(InputError, match="not a pocketsphinx trie LM"):
        read_trie_lm(other)


def test_trie_tables_equal_the_exported_arpa(trie_lm, tmp_path):
    """`BatchedNgramLM.from_sphinx_trie` (no ARPA text) builds the same tables as reading the ARPA
    that `write_arpa` exports for the same vocabulary, up to the ARPA's 6 printed decimals; the
    vocabulary is a random subset (other words dropped) in a shuffled order with one unknown word."""
    from asrdecode.lm.ngram_tensor import BatchedNgramLM

    rng = np.random.default_rng(7)
    words = [w for w in trie_lm.vocab if w not in ("<s>", "</s>")]
    vocab = [words[i] for i in rng.choice(len(words), 4000, replace=False)] + ["zzz-not-a-word"]
    rng.shuffle(vocab)
    arpa = write_arpa(limit_vocabulary(trie_lm, set(vocab)), tmp_path / "subset.arpa")
    ours = BatchedNgramLM.from_file(LM_BIN, vocab)
    reference = BatchedNgramLM.from_file(arpa, vocab)
    assert ours.info["ngrams"] == reference.info["ngrams"] and ours.info["ngrams"][2] > 1000
    for (name, a), (_, b) in zip(ours.named_buffers(), reference.named_buffers(), strict=True):
        assert a.shape == b.shape, name
        if a.dtype.is_floating_point:
            assert torch.allclose(a, b, atol=1e-5, rtol=0) or torch.equal(a, b), name
        else:
            assert torch.equal(a, b), name
