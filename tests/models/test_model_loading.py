"""Model path resolution: embedded names and packaged pocketsphinx files."""

from pathlib import Path

import pytest

from asrdecode.errors import ModelError
from asrdecode.models.loading import resolve_model_path, resolve_packaged_path


def test_packaged_sphinx_paths_resolve_to_real_files():
    folder = Path(resolve_packaged_path("embedded:sphinx-en-us"))
    assert (folder / "mdef").is_file() and (folder / "noisedict").is_file()
    dictionary = Path(resolve_packaged_path("embedded:sphinx-en-us/../cmudict-en-us.dict"))
    assert dictionary.is_file() and dictionary.read_text().startswith("'bout")
    assert resolve_packaged_path("data/x.arpa") == "data/x.arpa"


def test_embedded_demo_model_and_missing_files():
    assert resolve_model_path("embedded:demo_ctc_bpe").is_file()
    with pytest.raises(ModelError, match="embedded:nope"):
        resolve_model_path("embedded:nope")
    with pytest.raises(ModelError, match="missing.nemo"):
        resolve_model_path("missing.nemo")
