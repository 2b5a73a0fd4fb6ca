"""Entropy-based pruning of a `TrieLM` (`prune_relative_entropy`, vectorised) vs kaldingram's
SRILM-style pruning (one n-gram at a time, in Python), on a Kneser-Ney trigram kaldingram trained
from a generated corpus: the same n-grams kept, the same probabilities and backoff weights."""

from __future__ import annotations

import numpy as np
import pytest
from kaldingram.prune import ArpaParser, prune

from asrdecode.lm import train_arpa
from asrdecode.lm.sphinx_trie import (
    NgramLookup,
    NgramTable,
    TrieLM,
    history_log10_prob,
    prune_relative_entropy,
    relative_entropy_changes,
)


@pytest.fixture(scope="module")
def arpa(tmp_path_factory) -> str:
    """A trigram LM over 40 words from 3000 sentences of a random Markov chain (Zipf-ish)."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    weights = 1.0 / np.arange(1, 41)
    successors = [rng.permutation(40)[:8] for _ in range(40)]
    lines = []
    for _ in range(3000):
        w = int(rng.choice(40, p=weights / weights.sum()))
        sentence = [words[w]]
        for _ in range(int(rng.integers(2, 9))):
            w = int(successors[w][rng.integers(0, 8)]) if rng.random() < 0.8 else int(rng.integers(0, 40))
            sentence.append(words[w])
        lines.append(" ".join(sentence))
    folder = tmp_path_factory.mktemp("prune")
    (folder / "corpus.txt").write_text("\n".join(lines) + "\n")
    return str(train_arpa(folder / "corpus.txt", folder / "lm.arpa", order=3, quiet=True))


def kaldingram_model(arpa: str):
    """kaldingram's Arpa model, with SRILM's context probability for the history `<s>`: P(</s>).
    (kaldingram evaluates P(<s>) = 10^-99 there, so it prunes every `<s> w` bigram that is not a
    trigram history; SRILM's contextProb and Stolcke's paper use the `</s>` probability.)"""
    (model,) = ArpaParser().loadf(arpa, encoding="utf-8")
    joint = model.log_joint_prob

    def srilm_joint(sequence):
        return model.log_p_raw(("</s>",)) if sequence == ("<s>",) else joint(sequence)

    model.log_joint_prob = srilm_joint
    return model


def entries(model) -> list[dict[tuple[str, ...], tuple[float, float]]]:
    """{n-gram: (log10 prob, log10 backoff or 0)} per order."""
    out = []
    for order in range(1, model.order() + 1):
        table = {}
        for h, context in model._ngrams[order - 1].items():
            for w, log_p in context.items():
                bo = model._log_bo(h + (w,))
                table[h + (w,)] = (log_p, 0.0 if bo is None else bo)
        out.append(table)
    return out


def to_trie(tables: list[dict[tuple[str, ...], tuple[float, float]]]) -> TrieLM:
    vocab = sorted(w for (w,) in tables[0])
    index = {w: i for i, w in enumerate(vocab)}
    orders = []
    for k, table in enumerate(tables):
        grams = sorted(table)
        orders.append(
            NgramTable(
                np.array([[index[w] for w in g] for g in grams], dtype=np.int64),
                np.array([table[g][0] for g in grams]),
                None if k == len(tables) - 1 else np.array([table[g][1] for g in grams]),
            )
        )
    return TrieLM(vocab=vocab, orders=orders, log10_per_unit=1.0)


def from_trie(lm: TrieLM) -> list[dict[tuple[str, ...], tuple[float, float]]]:
    out = []
    for t in lm.orders:
        bows = t.log10_backoff if t.log10_backoff is not None else np.zeros(len(t.words))
        out.append(
            {
                tuple(lm.vocab[w] for w in row): (float(p), float(b))
                for row, p, b in zip(t.words, t.log10_prob, bows, strict=True)
            }
        )
    return out


@pytest.mark.parametrize("threshold", [1e-6, 1e-5, 1e-4, 3e-4])
def test_pruning_equals_kaldingram(arpa, threshold: float) -> None:
    original = entries(kaldingram_model(arpa))
    lm = to_trie(original)
    ours = from_trie(prune_relative_entropy(lm, threshold))
    reference = kaldingram_model(arpa)
    prune(reference, threshold, minorder=1)
    theirs = entries(reference)
    assert [len(t) for t in ours[1:]] < [len(t) for t in original[1:]]  # something was pruned
    assert len(ours[2]) > 0 and len(ours[1]) > len(ours[0])  # and something kept
    for k in range(3):
        assert set(ours[k]) == set(theirs[k]), (k, len(set(ours[k]) ^ set(theirs[k])))
        for gram, (p, bo) in ours[k].items():
            assert p == theirs[k][gram][0]
            assert bo == pytest.approx(theirs[k][gram][1], abs=1e-9), gram


def test_changes_and_history_probabilities(arpa) -> None:
    """Threshold 0 keeps everything; the history probability starts from P(</s>) for `<s>`."""
    lm = to_trie(entries(kaldingram_model(arpa)))
    kept = prune_relative_entropy(lm, 0.0)
    assert [len(t.words) for t in kept.orders] == [len(t.words) for t in lm.orders]
    bos, eos, w1 = (lm.vocab.index(w) for w in ("<s>", "</s>", "w1"))
    look = NgramLookup(lm)
    got = history_log10_prob(lm, np.array([[bos, w1], [w1, w1]]), look)
    want = [look.log10_prob(np.array([[eos]]))[0] + look.log10_prob(np.array([[bos, w1]]))[0]]
    want += [look.log10_prob(np.array([[w1]]))[0] + look.log10_prob(np.array([[w1, w1]]))[0]]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    changes = relative_entropy_changes(lm)
    assert [len(c) for c in changes] == [len(t.words) for t in lm.orders[1:]]
    assert all(np.isfinite(c).all() for c in changes)
