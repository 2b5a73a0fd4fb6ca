"""`wfst` 1-best vs kaldi-decoder's FasterDecoder (Kaldi's CPU decoder) on the same TLG and log-probs.

Graphs: TLGs built by `asrdecode build-graph` for the toy lexicon/ARPA of tests/graph and for the
NeMo fixture model's BPE units with a bigram ARPA over the fixture words. Log-probs: the real
NeMo fixture outputs and synthetic peaky matrices (with noise, so no two paths tie exactly).

Parity is exact (same words, costs within float32 rounding) whenever Kaldi's pruning is
independent of its hash-list order. When max_active binds hard, FasterDecoder also keeps tokens
that passed its *running* adaptive cutoff before it tightened (order-dependent); those cases are
not comparable token for token and are not tested here.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from wfst_ref import FIXTURES, kaldi_best_path, nemo_log_probs, nemo_sentences, single_thread, write_arpa  # noqa: F401

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.graph import GraphBuildConfig, build_graph
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

import kaldi_decoder  # noqa: E402,F401  (the reference decoder)
import kaldifst  # noqa: E402

COST_TOL = 2e-3  # float32 token costs vs Kaldi's double accumulation over ~60 frames
NO_MAX = 2**31 - 1


@pytest.fixture(scope="module")
def nemo_graphs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("wfst_nemo")
    write_arpa(d / "lm.arpa", nemo_sentences())
    out = {}
    for topo in ("compact", "normal"):
        cfg = GraphBuildConfig(
            arpa=str(d / "lm.arpa"), model=str(FIXTURES / "ctc_bpe.nemo"), lexicon_type="bpe", topology=topo
        )
        build_graph(cfg, d / topo)
        out[topo] = d / topo
    return out


@pytest.fixture(scope="module")
def toy_graph_dirs(tmp_path_factory) -> dict[str, Path]:
    from graph_toy import toy_config, write_toy

    d = tmp_path_factory.mktemp("wfst_toy")
    paths = write_toy(d / "in")
    out = {}
    for topo in ("compact", "normal"):
        build_graph(toy_config(paths, topology=topo), d / topo)
        out[topo] = d / topo
    return out


def synthetic(seed: int, B: int, T: int, V: int, blank: int) -> np.ndarray:
    """Peaky CTC-like log-probs: a random unit or blank per frame at ~0.8, plus noise."""
    rng = np.random.default_rng(seed)
    x = np.full((B, T, V), np.log(0.2 / (V - 1)), dtype=np.float32)
    for b in range(B):
        cols = rng.integers(0, V, size=T)
        cols[rng.random(T) < 0.5] = blank
        x[b, np.arange(T), cols] = np.log(0.8)
    x += rng.normal(size=x.shape).astype(np.float32) * 0.3
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def compare(
    graph_dir: Path,
    lp: np.ndarray,
    lengths: np.ndarray,
    beam: float,
    max_active: int,
    min_active: int,
    backend: str = "torch",
):
    """Decode with `backend` and check every utterance against FasterDecoder (the compiled backend
    runs the same cases in test_wfst_compiled.py)."""
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(next(graph_dir.glob("*LG.fst")))))
    cfg = WfstConfig(
        graph=str(graph_dir), beam=beam, max_active=max_active, min_active=min_active, backend=backend
    )
    dec = WfstDecoder(cfg)
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, lp.shape[2] - 1, [])
    results = dec.decode(out)
    for b, res in enumerate(results):
        ref = kaldi_best_path(fst, lp[b, : lengths[b]], beam, min(max_active, NO_MAX), min_active)
        assert ref is not None
        total, graph, acoustic, olabels, reached = ref
        assert [w.word for w in res.words] == [dec.words[o] for o in olabels], b
        assert -res.score == pytest.approx(total, abs=COST_TOL), b
        assert -res.acoustic_score == pytest.approx(acoustic, abs=COST_TOL), b
        assert -res.lm_score == pytest.approx(graph, abs=COST_TOL), b
        assert (b not in dec.last_info["not_final"]) == reached
    return results


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
