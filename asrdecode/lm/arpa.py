"""ARPA checks in Python before kaldilm sees the file (kaldilm aborts the process on bad input)."""

from __future__ import annotations

import gzip
import math
import re
import shutil
from collections.abc import Iterator
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


_FIELDS = re.compile("[ \t]+")
FIELD_SEPARATORS = " \t"  # only these: NGPU-LM tokens include characters str.split() takes as spaces


def split_fields(line: str) -> list[str]:
    """Fields of a stripped ARPA line, split on spaces and tabs only."""
    return _FIELDS.split(line)


@dataclass
class ArpaEntry:
    """One n-gram line of an ARPA file (log10 values as written; backoff 0.0 when absent)."""

    lineno: int
    order: int
    words: list[str]
    log10_prob: float
    log10_backoff: float


class ArpaReader:
    """Iterate the n-gram lines of an ARPA LM (plain or gzip), checking its structure on the way:
    `\\data\\` counts, section order, fields per line, numbers (log-prob <= 0, finite backoff),
    entries per section, `\\end\\`. Every problem is a one-line GraphError ``file:line: problem``.
    Fields are split on spaces and tabs only. ``counts`` holds the `\\data\\` counts once read."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.counts: dict[int, int] = {}
        self.lineno = 0

    def fail(self, msg: str) -> GraphError:
        return GraphError(f"{self.path}:{self.lineno}: {msg}")

    def __iter__(self) -> Iterator[ArpaEntry]:
        path, counts = self.path, self.counts
        if not path.is_file():
            raise GraphError(f"{path}: ARPA file not found")
        seen: dict[int, int] = {}
        section = "start"  # start | data | ngrams | end
        order = 0

        def close_section() -> None:
            if order and seen[order] != counts[order]:
                raise self.fail(
                    f"\\{order}-grams: section has {seen[order]} entries but \\data\\ "
                    f"declares ngram {order}={counts[order]}"
                )

        try:
            with open_text(path) as fh:
                for self.lineno, raw in enumerate(fh, 1):
                    line = raw.rstrip("\r\n").strip(FIELD_SEPARATORS)
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
                            raise self.fail(f"bad section header '{line[:60]}'") from None
                        if order not in counts:
                            raise self.fail(f"section \\{order}-grams: is not declared in \\data\\")
                        if order != len(seen) + 1:
                            raise self.fail(f"section \\{order}-grams: is out of order")
                        seen[order] = 0
                        section = "ngrams"
                        continue
                    if section == "data":
                        if not line.startswith("ngram ") or "=" not in line:
                            raise self.fail(f"expected 'ngram N=count' in \\data\\, got '{line[:60]}'")
                        key, _, value = line[6:].partition("=")
                        try:
                            n, c = int(key), int(value)
                        except ValueError:
                            raise self.fail(f"bad count line '{line[:60]}'") from None
                        if n < 1 or c < 0 or n in counts:
                            raise self.fail(f"bad or repeated count line '{line[:60]}'")
                        counts[n] = c
                        continue
                    if section != "ngrams":
                        raise self.fail(f"unexpected line '{line[:60]}'")
                    yield self._entry(split_fields(line), order, max(counts), line)
                    seen[order] += 1
        except UnicodeDecodeError:
            raise GraphError(f"{path}:{self.lineno + 1}: not UTF-8 text") from None
        except (OSError, EOFError) as err:
            raise GraphError(f"{path}: cannot read ARPA ({err})") from None
        if section == "start":
            raise GraphError(f"{path}: no \\data\\ section (not an ARPA file)")
        if section != "end":
            raise GraphError(f"{path}:{self.lineno}: missing \\end\\ (truncated ARPA file?)")
        missing = [n for n in counts if n not in seen]
        if missing:
            raise GraphError(f"{path}: \\data\\ declares {missing[0]}-grams but the section is missing")

    def _entry(self, fields: list[str], order: int, max_order: int, line: str) -> ArpaEntry:
        if len(fields) not in (order + 1, order + 2) or (len(fields) == order + 2 and order == max_order):
            raise self.fail(
                f"a {order}-gram line needs a log-prob, {order} words"
                f"{' and an optional backoff' if order < max_order else ''}; got '{line[:60]}'"
            )
        values = []
        for field_ in (fields[0], fields[order + 1]) if len(fields) == order + 2 else (fields[0],):
            try:
                values.append(float(field_))
            except ValueError:
                raise self.fail(f"'{field_[:30]}' is not a number") from None
        logp, backoff = values[0], values[1] if len(values) == 2 else 0.0
        if math.isnan(logp) or logp > 0:
            raise self.fail(f"log-prob must be a number <= 0, got '{fields[0]}'")
        if not math.isfinite(backoff):
            raise self.fail(f"backoff must be a finite number, got '{fields[order + 1]}'")
        return ArpaEntry(self.lineno, order, fields[1 : order + 1], logp, backoff)


def check_arpa(path: str | Path) -> ArpaSummary:
    """Validate an ARPA LM (`ArpaReader`: header counts, floats, word counts per order, `\\end\\`)
    and collect its unigram vocabulary. Every problem is a one-line GraphError naming file and line.
    """
    reader = ArpaReader(path)
    vocab = [entry.words[0] for entry in reader if entry.order == 1]
    if len(set(vocab)) != len(vocab):
        raise GraphError(f"{reader.path}: repeated unigram in \\1-grams:")
    return ArpaSummary(path=reader.path, counts=reader.counts, vocab=vocab)


def plain_copy(path: Path, dest: Path) -> Path:
    """kaldilm reads plain text only: decompress a .gz ARPA next to the build."""
    with open_text(path) as src, open(dest, "w", encoding="utf-8") as dst:
        shutil.copyfileobj(src, dst)
    return dest
