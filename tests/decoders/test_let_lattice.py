"""Lattices of `let` (paper 002's exact lattices) where its pruning differs from a per-pair search:
tight beams, few groups and small group capacities (members of shared blocks above the frame's
cut stay nodes); the lattice's best path is still the decoder's 1-best. Against brute force and
the statically composed graph: `test_wfst_otf_lattice.py` (both on-the-fly decoders)."""

from __future__ import annotations

import pytest
import torch
from helpers.wfst_ref import nemo_log_probs, single_thread  # noqa: F401

from asrdecode.decoders.let import LetConfig, LetDecoder
from asrdecode.errors import ConfigError
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
