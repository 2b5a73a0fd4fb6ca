"""The `cuda` tests' shared pieces: a decoder input moved to another device (its tensors and the
networks a transducer or AED decoder runs) and decode results compared across devices."""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest
import torch

from asrdecode.decoders.base import DecodeResult
from asrdecode.models import ModelOutput

# The device the `cuda` tests compare with the CPU: cuda, or with ASRDECODE_CUDA_TESTS_DEVICE=cpu the
# CPU itself (with TRITON_INTERPRET=1: `make cuda-tests-on-cpu`), which runs the tests' own code and
# every option they set where no GPU is
DEVICE = os.environ.get("ASRDECODE_CUDA_TESTS_DEVICE", "cuda")
CUDA = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device")


def on_device(output: ModelOutput, device: str | torch.device) -> ModelOutput:
    """`output` with its tensors and its ``extra`` networks (copies) on `device`."""

    def move(value):
        if isinstance(value, torch.Tensor):
            return value.to(device)
        if isinstance(value, torch.nn.Module):
            return copy.deepcopy(value).to(device)
        return value

    return dataclasses.replace(
        output,
        log_probs=move(output.log_probs),
        lengths=move(output.lengths),
        encoder_out=move(output.encoder_out),
        extra={k: move(v) for k, v in output.extra.items()},
    )


def assert_same_results(cpu: list[DecodeResult], other: list[DecodeResult], score_abs: float = 1e-3) -> None:
    """The same tokens, frames, durations, words and n-best on both devices; scores to float tolerance."""
    assert len(other) == len(cpu)
    for b, (a, g) in enumerate(zip(cpu, other, strict=True)):
        assert g.tokens == a.tokens, b
        assert g.token_frames == a.token_frames, b
        assert g.token_durations == a.token_durations, b
        assert [w.word for w in g.words] == [w.word for w in a.words], b
        assert g.score == pytest.approx(a.score, rel=1e-4, abs=score_abs), b
        assert (g.nbest is None) == (a.nbest is None), b
        for (words_a, score_a), (words_g, score_g) in zip(a.nbest or [], g.nbest or [], strict=True):
            assert words_g == words_a, b
            assert score_g == pytest.approx(score_a, rel=1e-4, abs=score_abs), b
