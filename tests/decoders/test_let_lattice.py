"""Lattices of `let` (paper 002's exact lattices) where its pruning differs from a per-pair search:
tight beams, few groups and small group capacities (members of shared blocks above the frame's
cut stay nodes); the lattice's best path is still the decoder's 1-best. Against brute force and
the statically composed graph: `test_wfst_otf_lattice.py` (both on-the-fly decoders); with beams that
prune nothing, the same lattice as the standard `wfst-otf`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.lattice_paths import compact_paths
from helpers.let_ref import LARGE_TRIGRAM, SMALL_UNIGRAM, UNITS, spelled_log_probs, toy_config, write_toy
from helpers.wfst_ref import nemo_log_probs, single_thread  # noqa: F401

from asrdecode.decoders.let import LetConfig, LetDecoder
from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder
from asrdecode.errors import ConfigError
from asrdecode.graph import build_graph
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")


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


@pytest.fixture(scope="module")
def toy_small(tmp_path_factory):
    """graph_toy's TLG built with a unigram; the trigram (let_ref) is the large LM."""
    folder = tmp_path_factory.mktemp("let_lattice_toy")
    paths = write_toy(folder)
    (folder / "small.arpa").write_text(SMALL_UNIGRAM)
    (folder / "large.arpa").write_text(LARGE_TRIGRAM)
    build_graph(toy_config({**paths, "arpa": folder / "small.arpa"}), folder / "small")
    return str(folder / "small"), str(folder / "large.arpa")


@pytest.mark.parametrize("seed", range(6))
def test_lattice_equals_the_standard_on_the_fly_decoders(toy_small, seed):
    """Paper 002's claim: with beams that prune nothing and a capacity above the LM's states, the
    determinized lattice of `let` is the standard `wfst-otf`'s (no history cap): the same states,
    arcs, word sequences and costs, so the same lattice size and oracle."""
    small, large = toy_small
    rng = np.random.default_rng(300 + seed)
    words = [str(w) for w in rng.choice(["ab", "ba", "c", "cab"], size=int(rng.integers(2, 6)))]
    lp = spelled_log_probs(rng, words, UNITS, noise=2.0)
    out = ModelOutput(torch.from_numpy(lp[None]), torch.tensor([len(lp)]), 0.04, -1, [])
    opts = {"graph": small, "lm": large, "beam": 1e9, "max_active": 10**9, "min_active": 0, "threads": 1}
    opts.update(
        lattice=True, lattice_beam=float(rng.choice([3.0, 8.0])), prune_interval=int(rng.integers(1, 5))
    )
    (ref,) = WfstOtfDecoder(WfstOtfConfig(**opts, backend="compiled", history_max=0)).decode(out)
    (got,) = LetDecoder(LetConfig(**opts, group_capacity=64)).decode(out)
    assert [w.word for w in got.words] == [w.word for w in ref.words]
    a, b = ref.lattice, got.lattice
    assert a.num_arcs > 1 and (b.num_states, b.num_arcs) == (a.num_states, a.num_arcs)
    pa = sorted((w, round(g + ac, 3), u) for w, g, ac, u in compact_paths(a))
    pb = sorted((w, round(g + ac, 3), u) for w, g, ac, u in compact_paths(b))
    assert [x[0] for x in pa] == [x[0] for x in pb] and [x[2] for x in pa] == [x[2] for x in pb]
    assert [x[1] for x in pb] == pytest.approx([x[1] for x in pa], abs=2e-3)
