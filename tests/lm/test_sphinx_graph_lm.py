"""The shipped graph LM (`configs/graph/sphinx-en-us.yaml`'s `arpa`, made by
scripts/export_sphinx_lm.py): a valid ARPA, its vocabulary chosen by unigram probability only,
and a proper distribution after vocabulary limiting and pruning (checked with kaldingram's reader)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import kaldilm
import numpy as np
import pytest
import yaml
from kaldingram.prune import ArpaParser

from asrdecode.graph.sphinx import read_sphinx_dict
from asrdecode.lm.arpa import check_arpa, plain_copy
from asrdecode.lm.sphinx_trie import read_trie_lm
from asrdecode.models.loading import resolve_packaged_path

ROOT = Path(__file__).resolve().parents[2]
ARPA = ROOT / yaml.safe_load((ROOT / "configs/graph/sphinx-en-us.yaml").read_text())["arpa"]
LM_BIN = Path(resolve_packaged_path("embedded:sphinx-en-us/../en-us.lm.bin"))
DICT = Path(resolve_packaged_path("embedded:sphinx-en-us/../cmudict-en-us.dict"))


def section_line_counts(path: Path) -> tuple[dict[int, int], dict[int, int]]:
    """(declared counts, non-empty lines per section), read independently of asrdecode's checker."""
    declared, lines, order = {}, {}, 0
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if m := re.fullmatch(r"ngram (\d+)=(\d+)", line):
                declared[int(m[1])] = int(m[2])
            elif m := re.fullmatch(r"\\(\d+)-grams:", line):
                order = int(m[1])
                lines[order] = 0
            elif line == "\\end\\":
                order = 0
            elif line and order:
                lines[order] += 1
    return declared, lines


def test_shipped_lm_is_valid_arpa_with_matching_counts(tmp_path):
    declared, lines = section_line_counts(ARPA)
    assert declared == lines and sorted(declared) == [1, 2, 3]
    assert check_arpa(ARPA).counts == declared
    # kaldilm (Kaldi's arpa2fst) reads it into a G with one state per history at least
    plain = plain_copy(ARPA, tmp_path / "lm.arpa")
    text = kaldilm.arpa2fst(str(plain), disambig_symbol="#0", max_arpa_warnings=-1)
    states = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert len(states) > declared[2]


def test_vocabulary_is_the_most_probable_pronounceable_words():
    """Vocabulary selection uses the unigram probabilities of en-us.lm.bin and the dictionary only:
    every kept word outranks every pronounceable word left out."""
    vocab = set(check_arpa(ARPA).vocab) - {"<s>", "</s>"}
    pronounceable = {word for word, _ in read_sphinx_dict(DICT)}
    assert vocab <= pronounceable
    lm = read_trie_lm(LM_BIN)
    uni = dict(zip(lm.vocab, lm.orders[0].log10_prob, strict=True))
    kept = min(uni[w] for w in vocab)
    dropped = [uni[w] for w in lm.vocab if w in pronounceable and w not in vocab and w[0] != "<"]
    assert not dropped or max(dropped) <= kept


@pytest.fixture(scope="module")
def kaldingram_lm():
    (model,) = ArpaParser().loadf(ARPA, encoding="utf-8")
    return model


def test_pruned_distributions_sum_to_one(kaldingram_lm):
    """sum_w p(w | h) = 1 over the whole vocabulary (kaldingram's backoff evaluation) for the empty
    history, unigram and bigram histories: limiting and pruning renormalised the backoffs."""
    lm = kaldingram_lm
    words = [w for w in lm.vocabulary() if w != "<s>"]
    rng = np.random.default_rng(0)
    bigram_histories = list(lm._ngrams[2].keys())  # (w1, w2) histories with explicit trigrams
    unigram_histories = list(lm._ngrams[1].keys())
    histories = [(), ("<s>",)]
    histories += [unigram_histories[i] for i in rng.choice(len(unigram_histories), 3, replace=False)]
    histories += [bigram_histories[i] for i in rng.choice(len(bigram_histories), 3, replace=False)]
    for h in histories:
        total = sum(10.0 ** lm.log_p_raw(h + (w,)) for w in words)
        assert total == pytest.approx(1.0, abs=2e-4), h
