"""`asrdecode bench lm-backoff`'s two readings of an ARPA LM against independent references: the
cheapest path against the shortest path through kaldilm's G (epsilon backoff arcs, OpenFst's
composition), the exact reading against the plain-Python backoff rule of the tests' helpers."""

import math

import kaldifst
import kaldilm
import numpy as np
import pytest
from helpers.otf_ref import ArpaScorer, random_arpa

from asrdecode.bench.lm_backoff import BackoffReadings, compare_readings

WORDS = ["a", "b", "c", "d"]


def g_cost(fst: kaldifst.StdVectorFst, ids: dict[str, int], words: list[str]) -> float:
    """The shortest distance of `words` through G (kaldilm's symbols; without a disambiguation
    symbol its backoff arcs are epsilons and ``<s>``, ``</s>`` are arcs)."""
    acceptor = kaldifst.make_linear_acceptor([ids[w] for w in ["<s>", *words, "</s>"]])
    composed = kaldifst.compose(acceptor, fst)
    ok, _, _, weight = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(composed))
    assert ok
    return weight.value


@pytest.mark.parametrize("seed", range(6))
def test_the_two_readings_against_g_and_the_backoff_rule(tmp_path, seed):
    rng = np.random.default_rng(seed)
    arpa = random_arpa(tmp_path / "lm.arpa", rng, WORDS, 3)
    symbols = str(tmp_path / "w.txt")
    kaldilm.arpa2fst(str(arpa), output_fst=str(tmp_path / "G.fst"), write_symbol_table=symbols)
    g = kaldifst.StdVectorFst.read(str(tmp_path / "G.fst"))
    ids = {}
    for line in (tmp_path / "w.txt").read_text().splitlines():
        word, i = line.split()
        ids[word] = int(i)
    readings, scorer = BackoffReadings(arpa), ArpaScorer(arpa)
    sentences = [[str(w) for w in rng.choice(WORDS, size=int(rng.integers(0, 7)))] for _ in range(40)]
    differ = 0
    for words in sentences:
        exact, cheapest = readings.exact(words), readings.cheapest_path(words)
        assert exact == pytest.approx(scorer.cost(words), abs=1e-4)
        assert cheapest == pytest.approx(g_cost(g, ids, words), abs=1e-3)
        assert cheapest <= exact + 1e-9  # the exact reading is one of G's paths
        differ += not math.isclose(exact, cheapest, abs_tol=1e-6)
    summary = compare_readings(readings, sentences)
    assert summary["sentences"] == len(sentences) and summary["differ"] == differ


def test_a_random_lm_has_sentences_whose_readings_differ(tmp_path):
    """The case the bench is about exists in these LMs (the test above is not vacuous)."""
    differ = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        readings = BackoffReadings(random_arpa(tmp_path / f"lm{seed}.arpa", rng, WORDS, 3))
        sentences = [[str(w) for w in rng.choice(WORDS, size=4)] for _ in range(20)]
        differ += compare_readings(readings, sentences)["differ"]
    assert differ > 0


def test_an_out_of_vocabulary_word_is_skipped(tmp_path):
    readings = BackoffReadings(random_arpa(tmp_path / "lm.arpa", np.random.default_rng(0), WORDS, 2))
    summary = compare_readings(readings, [["a", "zzz"], ["a", "b"]])
    assert summary["sentences"] == 1 and summary["skipped_out_of_vocabulary"] == 1
    with pytest.raises(KeyError, match="zzz"):
        readings.exact(["zzz"])
