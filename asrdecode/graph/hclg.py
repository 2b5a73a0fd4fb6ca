"""HCLG for HMM acoustic models: the shared recipe and a generic front end (pocketsphinx: sphinx.py).

L  phones per word, optional silence between words (self-loop at the word loop state)
G  ARPA via kaldilm;  LG = min(det(L o G)), disambiguation removed (as for TLG)
C  triphone context by kaldifst.compose_context (Kaldi's ComposeContext, width 3, centre 1):
   CLG ilabels are windows (left, phone, right), 0 = word-sequence boundary
H  one HMM per window with its transition matrix (generic: left-to-right, self-loop probability
   p at cost -ln p, forward 1 - p); the pdf of state k comes from the tied-state table for
   (left, phone, right), falling back to the phone's context-independent pdfs
HCLG = H o CLG; ilabel = pdf + 1 (same convention as TLG), olabel = words.txt id.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode.errors import GraphError
from asrdecode.graph.format import FORMAT_VERSION, DeviceGraph
from asrdecode.graph.fst_ops import arpa_to_g, compile_lg, fst_from_lists, make_lexicon_fst
from asrdecode.graph.stages import BuildStages
from asrdecode.graph.staging import staged_folder
from asrdecode.graph.symbols import write_symbols
from asrdecode.graph.units import add_disambig
from asrdecode.lm.arpa import check_arpa, plain_copy

Triphone = tuple[str | None, str, str | None]


@dataclass
class HmmTopology:
    """Left-to-right HMM shared by all phones."""

    num_states: int = 3
    self_loop_prob: float = 0.5

    def validate(self) -> None:
        if self.num_states < 1 or not 0.0 < self.self_loop_prob < 1.0:
            raise GraphError("HMM topology needs num_states >= 1 and 0 < self_loop_prob < 1")


@dataclass
class TiedStates:
    """pdf ids per HMM state: context-independent per phone, optional triphone overrides."""

    ci: dict[str, list[int]]
    triphones: dict[Triphone, list[int]] = dataclasses.field(default_factory=dict)

    @property
    def num_pdfs(self) -> int:
        ids = [p for v in self.ci.values() for p in v] + [p for v in self.triphones.values() for p in v]
        return max(ids) + 1

    def lookup(self, tri: Triphone) -> tuple[list[int], bool]:
        """(pdfs, backed_off)."""
        if tri in self.triphones:
            return self.triphones[tri], False
        if tri[1] not in self.ci:
            raise GraphError(f"phone '{tri[1]}' has no context-independent pdfs")
        return self.ci[tri[1]], True


Resolver = Callable[[list[int]], tuple[list[int], np.ndarray, bool]]


def make_h(windows: list[list[int]], resolve: Resolver) -> tuple[Any, int, np.ndarray]:
    """H: transition label -> CLG window index, one HMM per context window.

    `resolve(window)` gives (pdfs of the n emitting states, transition probabilities P[n, n+1]
    with P[i, j] = P(state i -> state j) and column n = exit, backed_off flag). A hub state
    (start, final) enters state 0 and outputs the window index; an arc into emitting state j
    reads a frame of pdf j; exits return to the hub by epsilon. Cost = -ln P.

    Input labels are Kaldi-style transition ids: one per (centre phone symbol, HMM state, pdf),
    so that H o CLG stays functional when different phones share tied states; `label_map[t]`
    gives the final ilabel (pdf + 1; 0 for epsilon and for the one-symbol windows, i.e.
    disambiguation symbols `[-d]` and C's subsequential symbol `[0]`, which get their own ids
    until determinization is done). Returns (H, number of backed-off windows, label_map).
    """
    arcs: list[tuple[int, int, int, float, int]] = []
    ids: dict[tuple[int, int, int], int] = {}
    label_map = [0]

    def tid(key: tuple[int, int, int], final_label: int) -> int:
        if key not in ids:
            ids[key] = len(label_map)
            label_map.append(final_label)
        return ids[key]

    n, backed_off = 1, 0
    for i, win in enumerate(windows):
        if not win:  # epsilon window
            continue
        if len(win) == 1:
            arcs.append((0, tid((-1, i, 0), 0), i, 0.0, 0))
            continue
        pdfs, trans, bo = resolve(win)
        backed_off += bo
        k = len(pdfs)
        states = list(range(n, n + k))
        n += k
        centre = win[1]
        arcs.append((0, tid((centre, 0, pdfs[0]), pdfs[0] + 1), i, 0.0, states[0]))
        for a in range(k):
            for b in range(a, k + 1):
                prob = float(trans[a, b])
                if prob <= 0.0:
                    continue
                if b == k:
                    arcs.append((states[a], 0, 0, -math.log(prob), 0))
                else:
                    label = tid((centre, b, pdfs[b]), pdfs[b] + 1)
                    arcs.append((states[a], label, 0, -math.log(prob), states[b]))
    return fst_from_lists(n, 0, {0: 0.0}, arcs), backed_off, np.array(label_map, dtype=np.int64)


def left_to_right(num_states: int, self_loop_prob: float | list[float]) -> np.ndarray:
    """P[n, n+1] of a left-to-right HMM without skips."""
    loops = [self_loop_prob] * num_states if isinstance(self_loop_prob, float) else list(self_loop_prob)
    trans = np.zeros((num_states, num_states + 1))
    for i, p in enumerate(loops):
        trans[i, i], trans[i, i + 1] = p, 1.0 - p
    return trans


def compile_hclg(
    num_phones: int,
    prons: list[tuple[str, tuple[int, ...]]],
    arpa: str | Path,
    resolve: Resolver,
    out_dir: str | Path,
    meta: dict[str, Any],
    optional: tuple[tuple[int, float], ...] = (),
    unit_table: list[tuple[str, int]] | None = None,
    determinize: bool = True,
    edge_silence: int | None = None,
    save_format: str = "both",
    stages: BuildStages | None = None,
) -> dict[str, Any]:
    """Shared HCLG recipe, timed in `stages` (G, LG, CLG, H∘CLG, determinize, minimize, write).

    `prons` use phone ids 1..num_phones, `optional` = (phone id, cost) that may appear between
    words with no output (silence, fillers). `edge_silence`: a phone id that every
    utterance starts and ends with, at no cost (pocketsphinx's `<s>`/`</s>` are silence words).
    Writes the graph folder (atomically, `staged_folder`; graph.pt and/or graph.safetensors by
    `save_format`), returns meta.

    determinize: as Kaldi's mkgraph, keep the disambiguation symbols through C and H, then
    HCLG = min(det(H o CLG)) on transition ids, mapped to pdf + 1 (disambiguation -> epsilon)
    afterwards; else HCLG = H o CLG as is.
    """
    import kaldifst

    t0 = time.perf_counter()
    summary = check_arpa(arpa)
    lm_words = [w for w in summary.vocab if w not in ("<s>", "</s>")]
    words = [("<eps>", 0)] + [(w, i + 1) for i, w in enumerate(lm_words)]
    word_ids = dict(words)
    n = len(words)
    words += [("#0", n), ("<s>", n + 1), ("</s>", n + 2)]
    prons = [(w, p) for w, p in prons if w in word_ids and p]
    if not prons:
        raise GraphError("no lexicon word is both in the LM and spelled with known phones")
    dis_prons, max_dis = add_disambig(prons)
    first_disambig = num_phones + 1
    with (
        staged_folder(out_dir) as stage,
        tempfile.TemporaryDirectory(prefix="scratch-", dir=stage) as scratch,
    ):
        tmp = Path(scratch)
        write_symbols(stage / "words.txt", words)
        arpa_plain = Path(arpa)
        with open(arpa_plain, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                arpa_plain = plain_copy(arpa_plain, tmp / "lm.arpa")
        stages = stages or BuildStages()
        with stages("G"):
            arpa_to_g(arpa_plain, stage / "words.txt", tmp / "G.fst", -1)
            G = kaldifst.StdVectorFst.read(str(tmp / "G.fst"))
        with stages("LG"):
            L = make_lexicon_fst(dis_prons, word_ids, first_disambig, n)
            if optional or edge_silence is not None:
                L = _add_loops(L, optional, edge_silence)
            disambig = list(range(first_disambig, first_disambig + max_dis + 1)) if determinize else []
            LG = compile_lg(L, G, first_disambig, n, keep_disambig=determinize)
        with stages("CLG"):
            CLG, windows = kaldifst.compose_context(disambig, 3, 1, LG)
            kaldifst.arcsort(CLG, sort_type="ilabel")
        with stages("H∘CLG"):
            H, backed_off, label_map = make_h(windows, resolve)
            kaldifst.arcsort(H, sort_type="olabel")
            HCLG = kaldifst.compose(H, CLG)
            kaldifst.connect(HCLG)
        if HCLG.num_states == 0:
            raise GraphError("H o CLG is empty")
        unreduced = HCLG.num_states
        if determinize:
            with stages("determinize"):
                if kaldifst.determinize_star(HCLG):
                    raise GraphError("determinization of H o CLG stopped early")
            with stages("minimize"):
                kaldifst.minimize_encoded(HCLG)
        with stages("write"):
            HCLG = _map_ilabels(HCLG, label_map)
            kaldifst.connect(HCLG)
            kaldifst.arcsort(HCLG, sort_type="ilabel")
            meta = {
                "kind": "HCLG",
                "label_convention": "ilabel i reads model column (pdf/senone) i-1; 0 = epsilon; "
                "olabel = words.txt id",
                **meta,
            }
            graph = DeviceGraph.from_kaldifst(HCLG, meta=dict(meta))
            graph.validate()
            graph_files = graph.save_folder(stage, save_format)
            kaldifst.StdConstFst(HCLG).write(str(stage / "HCLG.fst"))
            write_symbols(stage / "units.txt", unit_table or [("<eps>", 0)])
        covered = {w for w, _ in prons}
        meta.update(
            {
                "format": f"asrdecode-graph v{FORMAT_VERSION}",
                "graph_files": list(graph_files),
                "context_windows": len(windows) - 1,
                "triphones_backed_off": backed_off,
                "words": {"count": len(lm_words), "with_pronunciation": len(covered)},
                "disambig_symbols": max_dis + 1,
                "sizes": {
                    "G": {"states": G.num_states},
                    "LG": {"states": LG.num_states},
                    "CLG": {"states": CLG.num_states},
                    "H": {"states": H.num_states},
                    "HoCLG": {"states": unreduced},
                    "HCLG": graph.summary(),
                },
                "seconds": {**stages.seconds, "total": round(time.perf_counter() - t0, 3)},
            }
        )
        (stage / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def _map_ilabels(fst: Any, label_map: np.ndarray) -> Any:
    """Transition ids -> pdf + 1 (disambiguation ids -> epsilon)."""
    g = DeviceGraph.from_kaldifst(fst)
    a = g.arc_arrays()
    mapped = label_map[a["ilabel"].astype(np.int64)]
    return DeviceGraph.from_arrays(
        g.num_states, g.start, g.final.numpy(), a["src"], mapped, a["olabel"], a["weight"], a["nextstate"]
    ).to_kaldifst()


def _add_loops(L: Any, loops: tuple[tuple[int, float], ...], edge_unit: int | None = None) -> Any:
    """Optional units on L's loop state 0 (read between words, no output). With `edge_unit`,
    every utterance must begin and end with that unit (pocketsphinx's `<s>` and `</s>` are
    silence words every hypothesis starts and ends with): a new start state reads it into state 0,
    and each final state reads it (its final cost on that arc) into a new, only final state."""
    g = DeviceGraph.from_kaldifst(L)
    a = g.arc_arrays()
    rows = [[0, u, 0, c, 0] for u, c in loops]
    num_states, start, final = g.num_states, g.start, g.final.numpy()
    if edge_unit is not None:
        first, last = num_states, num_states + 1
        rows += [[first, edge_unit, 0, 0.0, start]]
        rows += [[int(f), edge_unit, 0, float(final[f]), last] for f in np.flatnonzero(np.isfinite(final))]
        num_states, start = num_states + 2, first
        final = np.full(num_states, np.inf, dtype=final.dtype)
        final[last] = 0.0
    extra = np.array(rows, dtype=np.float64).reshape(-1, 5)
    g2 = DeviceGraph.from_arrays(
        num_states,
        start,
        final,
        np.concatenate([a["src"], extra[:, 0].astype(np.int64)]),
        np.concatenate([a["ilabel"].astype(np.int64), extra[:, 1].astype(np.int64)]),
        np.concatenate([a["olabel"].astype(np.int64), extra[:, 2].astype(np.int64)]),
        np.concatenate([a["weight"], extra[:, 3].astype(np.float32)]),
        np.concatenate([a["nextstate"].astype(np.int64), extra[:, 4].astype(np.int64)]),
    )
    return g2.to_kaldifst()


def build_hclg(
    phones: list[str],
    lexicon: list[tuple[str, list[str]]],
    arpa: str | Path,
    tied: TiedStates,
    out_dir: str | Path,
    topo: HmmTopology | None = None,
    silence: str | None = None,
    silence_prob: float = 0.5,
    save_format: str = "both",
    stages: BuildStages | None = None,
) -> dict[str, Any]:
    """Generic HCLG into out_dir (graph.pt/.safetensors, HCLG.fst, words.txt, units.txt = phones, meta.json).

    Triphone pdfs come from `tied` (CI fallback); one shared left-to-right HMM topology;
    optional `silence` between words at cost -ln(silence_prob).
    """
    topo = topo or HmmTopology()
    topo.validate()
    phone_id = {p: i + 1 for i, p in enumerate(phones)}
    prons = [(w, tuple(phone_id[p] for p in sp)) for w, sp in lexicon if all(p in phone_id for p in sp)]
    trans = left_to_right(topo.num_states, topo.self_loop_prob)

    def resolve(win: list[int]) -> tuple[list[int], np.ndarray, bool]:
        left, centre, right = (phones[x - 1] if x > 0 else None for x in win)
        pdfs, bo = tied.lookup((left, centre, right))
        if len(pdfs) != topo.num_states:
            raise GraphError(
                f"phone '{centre}' has {len(pdfs)} pdfs, the HMM topology {topo.num_states} states"
            )
        return pdfs, trans, bo

    optional: tuple[tuple[int, float], ...] = ()
    if silence is not None:
        if silence not in phone_id:
            raise GraphError(f"silence phone '{silence}' is not in the phone list")
        optional = ((phone_id[silence], -math.log(silence_prob)),)
    meta = {
        "num_columns": tied.num_pdfs,
        "hmm": dataclasses.asdict(topo),
        "silence": silence,
        "dropped_lexicon_words": len(lexicon) - len(prons),
    }
    units = [("<eps>", 0)] + list(phone_id.items())
    return compile_hclg(
        len(phones),
        prons,
        arpa,
        resolve,
        out_dir,
        meta,
        optional,
        units,
        save_format=save_format,
        stages=stages,
    )
