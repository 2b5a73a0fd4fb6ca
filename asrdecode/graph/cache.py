"""Graphs built on first use into a cache folder that every run on the machine shares.

``decoder.graph: cache:configs/graph/NAME.yaml`` names a build config instead of a graph folder:
the graph is built the first time (with the same named, timed stages as ``asrdecode build-graph``)
into ``<cache root>/graphs/<kind>-<digest>``, where the digest is that of the build's cache key
(input checksums, config, graph format / recipe / asrdecode versions; `build.cached_meta`), and
later runs find it there and only load it. The cache root is ``$ASRDECODE_CACHE``, else
``$XDG_CACHE_HOME/asrdecode``, else ``~/.cache/asrdecode``.

The build runs in a child process (`build_in_child_process`): the OpenFst build's memory goes back
to the system before decoding starts. Processes that want the same graph at once take an exclusive
lock on ``<folder>.lock``: the first builds, the others wait and then reuse its build. A folder
left incomplete or stale (a file missing, meta.json unreadable or for other inputs) is rebuilt with
a one-line notice; builds replace the folder in one step (`build.staged_folder`), so a killed build
never leaves a half-written graph.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from asrdecode.errors import AsrDecodeError, GraphError
from asrdecode.graph.build import build_graph
from asrdecode.graph.recipe import GraphBuildConfig
from asrdecode.graph.stages import StageCallback
from asrdecode.graph.staging import cache_key, cached_meta, input_checksums

CACHE_PREFIX = "cache:"


def cache_root() -> Path:
    """$ASRDECODE_CACHE, else $XDG_CACHE_HOME/asrdecode, else ~/.cache/asrdecode."""
    if os.environ.get("ASRDECODE_CACHE"):
        return Path(os.environ["ASRDECODE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "asrdecode"


def load_graph_config(config_file: str | Path | None, overrides: Sequence[str] = ()) -> GraphBuildConfig:
    """A graph build config from YAML + `key=value` overrides; the config file and the files it
    names resolved as `transcribe` resolves them (`embedded:` paths, the shipped `configs/` and
    `data/` from any folder: `resolve_packaged_path`)."""
    from asrdecode.models.loading import resolve_packaged_path
    from asrdecode.typed_config import apply_override, dataclass_from_dict, load_yaml, parse_override

    tree = load_yaml(resolve_packaged_path(str(config_file))) if config_file else {}
    for item in overrides:
        path, value = parse_override(item)
        apply_override(tree, path, value)
    for key in ("acoustic_model", "lexicon", "noisedict", "model", "arpa"):
        if isinstance(tree.get(key), str):
            tree[key] = resolve_packaged_path(tree[key])
    return dataclass_from_dict(GraphBuildConfig, tree)


def cache_folder(cfg: GraphBuildConfig, inputs: dict | None = None) -> Path:
    """Where `cfg`'s graph lives in the cache (built there or not): keyed by its cache key."""
    key = json.dumps(cache_key(cfg, inputs if inputs is not None else input_checksums(cfg)), sort_keys=True)
    return cache_root() / "graphs" / f"{cfg.kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def is_cached(cfg: GraphBuildConfig, inputs: dict | None = None) -> bool:
    """True if `cfg`'s graph is in the cache, complete and current (nothing is built); `inputs`:
    its `input_checksums`, when the caller has them."""
    inputs = inputs if inputs is not None else input_checksums(cfg)
    return cached_meta(cfg, cache_folder(cfg, inputs), inputs) is not None


def cached_graph_folders() -> dict[Path, int]:
    """Every graph folder in the cache (any config, any version) and its size in bytes."""
    root = cache_root() / "graphs"
    if not root.is_dir():
        return {}
    folders = [
        f
        for f in sorted(root.iterdir())
        if f.is_dir() and not f.name.startswith(".") and (f / "meta.json").is_file()  # not a build's stage
    ]
    return {f: sum(x.stat().st_size for x in f.rglob("*") if x.is_file()) for f in folders}


def cached_graph(
    cfg: GraphBuildConfig,
    on_stage: StageCallback | None = None,
    on_status: Callable[[str], None] | None = None,
) -> Path:
    """The cache folder of `cfg`'s graph, built first if it is missing, incomplete or stale."""
    cfg.validate()
    inputs = input_checksums(cfg)
    folder = cache_folder(cfg, inputs)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = open(folder.with_name(folder.name + ".lock"), "a")  # noqa: SIM115 (held while building)
    except OSError as err:
        raise GraphError(f"graph cache {folder.parent}: {err.strerror or err}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same graph: wait for it
        if cached_meta(cfg, folder, inputs) is None:
            if folder.exists() and on_status is not None:
                on_status(f"graph cache {folder}: incomplete or stale, rebuilding")
            elif on_status is not None:
                on_status(f"graph cache: building {folder} (first use)")
            build_in_child_process(cfg, folder, on_stage)
    return folder


def _build_child(cfg: GraphBuildConfig, folder: Path, events) -> None:
    """Child process body: build, relaying stage events; a failure becomes one ("error", text)."""
    try:
        build_graph(cfg, folder, force=True, on_stage=lambda *event: events.put(("stage", event)))
        events.put(("done", None))
    except Exception as err:  # relayed as one line; the parent raises it as a GraphError
        text = str(err) if isinstance(err, AsrDecodeError) else f"{type(err).__name__}: {err}"
        events.put(("error", text))


def build_in_child_process(
    cfg: GraphBuildConfig, folder: Path, on_stage: StageCallback | None = None
) -> None:
    """`build_graph` in a child process (spawned: no state shared with the caller's threads), so the
    memory of the OpenFst build is returned to the system when it ends and the decoding process
    never holds both; its stage events reach `on_stage` as they happen."""
    import multiprocessing
    import queue

    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    child = ctx.Process(target=_build_child, args=(cfg, folder, events), daemon=True)
    child.start()
    try:
        while True:
            try:
                kind, payload = events.get(timeout=1.0)
            except queue.Empty:
                if not child.is_alive():
                    raise GraphError(
                        f"graph cache {folder}: the build process ended without a result "
                        f"(exit code {child.exitcode}; out of memory?)"
                    ) from None
                continue
            if kind == "stage" and on_stage is not None:
                on_stage(*payload)
            elif kind == "error":
                raise GraphError(f"graph cache {folder}: {payload}")
            elif kind == "done":
                break
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()


def resolve_graph_spec(
    spec: str, on_stage: StageCallback | None = None, on_status: Callable[[str], None] | None = None
) -> str:
    """`cache:CONFIG.yaml` -> the cached graph folder of that build config; anything else as it is."""
    if not spec.startswith(CACHE_PREFIX):
        return spec
    from asrdecode.models.loading import resolve_packaged_path

    config = resolve_packaged_path(spec[len(CACHE_PREFIX) :])
    if not Path(config).is_file():
        raise GraphError(f"decoder.graph={spec}: build config {config} not found")
    return str(cached_graph(load_graph_config(config), on_stage, on_status))
