"""The checkout travels to the GPU machine, at most 64 MiB with the GPU check's wheels (.whl/, at most
20 MiB): the tracked files are at most 40 MiB (skipped outside a git checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 40 * 2**20


def test_tracked_files_are_at_most_40_mib():
    if shutil.which("git") is None:
        pytest.skip("no git")
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout")
    sizes = Counter()
    for name in proc.stdout.decode().split("\0"):
        path = ROOT / name
        if name and os.path.lexists(path):
            sizes["/".join(name.split("/")[:2])] += path.lstat().st_size
    total = sum(sizes.values())
    largest = ", ".join(f"{k} {v / 2**20:.1f}" for k, v in sizes.most_common(5))
    assert total <= LIMIT, f"tracked files: {total / 2**20:.1f} MiB (largest, MiB: {largest})"
