"""Files that appear whole or not at all: written to a temporary file in the same folder, then
renamed over the target (a rename within a folder is atomic on POSIX), so a killed run leaves the
old file or none, never half a file. The temporary name starts with a dot and ends in ``.tmp``;
readers of our folders pass such names over. The file gets the permissions of a file created
normally (0666 less the umask), not mkstemp's private 0600."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_target(path: str | os.PathLike, *, sync: bool = False) -> Iterator[Path]:
    """A temporary path beside `path` for the block to write; renamed over `path` when the block
    ends without error, removed when it raises. ``sync``: flush the file and then the folder to the
    disk first (run outputs that must survive a power cut)."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it private; a file we write is not
    finally:
        os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if sync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)  # a failure here (EIO, ENOSPC) is the caller's to report
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        _fsync_folder(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str, *, sync: bool = True) -> None:
    """Write `text` (UTF-8, ``\\n`` line ends) to `path` through `atomic_target`."""
    with atomic_target(path, sync=sync) as tmp:
        tmp.write_text(text, encoding="utf-8", newline="\n")


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _fsync_folder(path: Path) -> None:
    """fsync a folder (the rename); a file system that cannot (some network mounts) is left alone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
