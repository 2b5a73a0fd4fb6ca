"""C libraries' own lines on the terminal (libmpg123's "Warning: Xing stream size off by more than
1%" and its resync notes, printed to file descriptor 2 while libsndfile reads an MP3) kept off it:
asrdecode says what is wrong with a file in its own one line."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

MPEG_SUFFIXES = (".mp3", ".mp2", ".mp1", ".mpga")  # the files libsndfile reads through libmpg123


def is_mpeg(path: str | os.PathLike) -> bool:
    """Whether libsndfile reads `path` through libmpg123 (by its name)."""
    return os.fspath(path).lower().endswith(MPEG_SUFFIXES)


@contextlib.contextmanager
def quiet_stderr(active: bool = True) -> Iterator[None]:
    """File descriptor 2 sent to the null device for the block (``active``), then restored; what
    Python itself writes to stderr is flushed first, so only the C library's lines are dropped."""
    if not active:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
