"""NeMo's text keeps its whitespace: a space a character model emits at the start or end of an
utterance or twice in a row, and sentencepiece's ' ⁇ ' for ``<unk>`` or a lone '▁', stay in the
text as NeMo 3.0.0's ``transcribe`` writes it; the words (and so word times and CTM lines) are that
text split at whitespace, and the Kaldi ``text`` file has them one space apart.

References (scripts/make_nemo_fixtures.py --set spaces, ``reference/spaces.json``): crafted CTC
log-probs whose greedy path is known (one frame per token), through the CTC decoding of the
character QuartzNet and the BPE TDT hybrid given the punctuation vocabularies, and the same tokens
through their transducer decodings' detokenisation, which agree."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import AUDIO, read_jsonl, run
from helpers.nemo_vocab import swap_vocabulary

from asrdecode import api
from asrdecode.decoders.base import DecoderContext, set_model_texts
from asrdecode.decoders.ctc_greedy import CtcGreedyConfig, CtcGreedyDecoder
from asrdecode.io.manifests import save_logprobs, write_logprobs_meta
from asrdecode.models import ModelOutput
from asrdecode.models.tokenizer import Tokenizer

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
REF = json.loads((FIX / "reference" / "spaces.json").read_text())
PUNCT = json.loads((FIX / "reference" / "punct.json").read_text())
KINDS = ["char", "bpe"]


def tokenizer(kind: str) -> Tokenizer:
    if kind == "bpe":
        return Tokenizer.from_sentencepiece((FIX / REF["tokenizer"]).read_bytes())
    return Tokenizer.from_labels(REF["char_labels"])


def log_probs(frames: list[int], columns: int) -> torch.Tensor:
    """The fixture's log-probs: 0 at each frame's label, -10 elsewhere, normalised."""
    lp = torch.full((len(frames), columns), -10.0)
    lp[torch.arange(len(frames)), torch.tensor(frames, dtype=torch.long)] = 0.0
    return torch.log_softmax(lp, dim=-1)


def test_the_references_have_spaces_at_either_end_and_doubled():
    texts = [r["text"] for kind in KINDS for r in REF[kind]["rows"]]
    assert any(t.startswith(" ") for t in texts) and any(t.endswith(" ") for t in texts)
    assert any("  " in t.strip() for t in texts)
    assert all(r["text"] != " ".join(r["text"].split()) for r in REF["bpe"]["rows"][:5])


@pytest.mark.parametrize("kind", KINDS)
def test_tokenizer_text_is_nemos_with_its_whitespace(kind):
    """The model's text of each token sequence (`Tokenizer.decode`) and the text of the bare unit
    list (saved log-probs) are NeMo's, character for character; the words are its split."""
    tok = tokenizer(kind)
    text_of_units = api.make_decoder("ctc-greedy", units=tok.units).context.text_of
    for row in REF[kind]["rows"]:
        assert tok.decode(row["ids"]) == row["text"], row["ids"]
        assert text_of_units(row["ids"]) == row["text"], row["ids"]
        assert [w for w, _, _ in tok.words_of(row["ids"])] == row["text"].split()


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_result_text_is_nemos(kind):
    """CTC greedy of the crafted log-probs: NeMo's tokens; the result's text (`set_model_texts`
    with the model's text) is NeMo's, its words the text split at whitespace; the same through the
    API from the unit list alone. Without a text function the text is the words joined."""
    tok = tokenizer(kind)
    blank = len(tok.units)
    rows = REF[kind]["rows"]
    ctx = DecoderContext(tok.units, blank, 0.04, tok.words_of, tok.decode)
    decoder = CtcGreedyDecoder(CtcGreedyConfig(), ctx)
    plain = CtcGreedyDecoder(CtcGreedyConfig(), DecoderContext(tok.units, blank, 0.04, tok.words_of))
    units_decoder = api.make_decoder("ctc-greedy", units=tok.units, frame_shift=0.04)
    for row in rows:
        lp = log_probs(row["frames"], blank + 1)
        out = ModelOutput(lp[None], torch.tensor([lp.shape[0]]), 0.04, blank, tok.units)
        (res,) = decoder.decode(out)
        assert res.tokens == row["ids"]
        set_model_texts([res], ctx.text_of)
        assert res.text == row["text"]
        assert [w.word for w in res.words] == row["text"].split()
        (joined,) = plain.decode(out)
        set_model_texts([joined], None)
        assert joined.text == " ".join(row["text"].split())
        (res,) = api.decode(units_decoder, lp)
        assert res.text == row["text"]


def test_a_result_whose_words_are_not_its_tokens_keeps_them_joined():
    """Words that are not the split of the tokens' text (a graph's word outputs) stay joined."""
    tok = tokenizer("char")
    row = REF["char"]["rows"][0]
    (res,) = api.decode(
        api.make_decoder("ctc-greedy", units=tok.units), log_probs(row["frames"], len(tok.units) + 1)
    )
    res.model_text = None
    res.words[0].word = "other"
    set_model_texts([res], tok.decode)
    assert res.model_text is None and res.text == " ".join(w.word for w in res.words)


def test_saved_log_probs_outputs(tmp_path):
    """``asrdecode transcribe`` of the crafted log-probs saved with the character unit list:
    transcripts.jsonl's pred_text is NeMo's text with its spaces, the Kaldi ``text`` file has the
    words one space apart, the CTM one line per word."""
    units = REF["char_labels"]
    blank = len(units)
    folder = tmp_path / "lp"
    rows = {f"u{i}": row for i, row in enumerate(REF["char"]["rows"])}
    for utt, row in rows.items():
        save_logprobs(folder, utt, log_probs(row["frames"], blank + 1).numpy())
    write_logprobs_meta(folder, 0.04, blank, units)
    out = tmp_path / "out"
    run("transcribe", str(folder), "--out", str(out))
    got = {r["utt_id"]: r for r in read_jsonl(out / "transcripts.jsonl")}
    assert {u: r["pred_text"] for u, r in got.items()} == {u: row["text"] for u, row in rows.items()}
    for utt, rec in got.items():
        assert [w["word"] for w in rec["words"]] == rows[utt]["text"].split()
    lines = (out / "text").read_text().splitlines()
    want = [f"{u} {' '.join(row['text'].split())}".rstrip() for u, row in rows.items()]
    assert sorted(lines) == sorted(want)
    ctm = (out / "hyp.ctm").read_text().split("\n")
    assert sum(1 for line in ctm if line) == sum(len(row["text"].split()) for row in rows.values())


def test_character_quartznet_audio_through_the_cli(tmp_path):
    """``asrdecode transcribe`` of the fixture clips with the character QuartzNet given the
    punctuation labels: pred_text is NeMo's ``transcribe`` text character for character (leading,
    trailing and doubled spaces included) on every clip whose log-probs have no near tie."""
    entry = PUNCT["models"]["quartznet_char"]
    model = tmp_path / "quartznet_char.nemo"
    assert swap_vocabulary(FIX / "quartznet_char.nemo", model, PUNCT["char_labels"]) == entry["sha256"]
    ref = np.load(FIX / "reference" / "quartznet_char.npz", allow_pickle=False)
    manifest = tmp_path / "in.jsonl"
    lines = [{"audio_filepath": str(AUDIO / f"{u}.wav"), "utt_id": str(u)} for u in ref["utt_ids"]]
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    run("transcribe", str(manifest), "--model", str(model), "--out", str(out), "--decoder", "ctc-greedy")
    got = {r["utt_id"]: r["pred_text"] for r in read_jsonl(out / "transcripts.jsonl")}
    compared = spaced = 0
    for b, utt in enumerate(ref["utt_ids"]):
        lp = ref["log_probs"][b, : int(ref["encoder_len"][b])]
        top = np.sort(lp, axis=-1)
        if (top[:, -1] - top[:, -2]).min() < 2e-3:
            continue
        want = entry["ctc"]["texts"][b]
        assert got[str(utt)] == want, utt
        compared += 1
        spaced += want != " ".join(want.split())
    assert compared >= 3 and spaced >= 2
