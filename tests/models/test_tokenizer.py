"""Tokenizer: sentencepiece BPE from model bytes, character labels, word grouping."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from asrdecode.models.tokenizer import Tokenizer

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"


@pytest.fixture(scope="module")
def bpe() -> tuple[Tokenizer, list[str]]:
    with tarfile.open(FIX / "ctc_bpe.nemo") as tf:
        cfg = yaml.safe_load(tf.extractfile("./model_config.yaml"))
        member = "./" + cfg["tokenizer"]["model_path"].removeprefix("nemo:")
        model_bytes = tf.extractfile(member).read()
    return Tokenizer.from_sentencepiece(model_bytes), cfg["decoder"]["vocabulary"]


def ids_of(tok: Tokenizer, pieces: list[str]) -> list[int]:
    return [tok.units.index(p) for p in pieces]


def test_bpe_units_match_nemo_vocabulary(bpe):
    tok, vocabulary = bpe
    assert tok.kind == "bpe" and len(tok) == tok.vocab_size == 128
    assert tok.units == vocabulary
    assert tok.units[0] == "<unk>"


def test_bpe_encode_decode(bpe):
    tok, _ = bpe
    for text in ("go forward ten meters", "he was not an ill disposed young man"):
        ids = tok.encode(text)
        assert all(0 <= i < 128 for i in ids)
        assert tok.decode(ids) == text
    assert tok.encode("Go Forward") == tok.encode("go forward")  # nmt_nfkc_cf case folding


def test_bpe_decode_matches_nemo_greedy_text(bpe):
    tok, _ = bpe
    z = np.load(FIX / "reference" / "ctc_bpe.npz", allow_pickle=False)
    for b in range(len(z["greedy_text"])):
        ids = z["greedy_tokens"][b, : z["greedy_tokens_len"][b]].tolist()
        assert tok.decode(ids) == str(z["greedy_text"][b])
        words = tok.words_of(ids)
        assert " ".join(w for w, _, _ in words) == " ".join(str(z["greedy_text"][b]).split())


def test_bpe_words_of(bpe):
    tok, _ = bpe
    ids = ids_of(tok, ["▁sh", "▁n", "ing", "▁h", "est", "ght"])
    assert tok.words_of(ids) == [("sh", 0, 0), ("ning", 1, 2), ("hestght", 3, 5)]
    # a first piece without '▁' still starts a word; a lone '▁' is merged into the next piece
    ids = ids_of(tok, ["me", "▁", "e", "▁", "▁sh"])
    assert tok.words_of(ids) == [("me", 0, 0), ("e", 1, 2), ("sh", 4, 4)]
    # <unk> is a word of its own, as in the detokenised text
    ids = ids_of(tok, ["▁sh", "<unk>", "ing"])
    assert tok.words_of(ids) == [("sh", 0, 0), ("⁇", 1, 1), ("ing", 2, 2)]
    assert tok.decode(ids).split() == ["sh", "⁇", "ing"]
    # no ids (sentencepiece 0.2.2 fails on the proto of none)
    assert tok.words_of([]) == [] and tok.surfaces([]) == [] and tok.decode([]) == ""


def test_char_tokenizer():
    labels = [" ", "a", "b", "c", "'"]
    tok = Tokenizer.from_labels(labels)
    assert tok.kind == "char" and tok.units == labels and len(tok) == 5
    ids = tok.encode("Abc  ca'b x")  # upper case folded, spaces collapsed, unknown 'x' dropped
    assert tok.decode(ids) == "abc ca'b "
    assert tok.words_of(tok.encode(" ab c  ")) == [("ab", 0, 1), ("c", 3, 3)]
    assert tok.words_of([1, 0, 0, 2, 3]) == [("a", 0, 0), ("bc", 3, 4)]
    assert tok.words_of([0, 0]) == []


def test_char_tokenizer_keeps_case_when_labels_have_upper_case():
    tok = Tokenizer.from_labels([" ", "a", "A"])
    assert tok.encode("aA") == [1, 2]


def test_char_tokenizer_rejects_duplicates():
    with pytest.raises(ValueError):
        Tokenizer.from_labels(["a", "a"])


def test_char_text_drops_the_space_before_a_vocabulary_mark():
    """NeMo's rule on a character model: one space before a punctuation label goes ("rnokwd 'lz"
    -> "rnokwd'lz"), the words follow; a mark not in the labels would be left alone."""
    tok = Tokenizer.from_labels([" ", *"dklnorwz", "'"])
    ids = tok.encode("rnokwd 'lz")
    assert "".join(tok.surfaces(ids)) == "rnokwd 'lz"
    assert tok.decode(ids) == "rnokwd'lz" and tok.punctuation == frozenset("'")
    assert tok.words_of(ids) == [("rnokwd'lz", 0, 9)]
    ids = [tok.units.index(c) for c in "do  'n"]
    assert tok.decode(ids) == "do 'n"  # one space goes, as in NeMo
