"""numba's disk cache for asrdecode's compiled kernels, and a one-line status when numba is about
to compile (first run only; later runs load its disk cache).

numba compiles an ``njit(cache=True)`` function at its first call in a process and stores the
machine code on disk; later processes load it in milliseconds. The first compile can take seconds,
so the user is told once why the run pauses.

numba keys a cached function by its own source file only, yet a kernel embeds the kernels it calls
from other files (the `wfst-otf` search calls the `wfst` cutoff, the `wfst` search calls the lattice
pruning): after an edit or an upgrade that changes only a callee's file, the caller's cache would
load the old callee. So every module with kernels calls `configure_cache` before defining them,
which points numba at a cache folder named by a hash of all of them (`kernel_sources_hash`): any
change to any kernel source gives a fresh folder.

numba also turns every array index of a signed integer type into Python's wraparound (``a[-1]``
is the last element): a compare and a select per access, which LLVM removes only when it can
prove the index non-negative (a ``range`` loop variable, not an index loaded from memory: a graph
arc's next state, a hash slot). asrdecode's kernels never index with negative numbers, so
`configure_cache` also makes numba lower the array indexing of functions defined in asrdecode's
modules without it (`unwrapped_indexing`); numba's own kernels and other packages' keep it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
_configured: list[str] = []

log = logging.getLogger("asrdecode")
_announced: set[str] = set()
_lock = threading.Lock()


_IMPORTS_NUMBA = re.compile(rb"^[ \t]*(?:import|from)[ \t]+numba\b", re.MULTILINE)


def kernel_sources_hash(package: Path = PACKAGE) -> str:
    """sha256 (first 16 hex digits) over the path and bytes of every module of `package` that
    imports numba: the kernel modules and this one (its lowering change is in their code), not
    those that only name it (a decoder that calls a kernel module, a benchmark)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        data = path.read_bytes()
        if _IMPORTS_NUMBA.search(data):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + data)
    return digest.hexdigest()[:16]


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return os.access(folder, os.W_OK)
    except OSError:
        return False


def configure_cache() -> str:
    """Point numba's disk cache (``numba.config.CACHE_DIR``) at ``numba-<kernel_sources_hash>``:
    under ``$NUMBA_CACHE_DIR`` if the user set it, else under the package's ``__pycache__`` (other
    ``numba-*`` folders there unused for a week are removed), else under
    ``$XDG_CACHE_HOME/asrdecode`` (default ``~/.cache/asrdecode``). Idempotent; returns the
    folder."""
    with _lock:
        if _configured:
            return _configured[0]
        import numba

        unwrapped = unwrapped_indexing()
        name = f"numba-{kernel_sources_hash()}" + ("-u" if unwrapped else "")
        user = os.environ.get("NUMBA_CACHE_DIR")
        in_tree = PACKAGE / "__pycache__"
        if user:
            folder = Path(user) / f"asrdecode-{name}"
        elif _writable(in_tree):
            folder = in_tree / name
            _remove_stale(in_tree, name)
        else:
            xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            folder = Path(xdg) / "asrdecode" / name
        numba.config.CACHE_DIR = str(folder)
        if _writable(folder):
            os.utime(folder)  # in use: see _remove_stale
        _configured.append(str(folder))
        return str(folder)


STALE_SECONDS = 7 * 24 * 3600
# the prefix of the LLVM names of functions defined in asrdecode's modules (numba mangles
# ``asrdecode.x.f`` as ``_ZN9asrdecode1x1f...``, Itanium style)
_OWN_PREFIX = f"_ZN{len(PACKAGE.name)}{PACKAGE.name}"
_unwrapped: list[bool] = []


def unwrapped_indexing() -> bool:
    """Make numba lower integer array indices in functions defined in asrdecode's modules
    without the negative-index wraparound (once per process; see the module doc). Returns
    whether it is in place: False if this numba's lowering does not have the hook it replaces
    (``numba.np.arrayobj.fix_integer_index``, with the arguments it has in numba 0.68), and every
    index then wraps as usual (slower, the same results). Other functions' indexing is
    unchanged."""
    if _unwrapped:
        return _unwrapped[0]
    try:
        import inspect

        from numba.core import types
        from numba.np import arrayobj

        wrapping = arrayobj.fix_integer_index
        hook = list(inspect.signature(wrapping).parameters) == ["context", "builder", "idxty", "idx", "size"]
    except (ImportError, AttributeError, TypeError, ValueError):
        hook = False
    if not hook:
        _unwrapped.append(False)
        return False

    def fix_integer_index(context, builder, idxty, idx, size):
        if idxty.signed and builder.function.name.startswith(_OWN_PREFIX):
            return context.cast(builder, idx, idxty, types.intp)
        return wrapping(context, builder, idxty, idx, size)

    arrayobj.fix_integer_index = fix_integer_index
    _unwrapped.append(True)
    return True


def _remove_stale(parent: Path, current: str) -> None:
    """Remove the other ``numba-*`` folders under `parent` that no process has configured for
    `STALE_SECONDS` (a process still running older kernels must keep its folder: numba saves into
    it when it compiles)."""
    import time

    for old in parent.glob("numba-*"):
        try:
            if old.name != current and time.time() - old.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


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
