"""Python's cyclic garbage collector paused while a command loads its libraries, model, graph and LM.

Loading allocates millions of long-lived objects (torch's modules, the compiled kernels, the model's
tables, the lexicon's dicts). Each of them counts towards the collector's thresholds, so the
collector runs full passes over an ever larger heap while little of it is garbage: about 0.7 s of
a 3.7 s `transcribe` of a small folder. While paused it does not run; when loading is over, one
full collection frees the reference cycles loading left behind (some hold native memory: without
it the first use's peak grew by 120-160 MB), and everything still alive is moved out of the
collector's generations (`gc.freeze`, as CPython's documentation suggests for long-lived startup
objects), so the collections of the decoding loop scan only what the loop allocates. Reference
counting frees memory as usual throughout.
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
    """Collect loading's garbage once, freeze what is left and resume the collector (only if
    `paused_while_loading` paused it; called twice, the second call does nothing)."""
    global _paused_here
    if _paused_here:
        _paused_here = False
        gc.collect()
        gc.freeze()
        gc.enable()
