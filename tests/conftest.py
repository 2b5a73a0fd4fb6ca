"""Suite-wide: the graph / LM-table cache (`asrdecode.graph.cache.cache_root`) lives in a temporary
folder, so tests neither read a developer's ~/.cache/asrdecode nor leave files in it (subprocesses
inherit the variable)."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_asrdecode_cache(tmp_path_factory):
    old = os.environ.get("ASRDECODE_CACHE")
    os.environ["ASRDECODE_CACHE"] = str(tmp_path_factory.mktemp("asrdecode-cache"))
    yield
    if old is None:
        os.environ.pop("ASRDECODE_CACHE", None)
    else:
        os.environ["ASRDECODE_CACHE"] = old
