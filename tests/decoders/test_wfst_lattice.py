"""`wfst` lattices: n-best vs exhaustive enumeration of all word sequences on tiny random WFSTs,
lattice 1-best == decoder 1-best on real model outputs, and the Kaldi text / OpenFst writers."""

import numpy as np
import pytest
import torch
from test_wfst_viterbi import V, device_graph, log_probs
from wfst_ref import (  # noqa: F401
    FIXTURES,
    all_word_sequences,
    nemo_log_probs,
    nemo_sentences,
    random_wfst,
    single_thread,
    write_arpa,
)

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.lattice import write_kaldi_text, write_word_fst
from asrdecode.graph import GraphBuildConfig, build_graph
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")
WIDE = {"beam": 1e9, "max_active": 10**9, "min_active": 0}


def one(lp: np.ndarray) -> ModelOutput:
    return ModelOutput(torch.from_numpy(lp[None]), torch.tensor([len(lp)]), 0.04, -1, [])


@pytest.mark.parametrize("seed", range(25))
def test_nbest_equals_exhaustive_enumeration(seed):
    rng = np.random.default_rng(500 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), V, 5, eps_forward=True)
    lp = log_probs(rng, int(rng.integers(1, 6)))
    ref = all_word_sequences(fst, lp)
    words = {i: f"w{i}" for i in range(1, 10)}
    dec = WfstDecoder(
        WfstConfig(**WIDE, lattice_beam=6.0, nbest=5, lattice=True), graph=device_graph(fst), words=words
    )
    (res,) = dec.decode(one(lp))
    if not ref:
        return
    best = min(ref.values())
    expected = sorted((c, [f"w{o}" for o in seq]) for seq, c in ref.items() if c <= best + 6.0)[:5]
    got = [(-score, w) for w, score in res.nbest]
    # every hypothesis is a real word sequence with its exact best cost, best first
    names = {tuple(f"w{o}" for o in seq): c for seq, c in ref.items()}
    for cost, w in got:
        assert cost == pytest.approx(names[tuple(w)], abs=1e-3)
    assert [c for c, _ in got] == sorted(c for c, _ in got)
    assert len(got) == len(expected)
    # nothing better than the last one returned is missing (exact ties may come in any order)
    missing = [w for c, w in expected if c < got[-1][0] - 1e-3 and w not in [g for _, g in got]]
    assert not missing
    # lattice 1-best == decoder 1-best
    assert got[0][1] == [w.word for w in res.words]
    assert got[0][0] == pytest.approx(-res.score, abs=1e-3)


@pytest.fixture(scope="module")
def nemo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("wfst_lat_nemo")
    write_arpa(d / "lm.arpa", nemo_sentences())
    cfg = GraphBuildConfig(arpa=str(d / "lm.arpa"), model=str(FIXTURES / "ctc_bpe.nemo"), lexicon_type="bpe")
    build_graph(cfg, d / "g")
    return d / "g"


def test_lattice_one_best_equals_decoder_on_model_outputs(nemo_dir, tmp_path):
    lp, lengths, _ = nemo_log_probs()
    dec = WfstDecoder(WfstConfig(graph=str(nemo_dir), beam=12.0, lattice_beam=4.0, lattice=True, nbest=3))
    res = dec.decode(ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, []))
    for r in res:
        assert r.nbest and r.nbest[0][0] == [w.word for w in r.words]
        assert r.nbest[0][1] == pytest.approx(r.score, abs=2e-3)
        assert all(a[1] >= b[1] for a, b in zip(r.nbest, r.nbest[1:], strict=False))
    assert dec.last_info["lattice_density"] > 1.0
    write_kaldi_text(tmp_path / "lat.txt", {f"u{i}": r.lattice for i, r in enumerate(res)})
    text = (tmp_path / "lat.txt").read_text()
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert [b.splitlines()[0] for b in blocks] == [f"u{i}" for i in range(len(res))]
    first = blocks[0].splitlines()[1].split()
    assert len(first) == 5 and "," in first[4]
    write_word_fst(tmp_path / "u0.fst", res[0].lattice)
    import kaldifst

    back = kaldifst.StdVectorFst.read(str(tmp_path / "u0.fst"))
    assert back.num_states == res[0].lattice.word_fst().num_states
