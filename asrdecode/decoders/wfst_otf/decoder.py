"""`wfst-otf`: WFST decoding of a small-LM graph with on-the-fly rescoring by a large ARPA LM (paper 000).

The graph (TLG/HCLG from `asrdecode build-graph`) is built with a small LM; the search composes it on
the fly with the difference ``lm_scale * (large - small)`` (`difference.DifferenceLM`: one combined
LM state per token; Kaldi's biglm decoders, paper 000 sec. 3). A token is (graph state, LM state):
recombination keys on both, word arcs add the difference, final tokens add the ``</s>``
difference. With ``lm_scale = 1`` the result is the 1-best of (graph with the small LM replaced by
the large one) without building that graph; memory grows with the large LM's tables (host), not
with a graph over them.

Everything else is the `wfst` decoder (`WfstDecoder`: config names, pruning, word times, score
split, compiled thread pool): this class only swaps the search. Scores: ``lm_score`` includes the
LM difference of the 1-best, ``acoustic_score`` is unchanged in meaning.

Backends (``decoder.backend``): ``compiled`` (numba, CPU; `wfst.compiled.CompiledSearch` with the LM) and
``torch`` (the batched token-passing core, `asrdecode.decoders.wfst.core.TokenPassing`, with the
LM state folded into the token key; any device, built for GPUs); ``auto`` = compiled on CPU. The
torch backend's LM tables stay in host memory with ``lm_on_host`` (default on CUDA; paper 000 sec.
2.2-2.3: the device keeps labels, offsets and backoff states, lookups are deduplicated, cached and
fetched from the host; `lm.host_lookup.HostLookupLM`), else both LMs' tables are on the device.
With them on the device, ``decoder.kernel: fused`` runs the whole frame loop as the fused Triton
search (`wfst.fused.FusedSearch`, paper 000 Alg. 2 and 4), whose kernels walk both LMs' tables for
each word arc (history_beam / history_max in its prep kernel); with ``lm_on_host`` or graph arcs
x LM states past 2^31, the per-frame search runs.
Lattices and n-best (``decoder.lattice``, ``nbest > 1``; compiled backend): the `wfst` lattices
(Kaldi's exact lattice generation, `wfst.lattice`) over the composed search space, as paper 002
asks of on-the-fly decoders: a lattice state is a (graph state, LM state) pair of the utterance
(numbered as the search meets them), each arc carries the LM difference of its word as part of
its graph cost, and a final pair adds the ``</s>`` difference. Written and determinized as `wfst`'s.
Not supported (one-line config errors): lattices with the torch backend, streaming.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from asrdecode.decoders.base import PendingDecode
from asrdecode.decoders.lms import load_difference_lm
from asrdecode.decoders.wfst.core import SearchGraph, SearchOptions, TokenPassing
from asrdecode.decoders.wfst.decoder import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.lattice import CompactLattice
from asrdecode.errors import ConfigError
from asrdecode.lm.difference import DifferenceLM
from asrdecode.lm.host_lookup import HostLookupLM
from asrdecode.models.base import ModelOutput

log = logging.getLogger("asrdecode.decoders.wfst_otf")
LATTICE_BACKEND = (
    "decoder.lattice / decoder.nbest > 1: wfst-otf keeps lattices with the compiled backend "
    "(decoder.backend=compiled, the default on CPU), not with the torch backend"
)


@dataclass
class WfstOtfConfig(WfstConfig):
    """Options of `wfst-otf`: every `wfst` option (see `WfstConfig`) plus the LMs.

    lm: the large LM that rescores on the fly: an ARPA file (plain or .gz) or pocketsphinx's binary
      trie (`.lm.bin`, e.g. ``embedded:sphinx-en-us/../en-us.lm.bin``, pocketsphinx's own trigram;
      restricted to the graph's words and renormalised).
    small_lm: the LM the graph was built with (default: the `arpa` input recorded in the graph
      folder's meta.json by `asrdecode build-graph`).
    lm_scale: weight of the difference: word arcs add ``lm_scale * (cost_large - cost_small)``;
      1 replaces the small LM by the large one.
    lm_on_host: torch backend: keep the LMs' weights and next states in host memory, the device
      holding only labels, first-label offsets and backoff states (paper 000 sec. 2.2; lookups
      deduplicated per call and fetched from the host, `lm.host_lookup`); null = true on CUDA, false
      elsewhere. false = both LMs' whole tables on the device (fixed-shape lookups, no host reads,
      so frames can be captured with cuda_graphs; with lm_on_host they run eagerly).
    lm_cache: lm_on_host: entries of the device cache of looked-up (LM state, word) pairs (a power
      of two; 0 = none; paper 000 sec. 2.3).
    """

    lm: str = ""
    small_lm: str = ""
    lm_scale: float = 1.0
    lm_on_host: bool | None = None
    lm_cache: int = 1 << 16


class WfstOtfDecoder(WfstDecoder):
    """`WfstDecoder` whose search carries a difference-LM state per token (module docstring)."""

    name: ClassVar[str] = "wfst-otf"
    config_type: ClassVar[type] = WfstOtfConfig
    refused_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check_options(cls, config: WfstOtfConfig) -> None:
        """One-line ConfigErrors for values the search cannot use (no graph or LM read)."""
        if config.want_lattice and config.backend == "torch":
            raise ConfigError(LATTICE_BACKEND)
        super().check_options(config)
        if config.lm_cache < 0 or config.lm_cache & (config.lm_cache - 1):
            raise ConfigError(f"decoder.lm_cache: {config.lm_cache} is not 0 or a power of two")

    def attach_lm(self, lm: DifferenceLM | None) -> None:
        """The difference LM (`lm`, or loaded from the config's LMs for the graph's words)."""
        if lm is None:
            lm = load_difference_lm(self.config, self.words, self.paths.olabel)
        self.diff = lm
        self.path_lm = lm.arrays()
        self._lms: dict[str, DifferenceLM | HostLookupLM] = {}
        self._host_note_logged = False

    # ------------------------------------------------------------------ backends
    def compiled_search(self) -> Any:
        if self._compiled is None:
            from asrdecode.decoders.wfst.compiled import CompiledSearch

            self._compiled = CompiledSearch(self.graph_cpu, self.config.threads, lm=self.diff)
        return self._compiled

    def lm_on_host(self, device: torch.device) -> bool:
        """Whether the torch search on `device` keeps the LM tables in host memory."""
        on = self.config.lm_on_host
        return device.type == "cuda" if on is None else bool(on)

    def lm_on(self, device: torch.device) -> DifferenceLM | HostLookupLM:
        """The LM lookups of the torch search on `device` (built once, then cached): the
        `DifferenceLM` with its tables on the device, or with lm_on_host the `HostLookupLM`."""
        key = str(device)
        if key not in self._lms:
            if self.lm_on_host(device):
                staged = self.config.pinned_copies and device.type == "cuda"
                self._lms[key] = HostLookupLM(self.diff, device, self.config.lm_cache, staged)
            elif device.type == "cpu":
                self._lms[key] = self.diff
            else:
                self._lms[key] = copy.deepcopy(self.diff).to(device)
        return self._lms[key]

    def lm_device_bytes(self, device: torch.device | str) -> dict[str, int]:
        """Device bytes of the LM lookups on `device` for the torch search: with lm_on_host the
        `HostLookupLM.device_bytes` parts, else both LMs' tables and the union-state maps."""
        lm = self.lm_on(torch.device(device))
        if isinstance(lm, HostLookupLM):
            return lm.device_bytes()
        tables = lm.table_bytes() - lm.state_bytes()
        return {"tables": tables, "state_maps": lm.state_bytes(), "total": lm.table_bytes()}

    def _search_options(self, device: torch.device) -> SearchOptions:
        options = super()._search_options(device)
        if options.cuda_graphs and self.lm_on_host(device):
            options.cuda_graphs = False  # a lookup reads the device (sizes, positions): not capturable
            if not self._host_note_logged:
                log.info("wfst-otf: decoder.cuda_graphs is off with decoder.lm_on_host (host LM lookups)")
                self._host_note_logged = True
        return options

    def _new_search(self, graph: SearchGraph, device: torch.device, want_lattice: bool) -> TokenPassing:
        return TokenPassing(graph, self._search_options(device), None, lm=self.lm_on(device))

    def _fused_lm(self, graph: SearchGraph, options: SearchOptions) -> tuple[Any, str]:
        """`kernel: fused` carries the LM when its tables are on the device (its kernels walk
        them; history_beam / history_max in its prep kernel); host lookups (lm_on_host) and a graph
        whose arcs times LM states pass 2^31 (the tie ranks, `fused._tie`) keep the per-frame
        search."""
        if self.lm_on_host(graph.device):
            return None, "an on-the-fly LM with lm_on_host"
        if graph.nextstate.numel() * self.diff.num_states >= 1 << 31:
            return None, "graph arcs x LM states past 2^31"
        return self.lm_on(graph.device), ""

    def start(self, output: ModelOutput) -> PendingDecode:
        want_lattice = self.config.want_lattice
        device = output.lengths.device
        if want_lattice and output.has_scores and self.backend_for(device) == "torch":
            raise ConfigError(LATTICE_BACKEND)
        pending = super().start(output)
        if self.backend_for(device) == "compiled":
            return pending
        results = pending.result()  # the torch backend: decoded by now
        lm = self.lm_on(device)
        if isinstance(lm, HostLookupLM):
            self.last_info["stats"]["lm_lookups"] = lm.take_stats()
        return PendingDecode.done(results)

    def word_lattice(
        self, data: tuple, num_frames: int, boost: dict[int, float], reached_final: bool
    ) -> CompactLattice | None:
        """The CompactLattice of one utterance: its lattice states are the search's (graph state,
        LM state) pairs (`data`: arcs with the LM's share ``lm``, nodes, pairs); a pair's final
        cost is the graph's plus the LM difference at </s>, the start pair is (start, <s>)."""
        return self.paths.pair_lattice(
            data,
            num_frames,
            self.path_lm,
            boost,
            reached_final,
            self.config.lattice_beam,
            self._arc_records(),
        )

    # ------------------------------------------------------------------ streaming
    def init_streams(
        self, count: int, boost: list[dict | None] | None = None, device: torch.device | str | None = None
    ) -> list[int]:
        raise ConfigError("wfst-otf does not decode streams (use decoder.type=wfst for streaming)")
