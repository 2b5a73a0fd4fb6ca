"""`asrdecode.lm.backoff` against independent references: the cheapest path against the shortest
path through kaldilm's G (epsilon backoff arcs, OpenFst's composition), the exact reading against
the plain-Python backoff rule of the tests' helpers; `exact_bigram`'s and `exact_readable`'s LMs read
both ways."""

import gzip
import itertools
import json
import math
from pathlib import Path

import kaldifst
import kaldilm
import numpy as np
import pytest
from helpers.otf_ref import ArpaScorer, random_arpa

from asrdecode.lm.backoff import BackoffReadings, exact_bigram, exact_readable

WORDS = ["a", "b", "c", "d"]


def kaldilm_g(arpa, tmp_path):
    """kaldilm's G of `arpa` and its word ids (no disambiguation symbol: backoff arcs are epsilons,
    ``<s>`` and ``</s>`` are arcs)."""
    symbols = tmp_path / f"{arpa.stem}.words.txt"
    fst = tmp_path / f"{arpa.stem}.G.fst"
    kaldilm.arpa2fst(str(arpa), output_fst=str(fst), write_symbol_table=str(symbols))
    ids = {}
    for line in symbols.read_text().splitlines():
        word, i = line.split()
        ids[word] = int(i)
    return kaldifst.StdVectorFst.read(str(fst)), ids


def g_cost(g, ids: dict[str, int], words: list[str]) -> float:
    """The shortest distance of ``<s> words </s>`` through G."""
    acceptor = kaldifst.make_linear_acceptor([ids[w] for w in ["<s>", *words, "</s>"]])
    ok, _, _, weight = kaldifst.get_linear_symbol_sequence(
        kaldifst.shortest_path(kaldifst.compose(acceptor, g))
    )
    assert ok
    return weight.value


def sentences(rng, n: int = 40) -> list[list[str]]:
    return [[str(w) for w in rng.choice(WORDS, size=int(rng.integers(0, 7)))] for _ in range(n)]


@pytest.mark.parametrize("seed", range(6))
def test_the_two_readings_against_g_and_the_backoff_rule(tmp_path, seed):
    rng = np.random.default_rng(seed)
    arpa = random_arpa(tmp_path / "lm.arpa", rng, WORDS, 3)
    g, ids = kaldilm_g(arpa, tmp_path)
    readings, scorer = BackoffReadings.read(arpa), ArpaScorer(arpa)
    differ = 0
    for words in sentences(rng):
        exact, cheapest = readings.exact(words), readings.cheapest_path(words)
        assert exact == pytest.approx(scorer.cost(words), abs=1e-4)
        assert cheapest == pytest.approx(g_cost(g, ids, words), abs=1e-3)
        assert cheapest <= exact + 1e-9  # the exact reading is one of G's paths
        differ += not math.isclose(exact, cheapest, abs_tol=1e-6)
    if seed == 0:
        assert differ > 0  # these LMs have the case (the comparison is not vacuous)


@pytest.mark.parametrize("seed", range(6))
def test_exact_bigram_is_read_exactly_by_its_g(tmp_path, seed):
    """Its G's shortest paths (kaldilm) equal its exact reading (the tests' backoff rule) on every
    sentence; only bigrams below their backoff route changed, to that route."""
    rng = np.random.default_rng(seed)
    lm = BackoffReadings.read(random_arpa(tmp_path / "lm.arpa", rng, WORDS, 3))
    small, raised = exact_bigram(lm)
    packed = small.write(tmp_path / "small.arpa.gz")
    again = BackoffReadings.read(packed)
    assert again.order == 2
    if seed == 0:
        assert raised > 0  # the case exists (the checks below are not vacuous)
    plain = tmp_path / "small.arpa"  # kaldilm reads plain text only
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    assert small.write(tmp_path / "again.arpa").read_bytes() == plain.read_bytes()
    g, ids = kaldilm_g(plain, tmp_path)
    scorer = ArpaScorer(plain)
    for words in sentences(rng):
        assert again.exact(words) == pytest.approx(scorer.cost(words), abs=1e-4)
        assert g_cost(g, ids, words) == pytest.approx(again.exact(words), abs=1e-3)
    changed = 0
    for gram, p in again.prob.items():
        before = lm.prob[gram]
        if len(gram) == 1 or p == pytest.approx(before, abs=1e-6):
            assert p == pytest.approx(before, abs=1e-6)
            continue
        assert p > before and p == pytest.approx(lm.bow.get(gram[:1], 0.0) + lm.prob[gram[1:]], abs=1e-6)
        changed += 1
    assert changed == raised


def test_an_out_of_vocabulary_word(tmp_path):
    readings = BackoffReadings.read(random_arpa(tmp_path / "lm.arpa", np.random.default_rng(0), WORDS, 2))
    assert not readings.in_vocabulary(["a", "zzz"])
    with pytest.raises(KeyError, match="zzz"):
        readings.exact(["zzz"])


def test_the_default_setups_small_lm_is_read_exactly_by_its_graph():
    """The shipped small LM (the default setup's graph) is a bigram LM with no bigram less probable
    than its backoff route (within its 6 printed decimals), so its G's cheapest paths are its exact
    reading and the on-the-fly composition is the full LM read exactly."""
    from asrdecode.models.loading import resolve_packaged_path

    lm = BackoffReadings.read(resolve_packaged_path("embedded:lm/sphinx-en-us-72k-small.arpa.gz"))
    assert lm.order == 2
    worst = max(lm.bow.get(g[:1], 0.0) + lm.prob[g[1:]] - p for g, p in lm.prob.items() if len(g) == 2)
    assert worst <= 1e-6


@pytest.mark.parametrize("seed", range(4))
def test_the_tensor_lm_counts_the_ngrams_below_their_backoff_route(tmp_path, seed):
    """`BatchedNgramLM.ngrams_below_backoff_route` (what `wfst-otf` and `let` warn about) against the
    plain-Python count over the ARPA (n-grams into ``</s>`` are final weights there, not arcs)."""
    from asrdecode.lm.ngram_tensor import BatchedNgramLM

    arpa = random_arpa(tmp_path / "lm.arpa", np.random.default_rng(seed), WORDS, 3)
    readings = BackoffReadings.read(arpa)
    expected = 0
    for gram, p in readings.prob.items():
        if len(gram) > 1 and gram[-1] != "</s>":
            route = readings.bow.get(gram[:-1], 0.0) + readings.word_log10(
                readings.state(gram[1:-1]), gram[-1]
            )
            expected += route * math.log(10) > p * math.log(10) + 1e-4
    lm = BatchedNgramLM.from_arpa(arpa, vocab=WORDS, token_ids="words")
    assert lm.ngrams_below_backoff_route() == expected
    if seed == 0:
        assert expected > 0
    small, _ = exact_bigram(readings)
    exact = BatchedNgramLM.from_arpa(small.write(tmp_path / "small.arpa"), vocab=WORDS, token_ids="words")
    assert exact.ngrams_below_backoff_route() == 0


@pytest.mark.parametrize("seed", range(8))
def test_exact_readable_is_read_exactly_by_its_g(tmp_path, seed):
    """Trigram LMs: the new LM's G (kaldilm, shortest paths) equals its exact reading (the tests'
    backoff rule) on random sentences, and its cheapest path equals its exact reading on every
    sentence of up to 4 words (brute force)."""
    rng = np.random.default_rng(seed)
    lm = BackoffReadings.read(random_arpa(tmp_path / "lm.arpa", rng, WORDS, 3))
    new, counts = exact_readable(lm)
    if seed == 0:
        assert counts["removed"] + counts["raised"] > 0  # the case exists (not vacuous)
    plain = new.write(tmp_path / "exact.arpa")
    g, ids = kaldilm_g(plain, tmp_path)
    scorer = ArpaScorer(plain)
    for words in sentences(rng):
        assert new.exact(words) == pytest.approx(scorer.cost(words), abs=1e-4)
        assert g_cost(g, ids, words) == pytest.approx(new.exact(words), abs=1e-3)
    for n in range(5):
        for words in itertools.product(WORDS, repeat=n):
            assert new.cheapest_path(list(words)) == pytest.approx(new.exact(list(words)), abs=1e-6)


def test_exact_readable_sphinx_lm_reads_every_reference_exactly():
    """The static path's LM (data/lm/sphinx-en-us-72k.arpa.gz): G undercuts the backoff rule on
    some references of the real sets; after `exact_readable` on none."""
    root = Path(__file__).resolve().parents[2]
    lm = BackoffReadings.read(root / "data/lm/sphinx-en-us-72k.arpa.gz")
    new, _ = exact_readable(lm)
    before = 0
    for name in ("demo/real", "real/dev", "real/test", "real/phone-dev", "real/phone-test"):
        for line in (root / "data" / name / "manifest.jsonl").read_text().splitlines():
            words = json.loads(line)["text"].split()
            if words and lm.in_vocabulary(words):
                before += lm.exact(words) - lm.cheapest_path(words) > 1e-3
                assert new.cheapest_path(words) == pytest.approx(new.exact(words), abs=1e-6)
    assert before > 0


def test_the_shipped_exact_readable_lm_is_the_scripts_output():
    """data/lm/sphinx-en-us-72k-exact.arpa.gz (configs/graph/sphinx-en-us-exact.yaml) is
    `exact_readable` of data/lm/sphinx-en-us-72k.arpa.gz, as scripts/exact_readable_lm.py writes it."""
    root = Path(__file__).resolve().parents[2]
    made, _ = exact_readable(BackoffReadings.read(root / "data/lm/sphinx-en-us-72k.arpa.gz"))
    shipped = BackoffReadings.read(root / "data/lm/sphinx-en-us-72k-exact.arpa.gz")
    assert shipped.prob.keys() == made.prob.keys()
    assert all(abs(shipped.prob[g] - p) < 1e-6 for g, p in made.prob.items())
    for g in made.bow.keys() | shipped.bow.keys():  # a weight of 0 is not written
        assert abs(shipped.bow.get(g, 0.0) - made.bow.get(g, 0.0)) < 1e-6
