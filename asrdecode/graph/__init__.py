"""Decoding graphs: the device-ready CSR format, TLG/HCLG building, and loading of OpenFst graphs."""

from asrdecode.graph.build import build_graph, describe_graph
from asrdecode.graph.format import DeviceGraph, find_graph_file
from asrdecode.graph.hclg import HmmTopology, TiedStates, build_hclg
from asrdecode.graph.openfst import convert_openfst_graph, load_openfst_graph
from asrdecode.graph.recipe import GraphBuildConfig

__all__ = [
    "DeviceGraph",
    "GraphBuildConfig",
    "HmmTopology",
    "TiedStates",
    "build_graph",
    "build_hclg",
    "convert_openfst_graph",
    "describe_graph",
    "find_graph_file",
    "load_openfst_graph",
]
