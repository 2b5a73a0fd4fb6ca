"""Each model family's output on cuda is within 1e-3 of the CPU's (marked `cuda`, skipped without a
CUDA device; scripts/gpu_check.sh runs them): every NeMo fixture (FastConformer, Conformer, ConvASR,
transducers, hybrids, sliding-window and cache-aware streaming encoders, Canary-like AED) and the
embedded demo models, on the fixture clips: the encoder output and the log-probs on the valid frames."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.devices import CUDA, DEVICE
from helpers.nemo_audio import FIX, audio_batch

from asrdecode.models.loading import load_model

pytestmark = [pytest.mark.cuda, CUDA]
FIXTURES = [
    "ctc_bpe", "rnnt_bpe", "tdt_bpe", "rnnt_char", "rnnt_lstm2", "hybrid_rnnt_ctc", "hybrid_tdt_ctc",
    "rnnt_local", "rnnt_streaming", "conformer_ctc_char", "quartznet_char", "citrinet_bpe", "aed_canary2",
    "aed_canary", "aed_bpe", "aed_timestamps",
]  # fmt: skip
TOL = 1e-3


def outputs(spec: str, **options):
    """The model's output for the fixture batch on the CPU and on cuda (a copy of the model)."""
    net = load_model(spec, **options).eval()
    audio = audio_batch()
    wav, lens = torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"])
    gpu = copy.deepcopy(net).to(DEVICE)
    with torch.inference_mode():
        return net(wav, lens), gpu(wav.to(DEVICE), lens.to(DEVICE))


def assert_close(cpu, gpu) -> None:
    assert gpu.lengths.tolist() == cpu.lengths.tolist()
    for name in ("encoder_out", "log_probs"):
        a, g = getattr(cpu, name), getattr(gpu, name)
        assert (a is None) == (g is None), name
        if a is None:
            continue
        assert g.device.type == DEVICE
        for b, n in enumerate(cpu.lengths.tolist()):
            scale = max(1.0, float(a[b, :n].abs().max()))  # ConvASR outputs are tiny: absolute 1e-3 then
            torch.testing.assert_close(g[b, :n].cpu(), a[b, :n], atol=TOL * scale, rtol=0)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_model(name):
    assert_close(*outputs(str(FIX / f"{name}.nemo")))


def test_cache_aware_streaming_and_sliding_window():
    assert_close(*outputs(str(FIX / "rnnt_streaming.nemo"), streaming="cache-aware"))
    assert_close(*outputs(str(FIX / "ctc_bpe.nemo"), attention="local", att_context_size=[8, 8]))


@pytest.mark.parametrize("name", ["demo_ctc_bpe", "demo_rnnt_bpe", "demo_tdt_bpe"])
def test_demo_model(name):
    assert_close(*outputs(f"embedded:{name}"))
