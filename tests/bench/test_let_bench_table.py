"""`asrdecode bench let`: the table (each row's cost per arc), the lattice oracle WER against brute
force over a lattice's paths, and a small case's rows with lattices (standard and capped
`wfst-otf`, `let` per capacity; lattice sizes, oracle WER, the lattices' 1-best the decoders')."""

from __future__ import annotations

import argparse
import itertools

import numpy as np
import pytest
from helpers.let_ref import LARGE_TRIGRAM, SMALL_UNIGRAM, UNITS, spelled_log_probs, toy_config, write_toy
from helpers.wfst_ref import single_thread  # noqa: F401

from asrdecode.bench.let_decode import arcs_per_second, oracle_errors, print_case, run_case
from asrdecode.decoders.wfst.lattice import CompactLattice
from asrdecode.graph import build_graph


def test_table_prints_each_rows_arcs_per_second(capsys):
    row = {
        "decoder": "wfst-otf", "beam": 9.5, "frames_per_second": 2000.0, "ratio_to_otf": 1.0,
        "ratio_to_wfst": None, "ratio_at_equal_wer": None, "equal_wer_peer": "wfst", "wer": 0.4,
        "same_1best_as_otf": 2, "arcs_per_frame": 12500.0, "tokens_per_frame": 2800.0,
        "word_members_per_frame": None, "union_members_per_frame": None, "lm_lookups_per_frame": 150.0,
    }  # fmt: skip
    let = {
        **row, "decoder": "let", "frames_per_second": 1500.0, "ratio_to_otf": 0.75, "arcs_per_frame": 6000.0,
        "word_members_per_frame": 1000.0, "union_members_per_frame": 4000.0,
    }  # fmt: skip
    assert arcs_per_second(row) == 25.0 and arcs_per_second(let) == 9.0
    case = {"case": "toy", "utterances": 2, "frames": 100, "options": {"beam": 9.5}, "rows": [row, let]}
    print_case(case)
    out = capsys.readouterr().out
    assert "M arcs/s" in out and "25.0" in out and "9.0" in out and "5000" in out


def edit_distance(a: list[str], b: list[str]) -> int:
    """Levenshtein distance of two word sequences (the textbook table)."""
    d = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return d[-1]


def random_lattice(rng: np.random.Generator) -> CompactLattice:
    """A random acyclic word lattice (arcs from lower to higher states, some epsilon arcs)."""
    n = int(rng.integers(1, 7))
    src, dst = [], []
    for s, t in itertools.combinations(range(n), 2):
        for _ in range(int(rng.integers(0, 3))):
            src.append(s)
            dst.append(t)
    m = len(src)
    finals = [int(s) for s in rng.choice(n, size=min(n, int(rng.integers(0, 3))), replace=False)]
    return CompactLattice(
        num_states=n, src=np.array(src, np.int64), dst=np.array(dst, np.int64),
        word=rng.integers(0, 5, size=m), graph=np.zeros(m), acoustic=np.zeros(m), units=[()] * m,
        final={s: (0.0, 0.0, ()) for s in finals}, times=np.zeros(n, np.int64), num_frames=1,
        words={1: "a", 2: "b", 3: "c", 4: "d"},
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(40))
def test_oracle_errors_are_the_fewest_edits_of_any_path(seed):
    rng = np.random.default_rng(seed)
    lat = random_lattice(rng)
    ref = [str(x) for x in rng.choice(["a", "b", "c", "d", "e"], size=int(rng.integers(0, 5)))]
    by_src: dict[int, list[int]] = {}
    for i in range(lat.num_arcs):
        by_src.setdefault(int(lat.src[i]), []).append(i)
    edits = []  # of every complete path

    def walk(s: int, words: list[str]) -> None:
        if s in lat.final:
            edits.append(edit_distance(ref, words))
        for i in by_src.get(s, ()):
            w = int(lat.word[i])
            walk(int(lat.dst[i]), [*words, lat.words[w]] if w else words)

    walk(0, [])
    best = min(edits, default=len(ref))  # no complete path: every reference word an error
    assert oracle_errors(lat, ref) == best


@pytest.fixture(scope="module")
def toy_case(tmp_path_factory):
    """The toy TLG of graph_toy's units and words built with a unigram, the trigram on the fly, and
    spelled noisy log-probs of a few word sequences."""
    folder = tmp_path_factory.mktemp("let_bench")
    paths = write_toy(folder)
    (folder / "small.arpa").write_text(SMALL_UNIGRAM)
    (folder / "large.arpa").write_text(LARGE_TRIGRAM)
    build_graph(toy_config({**paths, "arpa": folder / "small.arpa"}), folder / "small")
    rng = np.random.default_rng(7)
    refs = [["ab", "ba"], ["c", "c", "ab"], ["cab", "ba", "c"], ["ab", "c", "cab", "ba"]]
    rows = [spelled_log_probs(rng, [w for w in ref], UNITS, noise=2.0) for ref in refs]
    lengths = np.array([len(x) for x in rows])
    lp = np.zeros((len(rows), lengths.max(), len(UNITS) + 1), np.float32)
    for i, x in enumerate(rows):
        lp[i, : len(x)] = x
    return folder / "small", folder / "large.arpa", lp, lengths, refs


@pytest.mark.usefixtures("single_thread")
def test_lattice_rows_of_a_small_case(toy_case, capsys):
    small, large, lp, lengths, refs = toy_case
    args = argparse.Namespace(
        beams=[4.0, 1e9], capacities=[1, 64], bucket_width=0.0, lattice=True, lattice_beam=8.0, history_cap=1
    )
    case = run_case("toy", None, small, large, lp, lengths, refs, 0.04, 1e9, args, {"max_active": 10**6})
    rows = case["rows"]
    assert [(r["kind"], r["beam"]) for r in rows] == [
        (kind, b) for b in (4.0, 1e9) for kind in ("standard", "capped", "let", "let")
    ]
    assert rows[1]["decoder"] == "wfst-otf, history cap 1" and rows[0]["decoder"].startswith("wfst-otf")
    for r in rows:
        assert {"decoder", "wer", "frames_per_second", "oracle_wer", "lattice_arcs_per_frame"} <= set(r)
        assert r["lattice_1best_same"] == len(refs)  # each lattice's best path is the decoder's 1-best
        assert r["oracle_wer"] <= r["wer"] and r["lattice_arcs_per_frame"] > 0
    # wide beams, a capacity above the trigram's states: `let` is the standard search
    std, exact = rows[4], rows[7]
    assert exact["group_capacity"] == 64 and exact["same_1best_as_otf"] == len(refs)
    assert exact["wer"] == std["wer"] and exact["oracle_wer"] == std["oracle_wer"]
    assert exact["lattice_arcs_per_frame"] == std["lattice_arcs_per_frame"]
    assert exact["ratio_to_otf"] > 0 and rows[2]["ratio_to_capped"] is not None
    assert set(case["summary"]) == {"1", "64"}
    assert case["summary"]["64"]["at_equal_wer"][0] > 0
    print_case(case)
    out = capsys.readouterr().out
    assert "oracle WER" in out and "the standard wfst-otf at equal WER" in out and "the capped" in out
