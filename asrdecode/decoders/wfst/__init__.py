"""WFST decoders: the batched token-passing core and the `wfst` decoder (paper 001)."""

from asrdecode.decoders.wfst.core import BoostTable, SearchOptions, TokenPassing, Tokens
from asrdecode.decoders.wfst.decoder import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.paths import GraphPaths, acoustic_costs, load_graph

__all__ = [
    "BoostTable",
    "GraphPaths",
    "SearchOptions",
    "TokenPassing",
    "Tokens",
    "WfstConfig",
    "WfstDecoder",
    "acoustic_costs",
    "load_graph",
]
