"""The torch backend's device paths: host syncs per frame counted
by a dispatch-mode counter (a regression guard, not a timing), capacity overflow reruns checked
against kaldi-decoder, the CUDA-only switches on the CPU, and the Triton emitting kernel under
TRITON_INTERPRET=1 against its torch reference and exhaustive Viterbi."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.wfst_ref import (  # noqa: F401
    FIXTURES,
    kaldi_best_path,
    nemo_log_probs,
    nemo_sentences,
    single_thread,
    write_arpa,
)

from asrdecode.decoders.dispatch_count import DispatchCounter
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.core import CAPACITIES, TokenPassing
from asrdecode.errors import ConfigError
from asrdecode.graph import GraphBuildConfig, build_graph
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

MAX_SYNCS_PER_FRAME = 1.5  # mean host syncs per frame step measured on the BPE TLG: 1.1-1.3
COST_TOL = 2e-3


@pytest.fixture(scope="module")
def nemo_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wfst_device_nemo")
    write_arpa(d / "lm.arpa", nemo_sentences())
    build_graph(
        GraphBuildConfig(arpa=str(d / "lm.arpa"), model=str(FIXTURES / "ctc_bpe.nemo"), lexicon_type="bpe"),
        d / "g",
    )
    return d / "g"


def nemo_output() -> ModelOutput:
    lp, lengths, _ = nemo_log_probs()
    return ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])


def test_dispatch_counter_counts_sync_ops_only():
    x = torch.arange(6.0)
    with DispatchCounter() as c:
        y = x * 2 + 1
        y.index_select(0, torch.tensor([0, 2]))
        torch.cumsum(y, 0)
        x.to("cpu", copy=True, non_blocking=True)
    assert c.syncs == 0 and c.ops >= 4
    with DispatchCounter() as c:
        x.sum().item()
        torch.nonzero(x > 2)
        x[x > 2]
        torch.unique(x)
        x.to("cpu", copy=True)
        torch.repeat_interleave(torch.tensor([2, 1]))
    assert c.syncs == 6
    assert set(c.sync_ops) == {
        "aten._local_scalar_dense",
        "aten.nonzero",
        "aten.index(bool mask)",
        "aten._unique2",
        "aten._to_copy(to host)",
        "aten.repeat_interleave(no output_size)",
    }


def test_host_syncs_per_frame_regression_guard(nemo_dir, monkeypatch):
    """Every `step` (one frame of a whole batch) is counted by the dispatch counter: the mean
    stays at about one host read per frame, and the decoder's own counter (stats["syncs"], what
    asrdecode bench wfst reports) agrees with what the dispatcher saw."""
    per_step: list[tuple[int, int]] = []
    step = TokenPassing.step

    def counted(self, *args, **kwargs):
        before = self.stats["syncs"]
        with DispatchCounter() as c:
            out = step(self, *args, **kwargs)
        assert c.syncs == self.stats["syncs"] - before, c.sync_ops
        per_step.append((c.syncs, c.ops))
        return out

    monkeypatch.setattr(TokenPassing, "step", counted)
    dec = WfstDecoder(WfstConfig(graph=str(nemo_dir), beam=12.0, backend="torch"))
    dec.decode(nemo_output())  # first batch: capacities grow (reruns)
    per_step.clear()
    dec.decode(nemo_output())
    frames = dec.last_info["stats"]["frames"]
    assert len(per_step) == frames > 40
    syncs = sum(s for s, _ in per_step)
    assert syncs / frames <= MAX_SYNCS_PER_FRAME, (syncs, frames)
    assert dec.last_info["stats"]["redone_frames"] == 0


def test_capacity_overflow_reruns_give_kaldi_results(nemo_dir):
    """Start every capacity at its floor and copy records to the host every 2 frames: frames
    overflow and are rerun with larger buffers, and the 1-best still equals FasterDecoder's."""
    import kaldifst

    lp, lengths, _ = nemo_log_probs()
    cfg = WfstConfig(
        graph=str(nemo_dir), beam=10.0, max_active=50, min_active=20, backend="torch", host_copy_frames=2
    )
    dec = WfstDecoder(cfg)
    graph = dec.graph_on(torch.device("cpu"))
    dec._tuning["cpu"] = {"graph": graph, "capacity": dict.fromkeys(CAPACITIES, 16), "passes": 1}
    results = dec.decode(nemo_output())
    assert dec.last_info["stats"]["redone_frames"] > 0
    fst = kaldifst.StdVectorFst(kaldifst.StdFst.read(str(next(nemo_dir.glob("*LG.fst")))))
    for b, res in enumerate(results):
        total, _, _, olabels, _ = kaldi_best_path(fst, lp[b, : lengths[b]], 10.0, 50, 20)
        assert [w.word for w in res.words] == [dec.words[o] for o in olabels], b
        assert -res.score == pytest.approx(total, abs=COST_TOL), b


def test_cuda_switches_are_ignored_on_cpu_with_a_note(nemo_dir, caplog):
    plain = WfstDecoder(WfstConfig(graph=str(nemo_dir), beam=12.0, backend="torch")).decode(nemo_output())
    cfg = WfstConfig(graph=str(nemo_dir), beam=12.0, backend="torch", cuda_graphs=True, pinned_copies=True)
    dec = WfstDecoder(cfg)
    opts = cfg.search_options("cpu")
    assert not opts.cuda_graphs and not opts.pinned_copies and opts.kernel == "torch"
    with caplog.at_level(logging.INFO, logger="asrdecode.decoders.wfst"):
        switched = dec.decode(nemo_output())
    assert "apply to CUDA only" in caplog.text
    assert [r.words for r in switched] == [r.words for r in plain]
    assert [r.score for r in switched] == [r.score for r in plain]
    with pytest.raises(ConfigError, match="decoder.kernel"):
        WfstDecoder(WfstConfig(graph=str(nemo_dir), kernel="cuda"))


def test_triton_kernel_needs_cuda_or_the_interpreter(nemo_dir, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ConfigError, match="TRITON_INTERPRET"):
        WfstConfig(graph=str(nemo_dir), kernel="triton").search_options("cpu")


TRITON_CHECK = """
import sys
import numpy as np
import torch
sys.path.insert(0, {here!r})
from helpers.wfst_graphs import V, device_graph, log_probs, run
from helpers.wfst_ref import random_wfst, viterbi_reference
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.decoders.wfst.core import SearchGraph, SearchOptions, TokenPassing
from asrdecode.decoders.wfst.kernels import emitting_arcs

# 1. the fused kernel returns the torch reference's tensors bit for bit (random graph, tokens of
#    3 utterances with pruned tokens and empty slots)
rng = np.random.default_rng(4)
search = TokenPassing(SearchGraph(device_graph(random_wfst(rng, 12, V, 5))), SearchOptions())
g, B, N, cap = search.g, 3, 20, 64
state = torch.from_numpy(rng.integers(0, 12, size=N))
utt = torch.from_numpy(np.sort(rng.integers(0, B + 1, size=N)))  # utt == B: empty slot
cost = torch.from_numpy(rng.uniform(0, 5, size=N).astype(np.float32))
n = torch.where((utt < B) & (torch.from_numpy(rng.random(N)) < 0.7), g.n_emit[state], 0)
ac = torch.from_numpy(rng.normal(size=(B, V)).astype(np.float32)).reshape(-1)
ref = emitting_arcs(search, n, g.first_emit[state], utt, cost, ac, V, B, cap, kernel="torch")
got = emitting_arcs(search, n, g.first_emit[state], utt, cost, ac, V, B, cap, kernel="triton")
valid = ref[2]
assert int(ref[6]) == int(got[6]) > 0 and torch.equal(valid, got[2])
for r, t in zip(ref[:5], got[:5]):
    assert torch.equal(r[valid], t[valid])
assert torch.equal(ref[5], got[5])  # per-utterance best (atomic min)

# 2. a whole decode with kernel: triton equals exhaustive Viterbi
for seed in range(11, 100):  # the first random graph where both utterances reach a final state
    rng = np.random.default_rng(seed)
    fst = random_wfst(rng, 6, V, 5)
    lps = [log_probs(rng, 5), log_probs(rng, 3)]
    if all(viterbi_reference(fst, lp) is not None for lp in lps):
        break
cfg = WfstConfig(beam=1e9, max_active=10**9, min_active=0, backend="torch", kernel="triton")
dec = WfstDecoder(cfg, graph=device_graph(fst), words={{i: f"w{{i}}" for i in range(1, 10)}})
assert cfg.search_options("cpu").kernel == "triton"
for lp, res in zip(lps, run(dec, lps)):
    best = viterbi_reference(fst, lp)
    assert abs(-res.score - best[0]) < 1e-4, (res.score, best)
    assert [w.word for w in res.words] == [f"w{{o}}" for o in best[1]]
print("ok", int(ref[6]))
"""


def test_triton_kernel_under_the_interpreter_equals_torch_and_viterbi():
    """TRITON_INTERPRET=1 must be set before triton is first imported, so this runs in a fresh
    interpreter: the fused emitting kernel against the torch reference, and a decode with
    ``kernel: triton`` against exhaustive Viterbi (small: the interpreter is slow)."""
    here = str(Path(__file__).resolve().parent.parent)  # tests/: helpers is a package there
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", TRITON_CHECK.format(here=here)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok ")
