"""What the WFST decoders (`wfst`, `wfst-otf`, `let`) share around their searches: loading a
graph and its words, the acoustic costs they search with, a best path (graph arc indices and
their frames) read back into a `DecodeResult` with words, word times and costs, and a search's
lattice arcs and nodes made into a word lattice and n-best."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asrdecode.decoders.base import DecoderContext, DecodeResult, Word
from asrdecode.decoders.lms import load_rescorer
from asrdecode.decoders.wfst.lattice import CompactLattice, build_lattice, determinize
from asrdecode.errors import ConfigError, GraphError
from asrdecode.graph.format import DeviceGraph, find_graph_file, graph_folder
from asrdecode.graph.symbols import read_symbols
from asrdecode.io.lines import read_lines
from asrdecode.lm.difference import DifferenceLM, lm_final_costs, path_lm_cost
from asrdecode.lm.rescore import NbestRescorer
from asrdecode.models.base import ModelOutput

log = logging.getLogger("asrdecode.decoders.wfst")

# frames of deferred scores made at once for a search (`CostChunks`): 2.6 MB of 5,126 senones
SEARCH_CHUNK_FRAMES = 128


def read_pronunciations(lexicon: Path, units_txt: Path) -> dict[str, list[tuple[int, ...]]]:
    """word -> unit-column sequences, from a lexicon file and the graph's units.txt (id = column+1)."""
    column = {sym: i - 1 for i, sym in read_symbols(units_txt).items() if i > 0}
    prons: dict[str, list[tuple[int, ...]]] = {}
    for _, line in read_lines(lexicon, GraphError):
        f = line.split()
        if len(f) < 2:
            continue
        names = ["<space>" if u == " " else u for u in f[1:]]
        if all(u in column for u in names):
            prons.setdefault(f[0], []).append(tuple(column[u] for u in names))
    return prons


def load_graph(spec: str) -> tuple[DeviceGraph, dict[int, str]]:
    """A graph folder / graph.pt / .fst path -> (DeviceGraph on CPU, word id -> word)."""
    if not spec:
        raise ConfigError("decoder.graph must point to a graph folder (asrdecode build-graph) or graph.pt")
    p = Path(spec)
    folder = p if p.is_dir() else p.parent
    if p.is_dir():
        if (device_file := find_graph_file(p)) is not None:  # graph.pt or graph.safetensors
            graph = DeviceGraph.load(device_file)
        else:
            fsts = sorted(p.glob("*.fst"))
            if not fsts:
                raise GraphError(f"{p}: no graph.pt, graph.safetensors or .fst graph in this folder")
            graph = _from_fst(fsts[0])
    elif p.suffix == ".fst":
        graph = _from_fst(p)
    else:
        graph = DeviceGraph.load(p)
    words_file = folder / "words.txt"
    words = read_symbols(words_file) if words_file.is_file() else {}
    if not words:
        log.warning("wfst: no words.txt next to %s; words are printed as ids", spec)
    check_declared(graph, words, folder)
    return graph, words


def check_declared(graph: DeviceGraph, words: dict[int, str], folder: Path) -> None:
    """A graph folder's files agree: every output label is a word of words.txt, and the folder's
    meta.json (when there is one: schema-checked) declares the graph's own states, arcs, largest
    labels, number of model columns, blank, kind and topology. One-line GraphErrors naming the
    file."""
    from asrdecode.graph.staging import read_graph_meta

    top = int(graph.olabel.max()) if graph.num_arcs else 0
    if words and top > max(words):
        raise GraphError(
            f"{folder / 'words.txt'}: ends at word id {max(words)}, but the graph outputs word id {top}: "
            "the folder's files are from different builds"
        )
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return
    meta = read_graph_meta(meta_path)
    sizes = meta.get("sizes")
    declared = sizes.get(meta.get("kind")) if isinstance(sizes, dict) else None
    claims = dict(declared) if isinstance(declared, dict) else {}
    for key in ("num_columns", "blank_column", "blank_ilabel", "kind", "topology"):
        claims.setdefault(key, meta.get(key))
    actual = {"states": graph.num_states, "arcs": graph.num_arcs}
    if graph.num_arcs:
        actual |= {"max_ilabel": graph.max_ilabel, "max_olabel": top}
    actual |= {
        key: graph.meta.get(key)
        for key in ("num_columns", "blank_column", "blank_ilabel", "kind", "topology")
    }
    for key, value in actual.items():
        claim = claims.get(key)
        if claim is not None and value is not None and claim != value:
            raise GraphError(
                f"{meta_path}: declares {key} {claim!r}, the graph has {value}: the folder's files are "
                "from different builds (rebuild it)"
            )


def _from_fst(path: Path) -> DeviceGraph:
    from asrdecode.graph.openfst import read_fst

    return DeviceGraph.from_kaldifst(read_fst(path))


def acoustic_costs(
    log_probs: torch.Tensor,
    blank: int,
    acoustic_scale: float,
    blank_penalty: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """-acoustic_scale * (log-probs with the blank penalty), float32; into ``out`` when given (which
    may be ``log_probs`` itself)."""
    lp = log_probs.float()
    if blank_penalty and blank >= 0:
        lp = lp.clone() if out is None else out.copy_(lp)
        lp[..., blank] -= blank_penalty
    return torch.mul(lp, -acoustic_scale, out=out)


class CostChunks:
    """One utterance's acoustic costs (float32 [T, V]) made ``chunk`` frames at a time, as its
    search reaches them (`cost_parts`): each part is scored into the worker's buffer
    (``buffer(chunk * V)``, kept between utterances) and converted there in place, so that the
    search reads costs still in the cache and a worker holds one part's scores, not an utterance's.
    ``chunk`` is a multiple of the model's scoring chunk (`DeferredScores.chunk`), so each frame is
    scored with the arithmetic of a whole utterance."""

    def __init__(self, inputs: torch.Tensor, make: Callable[[torch.Tensor], np.ndarray], chunk: int) -> None:
        self.inputs, self.make, self.chunk = inputs, make, chunk

    def __iter__(self) -> Iterator[np.ndarray]:
        frames = self.inputs.shape[0]
        for lo in range(0, max(frames, 1), self.chunk):  # no frames: one empty part
            yield self.make(self.inputs[lo : lo + self.chunk])


def cost_parts(ac: np.ndarray | CostChunks) -> Iterable[np.ndarray]:
    """The parts a search advances through in turn: a `CostChunks`' parts, or the whole array."""
    return ac if isinstance(ac, CostChunks) else (ac,)


def utterance_costs(
    output: ModelOutput,
    blank: int,
    acoustic_scale: float,
    blank_penalty: float,
    buffer: Callable[[int], np.ndarray] | None = None,
    threads: int = 1,
) -> tuple[list[torch.Tensor], Callable[[torch.Tensor], np.ndarray | CostChunks]]:
    """The compiled searches' input: one row per utterance and the function that makes one
    utterance's acoustic costs from its row, called by the search's worker threads. With log-probs
    the rows are views of each utterance's valid frames on the host (padding frames are never
    converted) and the costs an array (float32 [T, V]). With deferred scores (`DeferredScores`)
    the rows are the utterances' model inputs and the costs `CostChunks`, scored by the worker as
    its search goes; except an utterance whose search is the batch's critical path on ``threads``
    workers (longer than the others' frames over ``threads`` - 1): it is scored here, up front, on
    all the model's threads (``score_wide``), while nothing else runs."""
    deferred = output.deferred
    if output.log_probs is None and deferred is not None:
        columns = deferred.columns
        rows = list(deferred.inputs)
        ahead: dict[int, np.ndarray] = {}  # id(row) -> its costs, made up front
        counts = [r.shape[0] for r in rows]
        if threads > 1 and deferred.score_wide is not None and rows:
            top = max(range(len(rows)), key=counts.__getitem__)
            if counts[top] * (threads - 1) > sum(counts) - counts[top]:
                made = torch.empty(counts[top], columns)
                deferred.score_wide(rows[top], made)
                made = acoustic_costs(made, blank, acoustic_scale, blank_penalty, out=made)
                ahead[id(rows[top])] = made.numpy()
        chunk = deferred.chunk * max(1, SEARCH_CHUNK_FRAMES // deferred.chunk) if deferred.chunk else 0

        def part(inputs: torch.Tensor) -> np.ndarray:
            numel = inputs.shape[0] * columns
            memory = torch.from_numpy(buffer(numel)) if buffer is not None else torch.empty(numel)
            frames = memory[:numel].view(inputs.shape[0], columns)
            deferred.score(inputs, frames)
            return acoustic_costs(frames, blank, acoustic_scale, blank_penalty, out=frames).numpy()

        def scored(inputs: torch.Tensor) -> np.ndarray | CostChunks:
            if id(inputs) in ahead:
                return ahead.pop(id(inputs))
            return CostChunks(inputs, part, chunk) if chunk else part(inputs)

        return rows, scored
    if output.log_probs is None:
        raise ValueError("the WFST decoders need log-probs; this model produced none")
    lp = output.log_probs.detach().to("cpu")
    T = lp.shape[1]
    rows = [lp[b, : min(int(n), T)] for b, n in enumerate(output.lengths.tolist())]

    def costs(frames: torch.Tensor) -> np.ndarray:
        return acoustic_costs(frames, blank, acoustic_scale, blank_penalty).contiguous().numpy()

    return rows, costs


def blank_column(output: ModelOutput | None, graph_meta: dict, context: DecoderContext | None) -> int:
    """The blank column of the model outputs: the output's, else the graph's, else the model's (-1:
    none)."""
    if output is not None and output.blank_id >= 0:
        return output.blank_id
    if "blank_column" in graph_meta:
        return int(graph_meta["blank_column"])
    if context is not None and context.blank_id >= 0:
        return context.blank_id
    return -1


@dataclass
class BestPath:
    """A 1-best path from any WFST search: arc indices and the frame of each (epsilon arcs
    included, in path order), its total cost and whether it ends in a final state."""

    arcs: np.ndarray
    frames: np.ndarray
    total: float
    reached_final: bool


class GraphPaths:
    """A decoding graph's arcs on the host, its words (both ways) and pronunciations: reads best
    paths back.
    `graph` is the graph the search runs on (with the word insertion penalty on its word arcs)."""

    def __init__(
        self,
        graph: DeviceGraph,
        words: dict[int, str],
        context: DecoderContext | None = None,
        prons: dict[str, list[tuple[int, ...]]] | None = None,
    ) -> None:
        self.graph = graph
        self.words = words
        self.word_ids = {w: i for i, w in words.items()}
        self.context = context
        self.prons = prons or {}
        a = graph.arc_arrays()
        self.src, self.ilabel, self.olabel = a["src"], a["ilabel"].astype(np.int64), a["olabel"]
        self.weight, self.next = a["weight"].astype(np.float64), a["nextstate"]
        self.final = graph.final.numpy().astype(np.float64)
        self.columns = graph.max_ilabel  # model columns read

    def check_columns(self, given: int) -> None:
        """A one-line error if the model gives fewer output columns than the graph reads (a graph
        built for another model: the searches would read past each frame's scores)."""
        if given < self.columns:
            raise GraphError(
                f"the graph reads {self.columns} model output columns, the model gives {given}: "
                "it was built for another model (build one from this model's units)"
            )

    @classmethod
    def for_decoder(
        cls,
        spec: str,
        lexicon: str | None,
        word_insertion_penalty: float,
        context: DecoderContext | None = None,
        graph: DeviceGraph | None = None,
        words: dict[int, str] | None = None,
    ) -> GraphPaths:
        """The graph of `decoder.graph` (or the one given), with `word_insertion_penalty` added to
        its word arcs, and the pronunciations of `decoder.lexicon` (default: the graph folder's
        lexicon.txt with its units.txt) for word times."""
        if graph is None:
            graph, words = load_graph(spec)
        if word_insertion_penalty:
            penalty = (graph.olabel != 0).to(graph.weight.dtype) * word_insertion_penalty
            graph = replace(graph, weight=graph.weight + penalty)
        folder = graph_folder(spec)
        path = Path(lexicon) if lexicon else (folder / "lexicon.txt" if folder else None)
        prons: dict[str, list[tuple[int, ...]]] = {}
        if path is not None and path.is_file() and folder is not None and (folder / "units.txt").is_file():
            prons = read_pronunciations(path, folder / "units.txt")
        elif lexicon:
            raise ConfigError(f"decoder.lexicon: {lexicon} not found (or no units.txt in the graph folder)")
        return cls(graph, words or {}, context, prons)

    def result(
        self, path: BestPath, boost: dict[int, float], blank: int, shift: float, lm: tuple | None = None
    ) -> DecodeResult:
        """DecodeResult of a 1-best path (either backend): words, word times, tokens and the
        score split. With `lm` (`DifferenceLM.arrays()`, the on-the-fly decoders) the path's
        total includes the LM difference of its words, which goes to ``lm_score``."""
        arcs_ok = path.arcs >= 0
        arcs, frames, total, reached = (
            path.arcs[arcs_ok],
            path.frames[arcs_ok],
            path.total,
            path.reached_final,
        )
        il, ol = self.ilabel[arcs], self.olabel[arcs]
        last_state = int(self.next[arcs[-1]]) if len(arcs) else self.graph.start
        graph_cost = float(self.weight[arcs].sum()) + (float(self.final[last_state]) if reached else 0.0)
        boost_cost = float(sum(boost.get(int(o), 0.0) for o in ol if o > 0))
        if lm is not None:
            graph_cost += path_lm_cost(lm, [int(o) for o in ol if o > 0], reached)
        acoustic = total - graph_cost - boost_cost
        emitting = il > 0
        nonblank = emitting & (il - 1 != blank)
        # tokens: non-blank emitting arcs that enter a unit (not self-loops)
        selfloop = self.src[arcs] == self.next[arcs]
        tok_mask = nonblank & ~selfloop
        tokens = (il[tok_mask] - 1).tolist()
        token_frames = frames[tok_mask].tolist()
        word_pos = np.nonzero(ol > 0)[0]
        word_ids = [int(o) for o in ol[word_pos]]
        names = [self.words.get(w, str(w)) for w in word_ids]
        # last frame of each token's run (self-loop continuations extend the current token)
        token_end = list(token_frames)
        k = -1
        for i in np.nonzero(nonblank)[0]:
            if tok_mask[i]:
                k += 1
            elif k >= 0:
                token_end[k] = int(frames[i])
        spans = self.word_spans(names, tokens)
        words: list[Word] = []
        if spans is not None:
            for name, (a, b) in zip(names, spans, strict=True):
                start, end = token_frames[a], token_end[b] + 1
                words.append(Word(name, round(start * shift, 3), round(end * shift, 3)))
        else:
            for i, p in enumerate(word_pos):
                q = word_pos[i + 1] if i + 1 < len(word_pos) else len(arcs)
                seg = np.nonzero(nonblank[p:q])[0] + p
                if len(seg):
                    start, end = int(frames[seg[0]]), int(frames[seg[-1]]) + 1
                else:
                    em = np.nonzero(emitting[p:])[0]
                    start = int(frames[p + em[0]]) if len(em) else max(int(frames[p]), 0)
                    end = start + 1
                words.append(Word(names[i], round(start * shift, 3), round(end * shift, 3)))
        return DecodeResult(
            words=words,
            tokens=tokens,
            token_frames=token_frames,
            score=-total,
            acoustic_score=-acoustic,
            lm_score=-(graph_cost + boost_cost),
        )

    def word_lattice(
        self,
        arcs: np.recarray | None,
        nodes: np.recarray | None,
        num_frames: int,
        start: int,
        finals: np.ndarray,
        boost: dict[int, float],
        reached_final: bool,
        lattice_beam: float,
        arc_records: np.ndarray,
    ) -> CompactLattice | None:
        """`build_lattice` + `determinize` of one utterance's search arcs and nodes over lattice
        states with the given start and final costs (`arc_records`: `graph.format.graph_records`)."""
        lat = build_lattice(
            arcs, nodes, num_frames, start, self.ilabel, self.olabel, self.weight, finals, boost,
            reached_final, lattice_beam, self.words, arc_records,
        )  # fmt: skip
        return determinize(lat) if lat is not None else None

    def pair_lattice(
        self,
        data: tuple,
        num_frames: int,
        lm: tuple,
        boost: dict[int, float],
        reached_final: bool,
        lattice_beam: float,
        arc_records: np.ndarray,
    ) -> CompactLattice | None:
        """`word_lattice` of an on-the-fly search (`wfst-otf`, `let`), whose lattice states are the
        utterance's (graph state, LM state) pairs (`data`: arcs with the LM's share ``lm``, nodes,
        pairs with ``state`` and ``lm_state``): a pair's final cost is the graph's plus the LM
        difference at </s> (`lm`: `DifferenceLM.arrays()`), the start pair is (start, <s>)."""
        arcs, nodes, pairs = data
        states = pairs["state"].astype(np.int64)
        lm_states = pairs["lm_state"].astype(np.int64)
        finals = self.final[states] + lm_final_costs(lm, lm_states)
        start = np.flatnonzero((states == self.graph.start) & (lm_states == DifferenceLM.START))
        start_pair = int(start[0]) if len(start) else -1
        return self.word_lattice(
            arcs, nodes, num_frames, start_pair, finals, boost, reached_final, lattice_beam, arc_records
        )

    def word_spans(self, names: list[str], tokens: list[int]) -> list[tuple[int, int]] | None:
        """(first, last) token index of each decoded word, or None if no rule explains the units."""
        if not names:
            return []
        if self.prons:
            spans, i = [], 0
            for w in names:
                match = next((p for p in self.prons.get(w, ()) if tuple(tokens[i : i + len(p)]) == p), None)
                if match is None:
                    break
                spans.append((i, i + len(match) - 1))
                i += len(match)
            if len(spans) == len(names) and i == len(tokens):
                return spans
        if self.context is not None and tokens:
            try:
                ww = self.context.words_of(tokens)
            except Exception:  # a tokenizer that does not know these units
                return None
            if [w for w, _, _ in ww] == names:
                return [(a, b) for _, a, b in ww]
        return None


def attach_lattices(
    results: list[DecodeResult],
    lattices: list[CompactLattice | None],
    keep_lattice: bool,
    nbest: int,
    frame_shift: float,
) -> float | None:
    """Give each result its word lattice (if `keep_lattice`) and its `nbest` best word sequences
    (if more than one) from the lattice; returns the lattices' mean density (arcs per frame; None
    without lattices)."""
    density = []
    for res, lat in zip(results, lattices, strict=True):
        if lat is not None:
            lat.frame_shift = frame_shift
        if keep_lattice:
            res.lattice = lat
            if lat is not None:
                density.append(lat.density())
        if nbest > 1:
            res.nbest = [(w, -c) for w, c in lat.nbest(nbest)] if lat is not None else []
    return sum(density) / len(density) if density else None


# calibrated confidences: the posterior is clipped to [CONFIDENCE_CLIP, 1 - CONFIDENCE_CLIP]
# before its logit
CONFIDENCE_CLIP = 1e-4


def calibrated_confidence(posterior: float, bias: float, slope: float) -> float:
    """``sigmoid(bias + slope * logit(posterior))``: a logistic calibration of a word posterior
    (Kaldi's `steps/conf/` fits one with more features); bias 0 and slope 1 keep the posterior."""
    if bias == 0.0 and slope == 1.0:
        return posterior
    p = min(max(posterior, CONFIDENCE_CLIP), 1.0 - CONFIDENCE_CLIP)
    z = bias + slope * math.log(p / (1.0 - p))
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def attach_confidences(
    results: list[DecodeResult], lattices: list[CompactLattice | None], bias: float = 0.0, slope: float = 1.0
) -> None:
    """Each result word's confidence from its utterance's word lattice
    (`CompactLattice.word_confidences`, then `calibrated_confidence`); words of results without a
    lattice, or whose words the lattice has no path for, keep none."""
    for res, lat in zip(results, lattices, strict=True):
        if lat is None or not res.words:
            continue
        confidences = lat.word_confidences([w.word for w in res.words])
        for w, conf in zip(res.words, confidences or [], strict=False):
            w.confidence = calibrated_confidence(conf, bias, slope)


class NbestRescoring:
    """N-best LM rescoring after a WFST search (`wfst`, `wfst-otf`, `let`; ``decoder.rescore_lm``,
    `asrdecode.lm.rescore`): each utterance's ``rescore_nbest`` best word sequences from its word
    lattice get the rescorer's added cost, minus what an on-the-fly search added for them (its LM
    difference, at the same scale); the cheapest becomes the result, its path read from the state
    lattice (`StateLattice.best_path_of`) and its scores shifted by the added cost."""

    def __init__(self, rescorer: NbestRescorer, paths: GraphPaths, rescore_nbest: int, nbest: int) -> None:
        self.rescorer, self.paths = rescorer, paths
        self.rescore_nbest, self.nbest = rescore_nbest, nbest

    @classmethod
    def for_config(cls, config: Any, paths: GraphPaths) -> NbestRescoring | None:
        """The rescoring of a decoder config (None without ``rescore_lm``); one-line ConfigErrors."""
        if not config.rescore_lm:
            return None
        return cls(load_rescorer(config), paths, config.rescore_nbest, config.nbest)

    def costs(
        self, sequences: list[list[str]], path_lm: tuple | None, reached_final: bool = True
    ) -> list[float]:
        """What rescoring adds to each word sequence's search cost (inf: the new LM cannot read
        it): the rescorer's ``scale * (exact_new - cheapest_graph)`` minus the same scale of the
        on-the-fly LM difference `path_lm` adds along it (with ``</s>`` if the path ends final)."""
        added = self.rescorer.added_costs(sequences)
        if path_lm is not None:
            for i, words in enumerate(sequences):
                ids = [self.paths.word_ids[w] for w in words]
                added[i] -= self.rescorer.scale * path_lm_cost(path_lm, ids, reached_final)
        return added

    def apply(
        self,
        results: list[DecodeResult],
        lattices: list[CompactLattice | None],
        boosts: list[dict[int, float]],
        blank: int,
        shift: float,
        not_final: list[int],
        path_lm: tuple | None,
        info: dict,
    ) -> None:
        """Rescore every result that has a lattice, in place; counts in `info`: ``rescored_changed``
        (words changed), ``rescore_unreadable`` (no hypothesis the new LM reads: the search's kept)."""
        changed = unreadable = 0
        for b, lat in enumerate(lattices):
            outcome = self._one(results, b, lat, boosts[b], blank, shift,
                                b not in not_final, path_lm)  # fmt: skip
            changed += outcome == "changed"
            unreadable += outcome == "unreadable"
        info["rescored_changed"] = changed
        if unreadable:
            info["rescore_unreadable"] = unreadable
            log.warning(
                "decoder.rescore_lm: no hypothesis of %d utterance(s) is in its vocabulary (and it has no "
                "<unk>); they keep the search's result",
                unreadable,
            )

    def _one(
        self,
        results: list[DecodeResult],
        b: int,
        lat: CompactLattice | None,
        boost: dict[int, float],
        blank: int,
        shift: float,
        reached_final: bool,
        path_lm: tuple | None,
    ) -> str:
        if lat is None or lat.state_lattice is None:
            return "none"
        hyps = lat.nbest(max(self.rescore_nbest, self.nbest))
        if not hyps:
            return "none"
        added = self.costs([w for w, _ in hyps], path_lm, reached_final)
        order = sorted(
            (i for i in range(len(hyps)) if np.isfinite(added[i])), key=lambda i: (hyps[i][1] + added[i], i)
        )
        if not order:
            return "unreadable"
        best, res = order[0], results[b]
        own = [w.word for w in res.words]
        changed = hyps[best][0] != own
        if changed:
            found = lat.state_lattice.best_path_of([self.paths.word_ids[w] for w in hyps[best][0]])
            if found is None:  # every lattice sequence has a path: kept as searched if not
                log.warning("decoder.rescore_lm: no lattice path for the rescored words; the search's kept")
                changed, best = False, next((i for i in order if hyps[i][0] == own), -1)
                if best < 0:
                    return "none"
            else:
                path = BestPath(*found, reached_final)
                new = self.paths.result(path, boost, blank, shift, path_lm)
                new.lattice, new.nbest = res.lattice, res.nbest
                results[b] = res = new
        res.score -= added[best]
        if res.lm_score is not None:
            res.lm_score -= added[best]
        if self.nbest > 1:
            res.nbest = [(hyps[i][0], -(hyps[i][1] + added[i])) for i in order[: self.nbest]]
        return "changed" if changed else "kept"
