"""asrdecode.huge_pages: read-only tables copied into transparent huge pages, the LM tables replaced
where they are held."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asrdecode.huge_pages import HUGE_PAGE, huge_pages_supported, in_huge_pages


def test_in_huge_pages_keeps_values_and_records():
    """A graph's records (a structured dtype) and a plain table: equal values, dtype and shape,
    C-contiguous, writable, starting on a huge page where the system can place them so; small
    arrays are returned as they are. The copy outlives the array it was made from."""
    rec = np.dtype([("first", np.int32), ("split", np.int32), ("end", np.int32), ("final", np.float32)])
    states = np.zeros(300_000, rec)
    states["first"] = np.arange(300_000)
    states["final"] = np.linspace(0, 1, 300_000, dtype=np.float32)
    table = np.random.default_rng(0).standard_normal((700, 1000)).astype(np.float32)
    for array in (states, table):
        copy = in_huge_pages(array)
        assert copy.dtype == array.dtype and copy.shape == array.shape
        assert copy.flags["C_CONTIGUOUS"] and copy.flags["WRITEABLE"]
        assert np.array_equal(copy, array)
        if huge_pages_supported():
            assert copy is not array and copy.ctypes.data % HUGE_PAGE == 0
    kept = in_huge_pages(np.arange(HUGE_PAGE, dtype=np.int32))
    assert int(kept[-1]) == HUGE_PAGE - 1  # the source is gone, the mapping is not
    small = np.arange(10, dtype=np.int64)
    assert in_huge_pages(small) is small


def test_lm_tables_replaced_by_their_huge_page_copies(monkeypatch):
    """`DifferenceLM.in_huge_pages` (here with the threshold at one 4 kB page, so that the demo LM's
    tables move): every lookup gives the same cost and next state, the tables the searches read
    are the copies, and the old tables are freed (no second copy stays in memory)."""
    import gc
    import weakref

    import asrdecode.huge_pages as huge_pages
    from asrdecode.lm.arpa import check_arpa
    from asrdecode.lm.difference import DifferenceLM, lm_step

    root = Path(__file__).resolve().parents[1]
    large, small = root / "data/demo/graph/lm.arpa", root / "data/demo/otf/small-lm.arpa"
    vocab = [w for w in check_arpa(large).vocab if w not in ("<s>", "</s>")]
    words = {i + 1: w for i, w in enumerate(vocab)}
    lm = DifferenceLM.from_files(large, small, words, len(words) + 1, 0.7)
    rng = np.random.default_rng(0)
    pairs, u = [], DifferenceLM.START
    for w in rng.integers(1, len(words) + 1, 300):
        pairs.append((u, int(w)))
        u = int(lm_step(lm.arrays(), u, int(w))[1])
    before = [lm_step(lm.arrays(), u, w) for u, w in pairs]
    old = weakref.ref(lm.large.arc_weight)
    old_map = weakref.ref(lm._tensors["large_of"])

    monkeypatch.setattr(huge_pages, "HUGE_PAGE", 4096)
    lm.in_huge_pages()
    gc.collect()
    assert [lm_step(lm.arrays(), u, w) for u, w in pairs] == before
    if huge_pages.huge_pages_supported():
        assert old() is None and old_map() is None
        tables = lm.arrays()
        for table in (*tables[0], *tables[1], *tables[2:7]):
            assert table.nbytes < 4096 or table.ctypes.data % 4096 == 0
        assert lm.large.arc_weight.data_ptr() == tables[0][3].ctypes.data
