"""Graph folders written safely: the inputs' checksums and the cache key, the recorded meta, and a
build staged in a sibling folder swapped into place at the end (a killed build never leaves a
folder that loads)."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from asrdecode.errors import GraphError
from asrdecode.graph.format import (
    FORMAT_VERSION,
    GRAPH_FILES,
    graph_file_names,
)
from asrdecode.graph.recipe import RECIPE_VERSION, GraphBuildConfig
from asrdecode.io.lines import parse_json, read_text_bytes
from asrdecode.io.schema import GRAPH_META, problem
from asrdecode.version import __version__

log = logging.getLogger("asrdecode.graph")


BUILD_FILES = ("TLG.fst", "words.txt", "units.txt", "meta.json")  # + graph.pt / graph.safetensors
# Files a build owns: replaced as a whole, never carried over from an older build of the folder.
OWNED_FILES = (*GRAPH_FILES, "TLG.fst", "HCLG.fst", "words.txt", "units.txt", "meta.json")


# ====================================================================== build + cache
def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def input_checksums(cfg: GraphBuildConfig) -> dict[str, dict[str, str]]:
    if cfg.kind == "hclg-sphinx":
        model = Path(cfg.acoustic_model or "")
        noise = Path(cfg.noisedict) if cfg.noisedict else model / "noisedict"
        sphinx_files = {
            "arpa": cfg.arpa,
            "lexicon": cfg.lexicon,
            "mdef": str(model / "mdef"),
            "transition_matrices": str(model / "transition_matrices"),
        }
        if noise.is_file() or cfg.noisedict:
            sphinx_files["noisedict"] = str(noise)
        return checksums(sphinx_files)
    files = {
        "arpa": cfg.arpa,
        "model": cfg.model,
        "units": cfg.units,
        "sentencepiece_model": cfg.sentencepiece_model,
    }
    if cfg.lexicon_type == "file":
        files["lexicon"] = cfg.lexicon
    return checksums(files)


def checksums(files: dict[str, str | None]) -> dict[str, dict[str, str]]:
    out = {}
    for key, p in files.items():
        if p is None:
            continue
        if not Path(p).is_file():
            raise GraphError(f"{p}: {key} file not found")
        out[key] = {"path": str(Path(p).resolve()), "sha256": sha256_file(p)}
    return out


def cache_key(cfg: GraphBuildConfig, inputs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """What decides whether a build can be reused: input checksums, config (without paths) and the
    code that builds and writes the graph (graph format, recipe and asrdecode versions)."""
    config = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k
        not in ("arpa", "model", "units", "lexicon", "sentencepiece_model", "acoustic_model", "noisedict")
    }
    if not cfg.defer_share:  # no deferral: graphs built before the option keep their key
        config.pop("defer_share")
        config.pop("defer_decay")
    return {
        "config": config,
        "sha256": {k: v["sha256"] for k, v in inputs.items()},
        "code": {
            "format_version": FORMAT_VERSION,
            "recipe_version": RECIPE_VERSION,
            "asrdecode": __version__,
        },
    }


def read_graph_meta(path: Path) -> dict[str, Any]:
    """A graph folder's meta.json, checked against `GRAPH_META` (one-line GraphError otherwise)."""
    meta = parse_json(read_text_bytes(path, GraphError), str(path), GraphError)
    if (wrong := problem(meta, GRAPH_META)) is not None:
        raise GraphError(f"{path}: {wrong}")
    return meta


def cached_meta(
    cfg: GraphBuildConfig, out_dir: str | Path, inputs: dict[str, dict[str, str]] | None = None
) -> dict[str, Any] | None:
    """meta.json of an existing build with the same inputs and config, else None."""
    out = Path(out_dir)
    meta_path = out / "meta.json"
    files = BUILD_FILES if cfg.kind == "tlg" else tuple(f.replace("TLG", "HCLG") for f in BUILD_FILES)
    files += graph_file_names(cfg.format)
    if not meta_path.is_file() or not all((out / f).is_file() for f in files):
        return None
    try:
        meta = parse_json(read_text_bytes(meta_path, GraphError), str(meta_path), GraphError)
    except GraphError:
        return None
    if not isinstance(meta, dict) or problem(meta, GRAPH_META) is not None:
        return None
    if meta.get("cache_key") != cache_key(cfg, inputs if inputs is not None else input_checksums(cfg)):
        return None
    return meta


@contextlib.contextmanager
def staged_folder(out_dir: str | Path) -> Iterator[Path]:
    """Write a graph folder atomically: files go into a fresh sibling folder (`.NAME.building-*`),
    which replaces `out_dir` as a whole when the block ends normally (an atomic exchange where the OS
    has one). On an exception the sibling is removed and `out_dir` stays as it was, so its meta.json
    always describes its graph files. Files of `out_dir` a build does not own are carried over."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise GraphError(f"{out}: exists and is not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned_stages(out)
        prefix = f".{out.name}.building-{os.getpid()}@{socket.gethostname()}-"
        stage = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    except OSError as err:
        raise GraphError(f"{out}: cannot create the graph folder ({err.strerror})") from None
    try:
        yield stage
        if out.is_dir():
            carry_over(out, stage)
        swap_into(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # the new files on failure, the old ones after a swap


def remove_abandoned_stages(out: Path) -> list[Path]:
    """Delete staging siblings of `out` left by builds that were killed (SIGKILL, power loss): their
    name holds the building process's pid and host (`.NAME.building-PID@HOST-*`), and a stage of
    this host whose process is gone is removed. Stages of live processes or other hosts stay."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.building-(\d+)@(.*)-[^-]+$")
    removed = []
    for entry in out.parent.iterdir():
        match = pattern.match(entry.name)
        if not match or match.group(2) != socket.gethostname() or process_alive(int(match.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def process_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (killed, not yet reaped: containers whose init does not
    reap orphans keep them for good) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux): the signal test is all there is
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])


def carry_over(old: Path, new: Path) -> None:
    """Hard-link (or copy) entries of `old` that a build does not own into `new`."""
    for entry in old.iterdir():
        if entry.name in OWNED_FILES or (new / entry.name).exists():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, new / entry.name, symlinks=True)
            continue
        try:
            os.link(entry, new / entry.name, follow_symlinks=False)
        except OSError:
            shutil.copy2(entry, new / entry.name, follow_symlinks=False)


def exchange_paths(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def swap_into(stage: Path, out: Path) -> None:
    """Put `stage` at `out`; afterwards `stage` holds the old folder (if any), for the caller to delete."""
    if not out.exists():
        os.rename(stage, out)
        return
    if exchange_paths(stage, out):
        return
    # no atomic exchange: two renames; in between `out` is briefly absent, never half-written
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, old / out.name)
    try:
        os.rename(stage, out)
    except OSError:
        os.rename(old / out.name, out)  # put the old folder back
        old.rmdir()
        raise
    os.rename(old / out.name, stage)
    old.rmdir()
