"""Bench commands: sweeps on a few real clips (small enough for the suite; no timing asserted)."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def three_clips(tmp_path_factory) -> Path:
    """The first three recordings of data/demo/real, as a manifest with absolute paths."""
    src = ROOT / "data/demo/real/manifest.jsonl"
    rows = [json.loads(x) for x in src.read_text().splitlines()[:3]]
    for r in rows:
        r["audio_filepath"] = str((src.parent / r["audio_filepath"]).resolve())
    path = tmp_path_factory.mktemp("clips") / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
