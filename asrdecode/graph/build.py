"""`asrdecode build-graph`: the dispatcher over the recipes (`tlg` for CTC models, `hclg-sphinx` for
the pocketsphinx HMM), with the cache check before and the staged write around every build.

The pieces live in small modules: `recipe` (GraphBuildConfig), `units` (units and lexicons),
`fst_ops` (L, T, G, LG), `symbols` (symbol tables), `staging` (checksums, cache key, staged
folders), `tlg` (the TLG recipe), `hclg` / `sphinx` (the HCLG recipe).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

from asrdecode.errors import GraphError
from asrdecode.graph.defer import defer_weights
from asrdecode.graph.format import (
    GRAPH_FILES,
    DeviceGraph,
    find_graph_file,
)
from asrdecode.graph.recipe import GraphBuildConfig
from asrdecode.graph.stages import BuildStages, StageCallback
from asrdecode.graph.staging import cache_key, cached_meta, input_checksums, read_graph_meta, staged_folder
from asrdecode.graph.symbols import read_symbols
from asrdecode.graph.tlg import build_tlg
from asrdecode.graph.units import DISAMBIG
from asrdecode.lm.arpa import check_arpa

log = logging.getLogger("asrdecode.graph")


def build_graph(
    cfg: GraphBuildConfig, out_dir: str | Path, force: bool = False, on_stage: StageCallback | None = None
) -> dict[str, Any]:
    """Build TLG (or sphinx HCLG) into `out_dir` (graph.pt and/or graph.safetensors, TLG.fst, words.txt,
    units.txt, meta.json); returns meta. The folder is replaced as a whole (`staged_folder`).
    `on_stage(name, "start" | "done", seconds)` hears each named stage (`asrdecode.graph.stages`);
    their seconds are in meta["seconds"].

    Skips the build (meta["cached"] = True) when meta.json records the same input checksums,
    config and code versions (`cache_key`), unless `force`.
    """
    cfg.validate()
    t0 = time.perf_counter()
    out = Path(out_dir)
    inputs = input_checksums(cfg)
    if not force:
        meta = cached_meta(cfg, out, inputs)
        if meta is not None:
            meta["cached"] = True
            return meta
    stages = BuildStages(on_stage)
    with staged_folder(out) as stage:
        if cfg.kind == "hclg-sphinx":
            meta = _build_sphinx(cfg, stage, inputs, t0, stages)
        else:
            meta = build_tlg(cfg, stage, inputs, t0, stages)
        if cfg.defer_share > 0:
            meta = _defer_built_graph(cfg, stage, meta, t0, stages)
        return meta


def _defer_built_graph(
    cfg: GraphBuildConfig, folder: Path, meta: dict[str, Any], t0: float, stages: BuildStages
) -> dict[str, Any]:
    """The recipe's graph files rewritten with deferred weights (`graph.defer`), its OpenFst file
    too, so that every file of the folder is the same graph."""
    with stages("defer"):
        graph = DeviceGraph.load(find_graph_file(folder))
        graph = defer_weights(graph, cfg.defer_share, cfg.defer_decay)
        graph.validate()
        graph.save_folder(folder, cfg.format)
        fst = next(name for name in ("HCLG.fst", "TLG.fst") if (folder / name).is_file())
        graph.to_kaldifst(const=True).write(str(folder / fst))
    meta["deferred_weights"] = {"share": cfg.defer_share, "decay": cfg.defer_decay}
    meta["seconds"]["defer"] = stages.seconds["defer"]
    meta["seconds"]["total"] = round(time.perf_counter() - t0, 3)
    (folder / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def _build_sphinx(
    cfg: GraphBuildConfig, out: Path, inputs: dict[str, dict[str, str]], t0: float, stages: BuildStages
) -> dict[str, Any]:
    from asrdecode.graph.sphinx import SphinxGraphConfig, build_sphinx_hclg

    scfg = SphinxGraphConfig(
        model_dir=str(cfg.acoustic_model),
        dictionary=str(cfg.lexicon),
        arpa=cfg.arpa,
        noisedict=cfg.noisedict,
        silprob=cfg.silprob,
        fillprob=cfg.fillprob,
        transition_scale=cfg.transition_scale,
    )
    check_arpa(cfg.arpa)
    meta = build_sphinx_hclg(scfg, out, cfg.format, stages)
    meta.update(
        {
            "inputs": inputs,
            "config": dataclasses.asdict(cfg),
            "cache_key": cache_key(cfg, inputs),
            "cached": False,
        }
    )
    meta["seconds"]["total"] = round(time.perf_counter() - t0, 3)
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def describe_graph(graph_dir: str | Path) -> dict[str, str]:
    """`asrdecode info GRAPH_DIR`: printable facts about a built or converted graph."""
    d = Path(graph_dir)
    path = find_graph_file(d)
    if path is None:
        raise GraphError(f"{d}: no graph.pt or graph.safetensors (not a graph folder)")
    graph = DeviceGraph.load(path)
    s = graph.summary()
    info = {
        "file": ", ".join(name for name in GRAPH_FILES if (d / name).is_file()),
        "kind": str(graph.meta.get("kind", "?")),
        "topology": str(graph.meta.get("topology", "-")),
        "states": f"{s['states']:,}",
        "arcs": f"{s['arcs']:,}",
        "epsilon arcs": f"{s['epsilon_arcs']:,} ({100 * s['epsilon_share']:.1f}%)",
        "final states": f"{s['final_states']:,}",
        "size": f"{s['bytes']:,} bytes ({s['bytes'] / 2**20:.2f} MiB)",
        "model columns read": str(s["max_ilabel"]),
    }
    if "blank_column" in graph.meta:
        info["blank"] = f"column {graph.meta['blank_column']} (ilabel {graph.meta['blank_ilabel']})"
    for name in ("words.txt", "units.txt"):
        if (d / name).is_file():
            table = read_symbols(d / name)
            real = [v for v in table.values() if v not in ("<eps>", "<s>", "</s>") and not DISAMBIG.match(v)]
            info[f"{name.split('.')[0]} (vocabulary)"] = str(len(real))
    meta_path = d / "meta.json"
    if meta_path.is_file():
        meta = read_graph_meta(meta_path)
        if "seconds" in meta:
            info["build seconds"] = str(meta["seconds"].get("total"))
        if meta.get("lm"):
            info["LM"] = f"order {meta['lm']['order']}, n-grams {meta['lm']['ngrams']}"
        if meta.get("dropped_lexicon_words"):
            info["dropped lexicon words"] = json.dumps(meta["dropped_lexicon_words"])
        if meta.get("deferred_weights"):
            deferred = meta["deferred_weights"]
            info["deferred weights"] = f"share {deferred['share']}, decay {deferred['decay']} (graph.defer)"
    return info
