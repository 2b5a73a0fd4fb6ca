"""Line-oriented text files (manifests, Kaldi data dirs, unit lists, lexicons, symbol tables)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from asrdecode.errors import AsrDecodeError, InputError

GZIP_TEXT_LIMIT = 1 << 30  # bytes a gzip'ed text file may expand to


def read_text_bytes(path: Path, error: type[AsrDecodeError] = InputError) -> bytes:
    """The bytes of a text file without a UTF-8 byte-order mark (a `.gz` file decompressed, at most
    `GZIP_TEXT_LIMIT` bytes); a missing, unreadable or damaged file raises ``error`` naming it."""
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = inflate.decompress(data, GZIP_TEXT_LIMIT)
            if inflate.unconsumed_tail:
                raise error(f"{path}: expands to more than {GZIP_TEXT_LIMIT >> 20} MB")
            if not inflate.eof:
                raise error(f"{path}: truncated gzip data")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except zlib.error as e:
        raise error(f"{path}: not valid gzip data ({e})") from None
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from None
    return data.removeprefix(b"\xef\xbb\xbf")


def read_lines(path: Path, error: type[AsrDecodeError] = InputError) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without the line break) per line, like iterating a text file
    (a final newline ends the last line; a UTF-8 byte-order mark is skipped). A missing, unreadable
    or non-UTF-8 file raises ``error`` naming the file (and line)."""
    pieces = read_text_bytes(path, error).split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    for i, raw in enumerate(pieces, start=1):
        try:
            yield i, raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            raise error(f"{path}:{i}: not valid UTF-8 text") from None
