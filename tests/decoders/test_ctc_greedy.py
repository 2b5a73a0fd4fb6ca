"""ctc-greedy against a plain-Python best path and against NeMo's fixture outputs."""

from pathlib import Path

import numpy as np
import pytest
import torch

from asrdecode.decoders import DecoderContext, make_decoder
from asrdecode.models.base import ModelOutput
from asrdecode.pipeline import words_of_units

FIXTURE = Path(__file__).parent.parent / "fixtures" / "nemo" / "reference" / "ctc_bpe.npz"


def _reference_best_path(lp: np.ndarray, blank: int) -> tuple[list[int], list[int]]:
    """One utterance, written as plainly as possible: argmax, merge repeats, drop blanks."""
    tokens, frames, prev = [], [], None
    for t in range(lp.shape[0]):
        label = int(np.argmax(lp[t]))
        if label != blank and label != prev:
            tokens.append(label)
            frames.append(t)
        prev = label
    return tokens, frames


def _decoder(units, blank, shift=0.04, **options):
    ctx = DecoderContext(units=units, blank_id=blank, frame_shift=shift, words_of=words_of_units(units))
    return make_decoder({"type": "ctc-greedy", **options}, ctx)


def test_random_batches_match_plain_best_path():
    rng = np.random.default_rng(0)
    units = ["▁a", "b", "▁c", "d", "e"]
    blank = len(units)
    for _ in range(20):
        B, T, V = 5, 30, len(units) + 1
        lengths = rng.integers(1, T + 1, size=B)
        logits = rng.normal(size=(B, T, V)).astype(np.float32) * 3
        logits[..., blank] += 1.5
        lp = torch.log_softmax(torch.from_numpy(logits), -1)
        out = ModelOutput(lp, torch.from_numpy(lengths), 0.04, blank, units)
        results = _decoder(units, blank).decode(out)
        for b, res in enumerate(results):
            ref_tokens, ref_frames = _reference_best_path(lp[b, : lengths[b]].numpy(), blank)
            assert res.tokens == ref_tokens
            assert res.token_frames == ref_frames
            nonblank = [lp[b, t].max().item() for t in range(lengths[b]) if lp[b, t].argmax() != blank]
            assert res.score == pytest.approx(sum(nonblank), abs=1e-4)


def test_word_times_and_words():
    units = ["▁go", "▁for", "ward", "▁ten"]
    blank = 4
    # frames: go go blank for ward ward blank blank ten
    seq = [0, 0, 4, 1, 2, 2, 4, 4, 3]
    lp = torch.full((1, len(seq), 5), -10.0)
    for t, k in enumerate(seq):
        lp[0, t, k] = -0.01
    out = ModelOutput(lp, torch.tensor([len(seq)]), 0.08, blank, units)
    res = _decoder(units, blank, shift=0.08).decode(out)[0]
    assert res.text == "go forward ten"
    assert [(w.start, w.end) for w in res.words] == [(0.0, 0.16), (0.24, 0.48), (0.64, 0.72)]


def test_blank_penalty_shifts_decisions():
    units = ["▁a"]
    lp = torch.log(torch.tensor([[[0.45, 0.55], [0.45, 0.55]]]))
    out = ModelOutput(lp, torch.tensor([2]), 0.04, 1, units)
    assert _decoder(units, 1).decode(out)[0].tokens == []
    assert _decoder(units, 1, blank_penalty=1.0).decode(out)[0].tokens == [0]


def test_nemo_fixture_tokens_and_scores():
    z = np.load(FIXTURE, allow_pickle=False)
    lp = torch.from_numpy(z["log_probs"])
    lengths = torch.from_numpy(z["encoder_len"])
    units = [f"u{i}" for i in range(lp.shape[-1] - 1)]
    res = _decoder(units, len(units)).decode(ModelOutput(lp, lengths, 0.08, len(units), units))
    for b, r in enumerate(res):
        ref = z["greedy_tokens"][b, : z["greedy_tokens_len"][b]].tolist()
        assert r.tokens == ref
        assert r.score == pytest.approx(float(z["greedy_score"][b]), abs=1e-3)
