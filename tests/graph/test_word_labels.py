"""Where built TLGs put word labels, checked against references that do not use the build:

* `first_output_labels` (when label pushing would act) vs enumeration of every path of small
  random acyclic FSTs;
* the earliest unit at which a spelling is unambiguous, computed from the lexicon alone, vs the
  arc that carries each word's label on the graph's best path for that word;
* `word_labels: first_unit` vs the default graph: same best words and costs on sampled inputs.
"""

from __future__ import annotations

import math
from collections import Counter

import kaldifst
import numpy as np
import pytest

from asrdecode.graph import DeviceGraph, GraphBuildConfig, build_graph
from asrdecode.graph.labels import MIXED, NO_PATH, emitting_fanout, first_output_labels, pushable_label_states
from asrdecode.graph.symbols import read_symbols

LN10 = math.log(10)
LETTERS = "abcdefg"  # random words use a-e; f and g start one fixed word each


# ---------------------------------------------------------------- the fixpoint vs enumeration
def enumerate_first_labels(num_states, arcs, finals) -> list[int]:
    """First output label of every successful path from each state, by listing the paths (acyclic)."""
    out_arcs: dict[int, list] = {}
    for s, _il, ol, ns in arcs:
        out_arcs.setdefault(s, []).append((ol, ns))

    def firsts(s: int) -> set:  # set of first labels; 0 = a path with empty output
        result = {0} if s in finals else set()
        for ol, ns in out_arcs.get(s, []):
            if ol:
                result.add(ol)
            else:
                result |= firsts(ns)
        return result

    value = []
    for s in range(num_states):
        f = firsts(s)
        value.append(NO_PATH if not f else (f.pop() if len(f) == 1 and 0 not in f else MIXED))
    return value


@pytest.mark.parametrize("seed", range(20))
def test_first_output_labels_equal_path_enumeration(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 10))
    arcs = []
    for s in range(n - 1):
        for _ in range(int(rng.integers(0, 4))):
            ns = int(rng.integers(s + 1, n))  # forward arcs only: acyclic
            ol = int(rng.choice([0, 0, 1, 2, 3]))
            arcs.append((s, int(rng.integers(0, 3)), ol, ns))
    finals = {int(f) for f in rng.choice(n, size=int(rng.integers(1, 3)), replace=False)}
    final = np.array([0.0 if s in finals else math.inf for s in range(n)], dtype=np.float32)
    a = np.array(arcs, dtype=np.int64).reshape(-1, 4)
    g = DeviceGraph.from_arrays(n, 0, final, a[:, 0], a[:, 1], a[:, 2], np.zeros(len(a), np.float32), a[:, 3])
    # the CSR order differs from `arcs`: compare per state
    assert first_output_labels(g).tolist() == enumerate_first_labels(n, arcs, finals)


def test_pushable_state_found_and_cycles_handled():
    # 0 -a:eps-> 1; from 1 both paths emit word 7 first (pushing would move it onto 0 -> 1);
    # state 2 loops with empty output before emitting 7 as well
    fst = kaldifst.compile("0 1 1 0 0\n1 2 2 0 0\n2 2 3 0 0.5\n2 3 1 7 0\n1 3 3 7 0\n3 0\n")
    g = DeviceGraph.from_kaldifst(fst)
    value = first_output_labels(g)
    assert value.tolist() == [7, 7, 7, MIXED]
    assert pushable_label_states(g) == 2  # states 1 and 2 (the start does not count)


# ---------------------------------------------------------------- built graphs
def synthetic_lexicon(num_words: int, seed: int) -> list[str]:
    """Random letter strings over a-e: many share prefixes, some are prefixes of others; plus two
    words whose first letter no other word starts with."""
    rng = np.random.default_rng(seed)
    words: set[str] = {"fdc", "gba"}
    while len(words) < num_words:
        words.add("".join(rng.choice(list("abcde"), size=int(rng.integers(1, 6)))))
    return sorted(words)


def write_arpa(path, words: list[str], bigrams: list[tuple[str, str]] = ()) -> dict:
    """Unigram (or bigram) ARPA; returns its log10 tables. Explicit bigrams (>= -0.5) always beat
    their backoff route (<= -0.8), so the tropical G's best path scores the ARPA probability."""
    rng = np.random.default_rng(1)
    backoff = -0.3 if bigrams else 0.0
    uni = {w: -float(np.round(rng.uniform(0.5, 3), 4)) for w in words} | {"</s>": -1.0}
    bi = {pair: -float(np.round(rng.uniform(0.05, 0.5), 4)) for pair in bigrams}
    bo = f" {backoff}" if bigrams else ""
    lines = ["\\data\\", f"ngram 1={len(words) + 2}"] + ([f"ngram 2={len(bi)}"] if bi else [])
    lines += ["", "\\1-grams:", "-1.0 </s>", f"-99 <s>{bo}", *[f"{uni[w]} {w}{bo}" for w in words], ""]
    if bi:
        lines += ["\\2-grams:", *[f"{p} {a} {b}" for (a, b), p in bi.items()], ""]
    path.write_text("\n".join([*lines, "\\end\\", ""]))
    return {"uni": uni, "bi": bi, "backoff": backoff}


def brute_force_best(letters: str, lexicon: list[str], lm: dict) -> tuple[float, list[str]] | None:
    """min over all segmentations of `letters` into lexicon words of -ln P(words </s> | <s>)."""
    lex = set(lexicon)

    def cost(prev: str, w: str) -> float:
        if (prev, w) in lm["bi"]:
            return -lm["bi"][(prev, w)] * LN10
        return -(lm["backoff"] + lm["uni"][w]) * LN10

    best: dict[tuple[int, str], tuple[float, list[str]]] = {(0, "<s>"): (0.0, [])}
    for i in range(len(letters) + 1):
        for (pos, prev), (c, ws) in sorted(best.items(), key=lambda kv: kv[0][0]):
            if pos != i:
                continue
            for j in range(i + 1, min(len(letters), i + 5) + 1):
                w = letters[i:j]
                if w in lex:
                    cand = (c + cost(prev, w), [*ws, w])
                    if (j, w) not in best or cand[0] < best[(j, w)][0]:
                        best[(j, w)] = cand
    ends = [
        (c + cost(prev, "</s>"), ws) for (pos, prev), (c, ws) in best.items() if pos == len(letters) and ws
    ]
    return min(ends) if ends else None


def earliest_possible_position(word: str, lexicon: list[str]) -> float:
    """From the lexicon alone: index of the first letter after which no other word's spelling
    starts the same way; a spelling that is a prefix of another: after its last letter (+0.5)."""
    if any(o != word and o.startswith(word) for o in lexicon):
        return len(word) - 0.5
    for k in range(len(word)):
        if not any(o != word and o.startswith(word[: k + 1]) for o in lexicon):
            return float(k)
    raise AssertionError(word)


def label_position(tlg, words_txt: dict[int, str], word: str, column: dict[str, int], blank: int) -> float:
    """Best path of the utterance `word` (blank after each letter) that outputs just `word` (not a
    split into shorter words): index of the letter whose arc
    carries the label (k), or k + 0.5 if it sits on an epsilon / blank arc after letter k."""
    frames = []
    for ch in word:
        frames += [column[ch] + 1, blank]
    word_id = next(i for i, w in words_txt.items() if w == word)
    reads = kaldifst.compose(kaldifst.make_linear_acceptor(frames), tlg)
    kaldifst.arcsort(reads, sort_type="olabel")
    path = kaldifst.shortest_path(kaldifst.compose(reads, kaldifst.make_linear_acceptor([word_id])))
    g = DeviceGraph.from_kaldifst(path)
    a, off, s, read, found = g.arc_arrays(), g.offsets.numpy(), g.start, 0, []
    while off[s + 1] > off[s]:
        i = off[s]
        il, ol = int(a["ilabel"][i]), int(a["olabel"][i])
        emits_letter = il not in (0, blank)
        read += emits_letter
        if ol:
            found.append((words_txt[ol], read - 1 if emits_letter else read - 0.5))
        s = int(a["nextstate"][i])
    assert [w for w, _ in found] == [word]
    return found[0][1]


@pytest.fixture(scope="module")
def synthetic_graphs(tmp_path_factory):
    d = tmp_path_factory.mktemp("labels")
    lexicon = synthetic_lexicon(150, seed=0)
    lms = {"uni": write_arpa(d / "uni.arpa", lexicon)}
    rng = np.random.default_rng(2)
    bigrams = sorted({(lexicon[i], lexicon[j]) for i, j in rng.integers(0, len(lexicon), size=(300, 2))})
    lms["bi"] = write_arpa(d / "bi.arpa", lexicon, bigrams)
    out = {"lms": lms}
    for lm in ("uni", "bi"):
        for labels in ("earliest", "first_unit"):
            cfg = GraphBuildConfig(
                arpa=str(d / f"{lm}.arpa"),
                unit_list=list(LETTERS),
                lexicon_type="chars",
                topology="compact",
                word_labels=labels,
                format="pt",
            )
            build_graph(cfg, d / f"{lm}-{labels}")
            out[(lm, labels)] = d / f"{lm}-{labels}"
    return lexicon, out


def _load(folder):
    tlg = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(folder / "TLG.fst")))
    return tlg, read_symbols(folder / "words.txt"), DeviceGraph.load(folder / "graph.pt")


def test_earliest_labels_sit_where_determinism_allows(synthetic_graphs):
    lexicon, graphs = synthetic_graphs
    column, blank = {ch: i for i, ch in enumerate(LETTERS)}, len(LETTERS) + 1
    bound = {w: earliest_possible_position(w, lexicon) for w in lexicon}
    assert Counter(b == 0 for b in bound.values())[True] == 2  # fdc and gba: unique by first letter
    assert any(b % 1 for b in bound.values())  # and some are prefixes of others
    # unigram LM: every word competes with every other one after any word -> exactly the bound
    tlg, words, g = _load(graphs[("uni", "earliest")])
    for w in lexicon:
        assert label_position(tlg, words, w, column, blank) == bound[w], w
    assert pushable_label_states(g) == 0  # label pushing (kPushLabels) would not move any label
    assert emitting_fanout(g) == {"shared_share": 0.0, "max_fanout": 1}  # input-deterministic
    # with bigrams after <s>, fewer words compete on explicit n-gram arcs: never later than the bound
    tlg, words, g = _load(graphs[("bi", "earliest")])
    positions = {w: label_position(tlg, words, w, column, blank) for w in lexicon}
    assert all(positions[w] <= bound[w] for w in lexicon)
    assert pushable_label_states(g) == 0


def test_first_unit_labels_equivalent_graph(synthetic_graphs):
    """Both graphs give the brute-force best word sequence and its ARPA cost on sampled inputs."""
    lexicon, graphs = synthetic_graphs
    column, blank = {ch: i for i, ch in enumerate(LETTERS)}, len(LETTERS) + 1
    for lm in ("uni", "bi"):
        tlg, words, g = _load(graphs[(lm, "first_unit")])
        ref_tlg, ref_words, ref = _load(graphs[(lm, "earliest")])
        for w in lexicon:
            assert label_position(tlg, words, w, column, blank) == 0, w
        fan = emitting_fanout(g)
        assert fan["max_fanout"] > 1 and fan["shared_share"] > 0  # the price: not input-deterministic
        # same best words and costs on word sequences and on random letter strings
        rng = np.random.default_rng(5)
        specs = ["".join(rng.choice(lexicon, size=int(rng.integers(1, 5)))) for _ in range(40)]
        specs += ["".join(rng.choice(list("abcde"), size=int(rng.integers(1, 9)))) for _ in range(40)]
        decodable = 0
        for spec in specs:
            expected = brute_force_best(spec, lexicon, graphs["lms"][lm])
            frames = []
            for ch in spec:
                frames += [column[ch] + 1, blank]
            for fst, table, name in ((tlg, words, "first_unit"), (ref_tlg, ref_words, "earliest")):
                c = kaldifst.compose(kaldifst.make_linear_acceptor(frames), fst)
                ok, _, out, weight = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(c))
                assert ok == (expected is not None), (spec, name)
                if not ok:
                    continue
                assert [table[o] for o in out] == expected[1], (spec, name)
                # earliest: minimize_encoded quantizes weights to a 1/1024 grid (a few arcs per word)
                tol = 1e-3 if name == "first_unit" else 1e-3 + 3 / 2048 * (len(expected[1]) + 1)
                assert weight.value == pytest.approx(expected[0], abs=tol), (spec, name)
            decodable += expected is not None
        assert decodable >= 40
