"""WFST decoders: the batched token-passing core and the `wfst` decoder (paper 001)."""

from asrdecode.decoders.wfst.core import BoostTable, SearchOptions, TokenPassing, Tokens
from asrdecode.decoders.wfst.decoder import WfstConfig, WfstDecoder, load_graph

__all__ = ["BoostTable", "SearchOptions", "TokenPassing", "Tokens", "WfstConfig", "WfstDecoder", "load_graph"]
