"""Independent references for the `wfst` decoder tests (no asrdecode search code is used here).

* `random_wfst`: tiny random WFSTs with epsilon arcs (random ilabels, olabels, weights, finals).
* `viterbi_reference`: exhaustive Viterbi in plain Python: dynamic programming over (frame, state)
  with a Bellman-Ford epsilon closure, keeping the output labels of the best path.
* `kaldi_best_path`: kaldi-decoder's FasterDecoder (Kaldi's CPU decoder) on a kaldifst graph.
* `kaldi_raw_lattice`: kaldi-decoder's LatticeSimpleDecoder's raw lattice; `assert_kaldi_lattice`
  compares a decoder's lattice with it.
* `write_arpa`: a small bigram ARPA writer for building TLGs from word lists.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nemo"


def random_wfst(
    rng: np.random.Generator, num_states: int, num_columns: int, num_words: int, eps_forward: bool = False
) -> dict:
    """Arc list of a random WFST: every state has 1-4 arcs, ~30% epsilon inputs, ~50% epsilon outputs.

    Weights are in [0, 3) (no negative cycles); 1-3 final states with random final costs.
    eps_forward: epsilon-input arcs only go to higher states (no epsilon cycles).
    """
    arcs = []
    for s in range(num_states):
        for _ in range(int(rng.integers(1, 5))):
            il = 0 if rng.random() < 0.3 else int(rng.integers(1, num_columns + 1))
            if il == 0 and eps_forward and s == num_states - 1:
                il = int(rng.integers(1, num_columns + 1))
            ol = 0 if rng.random() < 0.5 else int(rng.integers(1, num_words + 1))
            lo = s + 1 if il == 0 and eps_forward else 0
            arcs.append((s, il, ol, float(rng.uniform(0, 3)), int(rng.integers(lo, num_states))))
    final = [math.inf] * num_states
    for s in rng.choice(num_states, size=int(rng.integers(1, 4)), replace=False):
        final[int(s)] = float(rng.uniform(0, 2))
    return {"num_states": num_states, "start": 0, "final": final, "arcs": arcs}


def _closure(dist: dict[int, tuple[float, tuple[int, ...]]], arcs_of: dict) -> None:
    queue = list(dist)
    while queue:
        s = queue.pop()
        cost, out = dist[s]
        for il, ol, w, ns in arcs_of.get(s, ()):
            if il != 0:
                continue
            nc = cost + w
            if ns not in dist or nc < dist[ns][0]:
                dist[ns] = (nc, out + ((ol,) if ol else ()))
                queue.append(ns)


def viterbi_reference(fst: dict, log_probs: np.ndarray, acoustic_scale: float = 1.0, use_final: bool = True):
    """Exact best path of (frames x fst): (total cost incl. final, olabels) or None if no final state.

    Cost per emitting arc = weight - acoustic_scale * log_probs[t, ilabel - 1], as Kaldi's CTC
    decodable. Plain dictionaries; exhaustive over all (frame, state) pairs. use_final=False: the
    best path into any state after the last frame, final costs ignored (a partial hypothesis).
    """
    arcs_of: dict[int, list] = {}
    for s, il, ol, w, ns in fst["arcs"]:
        arcs_of.setdefault(s, []).append((il, ol, w, ns))
    dist = {fst["start"]: (0.0, ())}
    _closure(dist, arcs_of)
    for t in range(len(log_probs)):
        new: dict[int, tuple[float, tuple[int, ...]]] = {}
        for s, (cost, out) in dist.items():
            for il, ol, w, ns in arcs_of.get(s, ()):
                if il == 0:
                    continue
                nc = cost + w - acoustic_scale * float(log_probs[t, il - 1])
                if ns not in new or nc < new[ns][0]:
                    new[ns] = (nc, out + ((ol,) if ol else ()))
        _closure(new, arcs_of)
        dist = new
    best = None
    for s, (cost, out) in dist.items():
        if not use_final or math.isfinite(fst["final"][s]):
            total = cost + (fst["final"][s] if use_final else 0.0)
            if best is None or total < best[0]:
                best = (total, list(out))
    return best


def all_word_sequences(fst: dict, log_probs: np.ndarray) -> dict[tuple[int, ...], float]:
    """Every output sequence of (frames x fst) with its best total cost, by exhaustive DP over
    (state, output sequence) pairs. Needs an epsilon-cycle-free fst (`eps_forward=True`)."""
    arcs_of: dict[int, list] = {}
    for s, il, ol, w, ns in fst["arcs"]:
        arcs_of.setdefault(s, []).append((il, ol, w, ns))

    def relax(table: dict, key: tuple, cost: float, queue: list | None = None) -> None:
        if key not in table or cost < table[key]:
            table[key] = cost
            if queue is not None:
                queue.append(key)

    def closure(table: dict) -> None:
        queue = list(table)
        while queue:
            s, out = key = queue.pop()
            for il, ol, w, ns in arcs_of.get(s, ()):
                if il == 0:
                    relax(table, (ns, out + ((ol,) if ol else ())), table[key] + w, queue)

    table = {(fst["start"], ()): 0.0}
    closure(table)
    for t in range(len(log_probs)):
        new: dict = {}
        for (s, out), cost in table.items():
            for il, ol, w, ns in arcs_of.get(s, ()):
                if il:
                    relax(new, (ns, out + ((ol,) if ol else ())), cost + w - float(log_probs[t, il - 1]))
        closure(new)
        table = new
    result: dict[tuple[int, ...], float] = {}
    for (s, out), cost in table.items():
        if math.isfinite(fst["final"][s]):
            relax(result, out, cost + fst["final"][s])
    return result


def word_sequence_cost(fst: dict, log_probs: np.ndarray, words: list[int], use_final: bool = True) -> float:
    """Best cost of the paths of (frames x fst) that output exactly `words` (inf if none): Viterbi
    over (state, number of words output so far), so its size is linear in the sequence length."""
    arcs_of: dict[int, list] = {}
    for s, il, ol, w, ns in fst["arcs"]:
        arcs_of.setdefault(s, []).append((il, ol, w, ns))
    n = len(words)

    def step(key: tuple[int, int], ol: int) -> tuple[int, int] | None:
        s, k = key
        if not ol:
            return s, k
        return (s, k + 1) if k < n and words[k] == ol else None

    def closure(table: dict) -> None:
        queue = list(table)
        while queue:
            key = queue.pop()
            for il, ol, w, ns in arcs_of.get(key[0], ()):
                nxt = step((ns, key[1]), ol) if il == 0 else None
                if nxt is not None and (nxt not in table or table[key] + w < table[nxt]):
                    table[nxt] = table[key] + w
                    queue.append(nxt)

    table = {(fst["start"], 0): 0.0}
    closure(table)
    for t in range(len(log_probs)):
        new: dict = {}
        for key, cost in table.items():
            for il, ol, w, ns in arcs_of.get(key[0], ()):
                nxt = step((ns, key[1]), ol) if il else None
                c = cost + w - float(log_probs[t, il - 1]) if il else 0.0
                if nxt is not None and (nxt not in new or c < new[nxt]):
                    new[nxt] = c
        closure(new)
        table = new
    best = math.inf
    for (s, k), cost in table.items():
        if k == n and (not use_final or math.isfinite(fst["final"][s])):
            best = min(best, cost + (fst["final"][s] if use_final else 0.0))
    return best


def all_paths(fst: dict, log_probs: np.ndarray) -> list[dict]:
    """Every complete path of (frames x fst) ending in a final state, by depth-first enumeration
    (needs an epsilon-cycle-free fst, `eps_forward=True`). Each path: total, graph (arc weights +
    final cost) and acoustic cost, olabels, ilabels (one per frame) and its arcs as
    ((src frame, src state), (dst frame, dst state), ilabel, olabel, weight); the start node is
    (-1, start), an emitting arc for frame t goes from frame t-1 to t, an epsilon arc stays."""
    arcs_of: dict[int, list] = {}
    for s, il, ol, w, ns in fst["arcs"]:
        arcs_of.setdefault(s, []).append((il, ol, w, ns))
    T = len(log_probs)
    out: list[dict] = []

    def walk(frame: int, state: int, graph: float, acoustic: float, path: list) -> None:
        if frame == T - 1 and math.isfinite(fst["final"][state]):
            g = graph + fst["final"][state]
            out.append(
                {
                    "total": g + acoustic,
                    "graph": g,
                    "acoustic": acoustic,
                    "olabels": tuple(a[3] for a in path if a[3]),
                    "ilabels": tuple(a[2] for a in path if a[2]),
                    "arcs": tuple(path),
                }
            )
        for il, ol, w, ns in arcs_of.get(state, ()):
            if il == 0:
                arc = ((frame, state), (frame, ns), il, ol, w)
                walk(frame, ns, graph + w, acoustic, [*path, arc])
            elif frame + 1 < T:
                arc = ((frame, state), (frame + 1, ns), il, ol, w)
                ac = -float(log_probs[frame + 1, il - 1])
                walk(frame + 1, ns, graph + w, acoustic + ac, [*path, arc])

    walk(-1, fst["start"], 0.0, 0.0, [])
    return out


def kaldi_raw_lattice(
    fst, log_probs: np.ndarray, lattice_beam: float, beam: float = 50.0
) -> list[tuple] | None:
    """Kaldi's exact lattice generation (kaldi-decoder's LatticeSimpleDecoder, raw state-level
    lattice after its final lattice-beam pruning): arcs as (frames before the source state,
    ilabel, olabel, graph cost, acoustic cost) and final states as (time, -1, -1, graph, acoustic),
    parsed from the lattice's text form. None when no final state was reached."""
    import kaldi_decoder

    cfg = kaldi_decoder.LatticeSimpleDecoderConfig(
        beam=beam, lattice_beam=lattice_beam, determinize_lattice=False
    )
    dec = kaldi_decoder.LatticeSimpleDecoder(fst, cfg)
    dec.decode(kaldi_decoder.DecodableCtc(np.ascontiguousarray(log_probs, dtype=np.float32)))
    ok, lat = dec.get_raw_lattice()
    if not ok:
        return None
    lines = [line.split() for line in lat.to_str().splitlines() if line.strip()]
    start = int(lines[0][0])  # OpenFst prints the start state first
    arcs = [
        (int(f[0]), int(f[1]), int(f[2]), int(f[3]), *map(float, f[4].split(",")))
        for f in lines
        if len(f) == 5
    ]
    finals = [(int(f[0]), *map(float, f[1].split(","))) for f in lines if len(f) == 2]
    finals += [(int(f[0]), 0.0, 0.0) for f in lines if len(f) == 1]
    times = {start: 0}
    for _ in range(len(arcs) + 1):  # consistent state times: emitting arcs from the start
        grew = False
        for s, d, il, *_rest in arcs:
            if s in times and d not in times:
                times[d] = times[s] + (il != 0)
                grew = True
        if not grew:
            break
    out = [(times[s], il, ol, g, a) for s, d, il, ol, g, a in arcs]
    return out + [(times[s], -1, -1, g, a) for s, g, a in finals]


def assert_kaldi_lattice(lattice, ref: list[tuple] | None) -> None:
    """A decoder's lattice (`DecodeResult.lattice`) against `kaldi_raw_lattice`'s `ref`: the same
    arcs (time, ilabel, olabel, graph, acoustic) and final weights; both None when nothing
    survived to the last frame."""
    if ref is None:
        assert lattice is None
        return
    lat = lattice.state_lattice
    got = [
        (int(lat.node_frame[s]) + 1, int(il), int(ol), float(gc), float(ac))
        for s, il, ol, gc, ac in zip(lat.src, lat.ilabel, lat.olabel, lat.graph, lat.acoustic, strict=True)
    ]
    got += [(int(lat.node_frame[s]) + 1, -1, -1, w, 0.0) for s, w in lat.final.items()]
    assert len(got) == len(ref)
    for a, b in zip(sorted(got), sorted(ref), strict=True):
        assert a[:3] == b[:3]
        assert a[3:] == pytest.approx(b[3:], abs=1e-3)


def to_kaldifst(fst: dict):
    import kaldifst

    f = kaldifst.StdVectorFst()
    for _ in range(fst["num_states"]):
        f.add_state()
    f.start = fst["start"]
    for s, w in enumerate(fst["final"]):
        if math.isfinite(w):
            f.set_final(s, w)
    for s, il, ol, w, ns in fst["arcs"]:
        f.add_arc(s, kaldifst.StdArc(il, ol, w, ns))
    return f


def kaldi_best_path(
    fst, log_probs: np.ndarray, beam: float, max_active: int = 2**31 - 1, min_active: int = 20
):
    """FasterDecoder 1-best: (total cost, graph cost, acoustic cost, olabels, reached_final) or None."""
    import kaldi_decoder
    import kaldifst

    opts = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=max_active, min_active=min_active)
    dec = kaldi_decoder.FasterDecoder(fst, opts)
    dec.decode(kaldi_decoder.DecodableCtc(np.ascontiguousarray(log_probs, dtype=np.float32)))
    ok, lat = dec.get_best_path()
    if not ok:
        return None
    ok, _, olabels, weight = kaldifst.get_linear_symbol_sequence(lat)
    assert ok
    graph, acoustic = float(weight.value1), float(weight.value2)
    return graph + acoustic, graph, acoustic, list(olabels), dec.reached_final()


def write_arpa(path: Path, sentences: list[list[str]]) -> None:
    """Add-one bigram ARPA of the sentences (log10; backoff weight -0.3 on every unigram)."""
    uni = Counter(w for s in sentences for w in [*s, "</s>"])
    bi = Counter((a, b) for s in sentences for a, b in zip(["<s>", *s], [*s, "</s>"], strict=True))
    total = sum(uni.values()) + len(uni)
    lines = ["\\data\\", f"ngram 1={len(uni) + 1}", f"ngram 2={len(bi)}", "", "\\1-grams:"]
    lines.append("-99 <s> -0.3")
    for w, c in sorted(uni.items()):
        lines.append(f"{math.log10((c + 1) / total):.4f} {w}" + ("" if w == "</s>" else " -0.3"))
    lines += ["", "\\2-grams:"]
    ctx = Counter(a for a, _ in bi.elements())
    for (a, b), c in sorted(bi.items()):
        lines.append(f"{math.log10(c / (ctx[a] + 1)):.4f} {a} {b}")
    lines += ["", "\\end\\", ""]
    path.write_text("\n".join(lines))


def nemo_log_probs() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Real model outputs over the fixture's BPE-128 units: NeMo 3.0.0's log_probs [6, T, 129], lengths
    and greedy texts of the earlier, 128-wide ctc_bpe fixture (reference/ctc_bpe_128.npz; the same
    units), whose flat log-probs give the graph searches many near alternatives."""
    d = np.load(FIXTURES / "reference" / "ctc_bpe_128.npz")
    return d["log_probs"], d["encoder_len"], [str(t) for t in d["greedy_text"]]


def nemo_sentences() -> list[list[str]]:
    """Reference transcripts of the fixture clips + the (gibberish) greedy outputs of `nemo_log_probs`."""
    return _transcripts() + [t.split() for t in nemo_log_probs()[2]]


def model_sentences() -> list[list[str]]:
    """Reference transcripts of the fixture clips + the greedy outputs of the current ctc_bpe.nemo: the
    words of graphs that decode the clips through the model itself (the CLI tests)."""
    current = np.load(FIXTURES / "reference" / "ctc_bpe.npz", allow_pickle=False)["greedy_text"]
    return _transcripts() + [str(t).split() for t in current]


def _transcripts() -> list[list[str]]:
    text = (FIXTURES / "audio" / "text").read_text().splitlines()
    return [line.split()[1:] for line in text if line.strip()]


@pytest.fixture(autouse=False)
def single_thread():
    """Per-frame tensors are tiny: intra-op threads only add contention on a shared CPU."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
