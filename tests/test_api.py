"""The Python API's documented examples (docs/api.md) run as written, from the repository root,
and its argument checks."""

from __future__ import annotations

import json
import os
import re
import shutil
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
    assert set(asrdecode.__all__) == {
        "transcribe",
        "load_model",
        "load_graph",
        "make_decoder",
        "decode",
        "InputsFailed",
    }
    with pytest.raises(TypeError, match="model= or units="):
        asrdecode.make_decoder("ctc-greedy")
    with pytest.raises(AttributeError):
        asrdecode.no_such_function  # noqa: B018
    from asrdecode.errors import AsrDecodeError

    with pytest.raises(AsrDecodeError, match="nope.wav"):
        asrdecode.transcribe(str(tmp_path / "nope.wav"), model="embedded:demo_ctc_bpe")
    assert os.environ.get("ASRDECODE_CACHE")  # the suite's private cache: the examples built into it


def test_failed_inputs_are_named_for_a_list_a_folder_and_a_manifest(tmp_path):
    """A missing and an empty file among good ones: the good ones are decoded, then one
    `InputsFailed` names both, whatever form the inputs came in; strict stops at the first."""
    from helpers.cli import AUDIO, MODEL

    from asrdecode.errors import AudioError, InputError

    folder = tmp_path / "audio"
    folder.mkdir()
    shutil.copy(AUDIO / "ps_goforward.wav", folder)
    (folder / "empty.wav").write_bytes(b"")
    missing = tmp_path / "missing.wav"
    manifest = tmp_path / "m.jsonl"
    paths = [folder / "ps_goforward.wav", folder / "empty.wav", missing]
    manifest.write_text("".join(json.dumps({"audio_filepath": str(p)}) + "\n" for p in paths))
    options = {"model": str(MODEL), "threads": 1}
    for given, failed in (
        (paths, ["empty", "missing"]),
        (folder, ["empty"]),
        (manifest, ["empty", "missing"]),
    ):
        with pytest.raises(asrdecode.InputsFailed) as caught:
            asrdecode.transcribe(given, **options)
        assert [row["utt_id"] for row in caught.value.rows] == ["ps_goforward"]
        assert [f["utt_id"] for f in caught.value.failed] == failed
        assert all(f["error"] in str(caught.value) for f in caught.value.failed)
    with pytest.raises(AudioError, match="empty.wav|missing.wav"):
        asrdecode.transcribe(paths, strict=True, **options)
    with pytest.raises(InputError, match="no inputs given"):
        asrdecode.transcribe([], **options)
