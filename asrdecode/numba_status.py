"""A one-line status when numba is about to compile (first run only; later runs load its disk cache).

numba compiles an ``njit(cache=True)`` function at its first call in a process and stores the
machine code in ``__pycache__``; later processes load it in milliseconds. The first compile can take
seconds, so the user is told once why the run pauses.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("asrdecode")
_announced: set[str] = set()
_lock = threading.Lock()


def disk_cache_index(function: Any) -> Path | None:
    """The index file of `function`'s numba disk cache (None without ``cache=True``)."""
    try:
        return Path(function._cache._cache_file._index_path)  # numba internals
    except AttributeError:
        return None


def is_cached(function: Any) -> bool:
    """Whether `function` (an njit dispatcher) is compiled in this process or in numba's disk cache.
    A plain function (``NUMBA_DISABLE_JIT=1``) counts as compiled."""
    if getattr(function, "signatures", True):
        return True
    index = disk_cache_index(function)
    return index is not None and index.is_file()


def announce_first_compile(what: str, *functions: Any) -> None:
    """Log ``"<what>: compiling (first run only)"`` once per process if any of `functions` will
    have to be compiled at its next call."""
    with _lock:
        if what in _announced or all(is_cached(f) for f in functions):
            return
        _announced.add(what)
    log.warning(f"{what}: compiling (first run only)")
