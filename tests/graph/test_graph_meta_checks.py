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


def _damaged_folder(folder, tmp_path, change_graph=None, change_meta=None):
    """A copy of the graph folder with graph.pt (alone) and meta.json changed."""
    from asrdecode.graph.format import DeviceGraph

    damaged = tmp_path / "damaged"
    damaged.mkdir(exist_ok=True)
    for f in folder.iterdir():
        if f.name != "graph.safetensors":
            (damaged / f.name).write_bytes(f.read_bytes())
    if change_graph is not None:
        g = DeviceGraph.load(folder / "graph.pt")
        change_graph(g)
        g.save(damaged / "graph.pt")
    if change_meta is not None:
        meta = json.loads((folder / "meta.json").read_text())
        change_meta(meta)
        (damaged / "meta.json").write_text(json.dumps(meta))
    return damaged


def _set(tensor_name, index, value):
    return lambda g: getattr(g, tensor_name).__setitem__(index, value)


@pytest.mark.parametrize(
    "change_graph, change_meta, message",
    [
        (_set("olabel", 0, 10_000_000), None, "words.txt: ends at word id .* graph outputs word id 10000000"),
        (_set("olabel", 0, -3), None, "graph.pt: graph has a negative olabel"),
        (_set("weight", 1, float("nan")), None, "graph.pt: graph has 1 weight value.* NaN or -inf"),
        (_set("final", 0, float("-inf")), None, "graph.pt: graph has 1 final value.* NaN or -inf"),
        (
            lambda g: g.meta.update(num_columns=10**12),
            None,
            "graph.pt: graph declares num_columns 1000000000000",
        ),
        (
            None,
            lambda m: m["sizes"][m["kind"]].update(states=5),
            "meta.json: declares states 5, the graph has",
        ),
        (None, lambda m: m.update(num_columns=7), "meta.json: declares num_columns 7, the graph has"),
        (None, lambda m: m.update(kind=3), "meta.json: kind must be a string, got int"),
        (
            None,
            lambda m: m.update(blank_column=10**6),
            "meta.json: declares blank_column 1000000, the graph has",
        ),
        (None, lambda m: m.update(blank_ilabel=0), "meta.json: declares blank_ilabel 0, the graph has"),
        (None, lambda m: m.update(topology="normal"), "meta.json: declares topology 'normal', the graph has"),
        (
            None,
            lambda m: m["sizes"][m["kind"]].update(max_olabel=2),
            "meta.json: declares max_olabel 2, the graph has",
        ),
    ],
)
def test_a_graph_folder_is_checked_against_what_it_declares(
    graph, tmp_path, change_graph, change_meta, message
):
    """Output labels past words.txt, NaN weights, a number of model columns or sizes that the
    graph itself contradicts: one line naming the file when the folder is loaded, not garbage
    words or empty transcripts."""
    from asrdecode.decoders.wfst.paths import load_graph

    _, folder = graph
    damaged = _damaged_folder(folder, tmp_path, change_graph, change_meta)
    with pytest.raises(GraphError, match=message):
        load_graph(str(damaged))
    load_graph(str(folder))  # the folder as built loads
