"""TLG built by asrdecode vs references that do not use it: a hand-written ARPA scorer with
backoff, brute-force segmentation, hand-written CTC collapse rules, and Kaldi's FasterDecoder."""

import itertools
import math

import kaldifst
import numpy as np
import pytest
from helpers.graph_toy import ARPA, LEXICON, UNITS

from asrdecode.graph import DeviceGraph, describe_graph
from asrdecode.graph.fst_ops import make_ctc_topo
from asrdecode.graph.symbols import read_symbols
from asrdecode.graph.units import resolve_units

LN10 = math.log(10)
# minimize_encoded quantizes LG weights to a 1/1024 grid (Kaldi's kDelta), a few arcs per path.
TOL = 5e-3
COL = {u: i for i, u in enumerate(UNITS)}
BLANK = len(UNITS)  # column of blank


# ---------------------------------------------------------------- independent references
def _arpa_tables(text: str) -> tuple[dict, dict]:
    probs, backoffs, order = {}, {}, 0
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1])
            continue
        if not line or line.startswith("\\") or line.startswith("ngram") or not order:
            continue
        f = line.split()
        probs[tuple(f[1 : 1 + order])] = float(f[0])
        if len(f) == order + 2:
            backoffs[tuple(f[1 : 1 + order])] = float(f[-1])
    return probs, backoffs


PROBS, BACKOFFS = _arpa_tables(ARPA)


def lm_cost(words: list[str]) -> float:
    """-ln P(words </s> | <s>) of a bigram ARPA with backoff, by the ARPA definition."""
    total, prev = 0.0, "<s>"
    for w in [*words, "</s>"]:
        if (prev, w) in PROBS:
            total += PROBS[(prev, w)]
        else:
            total += BACKOFFS.get((prev,), 0.0) + PROBS[(w,)]
        prev = w
    return -total * LN10


def segmentations(units: list[str]) -> list[list[str]]:
    prons = {tuple(p.split()): w for w, p in LEXICON.items()}
    if not units:
        return [[]]
    out = []
    for k in range(1, len(units) + 1):
        w = prons.get(tuple(units[:k]))
        if w:
            out += [[w, *rest] for rest in segmentations(units[k:])]
    return out


def brute_force(units: list[str]) -> tuple[float, list[str]] | None:
    cands = [(lm_cost(s), s) for s in segmentations(units)]
    return min(cands) if cands else None


def ctc_normal(frames: list[int], blank: int = BLANK) -> set[tuple[int, ...]]:
    out, prev = [], None
    for f in frames:
        if f != blank and f != prev:
            out.append(f)
        prev = f
    return {tuple(out)}


def ctc_compact(frames: list[int], blank: int = BLANK) -> set[tuple[int, ...]]:
    """A run of k equal non-blank frames may stand for 1..k units; blanks vanish."""
    choices = []
    for sym, run in itertools.groupby(frames):
        if sym == blank:
            continue
        k = len(list(run))
        choices.append([(sym,) * n for n in range(1, k + 1)])
    return {sum(combo, ()) for combo in itertools.product(*choices)}


def ctc_minimal(frames: list[int], blank: int = BLANK) -> set[tuple[int, ...]]:
    return {tuple(f for f in frames if f != blank)}


# ---------------------------------------------------------------- helpers
def read_tlg(folder):
    return kaldifst.StdVectorFst(kaldifst.StdFst.read(str(folder / "TLG.fst")))


def best_path(fst, frame_columns: list[int]) -> tuple[float, list[int]] | None:
    """Shortest path of (linear acceptor of frame ilabels) o fst: (cost, olabels)."""
    acc = kaldifst.make_linear_acceptor([c + 1 for c in frame_columns])
    composed = kaldifst.compose(acc, fst)
    if composed.num_states == 0:
        return None
    ok, _, olabels, weight = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(composed))
    assert ok
    return weight.value, list(olabels)


def output_strings(fst, frame_columns: list[int]) -> set[tuple[int, ...]]:
    """All output strings of (acceptor of frames) o fst (acyclic), by path enumeration."""
    acc = kaldifst.make_linear_acceptor([c + 1 for c in frame_columns])
    g = DeviceGraph.from_kaldifst(kaldifst.compose(acc, fst))
    if g.num_states == 0:
        return set()
    a = g.arc_arrays()
    off = g.offsets.numpy()
    result = set()

    def walk(s: int, out: tuple[int, ...]) -> None:
        if math.isfinite(float(g.final[s])):
            result.add(tuple(o - 1 for o in out))  # unit id -> column
        for i in range(off[s], off[s + 1]):
            o = int(a["olabel"][i])
            walk(int(a["nextstate"][i]), out + ((o,) if o else ()))

    walk(g.start, ())
    return result


def frames_of(spec: str) -> list[int]:
    return [BLANK if ch == "_" else COL[ch] for ch in spec]


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize(
    "topology,frames",
    [
        ("normal", "aab_ba"),
        ("normal", "_a_b_b_a__"),
        ("compact", "aab_ba"),
        ("compact", "abba"),
        ("minimal", "a_bb_a"),
        ("normal", "cab_c"),
        ("compact", "ccaabbc"),
        ("minimal", "c_a_b_c"),
        ("compact", "cc_cc"),
    ],
)
def test_shortest_path_equals_brute_force_arpa(toy_graphs, topology, frames):
    fst = read_tlg(toy_graphs[topology])
    words = read_symbols(toy_graphs[topology] / "words.txt")
    cols = frames_of(frames)
    rule = {"normal": ctc_normal, "compact": ctc_compact, "minimal": ctc_minimal}[topology]
    expected = [r for u in rule(cols) if (r := brute_force([UNITS[c] for c in u]))]
    got = best_path(fst, cols)
    assert expected, "test case must be decodable"
    cost, best_words = min(expected)
    assert got is not None
    assert got[0] == pytest.approx(cost, abs=TOL)
    assert [words[o] for o in got[1]] == best_words


def test_expected_words_and_costs_by_hand(toy_graphs):
    """Spot values computed on paper from the ARPA (log10 probs x ln 10)."""
    fst = read_tlg(toy_graphs["compact"])
    words = read_symbols(toy_graphs["compact"] / "words.txt")
    cost, out = best_path(fst, frames_of("ab_ba"))
    assert [words[o] for o in out] == ["ab", "ba"]
    assert cost == pytest.approx((0.2 + 0.3 + 0.25) * LN10, abs=TOL)
    # "c a b c": cab c = (0.5+1.2) + (0.1+0.9) + (0.4+1.0) = 4.1 beats c ab c = 5.1
    cost, out = best_path(fst, frames_of("cabc"))
    assert [words[o] for o in out] == ["cab", "c"]
    assert cost == pytest.approx(4.1 * LN10, abs=TOL)


def test_normal_rejects_repeat_without_blank(toy_graphs):
    fst = read_tlg(toy_graphs["normal"])
    assert best_path(fst, frames_of("abba")) is None  # collapses to "a b a": no word sequence
    compact = read_tlg(toy_graphs["compact"])
    assert best_path(compact, frames_of("abba")) is not None


@pytest.mark.parametrize("topology", ["normal", "compact", "minimal"])
def test_topology_output_strings_match_ctc_rules(topology):
    units = resolve_units(["a", "b"], "last")
    T = make_ctc_topo(units, topology)
    blank = 2
    rule = {"normal": ctc_normal, "compact": ctc_compact, "minimal": ctc_minimal}[topology]
    for n in range(1, 5):
        for frames in itertools.product(range(3), repeat=n):
            assert output_strings(T, list(frames)) == rule(list(frames), blank), frames


def test_compact_and_normal_accept_same_unit_sequences_with_blanks(toy_graphs):
    """With a blank between repeats (the CTC rule), both topologies read the same words."""
    fsts = {t: read_tlg(toy_graphs[t]) for t in ("normal", "compact")}
    for spec in ["ab_ba", "aabb_baa", "c_c", "c", "cab", "cab_c", "_ab_", "ac", "bb", "ab"]:
        res = {t: best_path(f, frames_of(spec)) for t, f in fsts.items()}
        if res["normal"] is None:
            # compact may still read it (repeats without blank); here only when no word fits both
            continue
        assert res["compact"] is not None, spec
        assert res["compact"][1] == res["normal"][1], spec
        assert res["compact"][0] == pytest.approx(res["normal"][0], abs=TOL), spec


def test_kaldi_faster_decoder_reads_tlg(toy_graphs):
    """kaldi-decoder's FasterDecoder (ilabel i = column i-1) decodes peaky log-probs to the words."""
    import kaldi_decoder

    for topo in ("normal", "compact"):
        fst = read_tlg(toy_graphs[topo])
        words = read_symbols(toy_graphs[topo] / "words.txt")
        cols = frames_of("_cc_aa_bb__cc_")
        lp = np.full((len(cols), len(UNITS) + 1), math.log(0.02), dtype=np.float32)
        lp[np.arange(len(cols)), cols] = math.log(0.94)
        dec = kaldi_decoder.FasterDecoder(fst, kaldi_decoder.FasterDecoderOptions(beam=20.0))
        dec.decode(kaldi_decoder.DecodableCtc(lp))
        ok, lattice = dec.get_best_path()
        assert ok
        ok, _, olabels, _ = kaldifst.get_linear_symbol_sequence(lattice)
        assert [words[o] for o in olabels] == ["cab", "c"]


def test_describe_graph(toy_graphs):
    info = describe_graph(toy_graphs["compact"])
    g = DeviceGraph.load(toy_graphs["compact"] / "graph.pt")
    assert info["states"] == f"{g.num_states:,}" and info["arcs"] == f"{g.num_arcs:,}"
    assert info["words (vocabulary)"] == str(len(LEXICON))
    assert info["blank"] == f"column {BLANK} (ilabel {BLANK + 1})"
    assert g.meta["blank_ilabel"] == BLANK + 1 and g.max_ilabel == BLANK + 1


def test_remove_epsilon_keeps_paths_and_costs(toy_paths, toy_graphs, tmp_path):
    from helpers.graph_toy import toy_config

    from asrdecode.graph import build_graph

    meta = build_graph(toy_config(toy_paths, topology="minimal", remove_epsilon=True), tmp_path / "g")
    plain = read_tlg(toy_graphs["minimal"])
    no_eps = read_tlg(tmp_path / "g")
    g = DeviceGraph.load(tmp_path / "g" / "graph.pt")
    # no eps:eps arcs left (arcs whose input is a removed disambiguation symbol keep their word)
    assert not bool(((g.ilabel == 0) & (g.olabel == 0)).any())
    assert (
        meta["sizes"]["TLG"]["epsilon_arcs"]
        < DeviceGraph.load(toy_graphs["minimal"] / "graph.pt").num_epsilon_arcs
    )
    for spec in ["ab_ba", "cabc", "c_c", "cc", "abab", "b"]:
        a, b = best_path(plain, frames_of(spec)), best_path(no_eps, frames_of(spec))
        assert (a is None) == (b is None), spec
        if a:
            assert a[1] == b[1] and a[0] == pytest.approx(b[0], abs=TOL), spec
