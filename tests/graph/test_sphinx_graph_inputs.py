"""Bad inputs to the pocketsphinx HCLG build: truncated model files and a dictionary line without
phones are one-line errors naming the file; dictionary words with phones the model lacks and LM
words without a pronunciation are counted, not fatal."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import pytest

from asrdecode.errors import GraphError
from asrdecode.graph import GraphBuildConfig, build_graph

PS_MODEL = Path(str(importlib.resources.files("pocketsphinx") / "model" / "en-us"))
ARPA = "\\data\\\nngram 1=5\n\n\\1-grams:\n-0.7 </s>\n-99 <s>\n-0.6 go\n-0.8 ten\n-0.9 meters\n\n\\end\\\n"


@pytest.fixture
def inputs(tmp_path):
    model = tmp_path / "en-us"
    model.mkdir()
    for name in ("mdef", "transition_matrices", "noisedict"):
        (model / name).write_bytes((PS_MODEL / "en-us" / name).read_bytes())
    (tmp_path / "lm.arpa").write_text(ARPA)
    dictionary = [
        ln for ln in (PS_MODEL / "cmudict-en-us.dict").read_text().splitlines() if ln.split()[0] == "go"
    ]
    (tmp_path / "words.dict").write_text("\n".join(dictionary) + "\nten T EH XX\n")
    return tmp_path


def config(d: Path) -> GraphBuildConfig:
    return GraphBuildConfig(
        kind="hclg-sphinx",
        arpa=str(d / "lm.arpa"),
        acoustic_model=str(d / "en-us"),
        lexicon=str(d / "words.dict"),
    )


def test_unknown_phones_and_unpronounceable_lm_words_are_counted(inputs, tmp_path):
    meta = build_graph(config(inputs), tmp_path / "g")
    assert meta["dictionary_words_with_unknown_phones"] == 1  # ten: XX is not a phone of the model
    assert meta["words"] == {"count": 3, "with_pronunciation": 1}  # ten and meters have none


@pytest.mark.parametrize(
    "name,keep,match",
    [
        ("mdef", 30_000, r"en-us/mdef: truncated or malformed mdef"),
        ("mdef", 8, r"en-us/mdef: not a little-endian binary mdef"),
        ("transition_matrices", 500, r"en-us/transition_matrices: truncated or malformed transition"),
    ],
)
def test_truncated_model_file_is_a_one_line_error(inputs, tmp_path, name, keep, match):
    path = inputs / "en-us" / name
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(GraphError, match=match) as err:
        build_graph(config(inputs), tmp_path / "g")
    assert "\n" not in str(err.value)


def test_dictionary_line_without_phones_names_file_and_line(inputs, tmp_path):
    with open(inputs / "words.dict", "a") as f:
        f.write("meters\n")
    with pytest.raises(GraphError, match=r"words.dict:3: word 'meters' has no phones"):
        build_graph(config(inputs), tmp_path / "g")
