"""The on-disk cache of the difference LM's tables (`DifferenceLM.from_files(cache=...)`) and of one
LM's (`ngram_lm_from_file`): a second load reads the file and gives the same tables and costs as
building from the ARPA files; other ARPA contents are another entry; a damaged entry is rebuilt."""

import logging
from pathlib import Path

import numpy as np
import torch

from asrdecode.lm.arpa import check_arpa
from asrdecode.lm.difference import DifferenceLM

ROOT = Path(__file__).resolve().parents[2]
LARGE = ROOT / "data/demo/graph/lm.arpa"
SMALL = ROOT / "data/demo/otf/small-lm.arpa"


def words() -> dict[int, str]:
    vocab = [w for w in check_arpa(LARGE).vocab if w not in ("<s>", "</s>")]
    return {i + 1: w for i, w in enumerate(vocab)}


def same(a: DifferenceLM, b: DifferenceLM) -> None:
    for x, y in zip(a.arrays()[2:7], b.arrays()[2:7], strict=True):
        np.testing.assert_array_equal(x, y)
    for side in ("large", "small"):
        for name, buf in getattr(a, side).named_buffers():
            assert torch.equal(buf, dict(getattr(b, side).named_buffers())[name]), (side, name)
    rng = np.random.default_rng(0)
    for _ in range(20):
        seq = [int(w) for w in rng.integers(1, len(words()) + 1, size=5)]
        assert a.sentence_cost(seq) == b.sentence_cost(seq)


def test_cached_tables_equal_built_tables(tmp_path, caplog):
    w = words()
    n = max(w) + 1
    built = DifferenceLM.from_files(LARGE, SMALL, w, n, 0.7)
    first = DifferenceLM.from_files(LARGE, SMALL, w, n, 0.7, cache=tmp_path)
    (entry,) = list(tmp_path.glob("difference-*.safetensors"))
    loaded = DifferenceLM.from_files(LARGE, SMALL, w, n, 0.7, cache=tmp_path)
    same(built, first)
    same(built, loaded)
    assert loaded.lm_scale == 0.7
    # the same contents under another name: the same entry, reporting the file it was asked for
    same_copy = tmp_path / "same-large.arpa"
    same_copy.write_text(LARGE.read_text())
    assert DifferenceLM.from_files(same_copy, SMALL, w, n, 0.7, cache=tmp_path).large.info["path"] == str(
        same_copy
    )
    assert len(list(tmp_path.glob("difference-*.safetensors"))) == 1
    # another ARPA content: another entry
    copy = tmp_path / "large-copy.arpa"
    copy.write_text(LARGE.read_text().replace("\\end\\", "\\end\\\n"))
    DifferenceLM.from_files(copy, SMALL, w, n, cache=tmp_path)
    assert len(list(tmp_path.glob("difference-*.safetensors"))) == 2
    # a damaged entry is rebuilt, with a warning
    entry.write_bytes(b"not a safetensors file")
    with caplog.at_level(logging.WARNING):
        again = DifferenceLM.from_files(LARGE, SMALL, w, n, 0.7, cache=tmp_path)
    assert "cannot read cached LM tables" in caplog.text
    same(built, again)


def test_one_lm_cached_as_the_difference_is(tmp_path, caplog):
    """`ngram_lm_from_file` (n-best rescoring's new LM): the same cache, its own entry."""
    from asrdecode.lm.difference import ngram_lm_from_file
    from asrdecode.lm.ngram_tensor import BatchedNgramLM

    vocab = [*words().values(), "zzz-not-in-the-lm"]
    built = BatchedNgramLM.from_file(LARGE, vocab)
    first = ngram_lm_from_file(LARGE, vocab, cache=tmp_path)
    (entry,) = list(tmp_path.glob("ngram-*.safetensors"))
    loaded = ngram_lm_from_file(LARGE, vocab, cache=tmp_path)
    for lm in (first, loaded):
        assert (lm.vocab, lm.order, lm.vocab_size) == (vocab, built.order, built.vocab_size)
        for name, buf in built.named_buffers():
            assert torch.equal(buf, dict(lm.named_buffers())[name]), name
    assert loaded.info["path"] == str(LARGE)
    ngram_lm_from_file(LARGE, vocab[:-1], cache=tmp_path)  # another vocabulary: another entry
    assert len(list(tmp_path.glob("ngram-*.safetensors"))) == 2
    entry.write_bytes(b"not a safetensors file")
    with caplog.at_level(logging.WARNING):
        again = ngram_lm_from_file(LARGE, vocab, cache=tmp_path)
    assert "cannot read cached LM tables" in caplog.text
    assert torch.equal(again.arc_weight, built.arc_weight)
