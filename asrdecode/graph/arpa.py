"""ARPA checks in Python before kaldilm sees the file (kaldilm aborts the process on bad input)."""

from __future__ import annotations

import gzip
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from asrdecode.errors import GraphError


def open_text(path: Path) -> IO[str]:
    """Plain or gzip-compressed text (by magic bytes, not by name)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="strict")
    return open(path, encoding="utf-8", errors="strict")


@dataclass
class ArpaSummary:
    """What the graph builder needs from an ARPA file: n-gram counts and the vocabulary."""

    path: Path
    counts: dict[int, int]
    vocab: list[str] = field(default_factory=list)

    @property
    def order(self) -> int:
        return max(self.counts) if self.counts else 0


def check_arpa(path: str | Path) -> ArpaSummary:
    """Validate an ARPA LM (header counts, floats, word counts per order, `\\end\\`).

    Every problem is a one-line GraphError naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: ARPA file not found")
    counts: dict[int, int] = {}
    seen: dict[int, int] = {}
    vocab: list[str] = []
    section = "start"  # start | data | ngrams | end
    order = 0
    lineno = 0

    def fail(msg: str) -> GraphError:
        return GraphError(f"{path}:{lineno}: {msg}")

    def close_section() -> None:
        if order and seen.get(order, 0) != counts.get(order, 0):
            raise fail(
                f"\\{order}-grams: section has {seen.get(order, 0)} entries but \\data\\ "
                f"declares ngram {order}={counts.get(order, 0)}"
            )

    try:
        with open_text(path) as fh:
            for lineno, raw in enumerate(fh, 1):  # noqa: B007 - lineno is read by fail()
                line = raw.strip()
                if not line:
                    continue
                if section == "start":
                    if line == "\\data\\":
                        section = "data"
                    continue  # text before \data\ is a comment
                if line == "\\end\\":
                    close_section()
                    section = "end"
                    break
                if line.startswith("\\") and line.endswith("-grams:"):
                    close_section()
                    try:
                        order = int(line[1 : -len("-grams:")])
                    except ValueError:
                        raise fail(f"bad section header '{line}'") from None
                    if order not in counts:
                        raise fail(f"section \\{order}-grams: is not declared in \\data\\")
                    if order != len(seen) + 1:
                        raise fail(f"section \\{order}-grams: is out of order")
                    seen[order] = 0
                    section = "ngrams"
                    continue
                if section == "data":
                    if not line.startswith("ngram ") or "=" not in line:
                        raise fail(f"expected 'ngram N=count' in \\data\\, got '{line[:60]}'")
                    key, _, value = line[6:].partition("=")
                    try:
                        n, c = int(key), int(value)
                    except ValueError:
                        raise fail(f"bad count line '{line[:60]}'") from None
                    if n < 1 or c < 0 or n in counts:
                        raise fail(f"bad or repeated count line '{line[:60]}'")
                    counts[n] = c
                    continue
                if section != "ngrams":
                    raise fail(f"unexpected line '{line[:60]}'")
                fields = line.split()
                max_order = max(counts)
                if len(fields) not in (order + 1, order + 2) or (
                    len(fields) == order + 2 and order == max_order
                ):
                    raise fail(
                        f"a {order}-gram line needs a log-prob, {order} words"
                        f"{' and an optional backoff' if order < max_order else ''}; got '{line[:60]}'"
                    )
                for idx in (0, order + 1) if len(fields) == order + 2 else (0,):
                    try:
                        value = float(fields[idx])
                    except ValueError:
                        raise fail(f"'{fields[idx]}' is not a number") from None
                    if math.isnan(value) or value > 0 and idx == 0:
                        raise fail(f"log-prob '{fields[idx]}' must be a number <= 0")
                seen[order] += 1
                if order == 1:
                    vocab.append(fields[1])
    except UnicodeDecodeError:
        raise GraphError(f"{path}:{lineno + 1}: not UTF-8 text") from None
    except (OSError, EOFError) as err:
        raise GraphError(f"{path}: cannot read ARPA ({err})") from None
    if section == "start":
        raise GraphError(f"{path}: no \\data\\ section (not an ARPA file)")
    if section != "end":
        raise GraphError(f"{path}:{lineno}: missing \\end\\ (truncated ARPA file?)")
    missing = [n for n in counts if n not in seen]
    if missing:
        raise GraphError(f"{path}: \\data\\ declares {missing[0]}-grams but the section is missing")
    if len(set(vocab)) != len(vocab):
        raise GraphError(f"{path}: repeated unigram in \\1-grams:")
    return ArpaSummary(path=path, counts=counts, vocab=vocab)


def plain_copy(path: Path, dest: Path) -> Path:
    """kaldilm reads plain text only: decompress a .gz ARPA next to the build."""
    with open_text(path) as src, open(dest, "w", encoding="utf-8") as dst:
        shutil.copyfileobj(src, dst)
    return dest
