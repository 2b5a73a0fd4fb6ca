"""NeMo's text where the vocabulary has apostrophes and punctuation: NeMo 3.0.0 removes the one
whitespace character before each punctuation mark of the vocabulary (``don 't`` -> ``don't``,
``themid ' x`` -> ``themid' x``), and asrdecode's text, words and CTM follow it.

References (scripts/make_nemo_fixtures.py --set punct, ``reference/punct.json``): the fixture models
given a 128-piece BPE trained on sentences with "don't", "o'clock", "'tis", "it's." (its pieces
include the word-initial ``▁'`` and ``▁-``) or character labels with ``' . , ?``
(tests/helpers/nemo_vocab.py writes the same archives here, checked by SHA-256); NeMo's
``transcribe`` texts of every head, greedy and beam, and its detokenisation of those sentences and of
random token sequences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.nemo_vocab import sentencepiece_members, swap_vocabulary
from helpers.transducer import make_decoder, nemo_output

from asrdecode.config import dataclass_from_dict
from asrdecode.decoders.base import DecoderContext, set_model_texts
from asrdecode.decoders.ctc_beam import CtcBeamConfig, CtcBeamDecoder
from asrdecode.decoders.ctc_greedy import CtcGreedyConfig, CtcGreedyDecoder
from asrdecode.decoders.transducer_beam import TransducerBeamConfig, TransducerBeamDecoder
from asrdecode.models import ModelOutput
from asrdecode.models.loading import load_model
from asrdecode.models.tokenizer import Tokenizer, nemo_punctuation
from asrdecode.pipeline import words_of_units

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
REF = json.loads((FIX / "reference" / "punct.json").read_text())
SP = (FIX / REF["tokenizer"]["file"]).read_bytes()
CASES = [
    (name, head) for name, entry in REF["models"].items() for head in ("transducer", "ctc") if head in entry
]


def tokenizer(kind: str) -> Tokenizer:
    return Tokenizer.from_sentencepiece(SP) if kind == "bpe" else Tokenizer.from_labels(REF["char_labels"])


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    """The fixture models with the punctuation vocabularies, byte for byte the archives NeMo read."""
    tmp = tmp_path_factory.mktemp("punct")
    out = {}
    for name, entry in REF["models"].items():
        tok = tokenizer(entry["kind"])
        files = sentencepiece_members(SP) if entry["kind"] == "bpe" else None
        digest = swap_vocabulary(FIX / f"{name}.nemo", tmp / f"{name}.nemo", tok.units, files)
        assert digest == entry["sha256"], name
        out[name] = tmp / f"{name}.nemo"
    return out


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_punctuation_of_the_vocabulary_is_nemos():
    """The marks NeMo keeps attached (its ``supported_punctuation``): category P characters of the
    entries that are not special; a word-initial ``▁'`` alone adds nothing."""
    for name, head in CASES:
        entry = REF["models"][name]
        assert sorted(tokenizer(entry["kind"]).punctuation) == entry[head]["supported_punctuation"], name
    assert nemo_punctuation(["<unk>", "▁'", "[x.]", "##,", " ", "a"]) == frozenset()
    assert nemo_punctuation(["▁a", "n't", "."]) == frozenset({"'", "."})
    assert Tokenizer.from_sentencepiece(SP).describe()["punctuation"] == "!',-.:;?"


@pytest.mark.parametrize("kind", ["bpe", "char"])
def test_detokenisation_equals_nemo(kind):
    """Every sentence ("don't", "o'clock", "'tis", "it's.", ...), as tokenized and with its
    apostrophes made word-initial pieces, and 40 random token sequences: the text is NeMo's,
    character for character; the words are that text split at spaces, each from the tokens its
    characters came from."""
    tok = tokenizer(kind)
    rows = REF["detok"][kind]
    assert len(rows) >= 40
    joined = 0
    for row in rows:
        ids, text = row["ids"], row["text"]
        assert tok.decode(ids) == text, ids
        words = tok.words_of(ids)
        assert [w for w, _, _ in words] == text.split(), ids
        for word, first, last in words:
            assert 0 <= first <= last < len(ids)
            assert word.replace(" ", "") in tok.decode(ids[first : last + 1]).replace(" ", ""), (ids, word)
        joined += text != "".join(tok.surfaces(ids))
    assert joined >= 5  # NeMo removed a space before a mark in several of them


def test_sentences_with_apostrophes_as_nemo_writes_them():
    """The sentences themselves through the BPE: "don't", "o'clock", "'tis", "it's." come back as
    written, and with the word-initial apostrophe piece the space before it goes (NeMo's rule)."""
    tok = tokenizer("bpe")
    table = {tuple(r["ids"]): r["text"] for r in REF["detok"]["bpe"]}
    for text in ("don't", "o'clock", "'tis", "it's.", "don't go forward, it's ten o'clock."):
        ids = tok.encode(text)
        assert table[tuple(ids)] == tok.decode(ids) == text
    quote = tok.units.index("▁'")
    ids = [quote if tok.units[t] == "'" else t for t in tok.encode("don't go forward, it's ten o'clock.")]
    assert "".join(tok.surfaces(ids)) == "don 't go forward, it 's ten o 'clock."
    assert tok.decode(ids) == table[tuple(ids)] == "don't go forward, it's ten o'clock."
    assert [w for w, _, _ in tok.words_of(ids)] == ["don't", "go", "forward,", "it's", "ten", "o'clock."]
    assert tok.units[tok.encode("'tis")[0]] == "▁'"  # the word-initial apostrophe piece


def output_of(model, name: str, head: str) -> ModelOutput:
    """NeMo's own encoder output (transducer) or log-probs (CTC) of the fixture batch, from the
    model's committed reference: the weights are the same, only the vocabulary differs."""
    ref = dict(np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False))
    if head == "transducer":
        return nemo_output(model, ref)
    lp = ref["ctc_logprobs"] if "ctc_logprobs" in ref else ref["log_probs"]
    return ModelOutput(
        torch.from_numpy(lp),
        torch.from_numpy(ref["encoder_len"]).long(),
        model.frame_shift,
        model.blank_id,
        model.units,
    )


def decoders(model, head: str, entry: dict) -> dict:
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    beam = entry["beam"]["decoding"]["beam"]
    if head == "ctc":
        options = {k: beam[k] for k in ("beam_size", "beam_beta", "beam_threshold", "return_best_hypothesis")}
        return {
            "greedy": CtcGreedyDecoder(CtcGreedyConfig(), ctx),
            "beam": CtcBeamDecoder(dataclass_from_dict(CtcBeamConfig, options, prefix="decoder."), ctx),
        }
    options = {"strategy": entry["beam"]["decoding"]["strategy"], "max_symbols": beam["max_symbols"]}
    options |= {k: beam[k] for k in ("beam_size", "score_norm", "return_best_hypothesis")}
    config = dataclass_from_dict(TransducerBeamConfig, options, prefix="decoder.")
    return {"greedy": make_decoder(model, max_symbols=10), "beam": TransducerBeamDecoder(config, ctx)}


def near_tie(name: str, head: str, b: int) -> bool:
    """NeMo's CTC log-probs of utterance b have a frame whose two best are within 2e-3 (where float
    rounding may pick either; the CTC tests skip such utterances too)."""
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    lp = ref["ctc_logprobs"] if "ctc_logprobs" in ref else ref["log_probs"]
    top = np.sort(lp[b, : int(ref["encoder_len"][b])], axis=-1)
    return head == "ctc" and bool((top[:, -1] - top[:, -2]).min() < 2e-3)


@pytest.mark.parametrize("name, head", CASES)
def test_text_equals_nemo_transcribe(archives, name, head):
    """Greedy and beam (malsd / CTC beam_batch) on each head: NeMo's tokens, and NeMo's
    ``transcribe`` text character for character (with the model's text, `set_model_texts`: a word
    separator a character model emits at either end or twice in a row stays, as in NeMo's)."""
    entry = REF["models"][name][head]
    hybrid = "transducer" in REF["models"][name] and "ctc" in REF["models"][name]
    model = load_model(str(archives[name]), head=head if hybrid else "auto")
    out = output_of(model, name, head)
    compared = 0
    for key, decoder in decoders(model, head, entry).items():
        want = entry if key == "greedy" else entry["beam"]
        results = decoder.decode(out)
        set_model_texts(results, model.tokens_to_text)
        for b, res in enumerate(results):
            if res.tokens != want["tokens"][b]:  # a near tie: NeMo's tokens through the same words
                assert near_tie(name, head, b), (key, b)
                words = model.tokens_to_words(want["tokens"][b])
                assert " ".join(w for w, _, _ in words) == " ".join(want["texts"][b].split())
                continue
            assert res.text == want["texts"][b], (key, b)
            assert [w.word for w in res.words] == want["texts"][b].split(), (key, b)
            compared += 1
    assert any(any(c in t for c in "'.,?") for t in entry["texts"])
    assert compared >= len(entry["texts"])


@pytest.mark.parametrize("kind", ["bpe", "char"])
def test_the_references_exercise_the_rule(kind):
    """NeMo's texts of the models' outputs lost a space before a mark in several utterances (the
    plain detokenisation of NeMo's own tokens has it)."""
    tok = tokenizer(kind)
    stripped = 0
    for name, head in CASES:
        entry = REF["models"][name]
        if entry["kind"] == kind:
            for want in (entry[head], entry[head]["beam"]):
                for tokens, text in zip(want["tokens"], want["texts"], strict=True):
                    plain = "".join(tok.surfaces(tokens))
                    stripped += plain != text and " ".join(plain.split()) != " ".join(text.split())
    assert stripped >= 3


@pytest.mark.parametrize("kind", ["bpe", "char"])
def test_saved_log_probs_words_are_the_models(kind):
    """Decoding saved log-probs (the unit list only, no tokenizer model) groups the words as the
    model does: the same words and token spans on every row of the detokenisation table."""
    tok = tokenizer(kind)
    words_of = words_of_units(list(tok.units))
    for row in REF["detok"][kind]:
        assert words_of(row["ids"]) == tok.words_of(row["ids"]), row["ids"]


@pytest.mark.parametrize("name", [n for n, h in CASES if h == "transducer"])
def test_transducer_word_starts_are_nemos(archives, name):
    """Greedy transducer words against NeMo's ``transcribe(timestamps=True)`` word offsets: each
    word starts on NeMo's frame wherever NeMo's word list is its text split at spaces (NeMo's word
    offsets keep a word-initial mark's space inside the word before, ``otlv'ure '``, where its text
    and asrdecode's words have ``otlv'ure'``)."""
    entry = REF["models"][name]["transducer"]
    model = load_model(str(archives[name]), head="transducer")
    results = decoders(model, "transducer", entry)["greedy"].decode(output_of(model, name, "transducer"))
    compared = 0
    for b, res in enumerate(results):
        theirs = entry["words"][b]
        if [w["word"] for w in theirs] != entry["texts"][b].split():
            continue
        assert [w.word for w in res.words] == [w["word"] for w in theirs]
        starts = [round(w.start / model.frame_shift) for w in res.words]
        assert starts == [w["start_offset"] for w in theirs], b
        compared += 1
    assert compared >= 1


def test_attention_encoder_decoder_text_is_plain():
    """NeMo's multitask (Canary) decoding writes the detokenised text as it is, marks in the
    vocabulary or not: a Canary model with one sentencepiece tokenizer keeps the space."""
    from asrdecode.models import load_nemo

    tok = load_nemo(FIX / "aed_bpe.nemo").tokenizer
    ids = tok.encode("it 's done .")
    assert tok.punctuation == frozenset() and tok.decode(ids) == "it 's done ."
    assert [w for w, _, _ in tok.words_of(ids)] == ["it", "'s", "done", "."]
