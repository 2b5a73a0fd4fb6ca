"""Enumeration of a word lattice's paths (tests of the WFST decoders' lattices)."""

from __future__ import annotations

from asrdecode.decoders.wfst.lattice import CompactLattice


def compact_paths(lat: CompactLattice) -> list[tuple]:
    """Every complete path of a word lattice: (words, graph, acoustic, units)."""
    out = []
    by_src: dict[int, list[int]] = {}
    for i in range(lat.num_arcs):
        by_src.setdefault(int(lat.src[i]), []).append(i)

    def walk(s: int, words: tuple, g: float, a: float, units: tuple) -> None:
        if s in lat.final:
            fg, fa, fu = lat.final[s]
            out.append((words, g + fg, a + fa, units + fu))
        for i in by_src.get(s, ()):
            walk(
                int(lat.dst[i]),
                (*words, int(lat.word[i])),
                g + lat.graph[i],
                a + lat.acoustic[i],
                units + lat.units[i],
            )

    if lat.num_states:
        walk(0, (), 0.0, 0.0, ())
    return out


def lattice_best_path(arcs: list[tuple], finals: dict) -> tuple[list[int], float, tuple]:
    """Best path of a parsed CompactLattice (acyclic, by dynamic programming in state order):
    (words, total cost, units)."""
    best = {0: (0.0, [], ())}
    for s, d, w, g, a, units in sorted(arcs):
        if s in best:
            c, ws, us = best[s]
            if d not in best or c + g + a < best[d][0]:
                best[d] = (c + g + a, [*ws, w], us + units)
    ends = [(best[s][0] + g + a, best[s][1], best[s][2] + u) for s, (g, a, u) in finals.items() if s in best]
    cost, words, units = min(ends)
    return words, cost, units
