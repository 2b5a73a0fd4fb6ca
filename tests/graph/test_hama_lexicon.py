"""The English IPA lexicon of the hama phoneme model: its phone mapping, its coverage of the LM's
words, and a TLG over it decoding real speech as Kaldi's FasterDecoder does on the same graph."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.wfst_graphs import compare
from helpers.wfst_ref import single_thread, write_arpa  # noqa: F401

from asrdecode.errors import GraphError, InputError
from asrdecode.graph import build_graph
from asrdecode.graph.cache import load_graph_config
from asrdecode.graph.units import read_hama_units
from asrdecode.io.lines import read_lines
from asrdecode.lm.arpa import check_arpa
from asrdecode.models.loading import load_model, resolve_packaged_path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from make_hama_lexicon import ALTERNATES, ARPABET_TO_HAMA, mapped, plain_phone, read_cmudict  # noqa: E402

sys.path.remove(str(ROOT / "scripts"))

LEXICON = Path(resolve_packaged_path("embedded:lexicon/hama-en-us.dict.gz"))
MODEL = Path(resolve_packaged_path("embedded:hama-ipa-ctc"))
SMALL_LM = Path(resolve_packaged_path("embedded:lm/sphinx-en-us-72k-small.arpa.gz"))


@pytest.fixture(scope="module")
def lexicon() -> dict[str, list[list[str]]]:
    prons: dict[str, list[list[str]]] = {}
    for _, line in read_lines(LEXICON, GraphError):
        word, *phones = line.split()
        prons.setdefault(word, []).append(phones)
    return prons


def test_every_sphinx_phone_maps_to_model_phones():
    units = set(read_hama_units(MODEL))
    sphinx_phones = {p for prons in read_cmudict(sphinx_dict()).values() for pron in prons for p in pron}
    assert sphinx_phones == set(ARPABET_TO_HAMA)
    assert set(ARPABET_TO_HAMA.values()) | set(ALTERNATES.values()) <= units
    assert mapped(["G", "OW"]) == [("ɡ", "oʊ"), ("ɡ", "o"), ("g", "oʊ")]
    assert plain_phone("t͡ʃ") and plain_phone("ŋ") and not plain_phone("ʰ") and not plain_phone("<sp>")
    assert not plain_phone("¹") and not plain_phone("ː")


def sphinx_dict() -> Path:
    return Path(resolve_packaged_path("embedded:sphinx-en-us/../cmudict-en-us.dict"))


def test_lexicon_covers_the_lm_with_model_phones(lexicon):
    units = set(read_hama_units(MODEL))
    words = {w for w in check_arpa(SMALL_LM).vocab if w not in ("<s>", "</s>")}
    assert set(lexicon) == words
    used = {p for prons in lexicon.values() for pron in prons for p in pron}
    assert used <= units and all(plain_phone(p) for p in used)
    assert "<wb>" not in used
    assert ["ɡ", "o"] in lexicon["go"] and ["f", "ɔ", "ɹ", "w", "ɝ", "d"] in lexicon["forward"]


def test_gzip_text_errors_name_the_file(tmp_path):
    good = tmp_path / "lex.dict.gz"
    good.write_bytes(gzip.compress("go ɡ o\n".encode()))
    assert list(read_lines(good)) == [(1, "go ɡ o")]
    bad = tmp_path / "cut.dict.gz"
    bad.write_bytes(good.read_bytes()[:12])
    with pytest.raises(InputError, match="cut.dict.gz: truncated gzip data"):
        list(read_lines(bad))
    junk = tmp_path / "junk.dict.gz"
    junk.write_bytes(b"\x1f\x8bnot gzip at all")
    with pytest.raises(InputError, match="junk.dict.gz: not valid gzip data"):
        list(read_lines(junk))


CLIPS = {"ps_goforward.wav": "go forward ten meters", "ps_cards_001.wav": "ten of clubs",
         "ps_tidigits_dhd.2934z.wav": "two nine three four zero"}  # fmt: skip
DISTRACTORS = ["forwards", "meter", "clover", "tin", "free", "for", "nine", "club", "go", "owe"]


@pytest.fixture(scope="module")
def small_tlg(tmp_path_factory, lexicon) -> Path:
    """A TLG over the shipped lexicon's entries for the clips' words and some near-homophones,
    with a bigram over the transcripts."""
    folder = tmp_path_factory.mktemp("hama-tlg")
    sentences = [text.split() for text in CLIPS.values()] + [[w] for w in DISTRACTORS]
    write_arpa(folder / "lm.arpa", sentences)
    words = sorted({w for s in sentences for w in s})
    (folder / "lexicon.txt").write_text(
        "".join(f"{w} {' '.join(p)}\n" for w in words for p in lexicon[w]), encoding="utf-8"
    )
    cfg = load_graph_config(
        None,
        [f"arpa={folder / 'lm.arpa'}", "model=embedded:hama-ipa-ctc", "lexicon_type=file",
         f"lexicon={folder / 'lexicon.txt'}", "word_separator=<wb>", "topology=compact"],
    )  # fmt: skip
    build_graph(cfg, folder / "graph")
    meta = json.loads((folder / "graph" / "meta.json").read_text())
    assert meta["units"]["count"] == 191 and meta["units"]["blank_symbol"] == "<blk>"
    return folder / "graph"


@pytest.mark.usefixtures("single_thread")
def test_real_speech_through_the_tlg_as_kaldi_decodes_it(small_tlg):
    model = load_model("embedded:hama-ipa-ctc")
    waves = [sf.read(ROOT / "data" / "demo" / "real" / name, dtype="float32")[0] for name in CLIPS]
    batch = torch.zeros(len(waves), max(len(w) for w in waves))
    for i, w in enumerate(waves):
        batch[i, : len(w)] = torch.from_numpy(w)
    with torch.inference_mode():
        out = model(batch, torch.tensor([len(w) for w in waves]))
    lp, lengths = out.log_probs.numpy(), out.lengths.numpy()
    for backend in ("torch", "compiled"):
        results = compare(small_tlg, lp, lengths, 16.0, 10000, 20, backend=backend)
        assert [" ".join(w.word for w in r.words) for r in results] == list(CLIPS.values())


def test_shipped_graph_config_reads_units_from_the_model():
    cfg = load_graph_config(resolve_packaged_path("embedded:configs/graph/hama-en-us-small.yaml"))
    assert Path(cfg.model) == MODEL and Path(cfg.lexicon) == LEXICON and cfg.word_separator == "<wb>"
    assert np.array_equal(read_hama_units(cfg.model)[-1:], ["<wb>"])
