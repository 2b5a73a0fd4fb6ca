"""`let`: the lazy-evaluation token-group decoder (paper 002) over a base graph and two n-gram LMs.

``decoder.graph`` is a TLG/HCLG built with a small LM (``decoder.small_lm``, the ARPA the graph was
built from); ``decoder.lm`` is the large ARPA; their difference is `wfst-otf`'s `DifferenceLM`
(same names, same costs). The search (`asrdecode.decoders.let.search`) runs
on the base graph composed on the fly with D = G_large "minus" G_small: a word arc costs its graph
weight plus ``lm_scale * (-ln p_large(w | h) + ln p_small(w | h'))`` (``</s>`` likewise at the
end), so with ``lm_scale = 1`` a path scores as in a graph built with the large LM. Tokens are
grouped per graph state with at most ``group_capacity`` LM-state members; members are evaluated
only at word arcs and where different groups meet (lazy evaluation); pruning works on the groups
(``max_active`` counts groups, not (state, LM state) pairs), optionally with the bucket-queue
cut-off (``bucket_width``).

Results go through the `wfst` decoder's path-to-words code (words, word times, tokens);
``score = -total``, ``lm_score = -(graph cost + D cost)``, ``acoustic_score`` the rest.
``last_info["stats"]``: groups, arcs expanded, members evaluated at word arcs, unions.

Lattices and n-best (``decoder.lattice``, ``nbest > 1``): paper 002's exact lattices, in the
`wfst` lattice format. A lattice state is an utterance's (graph state, D state) pair, as in
`wfst-otf`'s lattices: every group member is a node, and every arc the search crossed between
groups (a *block arc*) stands for one arc per member of its source block, to the destination
group's member with the D state that member reaches (`search._lattice_frame`). So the raw lattice
holds the arcs a token-per-pair decoder would keep between the same tokens, and the same
lattice-beam pruning and determinization (`wfst.lattice`) make the word lattice.

Backends: only ``compiled`` (numba, CPU: one utterance per worker thread, the GIL released) is
implemented; ``auto`` uses it on every device (log-probs are copied to the host);
``backend: torch`` (the batched GPU design) is a configuration error. No streaming.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from asrdecode.decoders.base import DecoderContext, DecodeResult, PendingDecode
from asrdecode.decoders.lms import load_difference_lm
from asrdecode.decoders.wfst.compiled import CompiledRunner, PendingBatch, as_costs, search_settings
from asrdecode.decoders.wfst.core import PruningOptions
from asrdecode.decoders.wfst.decoder import GraphSearchConfig, check_search_options
from asrdecode.decoders.wfst.lattice import backward_costs, collapse_kernel
from asrdecode.decoders.wfst.paths import (
    BestPath,
    CostChunks,
    GraphPaths,
    NbestRescoring,
    attach_confidences,
    attach_lattices,
    blank_column,
    cost_parts,
    utterance_costs,
)
from asrdecode.decoders.workspace import INIT_CAPACITY, lattice_records
from asrdecode.errors import ConfigError
from asrdecode.graph.format import DeviceGraph
from asrdecode.lm.difference import DifferenceLM, new_memo, zeros_on_cache_lines
from asrdecode.models.base import ModelOutput
from asrdecode.numba_status import announce_first_compile

if TYPE_CHECKING:
    import torch

log = logging.getLogger("asrdecode.decoders.let")

BACKENDS = ("auto", "compiled", "torch")


@dataclass
class LetConfig(GraphSearchConfig):
    """Options of the `let` decoder: the shared ones (`GraphSearchConfig`; max_active counts
    groups) and the LM names of `wfst-otf`:

    lm: the large ARPA (plain or .gz). small_lm: the ARPA the graph was built with (default: the
      one named in the graph folder's meta.json, if that path exists).
    lm_scale: weight of the LM difference (1 = score paths as the large LM would).
    group_capacity: most LM states (members) a group keeps, best first (paper 002 sec. I, 1).
    bucket_width: > 0: the max/min-active cut-off from a bucket queue of this bin width (cost
      units; paper 002's histogram pruning, approximate to one bin); 0: exact selection as `wfst`.
    backend: auto | compiled | torch; only compiled exists (auto = compiled on any device).
    """

    lm: str = ""
    small_lm: str = ""
    lm_scale: float = 1.0
    group_capacity: int = 16
    bucket_width: float = 0.0


@dataclass
class LetPath(BestPath):
    """The best path of one utterance (`BestPath`, as `wfst`'s compiled backend), its stats and,
    with lattices, its lattice data (arcs, nodes, pairs: `GraphPaths.pair_lattice`)."""

    found: bool
    stats: np.ndarray
    lm_state: int = -1  # D state (DifferenceLM union state) of the best member at the end
    lattice: tuple | None = None


class LetWorkspace:
    """A search's arrays (`search.WORKSPACE`; grown by doubling, reused across utterances) and counters."""

    def __init__(self) -> None:
        from asrdecode.decoders.let import search

        self.arrays = search.WORKSPACE.allocate(
            wcache=zeros_on_cache_lines(1 << search.WORD_CACHE_BITS, search.WORD_CACHE_DTYPE),
            memo=new_memo(),  # LM lookups (one search's LM is fixed)
        )
        self.lattice = search.LATTICE.allocate(
            pair_tab=np.full(4 * INIT_CAPACITY, -1, np.int64),
            pair_slot=np.full(INIT_CAPACITY, -1, np.int32),
            pair_slot2=np.full(INIT_CAPACITY, -1, np.int32),
        )
        self.ctr = np.zeros(search.NUM_COUNTERS, np.int64)
        self.stats = np.zeros(search.NUM_STATS, np.int64)

    def lattice_data(self) -> tuple[np.recarray, np.recarray, np.recarray]:
        """Copies of the kept lattice arcs (with the LM's share ``lm``), nodes and pairs (each
        lattice state's graph ``state`` and ``lm_state``), as `wfst-otf`'s."""
        from asrdecode.decoders.let import search

        na, nn, npair = (int(self.ctr[i]) for i in (search.C_LAT_ARCS, search.C_NODES, search.C_PAIRS))
        return lattice_records(search.LATTICE, self.lattice, na, nn, npair)


class LetSearch(CompiledRunner):
    """The compiled LET search over one graph and LM pair (`CompiledRunner`: a workspace and state
    maps per worker thread, one utterance per task)."""

    label = "let"

    def __init__(self, graph: DeviceGraph, lm: DifferenceLM, capacity: int = 16, threads: int = 0) -> None:
        if capacity < 1:
            raise ConfigError("decoder.group_capacity must be >= 1")
        super().__init__(graph, threads)
        max_word = int(self.arcs["olabel"].max(initial=0))
        if lm.large.vocab_size <= max_word:
            raise ConfigError(
                f"decoder.lm: LM vocabulary ({lm.large.vocab_size}) lacks graph word id {max_word}"
            )
        self.diff = lm
        self.lm = lm.arrays()
        self.capacity = int(capacity)

    def kernels(self) -> tuple:
        from asrdecode.decoders.let import search

        return (search.search_advance, search.search_init, search.search_best)

    def warm_up(self) -> None:
        self._decode(self.warm_up_costs(1), search_settings(PruningOptions(1.0, 10, 1, 0.5, 1), 1))

    def decode_one(self, ac: np.ndarray | CostChunks, settings: np.record, lattice: bool = False) -> LetPath:
        """1-best of one utterance; ac: float32 [T, V] acoustic costs (-acoustic_scale * log-probs),
        or `CostChunks` made part by part as the search goes.
        With `lattice` the path carries the utterance's lattice data (settings' lattice beam)."""
        self.ensure_compiled()
        return self._decode(ac, settings, lattice)

    def _decode(self, ac: np.ndarray | CostChunks, settings: np.record, lattice: bool = False) -> LetPath:
        from asrdecode.decoders.let import search

        w = self.thread_workspace(LetWorkspace)
        slot = self.state_map("slot", self.num_states)
        slot_lm = self.state_map("slot_lm", self.diff.num_states)
        f32 = np.float32
        beam, cap, eps_limit, lm = f32(settings.beam), self.capacity, int(settings.eps_limit), self.lm
        hist = f32(settings.history_beam)
        w.ctr[search.C_VOCAB] = self.diff.large.vocab_size
        w.stats[:] = 0
        U, lattice_beam, interval = (
            int(self.diff.num_states),
            float(settings.lattice_beam),
            int(settings.prune_interval),
        )
        w.arrays, w.lattice = search.search_init(
            self.states, self.arcs, self.start, DifferenceLM.START, cap, beam, hist, slot, slot_lm,
            eps_limit, lm, U, w.arrays, w.ctr, w.stats, int(settings.gc_records), lattice, lattice_beam,
            interval, w.lattice,
        )  # fmt: skip
        for part in cost_parts(ac):
            w.arrays, w.lattice = search.search_advance(
                self.states, self.arcs, as_costs(part), beam, int(settings.max_active),
                int(settings.min_active), f32(settings.beam_delta), f32(settings.bucket_width), cap, slot,
                slot_lm, eps_limit, lm, U, w.arrays, w.ctr, w.stats, lattice, lattice_beam, interval,
                w.lattice, f32(settings.word_beam), hist, int(settings.l2_bytes),
            )  # fmt: skip
        arcs, frames, total, reached, found, state = search.search_best(
            self.states, lm, w.arrays, w.ctr, True
        )
        stats = w.stats.copy()
        stats[search.S_RECORDS] = w.ctr[search.C_REC] + w.ctr[search.C_MREC]
        data = w.lattice_data() if lattice else None
        return LetPath(arcs, frames, float(total), bool(reached), bool(found), stats, int(state), data)

    def submit(
        self,
        acs: list,
        settings: np.record,
        threads: int = 0,
        lattice: bool = False,
        prepare: Callable[[Any], np.ndarray] | None = None,
        finish: Callable[[Any, int], None] | None = None,
    ) -> PendingBatch:
        """Decode utterances on `threads` workers (default: the search's), longest first, queued
        behind any batch submitted before (`prepare`, `finish`: as `CompiledRunner.submit_batch`);
        the paths from ``.result()``."""
        return self.submit_batch(
            lambda ac: self.decode_one(ac, settings, lattice),
            acs,
            threads=threads,
            prepare=prepare,
            finish=finish,
        )


class LetDecoder:
    """`decoder.type: let` (see the module docstring). One instance decodes many batches."""

    name: ClassVar[str] = "let"
    config_type: ClassVar[type] = LetConfig
    refused_options: ClassVar[tuple[str, ...]] = ("history_max",)  # its groups: group_capacity

    @staticmethod
    def check_options(c: LetConfig) -> None:
        """One-line ConfigErrors for values the search cannot use (no graph or LM read)."""
        if c.backend not in BACKENDS:
            raise ConfigError(f"decoder.backend: {c.backend!r} is not one of {', '.join(BACKENDS)}")
        if c.backend == "torch":
            raise ConfigError("decoder.backend: torch is not implemented for let (use compiled or auto)")
        if c.group_capacity < 1:
            raise ConfigError("decoder.group_capacity must be >= 1")
        if c.bucket_width < 0:
            raise ConfigError("decoder.bucket_width must be >= 0")
        if c.history_max:  # left out when the default setup is switched to let (`refused_options`)
            raise ConfigError(
                "decoder.history_max is wfst-otf's; let's groups keep decoder.group_capacity members "
                "(switching a wfst-otf config to let: add decoder.history_max=0)"
            )
        check_search_options(c)

    def __init__(
        self,
        config: LetConfig,
        context: DecoderContext | None = None,
        graph: DeviceGraph | None = None,
        words: dict[int, str] | None = None,
        lm: DifferenceLM | None = None,
    ) -> None:
        c = config
        self.check_options(c)
        self.config = c
        self.context = context
        # the graph with its word insertion penalty, and best paths -> words, word times and costs
        self.paths = GraphPaths.for_decoder(
            c.graph, c.lexicon, c.word_insertion_penalty, context, graph, words
        )
        if lm is None:
            lm = load_difference_lm(c, self.paths.words, self.paths.olabel)
        self.search = LetSearch(self.paths.graph, lm, c.group_capacity, c.threads)
        self.path_lm = self.search.lm  # `DifferenceLM.arrays()`, as `wfst-otf`'s
        self.rescoring = NbestRescoring.for_config(c, self.paths)
        self.settings = c.search_settings(
            self.paths.graph.num_states, bucket_width=c.bucket_width, capacity=c.group_capacity,
            lattice_beam=c.lattice_beam, prune_interval=c.prune_interval,
        )  # fmt: skip

        self.last_info: dict[str, Any] = {}
        if c.want_lattice:  # the lattice kernels compile at their first use
            announce_first_compile("let: lattices", backward_costs, collapse_kernel)

    def takes_deferred_scores(self, device: torch.device) -> bool:
        """Whether `decode` takes deferred scores (`DeferredScores`) on `device`: on the CPU, where
        its worker threads score each utterance before searching it."""
        return device.type == "cpu"

    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        return self.start(output).result()

    def start(self, output: ModelOutput) -> PendingDecode:
        """`decode` without waiting (`start_decode`): the batch is queued on the search's workers
        behind any batch started before."""
        if not output.has_scores:
            raise ValueError("let needs log-probs; this model produced none")
        reader, c = self.paths, self.config
        reader.check_columns(output.columns)
        blank = blank_column(output, reader.graph.meta, self.context)
        buffer, threads = self.search.score_buffer, self.search.threads
        rows, costs = utterance_costs(output, blank, c.acoustic_scale, c.blank_penalty, buffer, threads)
        lengths = [r.shape[0] for r in rows]
        want_lattice = c.want_lattice
        lats: list[Any] = [None] * len(rows)
        lm, arcs, beam = self.search.lm, self.search.arcs, c.lattice_beam

        def finish(p: LetPath, b: int) -> None:  # in the worker, after the utterance's search
            if p.found:
                lats[b] = self.paths.pair_lattice(p.lattice, lengths[b], lm, {}, p.reached_final, beam, arcs)

        pending = self.search.submit(
            rows, self.settings, lattice=want_lattice, prepare=costs, finish=finish if want_lattice else None
        )
        return PendingDecode(
            lambda: self._results(pending.result(), lats, blank, output.frame_shift), pending.cancel
        )

    def _results(self, paths: list[LetPath], lats: list[Any], blank: int, shift: float) -> list[DecodeResult]:
        """A batch's results from its paths (and the lattices its workers built); sets `last_info`."""
        from asrdecode.decoders.let import search as S

        reader, c = self.paths, self.config
        want_lattice = c.want_lattice
        results = []
        not_final = []
        for b, p in enumerate(paths):
            if not p.found:
                results.append(DecodeResult(words=[], score=float("-inf")))
                continue
            if not p.reached_final:
                not_final.append(b)
            results.append(reader.result(p, {}, blank, shift, self.search.lm))
        total = np.sum([p.stats for p in paths], axis=0) if paths else np.zeros(S.NUM_STATS, np.int64)
        self.last_info = {
            "stats": {"backend": "compiled", **dict(zip(S.STAT_NAMES, total.tolist(), strict=True))},
            "not_final": not_final,
            "paths": paths,
        }
        if want_lattice:
            self.last_info["lattice_search_arcs"] = sum(len(p.lattice[0]) for p in paths)
            density = attach_lattices(results, lats, c.lattice, c.nbest, shift)
            if density is not None:
                self.last_info["lattice_density"] = density
            if self.rescoring is not None:
                boosts = [{} for _ in results]
                self.rescoring.apply(
                    results, lats, boosts, blank, shift, not_final, self.path_lm, self.last_info
                )
            attach_confidences(results, lats, c.confidence_bias, c.confidence_slope)
        if total[S.S_EPS_LIMIT]:
            log.warning("let: epsilon closure hit its limit (negative-cost epsilon cycle in the graph?)")
        return results
