"""Train an ARPA n-gram LM from a text corpus with kaldingram (one sentence per line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def train_arpa(corpus: str | Path, arpa: str | Path, order: int = 3, quiet: bool = False) -> Path:
    """kaldingram (modified Kneser-Ney) `corpus` -> `arpa`; runs in a child process like its CLI."""
    cmd = [
        sys.executable,
        "-m",
        "kaldingram.cli",
        "train",
        "--ngram-order",
        str(order),
        "--text",
        str(corpus),
        "--lm",
        str(arpa),
    ]
    subprocess.run(cmd, check=True, capture_output=quiet)
    return Path(arpa)
