"""`harness.sphinx_static_graph`: the bench cases find the static sphinx graph where
configs/sphinx-en-us.yaml builds it (the graph cache) when out/graphs/sphinx-en-us was not built."""

from __future__ import annotations

import shutil
from pathlib import Path

from asrdecode.bench import harness
from asrdecode.graph.cache import cache_folder, load_graph_config

ROOT = Path(__file__).resolve().parents[2]


def test_local_folder_first_then_the_cache_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)  # the graph config's inputs are paths from the checkout
    fake_root = tmp_path / "checkout"
    (fake_root / "configs" / "graph").mkdir(parents=True)
    config = fake_root / "configs" / "graph" / "sphinx-en-us.yaml"
    shutil.copy(ROOT / "configs" / "graph" / "sphinx-en-us.yaml", config)
    monkeypatch.setattr(harness, "ROOT", fake_root)
    assert harness.sphinx_static_graph() == cache_folder(load_graph_config(config))
    local = fake_root / "out" / "graphs" / "sphinx-en-us"
    local.mkdir(parents=True)
    (local / "graph.pt").write_bytes(b"")
    assert harness.sphinx_static_graph() == local
    config.unlink()  # no build config: nothing to look up in the cache
    shutil.rmtree(local)
    assert harness.sphinx_static_graph() == local
