"""Session fixtures: the toy CTC setup of graph_toy.py and its graphs for the three topologies."""

from pathlib import Path

import pytest
from helpers.graph_toy import toy_config, write_toy

from asrdecode.graph import build_graph


@pytest.fixture(scope="session")
def toy_paths(tmp_path_factory) -> dict[str, Path]:
    return write_toy(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="session")
def toy_graphs(toy_paths, tmp_path_factory) -> dict[str, Path]:
    """Graph folders for the three topologies, built once per session."""
    out = {}
    for topo in ("normal", "compact", "minimal"):
        d = tmp_path_factory.mktemp(f"tlg_{topo}")
        build_graph(toy_config(toy_paths, topology=topo), d)
        out[topo] = d
    return out
