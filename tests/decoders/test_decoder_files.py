"""`check_decoder_files`: the files a decoder's settings name are checked before anything loads."""

from __future__ import annotations

import pytest

from asrdecode.config import build_config
from asrdecode.decoders import check_decoder_files
from asrdecode.errors import AsrDecodeError


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["decoder.type=wfst", "decoder.graph=nope"], "decoder.graph: nope: no such graph folder"),
        (["decoder.type=wfst", "decoder.graph=cache:nope.yaml"], "build config nope.yaml not found"),
        (["decoder.type=wfst-otf", "decoder.graph=.", "decoder.lm=nope.arpa"], "decoder.lm: nope.arpa: file"),
        (["decoder.type=ctc-beam", "decoder.ngram_lm=nope.arpa"], "decoder.ngram_lm: nope.arpa: file"),
        (["decoder.type=wfst", "decoder.graph=.", "decoder.rescore_lm=embedded:x/y"], "decoder.rescore_lm"),
    ],
)
def test_missing_files_are_named_by_their_option(overrides, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AsrDecodeError, match=message):
        check_decoder_files(build_config(None, overrides).decoder)


def test_shipped_build_configs_and_files_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the shipped configs' checkout paths work from any folder
    check_decoder_files(build_config("configs/sphinx-en-us.yaml", []).decoder)
    check_decoder_files(build_config("embedded:configs/hama-en-us-otf.yaml", []).decoder)
