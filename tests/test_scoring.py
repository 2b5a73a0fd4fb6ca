"""Scoring against hand-computed examples."""

from __future__ import annotations

import json

import pytest

from asrdecode.errors import InputError
from asrdecode.scoring import normalize_text, read_transcripts, score


def test_one_sub_one_del():
    r = score({"u": "a b c d"}, {"u": "a x c"})
    assert (r.substitutions, r.deletions, r.insertions, r.hits, r.ref_words) == (1, 1, 0, 2, 4)
    assert r.wer == 0.5 and r.num_utterances == 1 and r.missing == []
    (u,) = r.utterances
    assert (u.utt_id, u.errors, u.wer, u.ref, u.hyp) == ("u", 2, 0.5, "a b c d", "a x c")


def test_corpus_totals_missing_and_extra():
    refs = {"u1": "the cat sat", "u2": "hello world", "u3": "one two three four"}
    hyps = {"u1": "the cat sat down", "u2": "hello word", "zz": "extra"}
    r = score(refs, hyps)
    # u1: 1 ins; u2: 1 sub; u3 missing: 4 del
    assert (r.substitutions, r.deletions, r.insertions) == (1, 4, 1)
    assert r.ref_words == 9 and r.wer == pytest.approx(6 / 9)
    assert r.missing == ["u3"] and r.extra == ["zz"] and r.num_utterances == 3
    d = r.to_dict()
    assert d["utterances"] == 3 and d["num_missing"] == 1 and d["missing"] == ["u3"]
    per = {x["utt_id"]: x for x in d["per_utterance"]}
    assert per["u3"]["missing"] is True and per["u3"]["deletions"] == 4 and per["u3"]["wer"] == 1.0
    assert per["u1"]["insertions"] == 1 and per["u1"]["wer"] == pytest.approx(1 / 3)


def test_cer():
    r = score({"u": "abc"}, {"u": "abd"})
    assert r.cer == pytest.approx(1 / 3) and r.char_errors == 1 and r.ref_chars == 3


def test_empty_reference_counts_insertions():
    r = score({"a": "", "b": "x y"}, {"a": "p q", "b": "x y"})
    assert r.insertions == 2 and r.ref_words == 2 and r.wer == 1.0
    assert r.utterances[0].wer == 2.0
    assert "I" in r.worst(1)[0]


def test_normalisation_case_and_punctuation():
    assert normalize_text("Hello, World!  It's   well-known.") == "hello world it's well known"
    assert normalize_text("\u201cQuoted\u201d \u2014 'single' rock 'n' roll") == "quoted single rock n roll"
    assert normalize_text("Don\u2019t STOP", lowercase=False) == "Don't STOP"
    assert normalize_text("A, b.", lowercase=False, remove_punctuation=False) == "A, b."
    assert score({"u": "Hello, world!"}, {"u": "hello world"}).wer == 0.0
    assert score({"u": "Hello, world!"}, {"u": "hello world"}, lowercase=False).substitutions == 1
    assert score({"u": "Hello, world!"}, {"u": "hello world"}, remove_punctuation=False).substitutions == 2


def test_worst_shows_alignments_of_the_worst_utterances():
    r = score({"good": "a b", "bad": "a b c d", "mid": "x y"}, {"good": "a b", "bad": "a x c", "mid": "x"})
    blocks = r.worst(5)
    assert len(blocks) == 2  # utterances without errors are left out
    assert blocks[0].startswith("=== bad") and "REF: a b c d" in blocks[0] and "HYP: a x c *" in blocks[0]
    assert "S" in blocks[0] and "D" in blocks[0]
    assert blocks[1].startswith("=== mid")
    assert len(r.worst(1)) == 1


def test_read_transcripts_kaldi_and_jsonl(tmp_path):
    k = tmp_path / "text"
    k.write_text("u1 HELLO  world\nu2\n\n")
    assert read_transcripts(k) == {"u1": "HELLO  world", "u2": ""}
    j = tmp_path / "t.jsonl"
    j.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {"utt_id": "u1", "pred_text": "a", "text": "A"},
                {"id": 7, "pred_text": "b", "text": "B"},
                {"audio_filepath": "/x/spk-3.wav", "pred_text": "c", "text": "C"},
            ]
        )
        + "\n"
    )
    assert read_transcripts(j) == {"u1": "a", "7": "b", "spk-3": "c"}
    assert read_transcripts(j, field="text") == {"u1": "A", "7": "B", "spk-3": "C"}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            '{"utt_id": "u1", "pred_text": "a"}\n{"utt_id": "u1", "pred_text": "b"}\n',
            ":2: duplicate utt_id 'u1'",
        ),
        ('{"utt_id": "u1", "pred_text": "a"}\n{"utt_id": "u2"}\n', ":2: no text under 'pred_text'"),
        ('{"utt_id": "u1", "pred_text": "a"}\n{oops\n', ":2: invalid JSON"),
        ('{"pred_text": "a"}\n', ":1: no 'utt_id'"),
    ],
)
def test_read_transcripts_errors_name_file_and_line(tmp_path, content, problem):
    p = tmp_path / "h.jsonl"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        read_transcripts(p)
    assert str(p) + problem in str(e.value)
    with pytest.raises(InputError, match="no such file"):
        read_transcripts(tmp_path / "nope")
