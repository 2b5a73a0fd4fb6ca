"""OpenFst-style symbol tables (words.txt, units.txt): `symbol id` per line."""

from __future__ import annotations

import re
from pathlib import Path

from asrdecode.errors import GraphError
from asrdecode.io.lines import read_lines


def write_symbols(path: Path, symbols: list[tuple[str, int]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for sym, idx in symbols:
            fh.write(f"{sym} {idx}\n")


def read_symbols(path: str | Path) -> dict[int, str]:
    """words.txt / units.txt: `symbol id` per line -> {id: symbol}."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: symbol table not found")
    table: dict[int, str] = {}
    for lineno, raw in read_lines(path, GraphError):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != 2 or not re.fullmatch(r"\d+", fields[1]):
            raise GraphError(f"{path}:{lineno}: expected 'symbol id', got '{raw.strip()[:60]}'")
        table[int(fields[1])] = fields[0]
    return table


def unit_symbol(name: str) -> str:
    return "<space>" if name == " " else name.replace(" ", "_")
