"""Scoring against hand-computed examples."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from asrdecode.errors import InputError
from asrdecode.scoring import compare_paired, normalize_text, read_transcripts, score


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


def _exact_bootstrap(errors_a, errors_b, words, level):
    """Every one of the n^n equally likely resamples, enumerated: the WER differences' quantiles
    (numpy's default interpolation over the sorted list) and the share where a has fewer errors."""
    n = len(words)
    rates, better = [], 0
    for draw in itertools.product(range(n), repeat=n):
        d = sum(errors_a[i] - errors_b[i] for i in draw)
        rates.append(d / max(sum(words[i] for i in draw), 1))
        better += d < 0
    tail = (1 - level) / 2
    return float(np.quantile(rates, tail)), float(np.quantile(rates, 1 - tail)), better / n**n


def test_paired_comparison_counts_and_bootstrap_against_enumeration():
    refs = {"u1": "a b c d", "u2": "e f", "u3": "g h i", "u4": "j"}
    a = score(refs, {"u1": "a b c d", "u2": "e x", "u3": "g", "u4": "j"})  # errors 0 1 2 0
    b = score(refs, {"u1": "a x c", "u2": "e f", "u3": "g h", "u4": "j k l"})  # errors 2 0 1 2
    cmp = compare_paired(a, b, rounds=200_000, level=0.8)
    assert (cmp.utterances, cmp.better, cmp.worse, cmp.equal) == (4, 2, 2, 0)
    assert cmp.wer_difference == pytest.approx(a.wer - b.wer) == pytest.approx((3 - 5) / 10)
    low, high, p_better = _exact_bootstrap([0, 1, 2, 0], [2, 0, 1, 2], [4, 2, 3, 1], 0.8)
    assert cmp.low == pytest.approx(low, abs=0.02) and cmp.high == pytest.approx(high, abs=0.02)
    assert cmp.probability_better == pytest.approx(p_better, abs=0.005)
    back = compare_paired(b, a, rounds=200_000, level=0.8)
    assert (back.better, back.worse) == (2, 2) and back.wer_difference == pytest.approx(-cmp.wer_difference)
    assert compare_paired(a, b, rounds=1000) == compare_paired(a, b, rounds=1000)  # seeded
    line = "a against b, per utterance (4): fewer errors on 2, more on 2, as many on 0; WER difference -20.0"
    assert cmp.summary("a", "b").startswith(line)


def test_paired_comparison_of_identical_runs_and_unshared_utterances():
    refs = {"u1": "a b", "u2": "c d"}
    a = score(refs, {"u1": "a", "u2": "c d"})
    same = compare_paired(a, a)
    assert (same.better, same.worse, same.equal) == (0, 0, 2)
    assert (same.wer_difference, same.low, same.high) == (0, 0, 0)
    assert same.probability_better == 0.0
    b = score({"u1": "a b"}, {"u1": "a b"})  # only u1 in both: u2 left out
    only = compare_paired(a, b)
    assert (only.utterances, only.worse, only.wer_difference) == (1, 1, 0.5)
    with pytest.raises(ValueError, match="different references"):
        compare_paired(a, score({"u1": "x y", "u2": "c d"}, {}))
    with pytest.raises(ValueError, match="rounds"):
        compare_paired(a, a, rounds=0)


def test_paired_comparison_in_blocks_equals_one_block(monkeypatch):
    """The resamples are drawn in blocks (bounded memory on large sets); the result does not depend
    on the block size."""
    import asrdecode.scoring as scoring

    refs = {f"u{i}": "a b c" for i in range(7)}
    a = score(refs, {f"u{i}": "a b c" if i % 2 else "a" for i in range(7)})
    b = score(refs, {f"u{i}": "a x c" for i in range(7)})
    whole = compare_paired(a, b, rounds=1000)
    monkeypatch.setattr(scoring, "BOOTSTRAP_BLOCK", 7 * 3)  # three resamples per block
    assert compare_paired(a, b, rounds=1000) == whole
