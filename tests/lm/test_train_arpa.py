"""train_arpa: kaldingram's ARPA loads in our ARPA checker and covers the corpus words."""

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
