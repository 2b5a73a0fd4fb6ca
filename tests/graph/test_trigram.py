"""Trigram ARPA with two-level backoff, character lexicon with prefix words (disambiguation
symbols): TLG shortest paths vs a brute-force ARPA scorer written from the ARPA definition."""

import itertools
import math

import kaldifst
import pytest

from asrdecode.graph import GraphBuildConfig, build_graph
from asrdecode.graph.symbols import read_symbols

LN10 = math.log(10)
TOL = 5e-3
WORDS = ["a", "b", "ab", "ba", "aab"]
UNIGRAMS = {"</s>": -1.0, "<s>": -99.0, "a": -0.6, "b": -0.7, "ab": -0.9, "ba": -1.0, "aab": -1.3}
UNI_BO = {"<s>": -0.4, "a": -0.5, "b": -0.6, "ab": -0.3, "ba": -0.45, "aab": -0.2}
BIGRAMS = {
    ("<s>", "a"): -0.3,
    ("a", "b"): -0.35,
    ("b", "a"): -0.5,
    ("ab", "ba"): -0.4,
    ("a", "</s>"): -0.6,
    ("ba", "</s>"): -0.5,
    ("b", "ab"): -0.8,
}
BI_BO = {("<s>", "a"): -0.3, ("a", "b"): -0.25, ("b", "a"): -0.35, ("ab", "ba"): -0.2}
TRIGRAMS = {
    ("<s>", "a", "b"): -0.1,
    ("a", "b", "a"): -0.2,
    ("b", "a", "</s>"): -0.15,
    ("ab", "ba", "</s>"): -0.1,
}


def arpa_text() -> str:
    lines = [
        "\\data\\",
        f"ngram 1={len(UNIGRAMS)}",
        f"ngram 2={len(BIGRAMS)}",
        f"ngram 3={len(TRIGRAMS)}",
        "",
    ]
    lines.append("\\1-grams:")
    lines += [f"{p} {w}" + (f" {UNI_BO[w]}" if w in UNI_BO else "") for w, p in UNIGRAMS.items()]
    lines += ["", "\\2-grams:"]
    lines += [
        f"{p} {h} {w}" + (f" {BI_BO[(h, w)]}" if (h, w) in BI_BO else "") for (h, w), p in BIGRAMS.items()
    ]
    lines += ["", "\\3-grams:"]
    lines += [f"{p} {' '.join(k)}" for k, p in TRIGRAMS.items()]
    return "\n".join(lines + ["", "\\end\\", ""])


def log10_prob(history: tuple[str, ...], w: str) -> float:
    """ARPA backoff: explicit n-gram, else backoff(history) + P(w | shorter history)."""
    table = {1: {(k,): v for k, v in UNIGRAMS.items()}, 2: BIGRAMS, 3: TRIGRAMS}
    key = history + (w,)
    if key in table[len(key)]:
        return table[len(key)][key]
    bo = {1: {(k,): v for k, v in UNI_BO.items()}, 2: BI_BO}.get(len(history), {}).get(history, 0.0)
    return bo + log10_prob(history[1:], w)


def sentence_cost(words: list[str]) -> float:
    hist, total = ("<s>",), 0.0
    for w in [*words, "</s>"]:
        total += log10_prob(hist[-2:], w)
        hist = hist + (w,)
    return -total * LN10


def segmentations(letters: str) -> list[list[str]]:
    if not letters:
        return [[]]
    return [
        [letters[:k], *rest]
        for k in range(1, len(letters) + 1)
        if letters[:k] in WORDS
        for rest in segmentations(letters[k:])
    ]


def test_explicit_ngrams_beat_their_backoff_route():
    """Precondition: tropical G (min over explicit arc and backoff path) equals the ARPA."""
    for (h, w), p in BIGRAMS.items():
        assert p >= UNI_BO.get(h, 0.0) + UNIGRAMS[w]
    for (h1, h2, w), p in TRIGRAMS.items():
        assert p >= BI_BO.get((h1, h2), 0.0) + log10_prob((h2,), w)


@pytest.mark.parametrize("topology", ["minimal", "compact", "normal"])
def test_trigram_tlg_equals_brute_force(tmp_path, topology):
    (tmp_path / "lm.arpa").write_text(arpa_text())
    cfg = GraphBuildConfig(
        arpa=str(tmp_path / "lm.arpa"),
        unit_list=["a", "b"],
        blank="first",
        lexicon_type="chars",
        topology=topology,
    )
    meta = build_graph(cfg, tmp_path / "g")
    assert meta["units"]["disambig_symbols"] >= 2  # a, b are prefixes of ab/aab/ba
    tlg = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(tmp_path / "g" / "TLG.fst")))
    words = read_symbols(tmp_path / "g" / "words.txt")
    col = {"_": 0, "a": 1, "b": 2}  # blank first
    checked = 0
    for n in range(1, 6):
        for letters in map("".join, itertools.product("ab", repeat=n)):
            # frames: letters separated by blanks, read the same way by every topology
            frames = [col[c] for c in "_".join(letters)]
            acc = kaldifst.make_linear_acceptor([f + 1 for f in frames])
            composed = kaldifst.compose(acc, tlg)
            cands = [(sentence_cost(s), s) for s in segmentations(letters)]
            if not cands:
                assert composed.num_states == 0, letters
                continue
            ok, _, out, w = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(composed))
            cost, best = min(cands)
            assert ok and w.value == pytest.approx(cost, abs=TOL), letters
            assert [words[o] for o in out] == best, letters
            checked += 1
    assert checked == 62
