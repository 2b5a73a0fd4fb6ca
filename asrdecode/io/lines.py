"""Line-oriented text files (manifests, Kaldi data dirs, unit lists, lexicons, symbol tables) and
the JSON values of their lines."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from asrdecode.errors import AsrDecodeError, InputError, one_line

GZIP_TEXT_LIMIT = 1 << 30  # bytes a gzip'ed text file may expand to
MAX_NESTING = 100  # levels of lists and mappings a JSON or YAML value of an input may have


def parse_json(text: str | bytes, where: str, error: type[AsrDecodeError] = InputError) -> Any:
    """The JSON value of `text`; invalid JSON, nesting deeper than `MAX_NESTING` or a number too
    long for Python raise ``error`` naming `where`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        hint = " (JSON Lines expected: one object per line)" if text.lstrip()[:1] in ("[", b"[") else ""
        raise error(f"{where}: invalid JSON: {e.msg} at column {e.colno}{hint}") from None
    except RecursionError:
        raise error(f"{where}: nested more than {MAX_NESTING} levels deep") from None
    except ValueError as e:  # not UTF-8, or an integer of more digits than Python converts
        raise error(f"{where}: {unreadable_value(e)}") from None
    check_nesting(value, where, error)
    return value


def unreadable_value(err: ValueError) -> str:
    """What a ValueError of a parser says, in words: a number too long, text that is not UTF-8."""
    digits = re.search(r"value has (\d+) digits", str(err))
    if digits:
        return f"a number of {digits.group(1)} digits, too long to read"
    if isinstance(err, UnicodeDecodeError):
        return f"not valid UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start})"
    return one_line(err, 100)


def check_nesting(value: Any, where: str, error: type[AsrDecodeError] = InputError) -> None:
    """Raise ``error`` naming `where` when `value` nests lists and mappings deeper than
    `MAX_NESTING` (counted level by level, without recursion)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(MAX_NESTING):
        inner = (item.values() if isinstance(item, dict) else item for item in level)
        level = [v for values in inner for v in values if isinstance(v, dict | list)]
        if not level:
            return
    raise error(f"{where}: nested more than {MAX_NESTING} levels deep")


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
