"""Large read-only tables in transparent huge pages.

The compiled searches read a graph's state and arc records and an LM's tables at random places;
with 4 kB pages tens of megabytes are more pages than the CPU's translation cache holds, so such
reads also walk the page tables. Linux maps 2 MB pages where a mapping asks for them
(``madvise(MADV_HUGEPAGE)``; in the common `transparent_hugepage` mode "madvise" nothing else gets
them). `in_huge_pages` copies an array into such a mapping: values, dtype and shape are unchanged;
elsewhere (other systems, small arrays) the array is returned as it is.
"""

from __future__ import annotations

import contextlib
import mmap

import numpy as np

HUGE_PAGE = 2 << 20  # bytes of an x86-64 / arm64 transparent huge page (smaller arrays gain nothing)


def huge_pages_supported() -> bool:
    """Whether this system lets a mapping ask for transparent huge pages."""
    return hasattr(mmap, "MADV_HUGEPAGE")


def in_huge_pages(array: np.ndarray, copy: bool = False) -> np.ndarray:
    """A C-contiguous copy of `array` in memory advised for transparent huge pages (when it is
    smaller than a huge page or the system has no such advice: the array itself, or with `copy` a
    plain copy). The copy keeps its mapping alive for as long as it, or a view of it, is
    referenced. The source is not freed here: replace it where it is held
    (`BatchedNgramLM.in_huge_pages`; with `copy`, so that no table is left a view of a loaded file),
    or a run keeps both."""
    array = np.asarray(array)
    if array.nbytes < HUGE_PAGE or not huge_pages_supported():
        return np.array(array, order="C") if copy else array
    size = -(-array.nbytes // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE  # room to start on a 2 MB boundary
    try:
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError):
        return np.array(array, order="C") if copy else array
    raw = np.frombuffer(region, dtype=np.uint8)
    skip = (-raw.ctypes.data) % HUGE_PAGE
    with contextlib.suppress(OSError, ValueError):  # a hint: the copy works with small pages too
        region.madvise(mmap.MADV_HUGEPAGE, skip, size - skip)
    out = raw[skip : skip + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out
