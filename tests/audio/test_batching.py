"""plan_batches and pad_batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asrdecode.audio import pad_batch, plan_batches
from asrdecode.io import Utterance


def utts(durations: list[float | None]) -> list[Utterance]:
    return [Utterance(f"u{i}", f"/a/{i}.wav", duration=d) for i, d in enumerate(durations)]


@pytest.mark.parametrize("max_utts", [None, 1, 3, 8])
def test_batches_respect_max_seconds_and_keep_every_utterance_once(max_utts):
    rng = np.random.default_rng(1)
    items = utts([float(d) for d in rng.uniform(0.2, 15.0, 200)] + [25.0, 30.0])
    batches = plan_batches(items, max_seconds=20.0, max_utterances=max_utts)
    flat = [u.utt_id for b in batches for u in b]
    assert sorted(flat) == sorted(u.utt_id for u in items) and len(flat) == len(set(flat))
    for b in batches:
        longest = max(u.duration for u in b)
        assert len(b) * longest <= 20.0 or len(b) == 1
        if max_utts:
            assert len(b) <= max_utts
    durs = [u.duration for b in batches for u in b]
    assert durs == sorted(durs, reverse=True)  # longest first
    assert [u.utt_id for u in batches[0]] == ["u201"] and [u.utt_id for u in batches[1]] == ["u200"]


def test_batches_are_filled_greedily():
    batches = plan_batches(utts([1.0, 2.0, 2.0, 1.0, 0.5]), max_seconds=4.0)
    assert [[u.utt_id for u in b] for b in batches] == [["u1", "u2"], ["u0", "u3", "u4"]]


def test_unknown_durations_go_last():
    items = utts([None, 3.0, None, 1.0, None])
    batches = plan_batches(items, max_seconds=100.0, max_utterances=2)
    assert [[u.utt_id for u in b] for b in batches] == [["u1", "u3"], ["u0", "u2"], ["u4"]]
    assert [[u.utt_id for u in b] for b in plan_batches(items, 100.0)][1:] == [["u0"], ["u2"], ["u4"]]


def test_bad_arguments_and_empty_input():
    assert plan_batches([], 10.0) == []
    with pytest.raises(ValueError):
        plan_batches(utts([1.0]), 0)
    with pytest.raises(ValueError):
        plan_batches(utts([1.0]), 10, max_utterances=0)


def test_pad_batch():
    waves = [torch.ones(3), np.full(5, 2.0, dtype=np.float64), torch.ones(1)]
    padded, lengths = pad_batch(waves, "cpu")
    assert padded.shape == (3, 5) and padded.dtype == torch.float32
    assert lengths.dtype == torch.int64 and lengths.tolist() == [3, 5, 1]
    assert (
        padded[0].tolist() == [1, 1, 1, 0, 0] and padded[1].tolist() == [2] * 5 and padded[2, 1:].sum() == 0
    )
    empty, lens = pad_batch([])
    assert empty.shape == (0, 0) and lens.shape == (0,)
    with pytest.raises(ValueError):
        pad_batch([torch.zeros(2, 2)])
