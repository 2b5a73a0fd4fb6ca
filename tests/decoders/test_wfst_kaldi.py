"""`wfst` 1-best vs kaldi-decoder's FasterDecoder (Kaldi's CPU decoder) on the same TLG and log-probs.

Graphs: TLGs built by `asrdecode build-graph` for the toy lexicon/ARPA of tests/graph and for the
NeMo fixture model's BPE units with a bigram ARPA over the fixture words. Log-probs: the real
NeMo fixture outputs and synthetic peaky matrices (with noise, so no two paths tie exactly).

Parity is exact (same words, costs within float32 rounding) whenever Kaldi's pruning is
independent of its hash-list order. When max_active binds hard, FasterDecoder also keeps tokens
that passed its *running* adaptive cutoff before it tightened (order-dependent); those cases are
not comparable token for token and are not tested here.
"""

import numpy as np
import pytest
from helpers.wfst_graphs import NO_MAX, compare, synthetic
from helpers.wfst_ref import (  # noqa: F401
    FIXTURES,
    kaldi_best_path,
    nemo_log_probs,
    nemo_sentences,
    single_thread,
    write_arpa,
)

pytestmark = pytest.mark.usefixtures("single_thread")

import kaldi_decoder  # noqa: E402,F401  (the reference decoder)


@pytest.mark.parametrize("topology", ["compact", "normal"])
@pytest.mark.parametrize("beam,max_active,min_active", [(16.0, NO_MAX, 0), (8.0, 10000, 20), (10.0, 50, 20)])
def test_nemo_logprobs_match_kaldi(nemo_graphs, topology, beam, max_active, min_active):
    lp, lengths, _ = nemo_log_probs()
    compare(nemo_graphs[topology], lp, lengths, beam, max_active, min_active)


@pytest.mark.parametrize("topology", ["compact", "normal"])
@pytest.mark.parametrize("beam,max_active,min_active", [(12.0, NO_MAX, 0), (14.0, 15, 10)])
def test_synthetic_logprobs_match_kaldi(nemo_graphs, topology, beam, max_active, min_active):
    lp = synthetic(0, 4, 60, 129, 128)
    compare(nemo_graphs[topology], lp, np.array([60, 50, 37, 60]), beam, max_active, min_active)


@pytest.mark.parametrize("topology", ["compact", "normal"])
@pytest.mark.parametrize("seed", range(4))
def test_toy_tlg_matches_kaldi(toy_graph_dirs, topology, seed):
    lp = synthetic(seed, 3, 25, 4, 3)
    compare(toy_graph_dirs[topology], lp, np.array([25, 17, 9]), 16.0, 10000, 20)
