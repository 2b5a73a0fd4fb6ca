"""Session fixtures of the decoder tests: TLGs built once per session (`asrdecode build-graph`) for
the NeMo fixture model's BPE units with a bigram over the fixture words, and for the toy lexicon
and ARPA of helpers/graph_toy.py, each in both topologies; and the on-the-fly decoders' pair of a
unigram (small LM) and a bigram (large LM) graph over the fixture words."""

from pathlib import Path

import pytest
from helpers.graph_toy import toy_config, write_toy
from helpers.otf_ref import unigram_arpa
from helpers.wfst_ref import FIXTURES, nemo_sentences, write_arpa

from asrdecode.graph import GraphBuildConfig, build_graph


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
def toy_graph_dirs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("wfst_toy")
    paths = write_toy(d / "in")
    out = {}
    for topo in ("compact", "normal"):
        build_graph(toy_config(paths, topology=topo), d / topo)
        out[topo] = d / topo
    return out


@pytest.fixture(scope="session")
def otf_graphs(tmp_path_factory) -> Path:
    """small/ (unigram LM) and large/ (bigram LM) graphs and their ARPAs small.arpa, large.arpa."""
    d = tmp_path_factory.mktemp("wfst_otf")
    sents = nemo_sentences()
    unigram_arpa(d / "small.arpa", sents)
    write_arpa(d / "large.arpa", sents)
    for name in ("small", "large"):
        model = str(FIXTURES / "ctc_bpe.nemo")
        cfg = GraphBuildConfig(arpa=str(d / f"{name}.arpa"), model=model, lexicon_type="bpe", format="pt")
        build_graph(cfg, d / name)
    return d
