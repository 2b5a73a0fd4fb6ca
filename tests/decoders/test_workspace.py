"""The compiled searches' workspaces (asrdecode.decoders.workspace): one field table, and compiled
code that grows and swaps named fields of the tuple."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from asrdecode.decoders.workspace import (
    WorkspaceLayout,
    borrowed,
    grow_fields,
    grow_tensors,
    prefetch,
    swap_spans,
)

LAYOUT = WorkspaceLayout(
    ("a", np.int32), ("b", np.float32), ("c", np.int64), ("d", np.int32), ("e", np.float32)
)
A, B, C, D, E = LAYOUT.indices("a", "b", "c", "d", "e")


@numba.njit
def _edit(ws, need):
    ws = grow_fields(ws, B, C, need)
    return swap_spans(ws, A, B, D)  # (a, b) <-> (d, e)


def test_compiled_field_edits():
    ws = LAYOUT.allocate(8)
    ws[A][:3] = [1, 2, 3]
    ws[B][:3] = [0.5, 1.5, 2.5]
    out = _edit(ws, 100)
    assert [a.dtype for a in out] == [np.int32, np.float32, np.int64, np.int32, np.float32]
    assert out[A] is ws[D] and out[B] is ws[E] and out[E].shape[0] >= 100  # swapped, grown
    assert out[D] is ws[A] and out[C].shape[0] >= 100
    np.testing.assert_array_equal(out[E][:3], [0.5, 1.5, 2.5])  # growth keeps the contents


def test_layout_allocates_and_names():
    ws = LAYOUT.allocate(16, c=np.zeros(3, np.int64))
    assert [a.shape[0] for a in ws] == [16, 16, 3, 16, 16]
    assert LAYOUT.span("b", "d") == slice(1, 4) and len(LAYOUT) == 5
    with pytest.raises(KeyError):
        LAYOUT.allocate(4, nope=np.zeros(1))
    with pytest.raises(ValueError):
        WorkspaceLayout(("a", np.int32), ("a", np.int64))


def test_grow_tensors_doubles_keeps_content_and_fills():
    class Holder:
        labels = torch.tensor([[1, 2], [3, 4]])
        frames = torch.tensor([[5, 6], [7, 8]])

    h = Holder()
    grow_tensors(h, ("labels", "frames"), 1, 2, {"labels": -1})  # fits: unchanged
    assert h.labels.shape == (2, 2)
    grow_tensors(h, ("labels", "frames"), 1, 5, {"labels": -1})  # 2 -> 4 -> 8
    assert h.labels.shape == h.frames.shape == (2, 8)
    assert h.labels[:, :2].tolist() == [[1, 2], [3, 4]] and (h.labels[:, 2:] == -1).all()
    assert h.frames[:, :2].tolist() == [[5, 6], [7, 8]] and (h.frames[:, 2:] == 0).all()


@numba.njit
def _prefetched_sum(a, indices):
    for i in indices:
        prefetch(a, i)
    return a.sum()


def test_prefetch_is_llvm_prefetch_and_only_a_hint():
    """`prefetch` compiles to LLVM's prefetch intrinsic, leaves every value alone and does not
    fault for an index past the array's end (record arrays too, as the searches use it)."""
    a = np.arange(10.0)
    assert _prefetched_sum(a, np.array([0, 9, 10, 1 << 20])) == a.sum()
    (ir,) = _prefetched_sum.inspect_llvm().values()
    assert "llvm.prefetch" in ir
    rec = np.zeros(4, np.dtype([("first", np.int32), ("end", np.int32)]))

    @numba.njit
    def first_after_prefetch(r, i):
        prefetch(r, i)
        return r[0].first

    assert first_after_prefetch(rec, 3) == 0


@numba.njit
def _add_to_first(a, b, x):
    a[0] += x
    return a[0] + b[1]


@numba.njit
def _through_borrowed(t, reps):
    a, (b, x) = borrowed(t)
    total = 0.0
    for _ in range(reps):
        total += _add_to_first(a, b, x)
    return total, a.shape[0], a.strides[0], b.size


def test_borrowed_views_read_and_write_the_held_arrays():
    """`borrowed` on a nested tuple of arrays and a number: the views have the source's shape and
    strides, writes through them land in the source, helpers take them as arrays; a type that is
    not an array, a number or a tuple of them is a typing error."""
    a = np.zeros(3)
    b = np.arange(5, dtype=np.int32)
    total, n, stride, size = _through_borrowed((a, (b, np.float32(2.5))), 4)
    assert (n, stride, size) == (3, 8, 5)
    assert a[0] == 10.0 and total == 2.5 + 5.0 + 7.5 + 10.0 + 4 * 1
    strided = np.arange(10.0)[::2]

    @numba.njit
    def second(v):
        return borrowed(v)[1]

    assert second(strided) == 2.0
    with pytest.raises(numba.TypingError):
        numba.njit(lambda: borrowed([1, 2]))()
