"""Small WFSTs and log-probs for the `wfst` tests: arc-list graphs on the device, random and peaky
synthetic log-probs, a batch runner, Kaldi's GetCutoff rule in Python, and the comparison of a
decode with kaldi-decoder's FasterDecoder; the fused search's checks run in a fresh interpreter."""

import math
import os
import subprocess
import sys
from pathlib import Path

import kaldifst
import numpy as np
import pytest
import torch

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.graph import DeviceGraph
from asrdecode.models.base import ModelOutput
from helpers.wfst_ref import kaldi_best_path

V = 4  # model columns; ilabel i reads column i-1


def device_graph(fst: dict) -> DeviceGraph:
    a = np.array(fst["arcs"], dtype=np.float64).reshape(-1, 5)
    g = DeviceGraph.from_arrays(
        fst["num_states"],
        fst["start"],
        np.array(fst["final"]),
        a[:, 0].astype(int),
        a[:, 1].astype(int),
        a[:, 2].astype(int),
        a[:, 3],
        a[:, 4].astype(int),
    )
    g.validate()
    return g


def log_probs(rng, T: int) -> np.ndarray:
    x = rng.normal(size=(T, V)) * 2
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def run(dec: WfstDecoder, lps: list[np.ndarray], acoustic_scale: float = 1.0):
    T = max(len(x) for x in lps)
    batch = np.zeros((len(lps), T, V), dtype=np.float32)
    for b, x in enumerate(lps):
        batch[b, : len(x)] = x
    out = ModelOutput(torch.from_numpy(batch), torch.tensor([len(x) for x in lps]), 0.04, -1, [])
    return dec.decode(out)


def epsilon_cycle_fst() -> dict:
    """States 0 and 1 joined by an epsilon cycle (positive weight) with outputs."""
    return {
        "num_states": 3,
        "start": 0,
        "final": [math.inf, math.inf, 0.5],
        "arcs": [
            (0, 1, 1, 0.2, 1),
            (1, 0, 2, 0.1, 0),
            (0, 0, 3, 0.3, 1),
            (1, 2, 0, 0.1, 2),
            (2, 0, 4, 0.0, 1),
        ],
    }


def kaldi_get_cutoff(costs: list[float], beam: float, max_active: int, min_active: int, delta: float):
    """Kaldi FasterDecoder::GetCutoff in plain Python (sorting instead of nth_element)."""
    best = min(costs)
    beam_cut = best + beam
    srt = sorted(costs)
    max_cut = srt[max_active] if len(srt) > max_active else math.inf
    if max_cut < beam_cut:
        return max_cut, max_cut - best + delta
    min_cut = math.inf
    if len(srt) > min_active:
        min_cut = best if min_active == 0 else srt[min_active]
    if min_cut > beam_cut:
        return min_cut, min_cut - best + delta
    return beam_cut, beam


COST_TOL = 2e-3  # float32 token costs vs Kaldi's double accumulation over ~60 frames


NO_MAX = 2**31 - 1


def synthetic(seed: int, B: int, T: int, V: int, blank: int) -> np.ndarray:
    """Peaky CTC-like log-probs: a random unit or blank per frame at ~0.8, plus noise."""
    rng = np.random.default_rng(seed)
    x = np.full((B, T, V), np.log(0.2 / (V - 1)), dtype=np.float32)
    for b in range(B):
        cols = rng.integers(0, V, size=T)
        cols[rng.random(T) < 0.5] = blank
        x[b, np.arange(T), cols] = np.log(0.8)
    x += rng.normal(size=x.shape).astype(np.float32) * 0.3
    return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def compare(
    graph_dir: Path,
    lp: np.ndarray,
    lengths: np.ndarray,
    beam: float,
    max_active: int,
    min_active: int,
    backend: str = "torch",
    kernel: str = "auto",
):
    """Decode with `backend` (and the torch backend's `kernel`) and check every utterance against
    FasterDecoder (the compiled backend runs the same cases in test_wfst_compiled.py, the fused
    kernels in test_wfst_fused.py)."""
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(next(graph_dir.glob("*LG.fst")))))
    cfg = WfstConfig(
        graph=str(graph_dir),
        beam=beam,
        max_active=max_active,
        min_active=min_active,
        backend=backend,
        kernel=kernel,
    )
    dec = WfstDecoder(cfg)
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, lp.shape[2] - 1, [])
    results = dec.decode(out)
    for b, res in enumerate(results):
        ref = kaldi_best_path(fst, lp[b, : lengths[b]], beam, min(max_active, NO_MAX), min_active)
        assert ref is not None
        total, graph, acoustic, olabels, reached = ref
        assert [w.word for w in res.words] == [dec.words[o] for o in olabels], b
        assert -res.score == pytest.approx(total, abs=COST_TOL), b
        assert -res.acoustic_score == pytest.approx(acoustic, abs=COST_TOL), b
        assert -res.lm_score == pytest.approx(graph, abs=COST_TOL), b
        assert (b not in dec.last_info["not_final"]) == reached
    return results


TESTS = str(Path(__file__).resolve().parent.parent)  # the tests folder (where `helpers` is found)


def run_interpreted(script: str) -> None:
    """Run the Python source `script` in a fresh interpreter with TRITON_INTERPRET=1 (it must be
    set before any kernel is jitted: the fused search's checks on the CPU); it must end printing
    "ok"."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("ok")
