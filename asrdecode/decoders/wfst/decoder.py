"""`wfst`: batched WFST beam search over a TLG/HCLG (paper 001; Kaldi CUDA decoder, prior-art D).

`WfstDecoder(config, context).decode(output)` decodes a whole batch with the token-passing core
(`asrdecode.decoders.wfst.core`), then traces each utterance's best token back on the host and
turns the arcs into words, word times and costs:

* total cost = graph cost (arc weights + final cost) + acoustic cost (``-acoustic_scale *
  logprob`` summed over the path) + word-boost costs; `DecodeResult.score = -total`,
  ``acoustic_score = -acoustic``, ``lm_score = -(graph + boost)``.
* word times come from the frames of the word's units (first unit's first frame to the last
  unit's last frame + 1, × the model's frame shift). Which units belong to which word: split
  the 1-best unit sequence with the lexicon (``decoder.lexicon`` or ``lexicon.txt`` in the graph
  folder), else with the model's own token→word rule (``DecoderContext.words_of``, e.g. BPE
  word-start marks) when it yields exactly the decoded words; else (no lexicon, custom units)
  from where the word label sits on the path: determinized graphs may emit a label a few units
  late, so those times are approximate.
* utterances whose search reached no final state fall back to the best token (as Kaldi's
  ``GetBestPath``); they are listed in ``decoder.last_info["not_final"]``.

Backends (``decoder.backend``): ``torch`` is the batched tensor search of
`asrdecode.decoders.wfst.core` (any device; built for GPUs); ``compiled`` is the same 1-best search
compiled with numba for CPUs (`asrdecode.decoders.wfst.compiled`: one utterance per call, the batch
spread over ``decoder.threads`` worker threads); ``auto`` (default) picks ``compiled`` when the
log-probs are on the CPU and ``torch`` otherwise. Both return results through the same path
(words, word times, tokens, scores; same costs to float rounding), and the same lattice data
(arcs within the search beam and every frame's tokens, window-pruned at ``lattice_beam`` every
``prune_interval`` frames by the same kernel) for lattices and n-best.

Lattices (``decoder.lattice`` or ``nbest > 1``; `asrdecode.decoders.wfst.lattice`): the exact
lattice-beam pruning gives a state-level lattice, determinized in the lattice semiring into a
word lattice in Kaldi's CompactLattice form (``DecodeResult.lattice``, a `CompactLattice`: graph
and acoustic cost and the unit string per word arc, so word start/end frames); n-best = the n
best paths of that deterministic word lattice. Its 1-best is the decoder's 1-best. Each result
word gets a confidence from it (`CompactLattice.word_confidences`: frame-based word posteriors).

Streaming (paper 001 sec. 3.1): `init_streams`, `decode_chunk`, `finalize`; each stream's tokens
are saved in a state buffer between chunks (gather by stream id, scatter back), so chunked
decoding equals offline decoding frame for frame; `finalize` gives the same n-best and lattices
as offline decoding. Back-pointer records no live token leads back to are garbage-collected
(both backends), so memory stays bounded on long streams.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import torch

from asrdecode.decoders.base import DecoderContext, DecodeResult, PendingDecode
from asrdecode.decoders.wfst.compiled import dense_boost
from asrdecode.decoders.wfst.core import (
    BoostTable,
    PruningOptions,
    SearchGraph,
    SearchOptions,
    TokenPassing,
    Tokens,
)
from asrdecode.decoders.wfst.kernels import KERNELS, triton_available
from asrdecode.decoders.wfst.lattice import (
    CompactLattice,
    backward_costs,
    collapse_kernel,
    prune_window,
)
from asrdecode.decoders.wfst.paths import (
    BestPath,
    GraphPaths,
    NbestRescoring,
    acoustic_costs,
    attach_confidences,
    attach_lattices,
    blank_column,
    utterance_costs,
)
from asrdecode.errors import ConfigError
from asrdecode.graph.format import DeviceGraph
from asrdecode.lm.difference import DifferenceLM
from asrdecode.models.base import ModelOutput
from asrdecode.numba_status import announce_first_compile

log = logging.getLogger("asrdecode.decoders.wfst")

BACKENDS = ("auto", "torch", "compiled")


@dataclass
class GraphSearchConfig(PruningOptions):
    """The options every WFST search shares (`wfst`, `wfst-otf`, `let`; Kaldi / riva names, so
    tuned values port): the pruning (`core.PruningOptions`) and

    graph: a graph folder from `asrdecode build-graph` (graph.pt + words.txt) or a graph.pt /
      OpenFst .fst file (words.txt next to it).
    lexicon: `word unit unit ...` file used only to split the 1-best units into words for word
      times (default: lexicon.txt in the graph folder if present).
    beam, max_active, min_active, beam_delta: Kaldi FasterDecoder pruning (see core.cutoff).
    acoustic_scale: multiplies the model log-probs. blank_penalty: subtracted from the blank
      log-prob before scaling (NeMo/riva name).
    word_insertion_penalty: cost added to every arc that outputs a word (Kaldi's
      `--word-ins-penalty`; pocketsphinx's `wip` maps to -ln(wip) * acoustic_scale).
    max_epsilon_passes: cap on epsilon-closure passes per frame (hit = warning).
    word_beam: a tighter beam for arcs that output a word (pocketsphinx's wbeam; 0 = off; see
      core.PruningOptions).
    history_beam: on-the-fly decoders: tokens more than this above the cheapest token of their
      graph state (other LM histories) are not expanded (0 = off; see core.PruningOptions).
    history_max: wfst-otf: at most this many tokens (LM histories) per graph state are expanded,
      the cheapest (0 = off; see core.PruningOptions).
    backend: auto | torch | compiled (see each decoder's docstring).
    threads: worker threads of the compiled backend (0 = the cores this process may use).
    lattice: keep word lattices (DecodeResult.lattice = a `CompactLattice`; see wfst/lattice.py).
    nbest: number of hypotheses in DecodeResult.nbest (1 = only the 1-best; > 1 implies lattice).
    lattice_beam: lattices keep every arc on a path within this cost of the best path (Kaldi's
      --lattice-beam); prune_interval: the search's lattice arcs are pruned every this many
      frames (Kaldi's --prune-interval; the result does not depend on it, memory does).
    rescore_lm: an ARPA LM (plain or .gz) that rescores the lattice's ``rescore_nbest`` best word
      sequences after the search (`paths.NbestRescoring`, `asrdecode.lm.rescore`: the graph's LM
      reading taken back, this LM read exactly put in, scaled by ``rescore_scale``); '' = none.
      The 1-best, its word times and scores and the n-best become the rescored ones; lattices are
      written as searched. rescore_graph_lm: the ARPA the graph was built with (default: the one
      recorded in the graph folder's meta.json by `asrdecode build-graph`).
    confidence_bias, confidence_slope: the word confidences from the lattice are calibrated as
      ``sigmoid(bias + slope * logit(posterior))`` (`paths.attach_confidences`; 0 and 1 = the raw
      posteriors), fitted by logistic regression with scripts/confidence_quality.py --fit.
    """

    graph: str = ""
    lexicon: str = ""
    acoustic_scale: float = 1.0
    blank_penalty: float = 0.0
    word_insertion_penalty: float = 0.0
    backend: str = "auto"
    threads: int = 0
    lattice: bool = False
    nbest: int = 1
    lattice_beam: float = 8.0
    prune_interval: int = 25
    rescore_lm: str = ""
    rescore_graph_lm: str = ""
    rescore_nbest: int = 100
    rescore_scale: float = 1.0
    confidence_bias: float = 0.0
    confidence_slope: float = 1.0

    @property
    def want_lattice(self) -> bool:
        """Whether the search keeps lattices (for `lattice`, an n-best or rescoring)."""
        return self.lattice or self.nbest > 1 or bool(self.rescore_lm)

    def search_settings(self, num_states: int, **extra: Any) -> np.record:
        """The compiled searches' settings record (`compiled.search_settings`) for a graph of
        `num_states` states; `extra`: the decoder's own settings (lattice beam, group capacity)."""
        from asrdecode.decoders.wfst.compiled import search_settings

        return search_settings(self, num_states, **extra)


def check_search_options(config: GraphSearchConfig) -> None:
    """The range checks of the options every WFST search shares (one-line ConfigErrors)."""
    if not config.beam > 0:
        raise ConfigError(f"decoder.beam must be > 0, got {config.beam}")
    if config.threads < 0:
        raise ConfigError("decoder.threads must be >= 0 (0 = number of cores)")
    if config.prune_interval < 0 or config.lattice_beam < 0:
        raise ConfigError("decoder.prune_interval and decoder.lattice_beam must be >= 0")
    if not config.word_beam >= 0:
        raise ConfigError("decoder.word_beam must be >= 0 (0 = off)")
    if not config.history_beam >= 0:
        raise ConfigError("decoder.history_beam must be >= 0 (0 = off)")
    if config.history_max < 0:
        raise ConfigError("decoder.history_max must be >= 0 (0 = off)")


@dataclass
class WfstConfig(GraphSearchConfig):
    """Options of the `wfst` decoder: the shared ones (`GraphSearchConfig`, lattices included) and

    boost: global word boosts, word -> log-score bonus (positive favours the word; paper 001
      sec. 3.2 recommends at most half the beam). Per-utterance boosts come in
      ``ModelOutput.extra["boost"]`` (a list with one dict or None per utterance).
    host_copy_frames: frames of back-pointers collected on the device per host copy.
    backend: auto | torch | compiled (see the module docstring); auto = compiled on CPU, torch on CUDA.
    cuda_graphs: torch backend on CUDA: capture each frame's fixed-shape work (one graph per
      capacity set) with torch.cuda.graphs and replay it (paper 001 sec. 3). Frames that
      keep lattices run eagerly (kernel fused captures its windows with lattices too). Ignored
      (with a note) on the CPU.
    pinned_copies: torch backend on CUDA: back-pointers go to pinned host buffers with
      non-blocking copies, double-buffered (paper 001 sec. 3). Ignored on the CPU.
    kernel: auto | torch | triton | fused: the torch backend's frame as tensor ops (torch), with
      the emitting-arc expansion as one Triton kernel (triton, wfst/kernels.py), or the whole frame
      as a few fused Triton kernels with the frame loop on the device (fused, wfst/fused.py: 1-best
      and lattices, `wfst-otf`'s 1-best with lm_on_host false; word boosts, word_beam, streams and
      `wfst-otf`'s host LM lookups and history_beam / history_max run the triton path); auto =
      triton on CUDA, torch elsewhere. triton and fused need CUDA or TRITON_INTERPRET=1.
    sync_frames: kernel fused: frames decoded between two host synchronisations (a buffer that
      overflowed in them is grown and those frames run again).
    """

    boost: dict = field(default_factory=dict)
    host_copy_frames: int = 32
    cuda_graphs: bool = False
    pinned_copies: bool = False
    kernel: str = "auto"
    sync_frames: int = 64

    def search_options(self, device: torch.device | str = "cpu") -> SearchOptions:
        """The search options for a torch search on `device` (device switches resolved)."""
        device = torch.device(device)
        cuda = device.type == "cuda"
        kernel = self.kernel
        if kernel == "auto":
            kernel = "triton" if cuda and triton_available(device) else "torch"
        elif kernel in ("triton", "fused") and not triton_available(device):
            raise ConfigError(
                f"decoder.kernel: {kernel} needs a CUDA device or TRITON_INTERPRET=1 (device is {device})"
            )
        pruning = {f.name: getattr(self, f.name) for f in fields(PruningOptions)}
        return SearchOptions(
            **pruning,
            host_copy_frames=self.host_copy_frames,
            cuda_graphs=self.cuda_graphs and cuda,
            pinned_copies=self.pinned_copies and cuda,
            kernel=kernel,
            sync_frames=self.sync_frames,
            prune_interval=self.prune_interval,
        )


@dataclass
class _Stream:
    frames: int = 0
    boost: dict[str, float] | None = None
    workspace: Any = None  # compiled backend: the stream's search state (compiled.Workspace)
    boost_ids: dict[int, float] = field(default_factory=dict)
    boost_array: Any = None


class WfstDecoder:
    """Batched WFST decoder; see the module docstring. One instance decodes many batches."""

    takes_boost: ClassVar[bool] = True  # applies the inputs' per-utterance boost lists
    name: ClassVar[str] = "wfst"
    config_type: ClassVar[type] = WfstConfig
    # options of the shared config this decoder refuses (the on-the-fly decoders' LM history
    # pruning): left out when the default setup's decoder section is switched to this decoder
    refused_options: ClassVar[tuple[str, ...]] = ("history_beam", "history_max")

    @classmethod
    def check_options(cls, config: WfstConfig) -> None:
        """One-line ConfigErrors for values the search cannot use (no graph read)."""
        if config.backend not in BACKENDS:
            raise ConfigError(f"decoder.backend: {config.backend!r} is not one of {', '.join(BACKENDS)}")
        check_search_options(config)
        if config.history_beam > 0 and "history_beam" in cls.refused_options:
            raise ConfigError(
                "decoder.history_beam prunes LM histories of the on-the-fly decoders (wfst-otf, let); "
                "wfst keeps one token per graph state"
            )
        if config.history_max > 0 and "history_max" in cls.refused_options:
            raise ConfigError(
                "decoder.history_max bounds the LM histories of wfst-otf; "
                "wfst keeps one token per graph state"
            )
        if config.kernel not in KERNELS:
            raise ConfigError(f"decoder.kernel: {config.kernel!r} is not one of {', '.join(KERNELS)}")
        if config.sync_frames < 1:
            raise ConfigError(f"decoder.sync_frames must be >= 1, got {config.sync_frames}")

    def __init__(
        self,
        config: WfstConfig,
        context: DecoderContext | None = None,
        graph: DeviceGraph | None = None,
        words: dict[int, str] | None = None,
        lm: DifferenceLM | None = None,
    ):
        """`graph` and `words` replace the config's graph files; `lm` is an on-the-fly LM already
        loaded (`wfst-otf`, `attach_lm`)."""
        self.check_options(config)
        self.config = config
        self.context = context
        self.paths = GraphPaths.for_decoder(
            config.graph, config.lexicon, config.word_insertion_penalty, context, graph, words
        )
        self.graph_cpu = self.paths.graph
        self.words = self.paths.words
        self.word_ids = self.paths.word_ids
        self._graphs: dict[str, SearchGraph] = {}
        self.last_info: dict[str, Any] = {}
        self._streams: dict[int, _Stream] = {}
        self._stream_search: TokenPassing | None = None
        self._stream_tokens: Tokens | None = None
        self._next_stream = 0
        self._stream_backend: str | None = None
        self._compiled: Any = None
        self.path_lm: tuple | None = None  # `DifferenceLM.arrays()` of an on-the-fly LM (`wfst-otf`)
        self.rescoring = NbestRescoring.for_config(config, self.paths)
        self._records: np.ndarray | None = None
        self._device_note_logged = False
        self._tuning: dict[str, dict] = {}  # per device: capacities the next batch starts from
        self._fused: dict[str, Any] = {}  # per device: the fused search (keeps its capacities, graphs)
        self._fused_notes: set[str] = set()
        if config.want_lattice:  # the lattice kernels compile at their first use
            announce_first_compile("wfst: lattices", prune_window, backward_costs, collapse_kernel)
        self.attach_lm(lm)

    def attach_lm(self, lm: DifferenceLM | None) -> None:
        """The on-the-fly LM of the search: `wfst` decodes its graph alone (`wfst-otf` overrides)."""
        if lm is not None:
            raise ConfigError("wfst decodes its graph alone; an on-the-fly LM is wfst-otf's")

    # ------------------------------------------------------------------ helpers
    def graph_on(self, device: torch.device) -> SearchGraph:
        """The search tables of the graph on `device` (converted once, then cached)."""
        key = str(device)
        if key not in self._graphs:
            self._graphs[key] = SearchGraph(self.graph_cpu.to(device))
        return self._graphs[key]

    def _blank_column(self, output: ModelOutput | None) -> int:
        return blank_column(output, self.graph_cpu.meta, self.context)

    def _ac_costs(self, log_probs: torch.Tensor, blank: int) -> torch.Tensor:
        return acoustic_costs(log_probs, blank, self.config.acoustic_scale, self.config.blank_penalty)

    def _boosts(self, per_utt: list[dict | None] | None, n: int) -> tuple[list[dict[int, float]], list[str]]:
        """Word -> bonus tables per utterance as word id -> cost; plus OOV boost words."""
        tables, oov = [], []
        for b in range(n):
            merged = dict(self.config.boost)
            if per_utt is not None and b < len(per_utt) and per_utt[b]:
                merged.update(per_utt[b])
            table = {}
            for word, score in merged.items():
                wid = self.word_ids.get(word)
                if wid is None:
                    oov.append(word)
                else:
                    table[wid] = -float(score)
            tables.append(table)
        return tables, sorted(set(oov))

    def _boost_table(self, tables: list[dict[int, float]], device: torch.device) -> BoostTable | None:
        if not any(tables):
            return None
        num_words = int(max(self.paths.olabel.max(initial=0), max(self.words, default=0))) + 1
        keys, costs = [], []
        for b, t in enumerate(tables):
            for wid, c in t.items():
                keys.append(b * num_words + wid)
                costs.append(c)
        order = np.argsort(keys)
        return BoostTable(
            torch.tensor(np.asarray(keys, dtype=np.int64)[order], device=device),
            torch.tensor(np.asarray(costs, dtype=np.float32)[order], device=device),
            num_words,
        )

    def _search_options(self, device: torch.device) -> SearchOptions:
        switches = self.config.cuda_graphs or self.config.pinned_copies
        if device.type != "cuda" and switches and not self._device_note_logged:
            log.info(
                "wfst: decoder.cuda_graphs / decoder.pinned_copies apply to CUDA only; "
                "ignored on %s (the same buffers run eagerly)",
                device,
            )
            self._device_note_logged = True
        return self.config.search_options(device)

    # ------------------------------------------------------------------ backends
    def backend_for(self, device: torch.device) -> str:
        """The backend `decode` uses for log-probs on `device` ("torch" or "compiled")."""
        want = self.config.backend
        if want == "auto":
            want = "compiled" if device.type == "cpu" else "torch"
        return want

    def compiled_search(self) -> Any:
        """The numba search over this graph (built once; compiles on first use)."""
        if self._compiled is None:
            from asrdecode.decoders.wfst.compiled import CompiledSearch

            self._compiled = CompiledSearch(self.graph_cpu, self.config.threads)
        return self._compiled

    def _start_compiled(
        self, output: ModelOutput, tables: list[dict[int, float]], oov: list[str], blank: int
    ) -> PendingDecode:
        """The batch queued on the compiled search's workers; its results made when collected."""
        search = self.compiled_search()
        c = self.config
        shift = output.frame_shift
        rows, costs = utterance_costs(
            output, blank, c.acoustic_scale, c.blank_penalty, search.score_buffer, search.threads
        )
        boosts = [dense_boost(t) for t in tables]
        want_lattice = c.want_lattice
        lats: list[CompactLattice | None] = [None] * len(rows)
        finish = None
        if want_lattice:  # each worker builds its utterance's word lattice after its search
            self._arc_records()  # built once here, not by the workers at once

            def finish(p: Any, b: int) -> None:  # as `_attach_lattices` with `_not_final`
                reached = not p.found or p.reached_final
                lats[b] = self.word_lattice(p.lattice, len(rows[b]), tables[b], reached)

        pending = search.submit(
            rows, boosts, self.search_settings(), lattice=want_lattice, prepare=costs, finish=finish
        )
        return PendingDecode(
            lambda: self._compiled_results(pending.result(), rows, tables, oov, blank, shift, lats),
            pending.cancel,
        )

    def _compiled_results(
        self,
        paths: list,
        rows: list,
        tables: list[dict[int, float]],
        oov: list[str],
        blank: int,
        shift: float,
        lats: list[CompactLattice | None],
    ) -> list[DecodeResult]:
        """A batch's results from the compiled search's paths (and the lattices its workers built);
        sets `last_info`."""
        from asrdecode.decoders.wfst.compiled import (
            NUM_STATS,
            STAT_ARCS,
            STAT_EPS_LIMIT,
            STAT_EPS_POPS,
            STAT_FRAMES,
            STAT_HISTORY_PRUNED,
            STAT_LM_LOOKUPS,
            STAT_PRUNE_FRAMES,
            STAT_TOKENS,
        )

        want_lattice = self.config.want_lattice
        self._not_final = [b for b, p in enumerate(paths) if p.found and not p.reached_final]
        results = [
            self._path_result(p, tables[b], blank, shift)
            if p.found
            else DecodeResult(words=[], score=float("-inf"))
            for b, p in enumerate(paths)
        ]
        total = np.sum([p.stats for p in paths], axis=0) if paths else np.zeros(NUM_STATS, np.int64)
        stats = {
            "backend": "compiled",
            "frames": int(total[STAT_FRAMES]),
            "syncs": 0,
            "arcs": int(total[STAT_ARCS]),
            "epsilon_pops": int(total[STAT_EPS_POPS]),
            "epsilon_limit_hit": int(total[STAT_EPS_LIMIT]),
            "tokens": int(total[STAT_TOKENS]),
        }
        if self.path_lm is not None:
            stats["history_pruned"] = int(total[STAT_HISTORY_PRUNED])
            stats["lm_lookups"] = int(total[STAT_LM_LOOKUPS])
        if want_lattice:
            stats["lattice_prune_frames"] = int(total[STAT_PRUNE_FRAMES])
        self.last_info = {"stats": stats, "oov_boost_words": oov, "not_final": self._not_final}
        if want_lattice:
            data = [p.lattice for p in paths]
            self._attach_lattices(data, results, [len(a) for a in rows], tables, blank, shift, lats=lats)
        if oov:
            log.warning("wfst: boost words not in the graph vocabulary: %s", ", ".join(oov[:10]))
        if stats["epsilon_limit_hit"]:
            log.warning("wfst: epsilon closure hit its limit (negative-cost epsilon cycle in the graph?)")
        return results

    def _new_search(self, graph: SearchGraph, device: torch.device, want_lattice: bool) -> TokenPassing:
        """The torch search of one batch (`wfst-otf` adds its LM here)."""
        return TokenPassing(
            graph, self._search_options(device), self.config.lattice_beam if want_lattice else None
        )

    # ------------------------------------------------------------------ offline
    def takes_deferred_scores(self, device: torch.device) -> bool:
        """Whether `decode` takes a model output with deferred scores (`DeferredScores`) on
        `device`: on the CPU with the compiled backend, whose worker threads score each utterance
        before searching it."""
        return device.type == "cpu" and self.backend_for(device) == "compiled"

    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        return self.start(output).result()

    def start(self, output: ModelOutput) -> PendingDecode:
        """`decode` without waiting (`start_decode`): with the compiled backend the batch is queued
        on the search's workers behind any batch started before."""
        if not output.has_scores:
            raise ValueError("wfst needs log-probs; this model produced none")
        self.paths.check_columns(output.columns)
        device = output.lengths.device
        blank = self._blank_column(output)
        lengths = [int(x) for x in output.lengths.tolist()]
        tables, oov = self._boosts(output.extra.get("boost") if output.extra else None, len(lengths))
        if self.backend_for(device) == "compiled":
            return self._start_compiled(output, tables, oov, blank)
        lp = output.log_probs if output.log_probs is not None else output.deferred.materialize()
        device = lp.device
        B, T, V = lp.shape
        ac = self._ac_costs(lp, blank)
        graph = self.graph_on(device)
        boost = self._boost_table(tables, device)
        want_lattice = self.config.want_lattice
        options = self._search_options(device)
        if self._fused_applies(options, boost, graph):
            return PendingDecode.done(
                self._decode_fused(
                    graph, options, ac, output.lengths, lengths, tables, oov, blank, output.frame_shift
                )
            )
        search = self._new_search(graph, device, want_lattice).inherit(self._tuning.get(str(device)))
        if search.lattice is not None:
            search.lattice.boosts = {b: dense_boost(t) for b, t in enumerate(tables) if t}
        tok = search.init(B, boost=boost)
        done: list[Tokens] = []
        ends: dict[int, list[int]] = {}
        for b, n in enumerate(lengths):
            ends.setdefault(min(n, T), []).append(b)
        for t in range(T + 1):
            if t in ends:
                finished, tok = search.retire(tok, ends[t])
                done.append(finished)
            if t == T or not len(tok):
                break
            frames = torch.full((B,), t, dtype=torch.int64, device=device)
            tok = search.step(tok, ac[:, t], frames, boost)
            search.maybe_collect([tok, *done])
        self._tuning[str(device)] = search.tuning()
        search.stats["records"] = search.backpointers.size  # host records at the end (after collections)
        final_tok = Tokens.cat(done) if done else Tokens.empty(device)
        results = self._results(search, final_tok, B, tables, blank, output.frame_shift)
        stats = {"backend": "torch", **search.stats}
        self.last_info = {"stats": stats, "oov_boost_words": oov, "not_final": self._not_final}
        if want_lattice:
            assert search.lattice is not None
            data = [search.lattice.take(b) for b in range(B)]
            self._attach_lattices(
                data, results, [min(n, T) for n in lengths], tables, blank, output.frame_shift
            )
        if oov:
            log.warning("wfst: boost words not in the graph vocabulary: %s", ", ".join(oov[:10]))
        if search.stats["epsilon_limit_hit"]:
            log.warning("wfst: epsilon closure hit max_epsilon_passes; raise decoder.max_epsilon_passes")
        return PendingDecode.done(results)

    def _fused_applies(self, options: SearchOptions, boost: BoostTable | None, graph: SearchGraph) -> bool:
        """Whether `kernel: fused` runs this batch (1-best or lattices): not with word boosts,
        word_beam or what `_fused_lm` refuses of an on-the-fly LM (there the per-frame search
        runs, with the Triton emitting kernel)."""
        if options.kernel != "fused":
            return False
        why = (
            "word boosts" if boost is not None else "word_beam" if options.word_beam > 0
            else self._fused_lm(graph, options)[1]
        )  # fmt: skip
        if why and why not in self._fused_notes:
            self._fused_notes.add(why)
            log.info("wfst: kernel fused does not take %s; the per-frame search runs", why)
        return not why

    def _fused_lm(self, graph: SearchGraph, options: SearchOptions) -> tuple[Any, str]:
        """The on-the-fly LM the fused search carries (`wfst-otf` adds it; None here) and what of
        it the fused search does not take ("" when nothing)."""
        return None, ""

    def _decode_fused(
        self,
        graph: SearchGraph,
        options: SearchOptions,
        ac: torch.Tensor,
        lengths: torch.Tensor,
        num_frames: list[int],
        tables: list[dict[int, float]],
        oov: list[str],
        blank: int,
        shift: float,
    ) -> list[DecodeResult]:
        """A batch through `fused.FusedSearch` (the frame loop on the device); `num_frames`:
        `lengths` on the host."""
        from asrdecode.decoders.wfst.fused import FusedSearch

        key = f"fused:{ac.device}"
        search = self._fused.get(key)
        beam = self.config.lattice_beam if self.config.want_lattice else None
        lm = self._fused_lm(graph, options)[0]
        if (
            search is None
            or search.g is not graph
            or search.lm is not lm
            or (search.options, search.lattice_beam) != (options, beam)
        ):
            search = self._fused[key] = FusedSearch(graph, options, beam, lm)
        rec, total, reached = search.decode(ac, lengths)
        data = search.backpointers.host()
        B = len(rec)
        self._not_final = [b for b in range(B) if rec[b] >= 0 and not reached[b]]
        results = [
            self._one_result(data, search, rec[b], total[b], reached[b], tables[b], blank, shift)  # type: ignore[arg-type]
            for b in range(B)
        ]
        stats = {"backend": "torch", "kernel": "fused", **search.stats, "records": search.backpointers.size}
        self.last_info = {"stats": stats, "oov_boost_words": oov, "not_final": self._not_final}
        if search.lattice is not None:
            T = ac.shape[1]
            data = [search.lattice.take(b) for b in range(B)]
            self._attach_lattices(data, results, [min(n, T) for n in num_frames], tables, blank, shift)
        if oov:
            log.warning("wfst: boost words not in the graph vocabulary: %s", ", ".join(oov[:10]))
        if search.stats["epsilon_limit_hit"]:
            log.warning("wfst: epsilon closure hit max_epsilon_passes; raise decoder.max_epsilon_passes")
        return results

    def _attach_lattices(
        self,
        data: list[tuple],
        results: list[DecodeResult],
        lengths: list[int],
        tables: list[dict],
        blank: int,
        frame_shift: float = 0.0,
        not_final: list[int] | None = None,
        lats: list[CompactLattice | None] | None = None,
    ) -> None:
        """Word lattice (and n-best) of each utterance from its search arcs and nodes (either
        backend): exact lattice-beam pruning, then determinization (wfst/lattice.py); `lats`:
        the lattices when already built (by the compiled search's workers). With ``rescore_lm``
        the results are then rescored (`paths.NbestRescoring`)."""
        not_final = self._not_final if not_final is None else not_final
        # search arcs kept until the end (after window pruning): the lattice's memory
        self.last_info["lattice_search_arcs"] = sum(len(d[0]) for d in data if d[0] is not None)
        if lats is None:
            lats = [
                self.word_lattice(data[b], lengths[b], tables[b], b not in not_final)
                for b in range(len(results))
            ]
        density = attach_lattices(results, lats, self.config.lattice, self.config.nbest, frame_shift)
        if density is not None:
            self.last_info["lattice_density"] = density
        if self.rescoring is not None:
            self.rescoring.apply(
                results, lats, tables, blank, frame_shift, not_final, self.path_lm, self.last_info
            )
        attach_confidences(results, lats, self.config.confidence_bias, self.config.confidence_slope)

    def word_lattice(
        self,
        data: tuple,
        num_frames: int,
        boost: dict[int, float],
        reached_final: bool,
    ) -> CompactLattice | None:
        """The CompactLattice of one utterance from its search arcs and nodes (`data`: arcs,
        nodes; lattice states are graph states)."""
        arcs, nodes = data[:2]
        start, finals = self.graph_cpu.start, self.paths.final
        return self.paths.word_lattice(
            arcs, nodes, num_frames, start, finals, boost, reached_final, self.config.lattice_beam,
            self._arc_records(),
        )  # fmt: skip

    def _arc_records(self) -> np.ndarray:
        """The graph's arcs as the compiled kernels read them (built once)."""
        if self._records is None:
            from asrdecode.graph.format import graph_records

            self._records = graph_records(self.graph_cpu)[1]
        return self._records

    def _results(
        self,
        search: TokenPassing,
        tok: Tokens,
        n: int,
        tables: list[dict[int, float]],
        blank: int,
        shift: float,
        use_final: bool = True,
    ) -> list[DecodeResult]:
        rec, total, reached = search.best_final(tok, n, use_final)
        rec_h, total_h, reached_h = rec.tolist(), total.tolist(), reached.tolist()
        data = search.backpointers.host()
        self._not_final = [b for b in range(n) if use_final and rec_h[b] >= 0 and not reached_h[b]]
        return [
            self._one_result(data, search, rec_h[b], total_h[b], reached_h[b], tables[b], blank, shift)
            for b in range(n)
        ]

    def _one_result(
        self,
        data: np.ndarray,
        search: TokenPassing,
        rec: int,
        total: float,
        reached: bool,
        boost: dict[int, float],
        blank: int,
        shift: float,
    ) -> DecodeResult:
        if rec < 0:
            return DecodeResult(words=[], score=float("-inf"))
        path = search.backpointers.trace(rec)
        return self._path_result(
            BestPath(data["arc"][path], data["frame"][path], total, reached), boost, blank, shift
        )

    def _path_result(self, path: BestPath, boost: dict[int, float], blank: int, shift: float) -> DecodeResult:
        """DecodeResult of a 1-best path (`paths.GraphPaths.result`, with the LM part of `wfst-otf`)."""
        return self.paths.result(path, boost, blank, shift, self.path_lm)

    # ------------------------------------------------------------------ streaming
    def init_streams(
        self, count: int, boost: list[dict | None] | None = None, device: torch.device | str | None = None
    ) -> list[int]:
        """Open `count` new streams (optionally with per-stream word boosts); returns their ids.

        All streams of a decoder share one state buffer on `device` (set by the first call,
        default CPU); with lattices (``lattice`` or ``nbest > 1``) each stream also keeps its
        lattice arcs, window-pruned as offline, for `finalize`. With the compiled backend each
        stream keeps its own search workspace."""
        if self._stream_backend is None:
            self._stream_backend = self.backend_for(torch.device(device or "cpu"))
        if self._stream_backend == "compiled":
            return self._init_streams_compiled(count, boost)
        if self._stream_search is None:
            c = self.config
            self._stream_search = TokenPassing(
                self.graph_on(torch.device(device or "cpu")),
                self._search_options(torch.device(device or "cpu")),
                c.lattice_beam if c.want_lattice else None,
            )
            self._stream_tokens = Tokens.empty(self._stream_search.device)
        ids = list(range(self._next_stream, self._next_stream + count))
        self._next_stream += count
        for i, sid in enumerate(ids):
            self._streams[sid] = _Stream(boost=(boost[i] if boost else None))
        search = self._stream_search
        tables, boost_table = self._stream_boost(ids, search.device)
        if search.lattice is not None:
            search.lattice.keys = np.array(ids)
            search.lattice.boosts.update({i: dense_boost(t) for i, t in zip(ids, tables, strict=True) if t})
        start = search.init(
            count,
            frames=torch.full((count,), -1, dtype=torch.int64, device=search.device),
            boost=boost_table,
        ).compact()
        if search.lattice is not None:
            search.lattice.flush()
        start.utt = torch.tensor(ids, device=search.device)[start.utt]
        self._stream_tokens = self._sorted(Tokens.cat([self._stream_tokens, start]))
        return ids

    @staticmethod
    def _sorted(tok: Tokens) -> Tokens:
        order = torch.argsort(tok.utt, stable=True)
        return tok.select(order)

    def _stream_boost(
        self, ids: list[int], device: torch.device
    ) -> tuple[list[dict[int, float]], BoostTable | None]:
        tables, _ = self._boosts([self._streams[s].boost for s in ids], len(ids))
        return tables, self._boost_table(tables, device)

    def _gather(self, ids: list[int]) -> tuple[Tokens, torch.Tensor]:
        """Tokens of `ids` (renumbered 0..len-1) and the mask of them in the state buffer."""
        assert self._stream_tokens is not None
        store = self._stream_tokens
        dev = store.utt.device
        idt = torch.tensor(ids, dtype=torch.int64, device=dev)
        mask = torch.isin(store.utt, idt)
        sub = store.select(mask)
        lookup = torch.full((self._next_stream,), -1, dtype=torch.int64, device=dev)
        lookup[idt] = torch.arange(len(ids), device=dev)
        sub.utt = lookup[sub.utt]
        return self._sorted(sub), mask

    def _scatter(self, ids: list[int], mask: torch.Tensor, tok: Tokens) -> None:
        assert self._stream_tokens is not None
        idt = torch.tensor(ids, dtype=torch.int64, device=tok.utt.device)
        tok = Tokens(idt[tok.utt], tok.state, tok.cost, tok.rec)
        self._stream_tokens = self._sorted(Tokens.cat([self._stream_tokens.select(~mask), tok]))

    def decode_chunk(
        self,
        stream_ids: list[int],
        log_probs: torch.Tensor,
        lengths: torch.Tensor | None = None,
        frame_shift: float | None = None,
    ) -> list[DecodeResult]:
        """Advance the given streams by a chunk of log-probs [b, Tc, V] (lengths: valid frames per
        stream, default Tc). Returns the partial best hypothesis of each stream (no final costs)."""
        self.paths.check_columns(log_probs.shape[-1])
        if self._stream_backend == "compiled":
            return self._decode_chunk_compiled(stream_ids, log_probs, lengths, frame_shift)
        search = self._live_search(stream_ids)
        b, Tc, V = log_probs.shape
        lens = [Tc] * b if lengths is None else [int(x) for x in lengths.tolist()]
        blank = self._blank_column(None)
        ac = self._ac_costs(log_probs.to(search.device), blank)
        tables, boost = self._stream_boost(stream_ids, search.device)
        tok, mask = self._gather(stream_ids)
        buf = search.load(tok, b)
        parked: list[Tokens] = []
        if search.lattice is not None:
            search.lattice.keys = np.array(stream_ids)
        for t in range(Tc):
            stop = [i for i in range(b) if lens[i] == t]
            if stop:
                finished, buf = search.retire(buf, stop)
                parked.append(finished)
            if not len(buf):
                break
            frames = torch.tensor([self._streams[s].frames + t for s in stream_ids], device=search.device)
            buf = search.step(buf, ac[:, t], frames, boost)
            search.maybe_collect([buf, *parked, self._stream_tokens])
        tok = self._sorted(Tokens.cat([buf.compact(), *parked]))
        if search.lattice is not None:
            search.lattice.flush()  # under this chunk's stream ids
        for i, s in enumerate(stream_ids):
            self._streams[s].frames += min(lens[i], Tc)
        self._scatter(stream_ids, mask, tok)
        shift = (
            frame_shift if frame_shift is not None else (self.context.frame_shift if self.context else 1.0)
        )
        return self._results(search, tok, b, tables, blank, shift, use_final=False)

    def _check_streams(self, stream_ids: list[int]) -> None:
        for s in stream_ids:
            if s not in self._streams:
                raise KeyError(f"unknown or finalized stream {s}")

    def _live_search(self, stream_ids: list[int]) -> TokenPassing:
        """The torch backend's stream search, once the streams are checked to be live."""
        if self._stream_search is None:
            raise RuntimeError("call init_streams first")
        self._check_streams(stream_ids)
        return self._stream_search

    def finalize(self, stream_ids: list[int], frame_shift: float | None = None) -> list[DecodeResult]:
        """Final results (with final costs) of the given streams, with n-best and lattices as
        offline decoding gives them; their state is released."""
        if self._stream_backend == "compiled":
            return self._stream_results_compiled(stream_ids, frame_shift, final=True)
        search = self._live_search(stream_ids)
        tables, _ = self._stream_boost(stream_ids, search.device)
        tok, mask = self._gather(stream_ids)
        shift = (
            frame_shift if frame_shift is not None else (self.context.frame_shift if self.context else 1.0)
        )
        blank = self._blank_column(None)
        results = self._results(search, tok, len(stream_ids), tables, blank, shift)
        if search.lattice is not None:
            data = [search.lattice.take(s) for s in stream_ids]
            frames = [self._streams[s].frames for s in stream_ids]
            self._attach_lattices(data, results, frames, tables, blank, shift)
        assert self._stream_tokens is not None
        self._stream_tokens = self._stream_tokens.select(~mask)
        for s in stream_ids:
            del self._streams[s]
        return results

    @property
    def _want_lattice(self) -> bool:
        return self.config.want_lattice

    # ------------------------------------------------------------------ streaming, compiled backend
    def search_settings(self) -> np.record:
        """The compiled search's settings record from the config."""
        c = self.config
        return c.search_settings(
            self.graph_cpu.num_states, lattice_beam=c.lattice_beam, prune_interval=c.prune_interval
        )

    def _init_streams_compiled(self, count: int, boost: list[dict | None] | None) -> list[int]:
        search = self.compiled_search()
        ids = list(range(self._next_stream, self._next_stream + count))
        self._next_stream += count
        for i, sid in enumerate(ids):
            workspace = search.new_workspace(self._want_lattice)
            st = _Stream(boost=(boost[i] if boost else None), workspace=workspace)
            st.boost_ids = self._boosts([st.boost], 1)[0][0]
            st.boost_array = dense_boost(st.boost_ids)
            search.begin(st.workspace, st.boost_array, self.search_settings())
            self._streams[sid] = st
        return ids

    def _decode_chunk_compiled(
        self,
        stream_ids: list[int],
        log_probs: torch.Tensor,
        lengths: torch.Tensor | None,
        frame_shift: float | None,
    ) -> list[DecodeResult]:
        self._check_streams(stream_ids)
        b, Tc, _ = log_probs.shape
        lens = [Tc] * b if lengths is None else [int(x) for x in lengths.tolist()]
        ac = self._ac_costs(log_probs.detach().cpu(), self._blank_column(None)).contiguous().numpy()
        search, settings = self.compiled_search(), self.search_settings()
        for i, s in enumerate(stream_ids):
            st = self._streams[s]
            n = min(lens[i], Tc)
            search.advance(st.workspace, ac[i, :n], st.boost_array, settings)
            st.frames += n
        return self._stream_results_compiled(stream_ids, frame_shift, final=False)

    def _stream_results_compiled(
        self, stream_ids: list[int], frame_shift: float | None, final: bool
    ) -> list[DecodeResult]:
        """Best path of each stream: partial (no final costs) or final (then the streams are released)."""
        search = self.compiled_search()
        shift = (
            frame_shift if frame_shift is not None else (self.context.frame_shift if self.context else 1.0)
        )
        blank = self._blank_column(None)
        results = []
        self._not_final = []
        for b, s in enumerate(stream_ids):
            st = self._streams[s]
            p = search.best(st.workspace, use_final=final)
            if final and p.found and not p.reached_final:
                self._not_final.append(b)
            results.append(
                self._path_result(p, st.boost_ids, blank, shift)
                if p.found
                else DecodeResult(words=[], score=float("-inf"))
            )
        if final and self._want_lattice:
            data = [self._streams[s].workspace.lattice_data() for s in stream_ids]
            frames = [self._streams[s].frames for s in stream_ids]
            tables = [self._streams[s].boost_ids for s in stream_ids]
            self._attach_lattices(data, results, frames, tables, blank, shift)
        if final:
            for s in stream_ids:
                del self._streams[s]
        return results
