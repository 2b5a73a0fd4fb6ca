"""Bring your own graph: an OpenFst TLG/HCLG (vector or const) converted once into the device format."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode.errors import GraphError
from asrdecode.graph.format import FORMAT_VERSION, DeviceGraph, graph_file_names
from asrdecode.graph.staging import staged_folder
from asrdecode.graph.symbols import read_symbols
from asrdecode.io.lines import read_lines

_TSTATE = re.compile(
    r"^Transition-state\s+(\d+):.*?(?:\bpdf\s*=\s*(\d+)|forward-pdf\s*=\s*(\d+)\s+"
    r"self-loop-pdf\s*=\s*(\d+))"
)
_TID = re.compile(r"^\s*Transition-id\s*=\s*(\d+)\b")


def read_tid2pdf(path: str | Path) -> dict[int, int]:
    """Transition-id -> pdf-id from Kaldi's `show-transitions` text, or from `tid pdf` lines.

    show-transitions prints a `Transition-state N: phone = P hmm-state = H pdf = K` line (or
    `forward-pdf = F self-loop-pdf = S` for chain models) followed by its `Transition-id = T ...`
    lines; a transition marked `[self-loop]` reads the self-loop pdf, any other the forward pdf.
    """
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: transition-id map not found")
    table: dict[int, int] = {}
    forward = loop = None
    for lineno, raw in read_lines(path, GraphError):
        line = raw.strip()
        if not line:
            continue
        m = _TSTATE.match(line)
        if m:
            if m.group(2) is not None:
                forward = loop = int(m.group(2))
            else:
                forward, loop = int(m.group(3)), int(m.group(4))
            continue
        m = _TID.match(raw)
        if m:
            if forward is None:
                raise GraphError(f"{path}:{lineno}: Transition-id before any Transition-state line")
            tid = int(m.group(1))
            table[tid] = loop if "[self-loop]" in line else forward
            continue
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            table[int(fields[0])] = int(fields[1])
            continue
        raise GraphError(f"{path}:{lineno}: not a show-transitions or 'tid pdf' line: '{line[:60]}'")
    if not table:
        raise GraphError(f"{path}: no transition-ids found")
    return table


def read_fst(fst_path: str | Path) -> Any:
    """Any standard-arc OpenFst file (vector or const)."""
    import kaldifst

    path = Path(fst_path)
    if not path.is_file():
        raise GraphError(f"{path}: FST file not found")
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head != b"\xd6\xfd\xb2\x7e":
        raise GraphError(f"{path}: not a binary OpenFst file")
    fst = kaldifst.StdFst.read(str(path))
    if fst is None:
        raise GraphError(
            f"{path}: OpenFst could not read this FST (only standard/tropical arcs are supported)"
        )
    return fst


def load_openfst_graph(
    fst_path: str | Path, words_txt: str | Path, tid2pdf: str | Path | None = None, kind: str | None = None
) -> DeviceGraph:
    """OpenFst TLG/HCLG -> DeviceGraph.

    A TLG (riva/NeMo) already has ilabel = model column + 1. A Kaldi HCLG has transition-ids as
    ilabels: with `tid2pdf` (show-transitions text) they become pdf-id + 1, the same convention.
    """
    fst = read_fst(fst_path)
    words = read_symbols(words_txt)
    graph = DeviceGraph.from_kaldifst(fst)
    if graph.num_states == 0:
        raise GraphError(f"{fst_path}: the FST is empty")
    if graph.num_arcs and int(graph.olabel.max()) > max(words, default=0):
        raise GraphError(
            f"{fst_path}: output label {int(graph.olabel.max())} is not in {words_txt} "
            f"(highest id {max(words)}); wrong words.txt?"
        )
    meta: dict[str, Any] = {
        "kind": kind or ("HCLG" if tid2pdf else "TLG"),
        "source": str(Path(fst_path).resolve()),
        "label_convention": "ilabel i reads model column i-1; 0 = epsilon; olabel = words.txt id",
    }
    if tid2pdf is not None:
        table = read_tid2pdf(tid2pdf)
        il = graph.ilabel.numpy().astype(np.int64)
        max_tid = int(il.max()) if il.size else 0
        lut = np.full(max(max_tid, max(table)) + 1, -1, dtype=np.int64)
        lut[0] = 0
        for tid, pdf in table.items():
            lut[tid] = pdf + 1
        mapped = lut[il]
        if (mapped < 0).any():
            bad = int(il[mapped < 0][0])
            raise GraphError(f"{fst_path}: transition-id {bad} is not in {tid2pdf}")
        a = graph.arc_arrays()
        graph = DeviceGraph.from_arrays(
            graph.num_states,
            graph.start,
            graph.final.numpy(),
            a["src"],
            mapped,
            a["olabel"],
            a["weight"],
            a["nextstate"],
        )
        meta["num_pdfs"] = max(table.values()) + 1
        meta["num_columns"] = meta["num_pdfs"]
    else:
        meta["num_columns"] = graph.max_ilabel
    graph.meta = meta
    graph.validate()
    return graph


def convert_openfst_graph(
    fst_path: str | Path,
    words_txt: str | Path,
    out_dir: str | Path,
    tid2pdf: str | Path | None = None,
    units_txt: str | Path | None = None,
    save_format: str = "both",
) -> dict:
    """Write a graph folder (graph.pt and/or graph.safetensors by `save_format`, words.txt, units.txt
    if given, meta.json) for an existing OpenFst graph; the folder is replaced as a whole."""
    import json

    graph_file_names(save_format)  # reject a bad format before converting
    graph = load_openfst_graph(fst_path, words_txt, tid2pdf)
    if units_txt is not None and not Path(units_txt).is_file():
        raise GraphError(f"{units_txt}: units file not found")
    with staged_folder(out_dir) as stage:
        files = graph.save_folder(stage, save_format)
        shutil.copyfile(words_txt, stage / "words.txt")
        if units_txt is not None:
            shutil.copyfile(units_txt, stage / "units.txt")
        meta = {
            **graph.meta,
            "format": f"asrdecode-graph v{FORMAT_VERSION}",
            "graph_files": list(files),
            "sizes": {"graph": graph.summary()},
        }
        (stage / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta
