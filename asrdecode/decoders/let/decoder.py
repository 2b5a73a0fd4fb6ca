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

Backends: only ``compiled`` (numba, CPU: one utterance per worker thread, the GIL released) is
implemented; ``auto`` uses it on every device (log-probs are copied to the host);
``backend: torch`` (the batched GPU design) is a configuration error. No lattices or n-best yet.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from asrdecode.decoders.base import DecoderContext, DecodeResult
from asrdecode.decoders.wfst.compiled import default_threads, graph_records
from asrdecode.decoders.wfst.paths import GraphPaths, acoustic_costs, blank_column
from asrdecode.decoders.wfst_otf.decoder import load_difference_lm
from asrdecode.errors import ConfigError
from asrdecode.graph.format import DeviceGraph
from asrdecode.lm.difference import DifferenceLM
from asrdecode.models.base import ModelOutput
from asrdecode.numba_status import announce_first_compile

log = logging.getLogger("asrdecode.decoders.let")

BACKENDS = ("auto", "compiled", "torch")


@dataclass
class LetConfig:
    """Options of the `let` decoder (wfst's names where they apply; LM names as `wfst-otf`).

    graph, lexicon, beam, max_active, min_active, beam_delta, acoustic_scale, blank_penalty,
      word_insertion_penalty, max_epsilon_passes, threads: as `wfst` (max_active counts groups).
    lm: the large ARPA (plain or .gz). small_lm: the ARPA the graph was built with (default: the
      one named in the graph folder's meta.json, if that path exists).
    lm_scale: weight of the LM difference (1 = score paths as the large LM would).
    group_capacity: most LM states (members) a group keeps, best first (paper 002 sec. I, 1).
    bucket_width: > 0: the max/min-active cut-off from a bucket queue of this bin width (cost
      units; paper 002's histogram pruning, approximate to one bin); 0: exact selection as `wfst`.
    backend: auto | compiled | torch; only compiled exists (auto = compiled on any device).
    """

    graph: str = ""
    lexicon: str = ""
    lm: str = ""
    small_lm: str = ""
    lm_scale: float = 1.0
    group_capacity: int = 16
    bucket_width: float = 0.0
    beam: float = 16.0
    max_active: int = 10000
    min_active: int = 200
    beam_delta: float = 0.5
    acoustic_scale: float = 1.0
    blank_penalty: float = 0.0
    word_insertion_penalty: float = 0.0
    max_epsilon_passes: int = 64
    backend: str = "auto"
    threads: int = 0


@dataclass
class LetPath:
    """The best path of one utterance: arcs and frames (as `wfst`'s compiled backend), costs."""

    arcs: np.ndarray
    frames: np.ndarray
    total: float
    reached_final: bool
    found: bool
    stats: np.ndarray
    lm_state: int = -1  # D state (DifferenceLM union state) of the best member at the end


class LetWorkspace:
    """A search's arrays (grown by doubling, reused across utterances) and counters."""

    def __init__(self) -> None:
        from asrdecode.decoders.let import search

        cache = 1 << search.WORD_CACHE_BITS
        memo = np.zeros(1 << search.MEMO_BITS, search.MEMO_DTYPE)  # LM lookups (one search's LM is fixed)
        memo["key"] = -1
        self.arrays = (
            *(
                np.empty(cache if i >= search.W_WC_KEY else 1024, dtype=dt)
                for i, dt in enumerate(search.WORKSPACE_DTYPES)
            ),
            memo,
        )
        self.ctr = np.zeros(search.NUM_COUNTERS, np.int64)
        self.stats = np.zeros(search.NUM_STATS, np.int64)


_compile_lock = threading.Lock()


class LetSearch:
    """The compiled LET search over one graph and LM pair; a workspace and state maps per worker
    thread, one utterance per task."""

    def __init__(self, graph: DeviceGraph, lm: DifferenceLM, capacity: int = 16, threads: int = 0) -> None:
        if capacity < 1:
            raise ConfigError("decoder.group_capacity must be >= 1")
        g = graph.to("cpu")
        self.num_states = g.num_states
        self.start = int(g.start)
        self.states, self.arcs = graph_records(g)
        max_word = int(self.arcs["olabel"].max(initial=0))
        if lm.large.vocab_size <= max_word:
            raise ConfigError(
                f"decoder.lm: LM vocabulary ({lm.large.vocab_size}) lacks graph word id {max_word}"
            )
        self.diff = lm
        self.lm = lm.arrays()
        self.capacity = int(capacity)
        self.threads = threads if threads > 0 else default_threads()
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None

    @staticmethod
    def ensure_compiled() -> None:
        from asrdecode.decoders.let import search

        with _compile_lock:
            if getattr(search.search_advance, "signatures", True):
                return
            announce_first_compile(
                "let: decoder", search.search_advance, search.search_init, search.search_best
            )

    def _maps(self) -> tuple[np.ndarray, np.ndarray]:
        maps = getattr(self._local, "maps", None)
        if maps is None:
            maps = (np.full(self.num_states, -1, np.int32), np.full(self.diff.num_states, -1, np.int32))
            self._local.maps = maps
        return maps

    def decode_one(
        self,
        ac: np.ndarray,
        beam: float,
        max_active: int,
        min_active: int,
        beam_delta: float,
        bucket_width: float = 0.0,
        eps_limit: int = 1 << 40,
        gc_records: int = 1 << 20,
    ) -> LetPath:
        """1-best of one utterance; ac: float32 [T, V] acoustic costs (-acoustic_scale * log-probs)."""
        from asrdecode.decoders.let import search

        self.ensure_compiled()
        w = getattr(self._local, "workspace", None)
        if w is None:
            w = self._local.workspace = LetWorkspace()
        ac = np.ascontiguousarray(ac, dtype=np.float32)
        if ac.ndim != 2:
            raise ValueError(f"acoustic costs must be [T, V], got {ac.shape}")
        if ac.shape[1] == 0:
            ac = np.zeros((ac.shape[0], 1), np.float32)
        slot, slot_lm = self._maps()
        f32 = np.float32
        lm = self.lm
        w.ctr[search.C_VOCAB] = self.diff.large.vocab_size
        w.stats[:] = 0
        w.arrays = search.search_init(
            self.states, self.arcs, self.start, DifferenceLM.START, self.capacity, f32(beam), slot, slot_lm,
            int(eps_limit), lm, w.arrays, w.ctr, w.stats, int(gc_records),
        )  # fmt: skip
        w.arrays = search.search_advance(
            self.states, self.arcs, ac, f32(beam), int(min(max_active, 2**31 - 1)), int(min_active),
            f32(beam_delta), f32(bucket_width), self.capacity, slot, slot_lm, int(eps_limit), lm,
            w.arrays, w.ctr, w.stats,
        )  # fmt: skip
        arcs, frames, total, reached, found, state = search.search_best(
            self.states, lm, w.arrays, w.ctr, True
        )
        stats = w.stats.copy()
        stats[search.S_RECORDS] = w.ctr[search.C_REC] + w.ctr[search.C_MREC]
        return LetPath(arcs, frames, float(total), bool(reached), bool(found), stats, int(state))

    def decode_batch(self, acs: list[np.ndarray], *args: Any, threads: int | None = None) -> list[LetPath]:
        """Decode utterances on `threads` workers (default: the search's), longest first."""
        self.ensure_compiled()
        threads = threads or self.threads
        if threads <= 1 or len(acs) <= 1:
            return [self.decode_one(a, *args) for a in acs]
        if self._pool is None or self._pool._max_workers != threads:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="let")
        if not getattr(self, "_warm", False):  # compile on this thread first (one status line)
            self.decode_one(np.zeros((1, acs[0].shape[1] if acs[0].ndim == 2 else 1), np.float32), *args)
            self._warm = True
        order = sorted(range(len(acs)), key=lambda i: -acs[i].shape[0])
        futures = {i: self._pool.submit(self.decode_one, acs[i], *args) for i in order}
        return [futures[i].result() for i in range(len(acs))]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class LetDecoder:
    """`decoder.type: let` (see the module docstring). One instance decodes many batches."""

    name: ClassVar[str] = "let"
    config_type: ClassVar[type] = LetConfig

    def __init__(
        self,
        config: LetConfig,
        context: DecoderContext | None = None,
        graph: DeviceGraph | None = None,
        words: dict[int, str] | None = None,
        lm: DifferenceLM | None = None,
    ) -> None:
        c = config
        if c.backend not in BACKENDS:
            raise ConfigError(f"decoder.backend: {c.backend!r} is not one of {', '.join(BACKENDS)}")
        if c.backend == "torch":
            raise ConfigError("decoder.backend: torch is not implemented for let (use compiled or auto)")
        if c.group_capacity < 1:
            raise ConfigError("decoder.group_capacity must be >= 1")
        if c.bucket_width < 0 or c.threads < 0 or c.beam <= 0:
            raise ConfigError("decoder.bucket_width and decoder.threads must be >= 0, decoder.beam > 0")
        self.config = c
        self.context = context
        # the graph with its word insertion penalty, and best paths -> words, word times and costs
        self.paths = GraphPaths.for_decoder(
            c.graph, c.lexicon, c.word_insertion_penalty, context, graph, words
        )
        if lm is None:
            lm = load_difference_lm(c, self.paths.words, self.paths.olabel)
        self.search = LetSearch(self.paths.graph, lm, c.group_capacity, c.threads)
        self.last_info: dict[str, Any] = {}

    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        from asrdecode.decoders.let import search as S

        if output.log_probs is None:
            raise ValueError("let needs log-probs; this model produced none")
        reader, c = self.paths, self.config
        blank = blank_column(output, reader.graph.meta, self.context)
        ac = acoustic_costs(output.log_probs, blank, c.acoustic_scale, c.blank_penalty)
        ac = ac.detach().to("cpu", torch.float32).contiguous().numpy()
        T = ac.shape[1]
        lengths = [min(int(x), T) for x in output.lengths.tolist()]
        eps_limit = max(c.max_epsilon_passes, 1) * max(reader.graph.num_states, 1024)
        paths = self.search.decode_batch(
            [ac[b, :n] for b, n in enumerate(lengths)],
            c.beam, c.max_active, c.min_active, c.beam_delta, c.bucket_width, eps_limit,
        )  # fmt: skip
        results = []
        not_final = []
        for b, p in enumerate(paths):
            if not p.found:
                results.append(DecodeResult(words=[], score=float("-inf")))
                continue
            if not p.reached_final:
                not_final.append(b)
            arcs = p.arcs[p.arcs >= 0]
            ol = reader.olabel[arcs]
            d_cost = self.search.diff.sentence_cost([int(o) for o in ol if o > 0], eos=p.reached_final)
            total = p.total - d_cost
            res = reader.result(p.arcs, p.frames, total, p.reached_final, {}, blank, output.frame_shift)
            res.score = -p.total
            res.lm_score = (res.lm_score or 0.0) - d_cost
            results.append(res)
        total = np.sum([p.stats for p in paths], axis=0) if paths else np.zeros(S.NUM_STATS, np.int64)
        self.last_info = {
            "stats": {
                "backend": "compiled",
                "frames": int(total[S.S_FRAMES]),
                "arcs": int(total[S.S_ARCS]),
                "groups": int(total[S.S_GROUPS]),
                "word_members": int(total[S.S_WORD_MEMBERS]),
                "unions": int(total[S.S_UNIONS]),
                "union_members": int(total[S.S_UNION_MEMBERS]),
                "shared": int(total[S.S_SHARED]),
                "epsilon_pops": int(total[S.S_EPS_POPS]),
                "epsilon_limit_hit": int(total[S.S_EPS_LIMIT]),
            },
            "not_final": not_final,
            "paths": paths,
        }
        if total[S.S_EPS_LIMIT]:
            log.warning("let: epsilon closure hit its limit (negative-cost epsilon cycle in the graph?)")
        return results
