"""Shipped configs run from any folder: their relative `configs/` and `data/` paths resolve in the
source checkout when the current folder does not have them (`loading.in_checkout`)."""

from __future__ import annotations

from pathlib import Path

from asrdecode.graph.cache import load_graph_config
from asrdecode.models.loading import resolve_packaged_path

ROOT = Path(__file__).resolve().parents[2]


def test_relative_paths_resolve_in_the_checkout_from_another_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_packaged_path("configs/sphinx-en-us.yaml") == str(ROOT / "configs/sphinx-en-us.yaml")
    assert resolve_packaged_path("no/such/file.yaml") == "no/such/file.yaml"  # the caller reports it
    graph = load_graph_config(resolve_packaged_path("configs/graph/sphinx-en-us-exact.yaml"))
    assert Path(graph.arpa) == ROOT / "data/lm/sphinx-en-us-72k-exact.arpa.gz"
    local = tmp_path / "configs" / "sphinx-en-us.yaml"  # the current folder's file comes first
    local.parent.mkdir()
    local.write_text("threads: 1\n")
    assert resolve_packaged_path("configs/sphinx-en-us.yaml") == "configs/sphinx-en-us.yaml"
    assert resolve_packaged_path(str(local)) == str(local)
