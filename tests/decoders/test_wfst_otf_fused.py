"""`wfst-otf` (backend torch, LM tables on the device) with ``kernel: fused``: the fused Triton
search (wfst/fused.py) carrying an LM state per token, its emit and epsilon kernels walking both
LMs' tables (`fused._lm_step`). On the CPU the kernels run under TRITON_INTERPRET=1 in a fresh
interpreter (set before they are jitted) and are compared with the per-frame torch search and
the compiled backend on random small graphs and random ARPA LMs; tiny inputs, since the
interpreter is slow. Their compilation for a CUDA target is checked in test_wfst_fused.py."""

import pytest
from helpers.wfst_graphs import TESTS, run_interpreted
from helpers.wfst_ref import single_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures("single_thread")

OTF_FUSED_CHECK = """
import sys
import tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, {here!r})
from helpers.otf_ref import WORDS, random_arpa
from helpers.wfst_graphs import device_graph, log_probs, run
from helpers.wfst_ref import random_wfst
from asrdecode.decoders.dispatch_count import DispatchCounter
from asrdecode.decoders.wfst.fused import FusedSearch
from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

WIDE = dict(beam=1e9, max_active=10**9, min_active=0)
tmp = Path(tempfile.mkdtemp())


def decode(fst, lms, lps, **options):
    large, small, scale = lms
    options = {{"backend": "torch", "lm_on_host": False, **options}}
    cfg = WfstOtfConfig(**options, lm=str(large), small_lm=str(small), lm_scale=scale)
    dec = WfstOtfDecoder(cfg, graph=device_graph(fst), words=WORDS)
    return dec, run(dec, lps)


def same(a, b, what, exact):
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert [w.word for w in x.words] == [w.word for w in y.words], (what, i, x.words, y.words)
        for f in ("score", "lm_score", "acoustic_score"):
            p, q = getattr(x, f), getattr(y, f)
            assert (p == q) if exact else abs(p - q) < 1e-4, (what, i, f, p, q)


def case(seed):
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, int(rng.integers(4, 9)), 4, 6, eps_forward=True)
    names = list(WORDS.values())
    # odd seeds: histories that change no cost, which the difference LM merges
    large = random_arpa(tmp / f"large{{seed}}.arpa", rng, names, 3, bare=0.6 * (seed % 2))
    small = random_arpa(tmp / f"small{{seed}}.arpa", rng, names, int(rng.integers(1, 3)))
    lms = (large, small, 1.0 if seed % 3 else 0.6)
    lps = [log_probs(rng, 4), log_probs(rng, 2), log_probs(rng, 0)]  # unequal lengths, one empty
    return fst, lms, lps


# 1. random graphs with epsilon arcs and random trigram / bigram / unigram LM pairs (lm_scale 1
#    and 0.6), a batch of unequal lengths, pruning that binds and none, windows of 2 frames,
#    programs of 16 lanes: the per-frame torch search's words, total, LM and acoustic scores bit
#    for bit, the compiled backend's within 1e-4; 6 launches a frame + 2 for the start tokens
FusedSearch.INTERPRETED = 16
for seed in range(4):
    fst, lms, lps = case(seed)
    prune = dict(beam=5.0, max_active=4, min_active=2) if seed % 2 else dict(WIDE)
    dec, got = decode(fst, lms, lps, kernel="fused", sync_frames=2, **prune)
    stats = dec.last_info["stats"]
    assert stats["kernel"] == "fused" and stats["windows"] == 2, stats
    assert stats["launches"] == 6 * 4 + 2 or stats["redone_windows"], stats  # a rerun launches again
    ref_dec, ref = decode(fst, lms, lps, kernel="torch", **prune)
    same(got, ref, ("torch", seed), exact=True)
    assert dec.last_info["not_final"] == ref_dec.last_info["not_final"]
    same(got, decode(fst, lms, lps, backend="compiled", **prune)[1], ("compiled", seed), exact=False)
    if seed == 0:  # the same decoder again: one host synchronisation per window
        with DispatchCounter() as c:
            again = run(dec, lps)
        assert c.syncs == 2 == dec.last_info["stats"]["windows"], c.sync_ops
        same(again, ref, "again", exact=True)

# 2. capacities far too small: every window overflows, is grown and rerun; the same results
start = dict(FusedSearch.START_CAPACITY)
FusedSearch.START_CAPACITY = {{"tok": 2, "arc": 2, "hash": 4, "eps": 2, "rec": 4, "lat": 2}}
fst, lms, lps = case(5)
dec, got = decode(fst, lms, lps, kernel="fused", sync_frames=2, **WIDE)
assert dec.last_info["stats"]["redone_windows"] > 0
same(got, decode(fst, lms, lps, kernel="torch", **WIDE)[1], "overflow", exact=True)
FusedSearch.START_CAPACITY = start

# 3. history_beam and history_max (the LM histories that meet in one graph state pruned before the
#    cutoff, in the prep kernel), alone and together, with and without beam pruning, windows of
#    3 frames: the per-frame torch search's words and scores bit for bit; without beam pruning it
#    expands fewer arcs than without the history pruning (so the pruning binds)
bound = 0
for seed in range(6, 10):
    fst, lms, lps = case(seed)
    lps = [lps[0], lps[1], lps[0][:1]]
    prune = dict(beam=6.0, max_active=6, min_active=1) if seed % 2 else dict(WIDE)
    history = [dict(history_max=1), dict(history_beam=0.5), dict(history_beam=2.0, history_max=2)][seed % 3]
    dec, got = decode(fst, lms, lps, kernel="fused", sync_frames=3, **prune, **history)
    assert dec.last_info["stats"]["kernel"] == "fused", history
    ref = decode(fst, lms, lps, kernel="torch", **prune, **history)[1]
    same(got, ref, ("history", seed, history), exact=True)
    if prune == WIDE:
        plain = decode(fst, lms, lps, kernel="fused", sync_frames=3, **prune)[0].last_info["stats"]
        bound += dec.last_info["stats"]["arcs"] < plain["arcs"]
assert bound == 2, bound

# 4. what the fused search does not take runs the per-frame search: host LM lookups
dec, got = decode(fst, lms, lps, kernel="fused", **WIDE, lm_on_host=True)
assert "kernel" not in dec.last_info["stats"]
print("ok")
"""


def test_fused_wfst_otf_under_the_interpreter():
    """Every check of OTF_FUSED_CHECK in a fresh interpreter with TRITON_INTERPRET=1."""
    run_interpreted(OTF_FUSED_CHECK.format(here=TESTS))
