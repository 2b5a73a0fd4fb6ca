"""pocketsphinx's own ARPA writer (scaled, truncated output) vs asrdecode's trie reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asrdecode.errors import InputError
from asrdecode.lm.sphinx_arpa_dump import (
    compare_with_dump,
    dump_scale,
    read_arpa_dump,
    run_pocketsphinx_writer,
)
from asrdecode.lm.sphinx_trie import NgramTable, TrieLM, read_trie_lm
from asrdecode.models.loading import resolve_packaged_path

LM_BIN = Path(resolve_packaged_path("embedded:sphinx-en-us/../en-us.lm.bin"))


def tiny_lm() -> TrieLM:
    vocab = ["</s>", "<s>", "a", "b"]
    uni = NgramTable(
        np.arange(4)[:, None], np.array([-0.5, -99.0, -0.6, -0.9]), np.array([0.0, -0.2, -0.3, -0.1])
    )
    bi = NgramTable(np.array([[1, 2], [2, 3], [3, 0]]), np.array([-0.1, -0.4, -0.05]), np.zeros(3))
    return TrieLM(vocab=vocab, orders=[uni, bi], log10_per_unit=1.0)


def test_scale_is_recovered_and_unfinished_line_ignored(tmp_path):
    """A dump as pocketsphinx 5.1.1 writes it: tab-separated words, every value times one constant,
    cut mid-line when the process dies."""
    factor = 1.7592186e13
    lm = tiny_lm()
    lines = ["This is an ARPA-format language model file", "\\data\\", "ngram 1=4", "ngram 2=3", ""]
    lines.append("\\1-grams:")
    for w, p, b in zip(lm.vocab, lm.orders[0].log10_prob, lm.orders[0].log10_backoff, strict=True):
        lines.append(f"{p * factor:.4f}\t{w}\t{b * factor:.4f}")
    lines += ["", "\\2-grams:"]
    for (h, w), p in zip(lm.orders[1].words, lm.orders[1].log10_prob, strict=True):
        lines.append(f"{p * factor:.4f}\t{lm.vocab[h]}\t{lm.vocab[w]}\t0.0000")
    text = "\n".join(lines[:-1]) + "\n" + lines[-1][:9]  # the last bigram is cut off
    (tmp_path / "dump.arpa").write_text(text)

    dump = read_arpa_dump(tmp_path / "dump.arpa")
    assert not dump.complete
    assert dump.ngrams[2] == [("<s>", "a"), ("a", "b")]
    assert dump_scale(dump) == pytest.approx(factor, rel=1e-12)
    result = compare_with_dump(lm, dump, dump_scale(dump))
    assert [result[k].compared for k in (1, 2)] == [4, 2]
    assert max(r.max_prob_diff for r in result.values()) < 1e-12
    assert result[1].max_backoff_diff < 1e-12 and result[2].missing == 0

    # a value off by 0.01 in the dump is found; an n-gram we do not have is counted as missing
    dump.log10_prob[2][1] += 0.01 * factor
    dump.ngrams[2][0] = ("b", "a")
    result = compare_with_dump(lm, dump, factor)
    assert result[2].max_prob_diff == pytest.approx(0.01) and result[2].missing == 1


def test_dump_without_bos_or_with_bad_numbers_is_a_one_line_error(tmp_path):
    (tmp_path / "a.arpa").write_text("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\tx\n\n\\end\\\n")
    with pytest.raises(InputError, match="no <s> unigram"):
        dump_scale(read_arpa_dump(tmp_path / "a.arpa"))
    (tmp_path / "b.arpa").write_text("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.x\tx\n\n\\end\\\n")
    with pytest.raises(InputError, match=r"b.arpa:5: bad number"):
        read_arpa_dump(tmp_path / "b.arpa")


def test_pocketsphinx_writer_output_equals_trie_reader(tmp_path):
    """pocketsphinx's writer on the packaged en-us.lm.bin (in a child process: 5.1.1 dies after the
    bigrams), with its LogMath kept alive so that no scale factor creeps in (<s> = -99 exactly),
    equals the trie decoded by asrdecode on the first 20,000 unigrams and bigrams, probabilities
    and backoffs, to its 4 printed decimals."""
    run_pocketsphinx_writer(LM_BIN, tmp_path / "ps.arpa")
    dump = read_arpa_dump(tmp_path / "ps.arpa", max_order=3, limit=20_000)
    assert not dump.complete  # it still dies before the trigrams
    factor = dump_scale(dump)
    assert factor == 1.0
    result = compare_with_dump(read_trie_lm(LM_BIN), dump, factor)
    tol = 0.5e-4 + 99 * 2.0**-23  # 4 printed decimals + float32 rounding of values down to -99
    for order in (1, 2):
        assert result[order].compared == 20_000 and result[order].missing == 0
        assert result[order].max_prob_diff <= tol
        assert result[order].max_backoff_diff <= tol
