"""Structured files asrdecode reads back are checked (asrdecode.io.schema): a graph folder whose
meta.json is damaged gives one line naming the file and the key, from `asrdecode info` and from
decoding (the graph file's own copy of the meta is checked too); the graph cache rebuilds such a
folder instead of trusting it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.graph_toy import toy_config, write_toy

from asrdecode.errors import GraphError
from asrdecode.graph.build import build_graph
from asrdecode.graph.staging import cached_meta
from asrdecode.io.schema import GRAPH_META, problem


def test_problem_messages():
    assert problem({"a": 1}, {"a": int, "b?": str}) is None
    assert problem([1], {"a": int}) == "the top level must be a mapping, got list"
    assert problem({}, {"a": int}) == "a is missing"
    assert problem({"a": True}, {"a": int}) == "a must be an integer, got bool"
    assert problem({"s": {"x": 1, "y": "z"}}, {"s": {"*": float}}) == "s.y must be a number, got str"
    assert problem({"lm": {"order": 3}}, GRAPH_META) == "lm.ngrams is missing"
    assert problem({"v": None}, {"v": (dict, type(None))}) is None


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("g")
    cfg = toy_config(write_toy(folder / "toy"))
    build_graph(cfg, folder / "graph")
    return cfg, folder / "graph"


@pytest.mark.parametrize(
    "meta, message",
    [
        ([1, 2], "the top level must be a mapping, got list"),
        ({"lm": {"order": 2}}, "lm.ngrams is missing"),
        ({"seconds": {"total": "soon"}}, "seconds.total must be a number, got str"),
        ({"blank_column": 3.5}, "blank_column must be an integer, got float"),
    ],
)
def test_damaged_meta_is_one_line(graph, tmp_path, meta, message):
    cfg, folder = graph
    damaged = tmp_path / "graph"
    damaged.mkdir()
    for f in folder.iterdir():
        (damaged / f.name).write_bytes(f.read_bytes())
    (damaged / "meta.json").write_text(json.dumps(meta))
    proc = subprocess.run(
        [sys.executable, "-m", "asrdecode.cli", "info", str(damaged)],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: {damaged / 'meta.json'}: {message}"
    assert cached_meta(cfg, damaged) is None  # the cache would rebuild it


def test_damaged_header_meta_in_the_graph_file(graph, tmp_path):
    from asrdecode.graph.format import DeviceGraph

    _, folder = graph
    g = DeviceGraph.load(folder / "graph.pt") if (folder / "graph.pt").is_file() else None
    g = g or DeviceGraph.load(folder / "graph.safetensors")
    g.meta = {"blank_column": "last"}
    g.save(tmp_path / "graph.safetensors")
    with pytest.raises(GraphError, match=r"graph header meta: blank_column must be an integer, got str"):
        DeviceGraph.load(tmp_path / "graph.safetensors")
