"""Model path resolution: embedded names and packaged pocketsphinx files."""

from pathlib import Path

import pytest

from asrdecode.errors import ModelError
from asrdecode.models.loading import check_model_settings, resolve_model_path, resolve_packaged_path


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


def test_a_hub_name_says_models_are_files_here():
    with pytest.raises(ModelError, match=r"nvidia/parakeet-tdt-0.6b-v2: .*not hub names.*docs/models.md"):
        resolve_model_path("nvidia/parakeet-tdt-0.6b-v2")
    with pytest.raises(ModelError, match="models/missing.nemo: model file not found"):
        resolve_model_path("models/missing.nemo")


def test_model_settings_are_checked_without_loading_the_model(tmp_path):
    """`check_model_settings`: the file, its family and the family's options, from the name alone
    (the file here is no model: nothing reads it)."""
    fake = tmp_path / "fake.nemo"
    fake.write_bytes(b"not read")
    assert check_model_settings(str(fake)) == (fake, "nemo")
    with pytest.raises(ModelError, match="model.head=ctc contradicts model.type=nemo-transducer"):
        check_model_settings(str(fake), "nemo-transducer", head="ctc")
    with pytest.raises(ModelError, match="cannot tell the model type"):
        check_model_settings(str(tmp_path))
    with pytest.raises(ModelError, match="only NeMo models"):
        check_model_settings("embedded:hama-ipa-ctc", attention="local")
    with pytest.raises(ModelError, match="unsupported model.type 'kaldi'"):
        check_model_settings(str(fake), "kaldi")
