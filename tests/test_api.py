"""The Python API's documented examples (docs/api.md) run as written, from the repository root,
and its argument checks."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import asrdecode

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = re.findall(r"```python\n(.*?)```", (ROOT / "docs/api.md").read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_documented_example_runs(index, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(EXAMPLES[index], f"docs/api.md example {index + 1}", "exec"), {})  # noqa: S102


def test_api_names_and_errors(tmp_path):
    assert set(asrdecode.__all__) == {"transcribe", "load_model", "load_graph", "make_decoder", "decode"}
    with pytest.raises(TypeError, match="model= or units="):
        asrdecode.make_decoder("ctc-greedy")
    with pytest.raises(AttributeError):
        asrdecode.no_such_function  # noqa: B018
    from asrdecode.errors import AsrDecodeError

    with pytest.raises(AsrDecodeError, match="nope.wav"):
        asrdecode.transcribe(str(tmp_path / "nope.wav"), model="embedded:demo_ctc_bpe")
    assert os.environ.get("ASRDECODE_CACHE")  # the suite's private cache: the examples built into it
