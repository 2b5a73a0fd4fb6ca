"""`let` (paper 002) against independent references: exhaustive Viterbi over the base graph
composed with D = G_large - G_small (plain-Python ARPA scorer, let_ref.py), the `wfst` decoder on a
graph built with the large LM, and `wfst` on the base graph when both LMs are the same."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.let_ref import (
    LARGE_TRIGRAM,
    SMALL_BIGRAM,
    SMALL_UNIGRAM,
    TOY_ARPA,
    UNITS,
    ArpaScorer,
    composed_viterbi,
    spelled_log_probs,
    toy_config,
    write_toy,
)
from helpers.wfst_ref import random_wfst, single_thread  # noqa: F401

from asrdecode.decoders import decoder_config_from_dict
from asrdecode.decoders.let import LetConfig, LetDecoder
from asrdecode.decoders.let import search as let_search
from asrdecode.decoders.let.search import bucket_cutoff
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst_otf import DifferenceLM, WfstOtfConfig, WfstOtfDecoder
from asrdecode.errors import ConfigError, GraphError
from asrdecode.graph import build_graph
from asrdecode.lm.ngram_tensor import BatchedNgramLM
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0, "threads": 1}
ARPAS = {
    "small_unigram": SMALL_UNIGRAM,
    "small_bigram": SMALL_BIGRAM,
    "toy_bigram": TOY_ARPA,
    "trigram": LARGE_TRIGRAM,
}
WORDS = list(("ab", "ba", "c", "cab"))


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict:
    """Toy TLGs (tests/graph/graph_toy.py units and lexicon) built with each ARPA of ARPAS."""
    folder = tmp_path_factory.mktemp("let_toy")
    paths = write_toy(folder)
    out = {"paths": paths, "arpa": {}, "graph": {}}
    for name, text in ARPAS.items():
        arpa = folder / f"{name}.arpa"
        arpa.write_text(text)
        out["arpa"][name] = arpa
        graph = folder / f"tlg_{name}"
        build_graph(toy_config({**paths, "arpa": arpa}), graph)
        out["graph"][name] = graph
    return out


def batch(lps: list[np.ndarray], blank: int = len(UNITS)) -> ModelOutput:
    T = max(len(x) for x in lps)
    x = np.zeros((len(lps), T, lps[0].shape[1]), np.float32)
    for b, lp in enumerate(lps):
        x[b, : len(lp)] = lp
    return ModelOutput(torch.from_numpy(x), torch.tensor([len(lp) for lp in lps]), 0.04, blank, [])


def let_decoder(toy: dict, small: str, large: str, **kw) -> LetDecoder:
    cfg = {**WIDE, "group_capacity": 64, **kw}
    return LetDecoder(
        LetConfig(
            graph=str(toy["graph"][small]),
            lm=str(toy["arpa"][large]),
            small_lm=str(toy["arpa"][small]),
            **cfg,
        )
    )


def graph_arcs(dec: LetDecoder) -> tuple[list, int, list[float]]:
    b = dec.paths
    arcs = list(
        zip(
            b.src.tolist(),
            b.ilabel.tolist(),
            b.olabel.tolist(),
            b.weight.tolist(),
            b.next.tolist(),
            strict=True,
        )
    )
    return arcs, b.graph.start, b.final.tolist()


def cases(seed: int, count: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        spelled_log_probs(rng, list(rng.choice(WORDS, size=int(rng.integers(1, 4)))), UNITS)
        for _ in range(count)
    ]


@pytest.mark.parametrize(
    ("small", "large", "lm_scale"),
    [
        ("small_unigram", "toy_bigram", 1.0),
        ("small_unigram", "trigram", 1.0),
        ("small_bigram", "trigram", 0.6),
        ("small_bigram", "toy_bigram", 1.7),
        ("trigram", "small_unigram", 1.0),
    ],
)
def test_wide_beam_equals_exhaustive_viterbi_over_composition(toy, small, large, lm_scale):
    """(a) wide beam, enough capacity: 1-best and cost = exhaustive Viterbi over B o D."""
    dec = let_decoder(toy, small, large, lm_scale=lm_scale)
    arcs, start, final = graph_arcs(dec)
    s_lm, l_lm = ArpaScorer(ARPAS[small]), ArpaScorer(ARPAS[large])
    lps = cases(hash((small, large)) % 1000, 6)
    results = dec.decode(batch(lps))
    for lp, res in zip(lps, results, strict=True):
        ref = composed_viterbi(arcs, start, final, dec.paths.words, s_lm, l_lm, lm_scale, lp)
        assert ref is not None
        assert res.text == " ".join(dec.paths.words[w] for w in ref[1])
        assert -res.score == pytest.approx(ref[0], abs=1e-3)
        # the score splits into the acoustic part and graph + D costs
        assert res.acoustic_score + res.lm_score == pytest.approx(res.score, abs=1e-3)
    assert dec.last_info["not_final"] == []
    assert dec.last_info["stats"]["word_members"] > 0
    # unions that are one arrival's block are shared, not copied: exact all the same
    assert dec.last_info["stats"]["unions_shared"] > 0


@pytest.mark.parametrize("large", ["toy_bigram", "trigram"])
def test_lm_scale_one_equals_wfst_on_the_large_lm_graph(toy, large):
    """(a) with lm_scale 1 the composition scores as the large LM: same 1-best and cost as plain
    `wfst` decoding of the TLG built with the large LM (explicit n-grams cheaper than backoff)."""
    lps = cases(7, 8)
    let = let_decoder(toy, "small_unigram", large).decode(batch(lps))
    ref = WfstDecoder(WfstConfig(graph=str(toy["graph"][large]), backend="compiled", **WIDE)).decode(
        batch(lps)
    )
    same = 0
    for a, b in zip(let, ref, strict=True):
        # the large-LM graph's weights are float32 sums pushed through determinization (~1e-3 off
        # the ARPA values): a different 1-best is allowed only for a near-tie
        assert a.score == pytest.approx(b.score, abs=5e-3)
        same += a.text == b.text
    assert same >= len(lps) - 1
    # the large LM changes some 1-bests relative to the small-LM graph alone
    small_only = WfstDecoder(WfstConfig(graph=str(toy["graph"]["small_unigram"]), backend="compiled", **WIDE))
    assert [r.text for r in small_only.decode(batch(lps))] != [r.text for r in let]


@pytest.mark.parametrize(
    ("beam", "max_active", "min_active"), [(1e9, 10**9, 0), (6.0, 10**9, 0), (8.0, 4, 1), (3.0, 2, 0)]
)
def test_same_lm_equals_wfst_on_the_base_graph(toy, beam, max_active, min_active):
    """(b) small LM == large LM: D adds nothing, groups have the tokens' costs, so with the exact
    cut-off the 1-best and its cost are those of plain `wfst` on B, beams and max_active included."""
    kw = {"beam": beam, "max_active": max_active, "min_active": min_active, "threads": 1}
    lps = cases(11, 8)
    for name in ("small_bigram", "trigram"):
        let = let_decoder(toy, name, name, **kw, group_capacity=4)
        ref = WfstDecoder(WfstConfig(graph=str(toy["graph"][name]), backend="compiled", **kw))
        for a, b in zip(let.decode(batch(lps)), ref.decode(batch(lps)), strict=True):
            assert a.text == b.text
            assert a.score == pytest.approx(b.score, abs=1e-5)
            assert a.tokens == b.tokens and a.token_frames == b.token_frames


def recomputed_cost(
    dec: LetDecoder, path, lp: np.ndarray, small: ArpaScorer, large: ArpaScorer, lm_scale: float
):
    """Cost of a returned path from scratch; asserts it is a path of the graph over all frames."""
    b = dec.paths
    state, frame, cost, hist, words = b.graph.start, -1, 0.0, ("<s>",), []
    for arc, f in zip(path.arcs.tolist(), path.frames.tolist(), strict=True):
        assert b.src[arc] == state
        if b.ilabel[arc]:
            frame += 1
            assert f == frame
            cost -= float(lp[frame, b.ilabel[arc] - 1])
        cost += float(b.weight[arc])
        if b.olabel[arc]:
            w = b.words[int(b.olabel[arc])]
            cost += lm_scale * (small.logp(hist, w) - large.logp(hist, w))
            hist, words = (*hist, w), [*words, w]
        state = int(b.next[arc])
    assert frame == len(lp) - 1
    if path.reached_final:  # else the best partial path, final costs left out (Kaldi's fallback)
        assert math.isfinite(b.final[state])
        cost += float(b.final[state]) + lm_scale * (small.logp(hist, "</s>") - large.logp(hist, "</s>"))
    return cost, words


@pytest.mark.parametrize(("capacity", "beam", "bucket_width"), [(1, 3.0, 0.0), (1, 1.5, 0.25), (2, 2.0, 0.5)])
def test_small_capacity_and_tight_beams_give_valid_paths(toy, capacity, beam, bucket_width):
    """(c) capacity 1-2 and tight beams: the 1-best is a path of the graph over all frames whose
    cost, recomputed from the graph, the log-probs and the ARPA scorer, is the reported cost."""
    lm_scale = 0.8
    dec = let_decoder(
        toy, "small_bigram", "trigram", group_capacity=capacity, beam=beam, max_active=3, min_active=1,
        bucket_width=bucket_width, lm_scale=lm_scale,
    )  # fmt: skip
    lps = cases(23, 10)
    results = dec.decode(batch(lps))
    s_lm, l_lm = ArpaScorer(SMALL_BIGRAM), ArpaScorer(LARGE_TRIGRAM)
    paths = dec.last_info["paths"]
    for lp, res, path in zip(lps, results, paths, strict=True):
        cost, words = recomputed_cost(dec, path, lp, s_lm, l_lm, lm_scale)
        assert -res.score == pytest.approx(cost, abs=1e-3)
        assert res.text == " ".join(words)
    assert dec.last_info["not_final"] == [b for b, p in enumerate(paths) if not p.reached_final]
    assert sum(p.reached_final for p in paths) >= len(lps) // 2


def random_arpa(rng: np.random.Generator, words: list[str], order: int) -> str:
    """A random backoff ARPA (unigram or bigram) over `words`."""
    uni = [*words, "</s>"]
    lines = ["\\data\\", f"ngram 1={len(uni) + 1}"]
    bi = [(a, b) for a in ["<s>", *words] for b in uni if rng.random() < 0.5] if order > 1 else []
    if bi:
        lines.append(f"ngram 2={len(bi)}")
    lines += ["", "\\1-grams:", "-99 <s>" + (" -0.3" if bi else "")]
    for w in uni:
        lines.append(
            f"{-rng.uniform(0.3, 1.5):.3f} {w}"
            + (f" {-rng.uniform(0, 0.5):.3f}" if bi and w != "</s>" else "")
        )
    if bi:
        lines += ["", "\\2-grams:"] + [f"{-rng.uniform(0.05, 1.0):.3f} {a} {b}" for a, b in bi]
    return "\n".join([*lines, "", "\\end\\", ""])


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_and_lms_equal_exhaustive_viterbi(tmp_path, seed):
    """(a) on random WFSTs (epsilon arcs with and without words, several finals) and random LMs."""
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), 4, 4, eps_forward=True)
    names = {i: f"w{i}" for i in range(1, 5)}
    words = {0: "<eps>", **names}
    small_text, large_text = (
        random_arpa(rng, list(names.values()), 1),
        random_arpa(rng, list(names.values()), 2),
    )
    (tmp_path / "s.arpa").write_text(small_text)
    (tmp_path / "l.arpa").write_text(large_text)
    from helpers.wfst_graphs import device_graph

    vocab = ["<eps>", *names.values()]
    lms = [BatchedNgramLM.from_arpa(tmp_path / f, vocab=vocab) for f in ("s.arpa", "l.arpa")]
    lm_scale = float(rng.uniform(0.5, 1.5))
    dec = LetDecoder(
        LetConfig(**WIDE, group_capacity=32), graph=device_graph(fst), words=words,
        lm=DifferenceLM(lms[1], lms[0], lm_scale),
    )  # fmt: skip
    lps = []
    for _ in range(3):
        x = rng.normal(size=(int(rng.integers(1, 9)), 4)) * 2
        lps.append((x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32))
    results = dec.decode(batch(lps, blank=-1))
    for lp, res in zip(lps, results, strict=True):
        ref = composed_viterbi(
            fst["arcs"], 0, fst["final"], words, ArpaScorer(small_text), ArpaScorer(large_text), lm_scale, lp
        )
        if ref is None:
            continue
        assert -res.score == pytest.approx(ref[0], abs=1e-3)
        assert [w.word for w in res.words] == [names[o] for o in ref[1]]


@pytest.mark.parametrize("seed", range(12))
def test_history_beam_equals_its_plain_search(tmp_path, seed):
    """`history_beam` in groups (members more than it above the block's best dropped when a
    block is made): the 1-best and cost of `wfst-otf`'s rule searched by plain dictionaries
    (`otf_ref.history_pruned_search`; on half of these seeds the pruning changes the 1-best),
    applied after the last frame too (`let` prunes a frame's groups when it makes them, before
    the final costs; `wfst-otf` at the next frame's start), on graphs whose words sit on
    emitting arcs (on an epsilon word arc, `let` prunes within the frame)."""
    from helpers.otf_ref import WORDS as OTF_WORDS
    from helpers.otf_ref import ArpaScorer as TextbookScorer
    from helpers.otf_ref import history_pruned_search
    from helpers.otf_ref import random_arpa as random_trigram
    from helpers.wfst_graphs import device_graph, log_probs

    rng = np.random.default_rng(300 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 6)), 4, 6, eps_forward=True)
    fst["arcs"] = [(s, il, ol if il else 0, w, ns) for s, il, ol, w, ns in fst["arcs"]]
    names = list(OTF_WORDS.values())
    # on odd seeds histories that change no cost, which the difference LM merges (group members)
    large = random_trigram(tmp_path / "large.arpa", rng, names, 3, bare=0.6 * (seed % 2))
    small = random_trigram(tmp_path / "small.arpa", rng, names, int(rng.integers(1, 3)))
    lp = log_probs(rng, int(rng.integers(6, 12)))
    for history_beam in (0.1, 0.5, 1e6):
        cfg = LetConfig(
            **WIDE, group_capacity=64, lm=str(large), small_lm=str(small), history_beam=history_beam
        )
        dec = LetDecoder(cfg, graph=device_graph(fst), words=OTF_WORDS)
        (res,) = dec.decode(batch([lp], blank=-1))
        ref = history_pruned_search(
            fst, lp, TextbookScorer(large), TextbookScorer(small), 1.0, history_beam, after_last_frame=True
        )
        if ref is None:
            assert res.score == -math.inf or dec.last_info["not_final"] == [0]
            continue
        assert -res.score == pytest.approx(ref[0], abs=1e-3)
        assert [w.word for w in res.words] == ref[1]
    with pytest.raises(ConfigError, match="history_beam"):
        LetDecoder(LetConfig(**WIDE, lm=str(large), small_lm=str(small), history_beam=-1.0),
                   graph=device_graph(fst), words=OTF_WORDS)  # fmt: skip


def test_threads_and_garbage_collection_change_nothing(toy):
    rng = np.random.default_rng(5)
    long = [spelled_log_probs(rng, list(rng.choice(WORDS, size=30)), UNITS) for _ in range(3)]
    lps = long + cases(3, 5)
    one = let_decoder(toy, "small_unigram", "trigram", beam=10.0, group_capacity=4)
    two = let_decoder(toy, "small_unigram", "trigram", beam=10.0, group_capacity=4, threads=2)
    a, b = one.decode(batch(lps)), two.decode(batch(lps))
    assert [(r.text, r.score) for r in a] == [(r.text, r.score) for r in b]
    search, c = one.search, one.config
    ac = -lps[0]
    plain = search.decode_one(ac, c.search_settings(search.num_states))
    collected = search.decode_one(ac, c.search_settings(search.num_states, gc_records=64))
    records = let_search.S_RECORDS  # records and member records alive at the end
    assert plain.stats[records] > 4 * 64  # without collection: the small limit collected
    assert collected.stats[records] < plain.stats[records]
    assert np.array_equal(plain.arcs, collected.arcs) and plain.total == collected.total


def reference_bucket_cut(costs: np.ndarray, beam, max_active, min_active, delta, width):
    """The bucket-queue cut-off as specified: Kaldi's GetCutoff rule with the k-th smallest costs
    replaced by bin edges (bins of `width` above the best, float32 as the search)."""
    f32 = np.float32
    best = costs.min()
    srt = np.sort(costs)
    nbins = int(f32(beam) / width) + 1

    def bin_of(x):
        return math.floor(f32(x - best) / width)

    if len(costs) > max_active and bin_of(srt[max_active]) < nbins:
        cut = best + f32(max(bin_of(srt[max_active]), 1) * width)
        if cut < best + f32(beam):
            return cut, cut - best + delta
    min_cut = math.inf  # at most min_active costs: nothing is cut
    if min_active <= 0:
        min_cut = best
    elif len(costs) > min_active:
        b = bin_of(srt[min_active])
        min_cut = best + f32((b + 1) * width) if b < nbins else srt[min_active]
    if min_cut > best + f32(beam):
        return min_cut, min_cut - best + delta
    return best + f32(beam), beam


@pytest.mark.parametrize("seed", range(8))
def test_bucket_cutoff_matches_its_definition(seed):
    rng = np.random.default_rng(seed)
    costs = rng.uniform(0, 20, size=int(rng.integers(1, 200))).astype(np.float32) + np.float32(100)
    for beam, max_active, min_active, width in [
        (5.0, 10, 3, 0.5),
        (3.0, 10**6, 150, 0.5),
        (30.0, 7, 0, 2.0),
        (2.0, 100, 40, 0.25),
        (12.0, 50, 5, 1.0),
    ]:
        width = np.float32(width * (1 + seed % 3) / 2)
        cut, adaptive = bucket_cutoff(
            costs, len(costs), np.float32(beam), max_active, min_active, np.float32(0.5), width
        )
        ref = reference_bucket_cut(costs, beam, max_active, min_active, 0.5, width)
        assert cut == pytest.approx(ref[0], abs=1e-3) and adaptive == pytest.approx(ref[1], abs=1e-3)
        if len(costs) <= min_active:  # as Kaldi: fewer than min_active survivors are all kept
            assert cut == math.inf
        if len(costs) > max_active and cut < costs.min() + beam and (costs < cut).sum() > 0:
            kept = int((costs < cut).sum())
            assert kept <= max_active or kept == int((costs < costs.min() + width).sum())


@pytest.mark.parametrize("backend", ["compiled", "torch"])
def test_log_probs_narrower_than_the_graph_are_refused(toy, backend):
    """A graph built for another model reads more output columns than the model gives: `let`,
    `wfst-otf` and `wfst` (offline and streaming) refuse it in one line instead of reading past
    each frame's scores."""
    g, s = str(toy["graph"]["small_unigram"]), str(toy["arpa"]["small_unigram"])
    lp = cases(0, 1)[0]
    columns = lp.shape[1]
    decoders = [
        WfstDecoder(WfstConfig(graph=g, backend=backend)),
        WfstOtfDecoder(WfstOtfConfig(graph=g, lm=s, small_lm=s, backend=backend)),
    ]
    if backend == "compiled":
        decoders.append(LetDecoder(LetConfig(graph=g, lm=s, small_lm=s)))
    for dec in decoders:
        assert dec.decode(batch([lp]))[0].words  # the model's own width
        message = f"reads {columns} model output columns, the model gives 3"
        with pytest.raises(GraphError, match=message) as err:
            dec.decode(batch([lp[:, :3]], blank=2))
        assert "\n" not in str(err.value)
    plain = decoders[0]
    plain.init_streams(1)
    with pytest.raises(GraphError, match="the model gives 3"):
        plain.decode_chunk([0], torch.from_numpy(lp[None, :, :3]))


def test_config_errors(toy):
    g, s = str(toy["graph"]["small_unigram"]), str(toy["arpa"]["small_unigram"])
    with pytest.raises(ConfigError, match="torch is not implemented"):
        LetDecoder(LetConfig(graph=g, lm=s, small_lm=s, backend="torch"))
    with pytest.raises(ConfigError, match="group_capacity"):
        LetDecoder(LetConfig(graph=g, lm=s, small_lm=s, group_capacity=0))
    with pytest.raises(ConfigError, match="decoder.lm"):
        LetDecoder(LetConfig(graph=g, small_lm=s))
    with pytest.raises(ConfigError, match="not found"):
        LetDecoder(LetConfig(graph=g, lm=s + ".missing", small_lm=s))
    # a wfst-otf config (the default setup's file) switched to let names the override that fixes it
    with pytest.raises(ConfigError, match=r"add decoder\.history_max=0\)$"):
        LetDecoder(LetConfig(graph=g, lm=s, small_lm=s, history_max=8))
    cfg = decoder_config_from_dict({"type": "let", "lm": s, "group_capacity": 3, "bucket_width": 0.5})
    assert isinstance(cfg, LetConfig) and cfg.group_capacity == 3
    with pytest.raises(ConfigError):
        decoder_config_from_dict({"type": "let", "boost": {"ab": 1.0}})  # a `wfst` option only


def test_word_beam_prunes_word_arcs_and_off_changes_nothing(toy):
    """`word_beam` on groups (the best groups' cheapest arc + word_beam for word arcs): 0 is the
    search without it, a wide one changes nothing, a tight one expands fewer arcs and still ends
    in valid paths; a negative one is a config error."""
    lps = cases(11, 6)
    kw = {"beam": 10.0, "max_active": 200}
    plain = let_decoder(toy, "small_unigram", "trigram", **kw)
    ref = plain.decode(batch(lps))
    for word_beam in (0.0, 1e6):
        dec = let_decoder(toy, "small_unigram", "trigram", **kw, word_beam=word_beam)
        assert [(r.text, r.score) for r in dec.decode(batch(lps))] == [(r.text, r.score) for r in ref]
        assert dec.last_info["stats"]["arcs"] == plain.last_info["stats"]["arcs"]
    tight = let_decoder(toy, "small_unigram", "trigram", **kw, word_beam=1.0)
    res = tight.decode(batch(lps))
    assert tight.last_info["stats"]["arcs"] < plain.last_info["stats"]["arcs"]
    assert all(r.words for r in res)
    with pytest.raises(ConfigError, match="word_beam"):
        let_decoder(toy, "small_unigram", "trigram", word_beam=-2.0)
    cfg = decoder_config_from_dict({"type": "let", "graph": "g", "word_beam": 8})
    assert cfg.word_beam == 8
