"""Lattices of `let` (paper 002's exact lattices) against independent references:

- brute force: on tiny random WFSTs with random large/small ARPAs, the word lattice holds every
  word sequence within the lattice beam of the composed search space, each with its best cost
  (best graph path + lm_scale * (large - small), the LMs scored by a plain-Python ARPA scorer),
  best first in the n-best; its 1-best is the decoder's; window pruning every frame or every 25
  gives the same;
- the statically composed graph: a graph built with a small (unigram) LM + the large (bigram) LM
  on the fly gives the same word sequences within the lattice beam, each with the same best path
  (total and acoustic cost, unit alignment), as `wfst` with lattices on the graph built directly
  with the large LM (NeMo fixture log-probs, wide beams);
- `wfst-otf` (a token per (graph state, LM state)) on the same inputs: the same n-best.
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


@pytest.mark.parametrize("prune_interval", [1, 25])
@pytest.mark.parametrize("seed", range(16))
def test_lattice_holds_every_sequence_within_the_beam_with_its_best_cost(tmp_path, seed, prune_interval):
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
    common = dict(
        **WIDE, lm=str(large), small_lm=str(small), lm_scale=scale, lattice=True, nbest=50,
        lattice_beam=beam, prune_interval=prune_interval,
    )  # fmt: skip
    dec = LetDecoder(LetConfig(**common, group_capacity=64), graph=device_graph(fst), words=WORDS)
    (res,) = dec.decode(one(lp))
    if not ref or dec.last_info["not_final"]:
        return
    best = min(ref.values())
    got = [(tuple(w), -score) for w, score in res.nbest]
    assert len({w for w, _ in got}) == len(got)  # one path per word sequence
    for words, cost in got:
        assert cost == pytest.approx(ref[words], abs=1e-3)
    within = {w for w, c in ref.items() if c <= best + beam - 1e-3}
    assert within <= {w for w, _ in got}
    # the lattice's 1-best is the decoder's
    assert list(got[0][0]) == [w.word for w in res.words]
    assert got[0][1] == pytest.approx(-res.score, abs=1e-3)
    # and wfst-otf (a token per pair) has the same n-best
    otf = WfstOtfDecoder(WfstOtfConfig(**common, backend="compiled"), graph=device_graph(fst), words=WORDS)
    (res_otf,) = otf.decode(one(lp))
    assert [tuple(w) for w, _ in res_otf.nbest] == [w for w, _ in got]
    for (_, a), (_, b) in zip(res_otf.nbest, res.nbest, strict=True):
        assert a == pytest.approx(b, abs=1e-3)


def test_small_graph_with_large_lm_gives_the_large_graphs_lattice(otf_graphs, tmp_path):
    lp, lengths, _ = nemo_log_probs()
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    opts = {"beam": 30.0, "max_active": 10**6, "min_active": 0, "backend": "compiled"}
    opts.update(lattice=True, nbest=20, lattice_beam=4.0)
    ref = WfstDecoder(WfstConfig(graph=str(otf_graphs / "large"), **opts)).decode(out)
    cfg = LetConfig(
        graph=str(otf_graphs / "small"), lm=str(otf_graphs / "large.arpa"), group_capacity=64, **opts
    )
    dec = LetDecoder(cfg)
    res = dec.decode(out)
    assert sum(len(r.nbest) for r in ref) > 2 * len(ref)  # the lattices hold alternatives
    assert dec.last_info["lattice_search_arcs"] > 0 and dec.last_info["lattice_density"] > 0
    for a, b in zip(ref, res, strict=True):
        assert [w.word for w in a.words] == [w.word for w in b.words]
        got = {tuple(w): s for w, s in b.nbest}
        want = {tuple(w): s for w, s in a.nbest}
        assert set(got) == set(want)
        for w, s in want.items():
            assert got[w] == pytest.approx(s, rel=1e-4, abs=1e-3)
        assert b.nbest[0][0] == [w.word for w in b.words]
        # the determinized word lattices: the same word sequences within the lattice beam, each
        # with the same best path (total and acoustic cost, unit alignment)
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
    write_kaldi_text(tmp_path / "let.txt", {f"u{i}": r.lattice for i, r in enumerate(res)})
    parsed = read_kaldi_text((tmp_path / "let.txt").read_text())
    assert [len(parsed[f"u{i}"][0]) for i in range(len(res))] == [r.lattice.num_arcs for r in res]


@pytest.mark.parametrize(("capacity", "bucket_width"), [(1, 0.0), (2, 0.0), (4, 0.5), (16, 0.0)])
def test_lattice_best_path_is_the_decoders_under_pruning(otf_graphs, capacity, bucket_width):
    """Tight beams, few groups, small capacities (members of shared blocks above the cut): the word
    lattice's best path is still the decoder's 1-best, with its cost."""
    lp, lengths, _ = nemo_log_probs()
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    cfg = LetConfig(
        graph=str(otf_graphs / "small"), lm=str(otf_graphs / "large.arpa"), beam=10.0, max_active=40,
        group_capacity=capacity, bucket_width=bucket_width, lattice=True, nbest=5, lattice_beam=6.0,
        prune_interval=5,
    )  # fmt: skip
    dec = LetDecoder(cfg)
    res = dec.decode(out)
    assert dec.last_info["stats"]["lattice_prune_frames"] > 0
    assert sum(len(r.words) for r in res) >= 3 and sum(len(r.nbest) for r in res) > len(res)
    for r in res:
        assert r.nbest[0][0] == [w.word for w in r.words]
        assert r.nbest[0][1] == pytest.approx(r.score, rel=1e-5, abs=1e-3)


def test_lattice_settings_are_checked(otf_graphs):
    small, large = str(otf_graphs / "small"), str(otf_graphs / "large.arpa")
    with pytest.raises(ConfigError, match="lattice_beam"):
        LetDecoder(LetConfig(graph=small, lm=large, lattice=True, lattice_beam=-1.0))
