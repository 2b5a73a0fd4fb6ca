"""`wfst` with ``kernel: fused`` (wfst/fused.py: the frame as fused Triton kernels, the frame loop
on the device) on the CPU: the kernels run under TRITON_INTERPRET=1 in a fresh interpreter (the
variable must be set before the kernels are jitted) and are compared with kaldi-decoder's
FasterDecoder, the compiled backend, the per-frame torch search and exhaustive Viterbi; small
graphs, since the interpreter is slow. The kernels are also compiled for a CUDA target (no GPU
needed), so a kernel that the interpreter accepts but Triton's compiler does not fails here."""

import inspect
import os
import subprocess
import sys

import pytest
from helpers.wfst_graphs import TESTS, run_interpreted
from helpers.wfst_ref import single_thread  # noqa: F401

from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.errors import ConfigError

pytestmark = pytest.mark.usefixtures("single_thread")

FUSED_CHECK = """
import sys
from pathlib import Path
import numpy as np
import torch
sys.path.insert(0, {here!r})
from helpers.wfst_graphs import V, compare, device_graph, epsilon_cycle_fst, log_probs, run, synthetic
from helpers.wfst_ref import nemo_log_probs, random_wfst, viterbi_reference
from asrdecode.decoders.dispatch_count import DispatchCounter
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.fused import FusedSearch

WORDS = {{i: f"w{{i}}" for i in range(1, 10)}}


def decode(fst, lps, **options):
    dec = WfstDecoder(WfstConfig(**{{"backend": "torch", **options}}), graph=device_graph(fst), words=WORDS)
    return dec, run(dec, lps)


def same(a, b, what):
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert [w.word for w in x.words] == [w.word for w in y.words], (what, i, x.words, y.words)
        assert abs(x.score - y.score) < 1e-4, (what, i, x.score, y.score)


# 1. random graphs with epsilon cycles, a batch of unequal lengths (one empty), pruning that binds
#    (beam, max_active, min_active) and none; windows of 3 frames; programs of 16 lanes, so the
#    kernels' loops take several steps: the per-frame torch search and the compiled backend give
#    the same words and scores
FusedSearch.INTERPRETED = 16
for seed in range(4):
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, 8 if seed < 2 else 24, V, 5)
    lps = [log_probs(rng, 7), log_probs(rng, 3), log_probs(rng, 0), log_probs(rng, 5)]
    for prune in (dict(beam=6.0, max_active=4, min_active=2), dict(beam=1e9, max_active=10**9, min_active=0)):
        dec, got = decode(fst, lps, kernel="fused", sync_frames=3, **prune)
        assert dec.last_info["stats"]["kernel"] == "fused" and dec.last_info["stats"]["windows"] == 3
        ref_dec, ref = decode(fst, lps, kernel="torch", **prune)
        same(got, ref, ("torch", seed, prune))
        assert dec.last_info["not_final"] == ref_dec.last_info["not_final"]
        same(got, decode(fst, lps, backend="compiled", **prune)[1], ("compiled", seed, prune))

FusedSearch.INTERPRETED = 1024

# 2. exhaustive Viterbi on a graph with an epsilon cycle (no pruning)
fst = epsilon_cycle_fst()
rng = np.random.default_rng(3)
lps = [log_probs(rng, 6), log_probs(rng, 4)]
for lp, res in zip(lps, decode(fst, lps, kernel="fused", beam=1e9, max_active=10**9, min_active=0)[1]):
    best = viterbi_reference(fst, lp)
    assert abs(-res.score - best[0]) < 1e-4 and [w.word for w in res.words] == [f"w{{o}}" for o in best[1]]

# 3. capacities far too small: every window overflows, is grown and rerun; the same results
start = dict(FusedSearch.START_CAPACITY)
FusedSearch.START_CAPACITY = {{"tok": 2, "arc": 2, "hash": 4, "eps": 2, "rec": 4, "lat": 2}}
rng = np.random.default_rng(1)
fst = random_wfst(rng, 8, V, 5)
lps = [log_probs(rng, 7), log_probs(rng, 3)]
dec, got = decode(fst, lps, kernel="fused", sync_frames=2, beam=1e9, max_active=10**9, min_active=0)
assert dec.last_info["stats"]["redone_windows"] > 0
same(got, decode(fst, lps, kernel="torch", beam=1e9, max_active=10**9, min_active=0)[1], "overflow")
FusedSearch.START_CAPACITY = start

# 4. host synchronisations: one per window of sync_frames frames, whatever the batch
dec, _ = decode(fst, lps, kernel="fused", sync_frames=64)
with DispatchCounter() as c:
    run(dec, lps)
assert c.syncs == 1 == dec.last_info["stats"]["windows"], c.sync_ops

# 5. kaldi-decoder's FasterDecoder on TLGs built by build-graph (toy lexicon; the NeMo fixture's
#    BPE units with its log-probs, max_active binding)
toy, nemo = Path({toy!r}), Path({nemo!r})
for seed in range(2):
    compare(toy, synthetic(seed, 3, 25, 4, 3), np.array([25, 17, 9]), 16.0, 10000, 20, kernel="fused")
lp, lengths, _ = nemo_log_probs()
compare(nemo, lp[:2], lengths[:2], 10.0, 50, 20, kernel="fused")
print("ok")
"""


def test_fused_search_under_the_interpreter(toy_graph_dirs, nemo_graphs):
    """Every check of FUSED_CHECK in a fresh interpreter with TRITON_INTERPRET=1."""
    toy, nemo = str(toy_graph_dirs["compact"]), str(nemo_graphs["compact"])
    run_interpreted(FUSED_CHECK.format(here=TESTS, toy=toy, nemo=nemo))


LATTICE_CHECK = """
import sys
import numpy as np
sys.path.insert(0, {here!r})
from helpers.wfst_graphs import V, device_graph, log_probs, run
from helpers.wfst_ref import assert_kaldi_lattice, kaldi_raw_lattice, random_wfst, to_kaldifst
from asrdecode.decoders.dispatch_count import DispatchCounter
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.core import LatticeArcs
from asrdecode.decoders.wfst.fused import FusedSearch
from asrdecode.decoders.wfst.lattice import ARC_FIELDS, NODE_FIELDS

WORDS = {{i: f"w{{i}}" for i in range(1, 10)}}
WIDE = {{"beam": 1e9, "max_active": 10**9, "min_active": 0}}
TAKEN = []
take = LatticeArcs.take


def taking(self, key):  # the search arcs and nodes each utterance's lattice is built from
    data = take(self, key)
    TAKEN.append(data)
    return data


LatticeArcs.take = taking


def decode(fst, lps, **options):
    TAKEN.clear()
    cfg = WfstConfig(**{{"backend": "torch", "lattice": True, **options}})
    dec = WfstDecoder(cfg, graph=device_graph(fst), words=WORDS)
    return dec, run(dec, lps), [rows(d) for d in TAKEN]


def rows(data):
    arcs, nodes = data
    if nodes is None:
        return [], []
    return (
        sorted(zip(*(arcs[f].tolist() for f in ARC_FIELDS))),
        sorted(zip(*(nodes[f].tolist() for f in NODE_FIELDS))),
    )


def same(a, b, what):
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert [w.word for w in x.words] == [w.word for w in y.words], (what, i, x.words, y.words)
        assert abs(x.score - y.score) < 1e-4, (what, i, x.score, y.score)
        assert (x.lattice is None) == (y.lattice is None), (what, i)
        if x.lattice is None:
            continue
        p, q = x.lattice.state_lattice, y.lattice.state_lattice
        assert p.num_nodes == q.num_nodes and sorted(p.final) == sorted(q.final), (what, i)
        for f in ("src", "dst", "arc", "node_frame", "node_state"):
            assert np.array_equal(getattr(p, f), getattr(q, f)), (what, i, f)
        for f in ("graph", "acoustic", "alpha", "beta"):
            assert np.allclose(getattr(p, f), getattr(q, f), atol=1e-4), (what, i, f)
        assert np.allclose([p.final[k] for k in sorted(p.final)], [q.final[k] for k in sorted(q.final)])
        for (w1, c1), (w2, c2) in zip(x.lattice.nbest(4), y.lattice.nbest(4), strict=True):
            assert w1 == w2 and abs(c1 - c2) < 1e-4, (what, i)


# 1. random graphs with epsilon cycles, a batch of unequal lengths (one empty), pruning that binds
#    and none, windows of 2 frames, window pruning never or every 2 frames (where the per-frame
#    search prunes too): the lattice stores receive the per-frame torch search's arcs and nodes
#    (as multisets: duplicates of re-expanded epsilon arcs included), and the lattices, n-best and
#    1-best are the same; no launch is added (6 per frame + 2 for the start, one host read per
#    window)
FusedSearch.INTERPRETED = 16
cases = []
for seed in range(3):
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, 8 if seed < 2 else 24, V, 5)
    lps = [log_probs(rng, 5), log_probs(rng, 3), log_probs(rng, 0)]
    prune = dict(beam=6.0, max_active=4, min_active=2) if seed != 1 else dict(WIDE)
    prune.update(lattice_beam=3.0, prune_interval=2 * (seed > 0), nbest=4)
    cases.append((fst, lps, prune))
    dec, got, data = decode(fst, lps, kernel="fused", sync_frames=2, **prune)
    stats = dec.last_info["stats"]
    assert stats["kernel"] == "fused" and stats["windows"] == 3, stats
    assert stats["launches"] == 6 * 5 + 2 and stats["lattice_arcs"] > 0, stats
    _, ref, ref_data = decode(fst, lps, kernel="torch", **prune)
    assert data == ref_data, seed
    same(got, ref, ("torch", seed))
    if seed == 0:  # the same decoder again (set up now): one host synchronisation per window
        with DispatchCounter() as c:
            again = run(dec, lps)
        assert c.syncs == 3, c.sync_ops
        same(again, ref, "again")

# 2. the lattice-arc arena far too small: windows overflow, are rerun larger, the same lattices
start = dict(FusedSearch.START_CAPACITY)
FusedSearch.START_CAPACITY = {{**start, "lat": 2}}
fst, lps, prune = cases[0]
dec, got, data = decode(fst, lps, kernel="fused", sync_frames=2, **prune)
assert dec.last_info["stats"]["redone_windows"] > 0
_, ref, ref_data = decode(fst, lps, kernel="torch", **prune)
assert data == ref_data
same(got, ref, "overflow")
FusedSearch.START_CAPACITY = start
FusedSearch.INTERPRETED = 1024

# 3. Kaldi's exact lattice (kaldi-decoder's LatticeSimpleDecoder) on random graphs with epsilon
#    cycles, as test_wfst_lattice.py checks the per-frame search
for seed in range(4):
    rng = np.random.default_rng(800 + seed)
    fst = random_wfst(rng, int(rng.integers(3, 8)), V, 5)
    lp = log_probs(rng, int(rng.integers(2, 7)))
    ref = kaldi_raw_lattice(to_kaldifst(fst), lp, lattice_beam=4.0)
    _, (res,), _ = decode(fst, [lp], kernel="fused", lattice_beam=4.0, **WIDE)
    assert_kaldi_lattice(res.lattice, ref)
print("ok")
"""


def test_fused_lattices_under_the_interpreter():
    """Every check of LATTICE_CHECK in a fresh interpreter with TRITON_INTERPRET=1."""
    run_interpreted(LATTICE_CHECK.format(here=TESTS))


COMPILE_CHECK = """
import inspect
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from asrdecode.decoders.wfst import fused

for name, (types, constants) in fused.kernel_signatures().items():
    fn = fused.jitted(name)
    for lm in (0, 1) if "LM" in constants else (None,):  # without and with an on-the-fly LM
        constexprs = constants if lm is None else {**constants, "LM": lm}
        src = ASTSource(fn=fn, signature=types, constexprs=constexprs)
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        assert "cubin" in kernel.asm, (name, lm)

# no kernel is specialised on a scalar (a frame index, a batch size): one compilation per kernel
# and constexpr values, not one per pattern of its integers
from asrdecode.decoders.wfst import kernels
for name, fn in [(n, fused.jitted(n)) for n in fused.KERNELS] + [("emitting arcs", kernels._kernel())]:
    scalars = [p for p in fn.params if not (p.is_constexpr or p.name.endswith(("_ptr", "_out")))]
    special = [p.name for p in scalars if not p.do_not_specialize]
    assert not special, (name, special)
print("ok")
"""


def test_fused_kernels_compile_for_a_cuda_target():
    """Triton compiles each kernel to a cubin for an sm_90 GPU (an H100) without a GPU here,
    each kernel that takes an LM (`wfst-otf`) with and without one; no kernel is specialised on
    its scalars."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE_CHECK], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_fused_needs_cuda_or_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ConfigError, match="fused needs a CUDA device or TRITON_INTERPRET"):
        WfstConfig(kernel="fused").search_options("cpu")
    with pytest.raises(ConfigError, match="sync_frames"):
        WfstDecoder.check_options(WfstConfig(kernel="fused", sync_frames=0))


def test_kernel_signatures_name_every_argument():
    from asrdecode.decoders.wfst import fused

    for name, (types, _) in fused.kernel_signatures().items():
        assert list(types) == list(inspect.signature(getattr(fused, name)).parameters), name
