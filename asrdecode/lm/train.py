"""Train an ARPA n-gram LM from a text corpus with kaldingram (one sentence per line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def train_arpa(corpus: str | Path, arpa: str | Path, order: int = 3, quiet: bool = False) -> Path:
    """kaldingram (modified Kneser-Ney) `corpus` -> `arpa`; runs in a child process like its CLI.
    A failure raises RuntimeError naming the corpus and kaldingram's last line of error output."""
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
    proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        said = [line.strip() for line in (proc.stderr or "").splitlines() if line.strip()]
        why = said[-1] if said else f"exit status {proc.returncode}"
        raise RuntimeError(f"kaldingram could not train an LM on {corpus}: {why}")
    return Path(arpa)
