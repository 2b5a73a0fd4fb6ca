"""`BatchedNgramLM.score` (sparse batched lookup) and `histories` against a plain-Python ARPA scorer,
and the `wfst-otf` difference LM's union states against the same scorer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.otf_ref import LN10, ArpaScorer, random_arpa  # noqa: E402

from asrdecode.lm.difference import DifferenceLM, lm_final, lm_step  # noqa: E402
from asrdecode.lm.ngram_tensor import BatchedNgramLM  # noqa: E402

WORDS = [f"w{i}" for i in range(8)]


@pytest.mark.parametrize("order", [1, 2, 3])
def test_score_and_histories_equal_brute_force(tmp_path, order):
    path = random_arpa(tmp_path / "lm.arpa", np.random.default_rng(order), WORDS, order)
    lm = BatchedNgramLM.from_arpa(path, vocab=WORDS)
    ref = ArpaScorer(path)
    hist = lm.histories()
    assert len(set(hist)) == lm.num_states
    names = {-1: "<s>", **dict(enumerate(WORDS))}
    states = torch.arange(lm.num_states).repeat_interleave(len(WORDS))
    tokens = torch.arange(len(WORDS)).repeat(lm.num_states)
    logp, nxt = lm.score(states, tokens)
    full, full_next = lm.advance(torch.arange(lm.num_states))
    assert torch.equal(logp, full.reshape(-1)) and torch.equal(nxt, full_next.reshape(-1))
    for i, (s, w) in enumerate(zip(states.tolist(), tokens.tolist(), strict=True)):
        h = tuple(names[t] for t in hist[s])
        assert float(logp[i]) == pytest.approx(ref.log10p(h, WORDS[w]) * LN10, abs=1e-4)
        # the next state's history is the longest suffix of h w that is a history of the LM
        ext = (*hist[s], w)
        want = next(ext[k:] for k in range(len(ext) + 1) if ext[k:] in set(hist))
        assert hist[int(nxt[i])] == want


def test_difference_lm_sentences_equal_brute_force(tmp_path):
    rng = np.random.default_rng(11)
    large = random_arpa(tmp_path / "large.arpa", rng, WORDS, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, WORDS, 2)
    diff = DifferenceLM(
        BatchedNgramLM.from_arpa(large, vocab=WORDS), BatchedNgramLM.from_arpa(small, vocab=WORDS), 0.7
    )
    arrays = diff.arrays()
    big, little = ArpaScorer(large), ArpaScorer(small)
    for _ in range(40):
        ids = rng.integers(0, len(WORDS), size=int(rng.integers(0, 9))).tolist()
        words = [WORDS[i] for i in ids]
        want = 0.7 * (big.cost(words) - little.cost(words))
        assert diff.sentence_cost(ids) == pytest.approx(want, abs=1e-4)  # torch lookups
        u, total = diff.START, 0.0
        for w in ids:  # numba lookups
            c, u = lm_step(arrays, u, w)
            total += float(c)
        assert total + float(lm_final(arrays, u)) == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("seed", range(4))
def test_histories_that_change_no_cost_are_merged(tmp_path, seed):
    """Union states whose every difference is their backoff's (here bigrams without trigrams and
    with backoff weight 1) are merged into it: every word sequence up to four words costs what the
    ARPA scorer says and what the unmerged maps give (torch and numba lookups), the final states
    differ only where merged, and fewer states are reached."""
    import itertools

    from asrdecode.lm.difference import union_maps

    rng = np.random.default_rng(40 + seed)
    large = random_arpa(tmp_path / "large.arpa", rng, WORDS[:5], 3, bare=0.5)
    small = random_arpa(tmp_path / "small.arpa", rng, WORDS[:5], 1 + seed % 2)
    lms = [BatchedNgramLM.from_arpa(p, vocab=WORDS[:5]) for p in (large, small)]
    merged, plain = DifferenceLM(*lms, 0.7), DifferenceLM(*lms, 0.7, maps=union_maps(*lms, merge=False))
    big, little = ArpaScorer(large), ArpaScorer(small)
    reached = {"merged": set(), "plain": set()}
    for n in range(5):
        for ids in itertools.product(range(5), repeat=n):
            words = [WORDS[i] for i in ids]
            want = 0.7 * (big.cost(words) - little.cost(words))
            for name, diff in (("merged", merged), ("plain", plain)):
                arrays, u, total = diff.arrays(), diff.START, 0.0
                for w in ids:
                    c, u = lm_step(arrays, u, w)
                    total += float(c)
                reached[name].add(u)
                assert total + float(lm_final(arrays, u)) == pytest.approx(want, abs=1e-4)
                assert diff.sentence_cost(list(ids)) == pytest.approx(want, abs=1e-4)
    assert len(reached["merged"]) < len(reached["plain"])


def test_merged_histories_keep_the_prefixes_of_kept_ones(tmp_path):
    """History (a) changes no cost (backoff weight 1, its one bigram as likely as the unigram), but
    (a b) has a trigram: (a) must stay a state, else "a b c" would lose its trigram."""
    large = tmp_path / "large.arpa"
    large.write_text(
        "\\data\\\nngram 1=5\nngram 2=3\nngram 3=1\n\n\\1-grams:\n-0.6 </s>\n-99 <s> -0.5\n"
        "-0.5 a 0.0\n-0.7 b -0.3\n-0.9 c -0.2\n\n\\2-grams:\n-0.2 <s> a -0.1\n-0.7 a b -0.4\n"
        "-0.3 b c -0.1\n\n\\3-grams:\n-0.05 a b c\n\n\\end\\\n"
    )
    small = tmp_path / "small.arpa"
    small.write_text(
        "\\data\\\nngram 1=5\n\n\\1-grams:\n-0.7 </s>\n-99 <s>\n-0.6 a\n-0.6 b\n-0.6 c\n\n\\end\\\n"
    )
    vocab = ["a", "b", "c"]
    diff = DifferenceLM(*(BatchedNgramLM.from_arpa(p, vocab=vocab) for p in (large, small)))
    big, little = ArpaScorer(large), ArpaScorer(small)
    for ids in ([0, 1, 2], [1, 0, 1, 2], [0, 0, 1, 2], [2, 0, 1, 2, 2]):
        words = [vocab[i] for i in ids]
        assert diff.sentence_cost(ids) == pytest.approx(big.cost(words) - little.cost(words), abs=1e-4)


def test_lookups_are_batched_without_host_reads(tmp_path):
    """`score` and the difference LM's `step` / `final_cost` are one fixed op sequence whatever the
    batch (what the torch search needs to stay free of host reads and capturable), none syncing."""
    from helpers.host_reads import HostReads

    rng = np.random.default_rng(3)
    large = BatchedNgramLM.from_arpa(random_arpa(tmp_path / "l.arpa", rng, WORDS, 3), vocab=WORDS)
    small = BatchedNgramLM.from_arpa(random_arpa(tmp_path / "s.arpa", rng, WORDS, 2), vocab=WORDS)
    diff = DifferenceLM(large, small)
    op_lists = []
    for n in (1, 300):
        states = torch.randint(0, diff.num_states, (n,))
        words = torch.randint(0, len(WORDS), (n,))
        with HostReads() as rec:
            large.score(torch.randint(0, large.num_states, (n,)), words)
            diff.step(states, words)
            diff.final_cost(states)
        assert rec.syncs == []
        op_lists.append(rec.ops)
    assert op_lists[0] == op_lists[1]


def test_gzip_lms_give_the_same_difference(tmp_path):
    import gzip
    import shutil

    rng = np.random.default_rng(5)
    large = random_arpa(tmp_path / "large.arpa", rng, WORDS, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, WORDS, 2)
    with open(large, "rb") as src, gzip.open(tmp_path / "large.arpa.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    words = dict(enumerate(WORDS))
    plain = DifferenceLM.from_files(large, small, words, len(WORDS))
    packed = DifferenceLM.from_files(tmp_path / "large.arpa.gz", small, words, len(WORDS))
    for a, b in zip(plain.arrays()[2:7], packed.arrays()[2:7], strict=True):
        assert np.array_equal(a, b)
    for a, b in zip(plain.arrays()[0], packed.arrays()[0], strict=True):
        assert np.array_equal(a, b)
