"""The one-line "compiling (first run only)" status: shown once when an njit function will compile,
never when it is compiled in this process or loaded from numba's disk cache."""

from __future__ import annotations

import logging
from pathlib import Path

import numba
import numpy as np

from asrdecode.numba_status import announce_first_compile, disk_cache_index, is_cached


def test_status_once_before_a_compile_and_never_after(caplog) -> None:
    @numba.njit(cache=False)
    def twice(x):
        return 2 * x

    assert not is_cached(twice) and disk_cache_index(twice) is None
    with caplog.at_level(logging.WARNING, logger="asrdecode"):
        announce_first_compile("test: twice", twice)
        announce_first_compile("test: twice", twice)
    assert [r.getMessage() for r in caplog.records] == ["test: twice: compiling (first run only)"]
    assert twice(np.int64(3)) == 6
    assert is_cached(twice)  # compiled in this process now
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="asrdecode"):
        announce_first_compile("test: twice again", twice)
    assert caplog.records == []


def test_disk_cached_functions_need_no_status() -> None:
    """The sphinx front end's kernel after one call: its cache index exists on disk."""
    import torch

    from asrdecode.features.sphinx_mfcc import _noise_gains_kernel, noise_gains_numba

    noise_gains_numba(torch.rand(1, 3, 4, dtype=torch.float64) + 1.0)
    assert disk_cache_index(_noise_gains_kernel).is_file() and is_cached(_noise_gains_kernel)


def test_cache_folder_follows_every_kernel_source(tmp_path) -> None:
    """numba keys a cached kernel by its own file only, but kernels embed the kernels they call
    from other files: the cache folder is named by a hash of every kernel module, so editing a
    callee's file (here the lattice pruning, called by the `wfst` search) gives a fresh folder."""
    import shutil

    import asrdecode
    from asrdecode.numba_status import configure_cache, kernel_sources_hash

    package = tmp_path / "asrdecode"
    shutil.copytree(Path(asrdecode.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    before = kernel_sources_hash(package)
    assert kernel_sources_hash(package) == before
    (package / "README.txt").write_text("not a kernel module")
    assert kernel_sources_hash(package) == before
    bench = package / "bench" / "gpu.py"  # names numba, imports none: no kernel of it
    assert b"numba" in bench.read_bytes()
    bench.write_text(bench.read_text() + "\n# edited\n")
    assert kernel_sources_hash(package) == before
    lattice = package / "decoders" / "wfst" / "lattice.py"
    lattice.write_text(lattice.read_text() + "\n# edited\n")
    assert kernel_sources_hash(package) != before
    folder = configure_cache()
    assert folder == numba.config.CACHE_DIR and kernel_sources_hash() in Path(folder).name
    from asrdecode.decoders.wfst.lattice import prune_window

    assert Path(folder) in disk_cache_index(prune_window).parents


def test_indexing_in_asrdecode_kernels_does_not_wrap_negative_indices() -> None:
    """Functions defined in asrdecode's modules index without Python's negative-index wraparound
    (`unwrapped_indexing`, installed by `configure_cache`); any other function keeps it. Probed
    on a view into a larger array, so that index -1 reads memory the array owns: unwrapped, the
    element before the view; wrapped, the view's last."""
    from asrdecode.numba_status import configure_cache, unwrapped_indexing

    configure_cache()
    assert unwrapped_indexing() and configure_cache().endswith("-u")

    def read(x, i):
        return x[i]

    def read_2d(x, i, j):
        return x[i, j]

    for f in (read, read_2d):
        f.__module__ = "asrdecode.indexing_probe"  # numba names a function by its module
    own, own_2d = (numba.njit(cache=False)(f) for f in (read, read_2d))

    def read_elsewhere(x, i):
        return x[i]

    elsewhere = numba.njit(cache=False)(read_elsewhere)
    base = np.arange(10.0)
    view = base[5:]
    assert own(view, 2) == elsewhere(view, 2) == 7.0
    assert own(view, -1) == 4.0 and elsewhere(view, -1) == 9.0
    grid = np.arange(20.0).reshape(10, 2)
    assert own_2d(grid[5:], -1, 1) == 9.0 and own_2d(grid[5:], 1, 1) == 13.0


def test_indexing_stays_wrapped_where_numba_has_no_such_hook(monkeypatch) -> None:
    """A numba whose indexing hook is missing or takes other arguments is left alone (every index
    wraps, as numba does)."""
    from numba.np import arrayobj

    import asrdecode.numba_status as status

    for hook in (lambda context, builder: None, None):
        monkeypatch.setattr(status, "_unwrapped", [])
        if hook is None:
            monkeypatch.delattr(arrayobj, "fix_integer_index")
        else:
            monkeypatch.setattr(arrayobj, "fix_integer_index", hook)
        assert status.unwrapped_indexing() is False
        assert arrayobj.__dict__.get("fix_integer_index") is hook
