"""The memo of the difference LM's lookups (`memo_get` / `memo_fill`): a set-associative cache of
`lm_step`. What it returns is `lm_step`'s value, whatever was evicted; a set keeps its MEMO_WAYS
newest pairs; its sets start on cache lines."""

from pathlib import Path

import numpy as np

from asrdecode.lm.arpa import check_arpa
from asrdecode.lm.difference import (
    MEMO_DTYPE,
    MEMO_WAYS,
    DifferenceLM,
    lm_step,
    memo_fill,
    memo_get,
    memo_slot,
    new_memo,
    zeros_on_cache_lines,
)

ROOT = Path(__file__).resolve().parents[2]
LARGE = ROOT / "data/demo/graph/lm.arpa"
SMALL = ROOT / "data/demo/otf/small-lm.arpa"


def demo_lm() -> tuple[tuple, int]:
    """The demo difference LM's arrays and its vocabulary size (the memo's key stride)."""
    vocab = [w for w in check_arpa(LARGE).vocab if w not in ("<s>", "</s>")]
    words = {i + 1: w for i, w in enumerate(vocab)}
    return DifferenceLM.from_files(LARGE, SMALL, words, len(words) + 1, 0.7).arrays(), len(words) + 1


def history_word_pairs(lm: tuple, vocab: int, n: int, seed: int = 0) -> list[tuple[int, int]]:
    """n (union state, word) pairs met along random word sequences."""
    rng = np.random.default_rng(seed)
    pairs, u = [], DifferenceLM.START
    for _ in range(n):
        w = int(rng.integers(1, vocab))
        pairs.append((u, w))
        u = int(lm_step(lm, u, w)[1])
        if rng.random() < 0.2:
            u = DifferenceLM.START
    return pairs


def lookup(lm: tuple, memo: np.ndarray, u: int, w: int, vocab: int) -> tuple[float, int, bool]:
    """What a search does with the memo: a probe, the LM on a miss."""
    c, nxt, hit = memo_get(memo, u, w, vocab)
    if not hit:
        c, nxt = memo_fill(lm, memo, u, w, vocab)
    return c, nxt, hit


def test_new_memo_is_empty_and_its_sets_start_on_cache_lines():
    for bits in (4, 10, 16):
        memo = new_memo(bits)
        assert memo.shape == (1 << bits,) and memo.dtype == MEMO_DTYPE
        assert (memo["key"] == -1).all()
        assert memo.ctypes.data % (MEMO_WAYS * MEMO_DTYPE.itemsize) == 0


def test_zeros_on_cache_lines_start_on_a_line_whatever_the_record_size():
    """numpy aligns to 16 bytes; the helper to 64 also for records of 32 bytes (`let`'s word-block
    cache), which no whole number of records skipped could align."""
    from asrdecode.decoders.let.search import WORD_CACHE_DTYPE

    for dtype in (np.dtype(np.uint8), MEMO_DTYPE, WORD_CACHE_DTYPE):
        for n in (1, 7, 1 << 12):
            arrays = [zeros_on_cache_lines(n, dtype) for _ in range(8)]
            for a in arrays:
                assert a.shape == (n,) and a.dtype == dtype and a.flags["C_CONTIGUOUS"]
                assert a.ctypes.data % 64 == 0 and not a.view(np.uint8).any()


def test_memo_returns_lm_step_through_evictions():
    lm, vocab = demo_lm()
    memo = new_memo(4)  # 16 entries for 40 pairs: most pairs evict others
    pool = history_word_pairs(lm, vocab, 40)
    hits = 0
    for k in np.random.default_rng(1).integers(0, len(pool), 3000):
        u, w = pool[k]
        c, nxt, hit = lookup(lm, memo, u, w, vocab)
        hits += hit
        assert (c, nxt) == tuple(lm_step(lm, u, w))
    assert 0 < hits < 3000


def test_a_set_keeps_its_newest_pairs():
    lm, vocab = demo_lm()
    memo = new_memo(4)
    by_set: dict[int, list[tuple[int, int]]] = {}
    for u, w in dict.fromkeys(history_word_pairs(lm, vocab, 3000)):
        by_set.setdefault(int(memo_slot(u, w, vocab, memo.shape[0])[1]), []).append((u, w))
    first, pairs = max(by_set.items(), key=lambda kv: len(kv[1]))
    assert first % MEMO_WAYS == 0 and len(pairs) > MEMO_WAYS
    for u, w in pairs[:MEMO_WAYS]:
        assert not lookup(lm, memo, u, w, vocab)[2]
    for u, w in pairs[:MEMO_WAYS]:  # all of them fit
        assert lookup(lm, memo, u, w, vocab)[2]
    assert not lookup(lm, memo, *pairs[MEMO_WAYS], vocab)[2]  # a fifth: the oldest drops out
    assert not memo_get(memo, *pairs[0], vocab)[2]
    assert all(memo_get(memo, u, w, vocab)[2] for u, w in pairs[1 : MEMO_WAYS + 1])
