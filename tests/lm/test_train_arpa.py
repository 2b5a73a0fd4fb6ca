"""train_arpa: kaldingram's ARPA loads in our ARPA checker and covers the corpus words."""

import pytest

from asrdecode.lm import train_arpa
from asrdecode.lm.arpa import check_arpa


def test_train_arpa_writes_a_valid_trigram(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("go forward ten meters\ngo back ten meters\nturn left\n")
    arpa = train_arpa(corpus, tmp_path / "lm.arpa", order=3, quiet=True)
    summary = check_arpa(arpa)
    text = arpa.read_text()
    assert "\\3-grams:" in text
    for word in ("go", "forward", "back", "turn", "left", "meters"):
        assert f" {word}" in text
    assert summary is not None


def test_a_failed_training_says_why_in_one_line(tmp_path):
    missing = tmp_path / "no-such-corpus.txt"
    with pytest.raises(RuntimeError) as err:
        train_arpa(missing, tmp_path / "lm.arpa", quiet=True)
    said = str(err.value)
    assert "\n" not in said and str(missing) in said
    assert said.split(": ", 1)[1] and "exit status" not in said  # kaldingram's own last line
