"""Deferred scores (`DeferredScores`): a model output whose log-probs are made per utterance by the
decoder's worker threads. `wfst`, `wfst-otf` and `let` give exactly what they give on the same
log-probs made up front (1-best, scores, lattices), each utterance is scored once on the worker
that searches it (whole, or part by part as the search goes when the model can score parts:
`CostChunks`), and a decoder that cannot take them on a device says so."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from helpers.wfst_ref import nemo_log_probs, single_thread  # noqa: F401

from asrdecode.decoders.let import LetConfig, LetDecoder
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder, paths
from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder
from asrdecode.models.base import DeferredScores, ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

PRUNING = {"beam": 14.0, "max_active": 10**6, "min_active": 0}
PART = 8  # the search's parts of deferred scores in these tests (frames; 128 in use)


@pytest.fixture(params=[0, 4], ids=["whole", "parts"])
def chunk(request, monkeypatch) -> int:
    """`DeferredScores.chunk` of the tests' model: 0 (whole utterances) or 4, with the search
    taking parts of `PART` frames."""
    monkeypatch.setattr(paths, "SEARCH_CHUNK_FRAMES", PART)
    return request.param


def score_calls(lengths, chunk: int) -> int:
    """How many times the model is asked to score utterances of these frames (no frames: once)."""
    return sum(-(-max(int(n), 1) // PART) if chunk else 1 for n in lengths)


def outputs(lengths: list[int] | None = None, chunk: int = 0) -> tuple[ModelOutput, ModelOutput, list[str]]:
    """The NeMo fixture's log-probs made up front, the same deferred (each utterance's valid
    frames as its input; scoring copies them, recording the scoring thread), and that record;
    `lengths` (frames per utterance) cut the fixture's utterances shorter; `chunk`: the deferred
    scores' (`DeferredScores.chunk`)."""
    lp, lengths_np, _ = nemo_log_probs()
    lengths = lengths_np if lengths is None else np.minimum(lengths_np, lengths)
    made = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    scored_on: list[str] = []
    lock = threading.Lock()

    def score(x: torch.Tensor, out: torch.Tensor) -> None:
        with lock:
            scored_on.append(threading.current_thread().name)
        out.copy_(x)

    def score_wide(x: torch.Tensor, out: torch.Tensor) -> None:
        with lock:
            scored_on.append("wide " + threading.current_thread().name)
        out.copy_(x)

    inputs = [torch.from_numpy(lp[b, :n].copy()) for b, n in enumerate(lengths)]
    scores = DeferredScores(inputs, lp.shape[2], score, score_wide, chunk)
    deferred = ModelOutput(None, torch.from_numpy(lengths), 0.08, 128, [], deferred=scores)
    return made, deferred, scored_on


def same_results(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert [(w.word, w.start, w.end, w.confidence) for w in x.words] == [
            (w.word, w.start, w.end, w.confidence) for w in y.words
        ]
        assert (x.tokens, x.token_frames, x.score, x.acoustic_score, x.lm_score) == (
            y.tokens,
            y.token_frames,
            y.score,
            y.acoustic_score,
            y.lm_score,
        )
        assert (x.lattice is None) == (y.lattice is None)
        if x.lattice is not None:
            assert x.lattice.to_kaldi_text("u") == y.lattice.to_kaldi_text("u")


@pytest.mark.parametrize("threads", [1, 2])
def test_wfst_compiled_takes_deferred_scores(nemo_graphs, threads, chunk):  # noqa: F811
    """The compiled backend with lattices, a blank penalty and two workers: the same results; each
    utterance scored once (whole or in parts), on a search worker when there are two."""
    cfg = WfstConfig(
        graph=str(nemo_graphs["compact"]), threads=threads, lattice=True, blank_penalty=0.5, **PRUNING
    )
    dec = WfstDecoder(cfg)
    assert dec.takes_deferred_scores(torch.device("cpu"))
    assert not dec.takes_deferred_scores(torch.device("meta"))
    made, deferred, scored_on = outputs(chunk=chunk)
    want = dec.decode(made)
    got = dec.decode(deferred)
    same_results(want, got)
    assert sum(len(r.words) for r in got) > 10
    assert len(scored_on) == score_calls(made.lengths, chunk)
    assert max(made.lengths) > 4 * PART  # several parts
    if threads == 2:
        assert all(name.startswith("wfst_") for name in scored_on)  # the search's pool


def test_wfst_torch_backend_is_not_given_deferred_scores_but_reads_them(nemo_graphs):  # noqa: F811
    dec = WfstDecoder(WfstConfig(graph=str(nemo_graphs["compact"]), backend="torch", **PRUNING))
    assert not dec.takes_deferred_scores(torch.device("cpu"))
    made, deferred, _ = outputs()
    same_results(dec.decode(made), dec.decode(deferred))  # made up front (materialize) if given


def test_wfst_otf_and_let_take_deferred_scores(otf_graphs, chunk):
    small, lm = str(otf_graphs / "small"), str(otf_graphs / "large.arpa")
    otf = WfstOtfDecoder(WfstOtfConfig(graph=small, lm=lm, threads=2, lattice=True, **PRUNING))
    let = LetDecoder(LetConfig(graph=small, lm=lm, threads=2, lattice=True, **PRUNING))
    for dec in (otf, let):
        assert dec.takes_deferred_scores(torch.device("cpu"))
        made, deferred, scored_on = outputs(chunk=chunk)
        want = dec.decode(made)
        same_results(want, dec.decode(deferred))
        assert len(scored_on) == score_calls(made.lengths, chunk) and sum(len(r.words) for r in want) > 10


def test_materialize_pads_with_zeros():
    """A decoder that cannot take deferred scores reads them made up front: each utterance's
    frames, the padding 0 (as a model's ``forward_features`` gives them)."""
    made, deferred, scored_on = outputs()
    assert deferred.columns == made.columns == made.log_probs.shape[2]
    assert deferred.has_scores and not ModelOutput(None, torch.zeros(1), 0.01, -1, []).has_scores
    full = deferred.deferred.materialize()
    assert full.shape == made.log_probs.shape and len(scored_on) == full.shape[0]
    for b, n in enumerate(made.lengths.tolist()):
        assert torch.equal(full[b, :n], made.log_probs[b, :n]) and not full[b, n:].any()


def test_utterances_of_zero_and_one_frame(nemo_graphs, chunk):  # noqa: F811
    """An input shorter than a frame has no frames to score: the same (empty) result either way;
    utterances of exactly one part and one frame more."""
    dec = WfstDecoder(WfstConfig(graph=str(nemo_graphs["compact"]), threads=2, **PRUNING))
    made, deferred, scored_on = outputs([0, PART, 1000, 0, PART + 1, 1], chunk)
    want = dec.decode(made)
    same_results(want, dec.decode(deferred))
    assert want[0].words == [] and want[3].words == []
    others = [n for b, n in enumerate(made.lengths) if b != 2]  # the long one: scored wide, whole
    assert made.lengths[2] > sum(others) and len(scored_on) == 1 + score_calls(others, chunk)


def test_the_critical_utterance_is_scored_up_front_on_all_threads(nemo_graphs, chunk):  # noqa: F811
    """With two workers, an utterance longer than all the others together is the batch's critical
    path: it is scored before the search starts, by the model on all its threads (``score_wide``,
    from the calling thread), whole; the others by the workers. The same results; a batch without
    such an utterance has every utterance scored by the workers (above)."""
    dec = WfstDecoder(WfstConfig(graph=str(nemo_graphs["compact"]), threads=2, **PRUNING))
    made, deferred, scored_on = outputs([1000, 3, 4, 0, 5, 2], chunk)
    longest = int(made.lengths.argmax())
    assert made.lengths[longest] > made.lengths.sum() - made.lengths[longest]
    same_results(dec.decode(made), dec.decode(deferred))
    assert scored_on[0] == "wide " + threading.main_thread().name
    others = [n for b, n in enumerate(made.lengths) if b != longest]
    assert len(scored_on) == 1 + score_calls(others, chunk)
    assert all(name.startswith("wfst_") for name in scored_on[1:])
    one = WfstDecoder(WfstConfig(graph=str(nemo_graphs["compact"]), threads=1, **PRUNING))
    made, deferred, scored_on = outputs([1000, 3, 4, 0, 5, 2], chunk)
    same_results(one.decode(made), one.decode(deferred))
    assert not any(name.startswith("wide") for name in scored_on)  # one worker: no critical path
    assert len(scored_on) == score_calls(made.lengths, chunk)
