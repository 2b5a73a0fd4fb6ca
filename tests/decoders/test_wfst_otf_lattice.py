"""Lattices of `wfst-otf` (compiled backend) and `let` (paper 002's exact lattices) against
independent references:

- brute force: on tiny random WFSTs with random large/small ARPAs, the word lattice holds exactly
  the word sequences within the lattice beam of the composed search space (and, as Kaldi's,
  possibly some combining kept arcs of different paths), each with its best
  cost (best graph path for it + lm_scale * (large - small), the LMs scored by a plain-Python ARPA
  scorer), best first in the n-best; its 1-best is the decoder's;
- the statically composed graph: a graph built with a small (unigram) LM + the large (bigram) LM
  on the fly gives the same n-best word sequences and costs as `wfst` with lattices on the graph
  built directly with the large LM (NeMo fixture log-probs, wide beams), and the same Kaldi
  lattice archive after determinization up to the cost split between the graph's arcs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.lattice_paths import compact_paths
from helpers.otf_ref import WORDS, ArpaScorer, random_arpa
from helpers.wfst_graphs import device_graph, log_probs
from helpers.wfst_ref import all_word_sequences, nemo_log_probs, random_wfst, single_thread  # noqa: F401

from asrdecode.decoders.let import LetConfig, LetDecoder
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.lattice import read_kaldi_text, write_kaldi_text
from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder
from asrdecode.errors import ConfigError
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")
WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0}


def one(lp: np.ndarray) -> ModelOutput:
    return ModelOutput(torch.from_numpy(lp[None]), torch.tensor([len(lp)]), 0.04, -1, [])


def on_the_fly(kind: str, in_memory=None, words=None, **options):
    """A `wfst-otf` (compiled backend) or `let` (capacity above the test LMs' state count, so that
    it keeps every member) decoder with these options (`in_memory`: a DeviceGraph instead of
    decoder.graph)."""
    if kind == "let":
        return LetDecoder(LetConfig(**options, group_capacity=64), graph=in_memory, words=words)
    return WfstOtfDecoder(WfstOtfConfig(**options, backend="compiled"), graph=in_memory, words=words)


@pytest.mark.parametrize("kind", ["wfst-otf", "let"])
@pytest.mark.parametrize("prune_interval", [1, 25])
@pytest.mark.parametrize("seed", range(16))
def test_lattice_holds_every_sequence_within_the_beam_with_its_cost(tmp_path, seed, prune_interval, kind):
    rng = np.random.default_rng(2200 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), 4, 6, eps_forward=True)
    names = list(WORDS.values())
    large = random_arpa(tmp_path / "large.arpa", rng, names, 3)
    small = random_arpa(tmp_path / "small.arpa", rng, names, int(rng.integers(1, 3)))
    scale = 1.0 if seed % 3 else 0.6
    lp = log_probs(rng, int(rng.integers(1, 6)))
    lm_large, lm_small = ArpaScorer(large), ArpaScorer(small)
    ref = {}
    for seq, cost in all_word_sequences(fst, lp).items():
        ws = tuple(WORDS[o] for o in seq)
        ref[ws] = cost + scale * (lm_large.cost(list(ws)) - lm_small.cost(list(ws)))
    beam = 5.0
    dec = on_the_fly(
        kind, device_graph(fst), WORDS, **WIDE, lm=str(large), small_lm=str(small), lm_scale=scale,
        lattice=True, nbest=50, lattice_beam=beam, prune_interval=prune_interval,
    )  # fmt: skip
    (res,) = dec.decode(one(lp))
    if not ref or dec.last_info["not_final"]:
        return
    best = min(ref.values())
    got = [(tuple(w), -score) for w, score in res.nbest]
    assert len({w for w, _ in got}) == len(got)  # one path per word sequence
    for words, cost in got:
        assert cost == pytest.approx(ref[words], abs=1e-3)
    # every sequence clearly within the beam is there (ties at the beam's edge may go either way)
    within = {w for w, c in ref.items() if c <= best + beam - 1e-3}
    assert within <= {w for w, _ in got}
    # the lattice's 1-best is the decoder's
    assert list(got[0][0]) == [w.word for w in res.words]
    assert got[0][1] == pytest.approx(-res.score, abs=1e-3)


@pytest.fixture
def built(otf_graphs):
    """The session's small (unigram) and large (bigram) graphs over the fixture words (conftest)."""
    return otf_graphs


@pytest.mark.parametrize("kind", ["wfst-otf", "let"])
def test_small_graph_with_large_lm_gives_the_large_graphs_lattice(built, tmp_path, kind):
    lp, lengths, _ = nemo_log_probs()
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    opts = {"beam": 30.0, "max_active": 10**6, "min_active": 0, "backend": "compiled"}
    opts.update(lattice=True, nbest=20, lattice_beam=4.0)
    ref = WfstDecoder(WfstConfig(graph=str(built / "large"), **opts)).decode(out)
    opts.pop("backend")
    dec = on_the_fly(kind, graph=str(built / "small"), lm=str(built / "large.arpa"), **opts)
    res = dec.decode(out)
    assert dec.last_info["lattice_search_arcs"] > 0 and dec.last_info["lattice_density"] > 0
    assert sum(len(r.nbest) for r in ref) > 2 * len(ref)  # the lattices hold alternatives
    for a, b in zip(ref, res, strict=True):
        assert [w.word for w in a.words] == [w.word for w in b.words]
        # float32 costs: G's weights (arpa2fst, pushed by determinization) vs the LM tables
        got = {tuple(w): s for w, s in b.nbest}
        want = {tuple(w): s for w, s in a.nbest}
        assert set(got) == set(want)
        for w, s in want.items():
            assert got[w] == pytest.approx(s, rel=1e-4, abs=1e-3)
        assert b.nbest[0][0] == [w.word for w in b.words]
        # the determinized word lattices: the same word sequences within the lattice beam, each
        # with the same best path (total and acoustic cost, unit alignment); how the graph cost
        # is spread over a path's arcs differs with the graphs' weight pushing, and so do the
        # paths beyond the beam that combine kept arcs of different paths
        pa = {w: (g + ac, ac, u) for w, g, ac, u in compact_paths(a.lattice)}
        pb = {w: (g + ac, ac, u) for w, g, ac, u in compact_paths(b.lattice)}
        best = min(t for t, _, _ in pa.values())
        inside_a = {w for w, (t, _, _) in pa.items() if t <= best + 4.0 - 1e-2}
        inside_b = {w for w, (t, _, _) in pb.items() if t <= best + 4.0 - 1e-2}
        assert inside_a == inside_b and len(inside_a) > 1
        for w in inside_a:
            total, ac, units = pa[w]
            assert pb[w][0] == pytest.approx(total, rel=1e-4, abs=1e-3)
            assert pb[w][1] == pytest.approx(ac, rel=1e-4, abs=1e-3) and pb[w][2] == units
    write_kaldi_text(tmp_path / "otf.txt", {f"u{i}": r.lattice for i, r in enumerate(res)})
    parsed = read_kaldi_text((tmp_path / "otf.txt").read_text())
    assert [len(parsed[f"u{i}"][0]) for i in range(len(res))] == [r.lattice.num_arcs for r in res]


def test_lattices_need_the_compiled_backend(built):
    lp, lengths, _ = nemo_log_probs()
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    small, large = str(built / "small"), str(built / "large.arpa")
    with pytest.raises(ConfigError, match="compiled backend"):
        WfstOtfDecoder(WfstOtfConfig(graph=small, lm=large, backend="torch", lattice=True))
    dec = WfstOtfDecoder(WfstOtfConfig(graph=small, lm=large, backend="auto", nbest=3))
    dec.config.backend = "torch"  # as `auto` resolves on a GPU
    with pytest.raises(ConfigError, match="compiled backend"):
        dec.decode(out)
