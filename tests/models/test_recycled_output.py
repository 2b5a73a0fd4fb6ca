"""RecycledOutput: output memory handed out again only when nothing refers to it."""

from __future__ import annotations

import numpy as np
import torch

from asrdecode.models.base import RecycledOutput

CPU = torch.device("cpu")


def test_memory_is_reused_once_let_go_of() -> None:
    out = RecycledOutput()
    a = out.empty((4, 5), torch.float32, CPU)
    ptr = a.data_ptr()
    del a
    b = out.empty((2, 10), torch.float32, CPU)
    assert b.data_ptr() == ptr and b.shape == (2, 10)


def test_memory_still_referred_to_is_not_handed_out() -> None:
    out = RecycledOutput()
    a = out.empty((4, 5), torch.float32, CPU)
    a.fill_(1.0)
    row = a[1]  # a view keeps the memory in use
    array = a.numpy()  # so does a numpy array of it
    del a
    b = out.empty((4, 5), torch.float32, CPU)
    b.fill_(2.0)
    assert (row == 1).all() and (array == 1).all()
    assert not np.shares_memory(array, b.numpy())
    del row, array
    c = out.empty((4, 5), torch.float32, CPU)
    assert not np.shares_memory(c.numpy(), b.numpy())


def test_growth_doubles_and_other_dtypes_get_fresh_memory() -> None:
    out = RecycledOutput()
    del_me = out.empty((100,), torch.float32, CPU)
    del del_me
    big = out.empty((150,), torch.float32, CPU)
    ptr = big.data_ptr()
    del big
    assert out.empty((200,), torch.float32, CPU).data_ptr() == ptr  # grown to 2 x 100, fits 200
    other = out.empty((10,), torch.float64, CPU)
    assert other.dtype == torch.float64 and other.shape == (10,)
