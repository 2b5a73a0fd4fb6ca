"""Generic HCLG on a toy phone set: shortest path of a pdf alignment = ARPA cost + HMM transition
costs computed by hand; triphone lookup with CI fallback; Kaldi's FasterDecoder reads it."""

import math

import kaldifst
import numpy as np
import pytest

from asrdecode.graph import DeviceGraph
from asrdecode.graph.hclg import HmmTopology, TiedStates, build_hclg
from asrdecode.graph.symbols import read_symbols

LN10 = math.log(10)
TOL = 5e-3
PHONES = ["a", "b", "sil"]
LEXICON = [("ab", ["a", "b"]), ("b", ["b"]), ("ba", ["b", "a"])]
ARPA = """\\data\\
ngram 1=5
ngram 2=2

\\1-grams:
-0.8 </s>
-99 <s> -0.3
-0.5 ab -0.2
-0.7 b -0.25
-0.9 ba -0.1

\\2-grams:
-0.1 <s> ab
-0.2 ab b

\\end\\
"""
# CI pdfs per phone (2-state HMM); triphone overrides for "a" with no left context and "b" on the right
CI = {"a": [0, 1], "b": [2, 3], "sil": [4, 5]}
TRI = {(None, "a", "b"): [6, 7], ("a", "b", None): [8, 9]}
P_LOOP = 0.6


@pytest.fixture(scope="module")
def hclg_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hclg")
    (d / "lm.arpa").write_text(ARPA)
    meta = build_hclg(
        PHONES,
        LEXICON,
        d / "lm.arpa",
        TiedStates(CI, TRI),
        d / "out",
        HmmTopology(num_states=2, self_loop_prob=P_LOOP),
        silence="sil",
        silence_prob=0.5,
    )
    assert meta["kind"] == "HCLG" and meta["num_columns"] == 10
    return d / "out"


def hmm_cost(frames_per_state: list[int]) -> float:
    """-ln of a left-to-right pass: each state k spends n_k frames (n_k - 1 self-loops, then leaves)."""
    return sum((n - 1) * -math.log(P_LOOP) - math.log(1 - P_LOOP) for n in frames_per_state)


def best(fst, pdfs: list[int]):
    acc = kaldifst.make_linear_acceptor([p + 1 for p in pdfs])
    composed = kaldifst.compose(acc, fst)
    if composed.num_states == 0:
        return None
    ok, _, out, w = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(composed))
    assert ok
    return w.value, out


def test_alignment_cost_equals_lm_plus_hmm(hclg_dir):
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(hclg_dir / "HCLG.fst")))
    words = read_symbols(hclg_dir / "words.txt")
    # "ab b": a = (<bnd>,a,b) -> [6,7]; b = (a,b,b) missing -> CI [2,3]; b = (b,b,<bnd>) -> CI [2,3]
    pdfs = [6, 6, 7] + [2, 3, 3] + [2, 2, 3]
    cost, out = best(fst, pdfs)
    assert [words[o] for o in out] == ["ab", "b"]
    lm = (0.1 + 0.2 + (0.25 + 0.8)) * LN10  # p(ab|<s>) p(b|ab) bo(b) p(</s>)
    assert cost == pytest.approx(lm + hmm_cost([2, 1]) + hmm_cost([1, 2]) + hmm_cost([2, 1]), abs=TOL)
    # single word "b" at both boundaries: (<bnd>,b,<bnd>) missing -> CI
    cost, out = best(fst, [2, 3])
    assert [words[o] for o in out] == ["b"]
    assert cost == pytest.approx((0.3 + 0.7 + 0.25 + 0.8) * LN10 + hmm_cost([1, 1]), abs=TOL)
    # "ab" ends the sentence: b = (a,b,<bnd>) uses its triphone pdfs [8,9]; CI pdfs there do not fit
    cost, out = best(fst, [6, 7, 8, 9])
    assert [words[o] for o in out] == ["ab"]
    assert cost == pytest.approx((0.1 + 0.2 + 0.8) * LN10 + 2 * hmm_cost([1, 1]), abs=TOL)
    assert best(fst, [6, 7, 2, 3]) is None


def test_optional_silence_between_words(hclg_dir):
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(hclg_dir / "HCLG.fst")))
    words = read_symbols(hclg_dir / "words.txt")
    # "ab sil b": right context of b in "ab" is now sil -> (a,b,sil) missing -> CI
    pdfs = [6, 7, 2, 3, 4, 5, 2, 3]
    cost, out = best(fst, pdfs)
    assert [words[o] for o in out] == ["ab", "b"]
    lm = (0.1 + 0.2 + 0.25 + 0.8) * LN10
    assert cost == pytest.approx(lm + 4 * hmm_cost([1, 1]) + math.log(2), abs=TOL)


def test_hclg_graph_file_and_kaldi_decoder(hclg_dir):
    import kaldi_decoder

    g = DeviceGraph.load(hclg_dir / "graph.pt")
    assert g.meta["kind"] == "HCLG" and g.max_ilabel <= 10
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(hclg_dir / "HCLG.fst")))
    words = read_symbols(hclg_dir / "words.txt")
    pdfs = [6, 6, 7, 7, 2, 3, 3, 2, 2, 3]
    lp = np.full((len(pdfs), 10), math.log(0.01), dtype=np.float32)
    lp[np.arange(len(pdfs)), pdfs] = math.log(0.91)
    dec = kaldi_decoder.FasterDecoder(fst, kaldi_decoder.FasterDecoderOptions(beam=20.0))
    dec.decode(kaldi_decoder.DecodableCtc(lp))
    ok, lat = dec.get_best_path()
    assert ok
    _, _, out, _ = kaldifst.get_linear_symbol_sequence(lat)
    assert [words[o] for o in out] == ["ab", "b"]
