"""Python's cyclic garbage collector paused while a command loads its libraries, model, graph and LM.

Loading allocates millions of long-lived objects (torch's and numba's modules, the model's
tables, the lexicon's dicts). Each of them counts towards the collector's thresholds, so the
collector runs full passes over an ever larger heap while nothing is garbage yet: about half a
second of a three-second `transcribe` of a small folder. While paused it does not run; when
loading is over, everything allocated so far is moved out of its generations (`gc.freeze`, as
CPython's documentation suggests for long-lived startup objects), so the collections of the
decoding loop scan only what the loop allocates. Reference counting frees memory as usual
throughout; only reference cycles made during loading stay until the process ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused_here = False  # the collector was paused by `paused_while_loading` and not resumed yet


@contextmanager
def paused_while_loading() -> Iterator[None]:
    """The collector paused until `loading_done` (called where loading ends) or the block's end,
    whichever comes first. Does nothing if the collector was already disabled."""
    global _paused_here
    if gc.isenabled():
        gc.disable()
        _paused_here = True
    try:
        yield
    finally:
        loading_done()


def loading_done() -> None:
    """Freeze what loading allocated and resume the collector (only if `paused_while_loading`
    paused it; called twice, the second call does nothing)."""
    global _paused_here
    if _paused_here:
        _paused_here = False
        gc.freeze()
        gc.enable()
