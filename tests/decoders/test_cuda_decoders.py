"""Every decoder gives on cuda what it gives on the CPU (marked `cuda`, skipped without a CUDA
device; scripts/gpu_check.sh runs them on the GPU machine): the CPU's inputs moved to the device,
then the same tokens, frames, words and n-best, scores to float tolerance. `wfst` with and without
CUDA graphs and with the torch or the Triton emitting kernel or the fused frame kernels, 1-best and
lattices (the fused kernels also from tiny capacities, every window rerun); `wfst-otf` with
the LM on the device and on the host, and on the fused kernels; `ctc-greedy`, `ctc-beam` (with the
token LM too); transducer greedy (RNN-T and TDT, label and frame looping, with and without CUDA
graphs, with the token LM) and beam (ALSD++ and AES++; it has no CUDA-graph mode); `aed-greedy` and
`aed-beam`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.devices import CUDA, DEVICE, assert_same_results, on_device
from helpers.nemo_audio import audio_batch
from helpers.transducer import nemo_output
from helpers.wfst_ref import FIXTURES, nemo_log_probs

from asrdecode.decoders import DecoderContext, make_decoder
from asrdecode.models import ModelOutput, load_nemo
from asrdecode.models.loading import load_model

pytestmark = [pytest.mark.cuda, CUDA]
ARPA = FIXTURES / "lm_tokens.arpa"
_MODELS: dict[str, object] = {}


def model(name: str):
    if name not in _MODELS:
        _MODELS[name] = load_model(str(FIXTURES / f"{name}.nemo"))
    return _MODELS[name]


def context(net) -> DecoderContext:
    return DecoderContext(net.units, net.blank_id, net.frame_shift, net.tokens_to_words)


def both(section: dict, output: ModelOutput, ctx: DecoderContext | None, **on_cuda) -> None:
    """`section` decoded on the CPU and (with `on_cuda` options added) on cuda: the same results."""
    cpu = make_decoder(section, ctx).decode(output)
    gpu = make_decoder({**section, **on_cuda}, ctx).decode(on_device(output, DEVICE))
    assert_same_results(cpu, gpu)


def ctc_output() -> ModelOutput:
    lp, lengths, _ = nemo_log_probs()
    return ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, model("ctc_bpe").units)


def transducer_output(name: str) -> ModelOutput:
    data = np.load(FIXTURES / "reference" / f"{name}.npz", allow_pickle=False)
    return nemo_output(model(name), {k: data[k] for k in data.files})


@pytest.mark.parametrize("kernel", ["torch", "triton", "fused"])
@pytest.mark.parametrize("cuda_graphs", [False, True])
@pytest.mark.parametrize("lattice", [False, True])
def test_wfst(nemo_graphs, kernel, cuda_graphs, lattice):
    section = {"type": "wfst", "graph": str(nemo_graphs["compact"]), "beam": 12.0, "backend": "torch"}
    if lattice:
        section |= {"lattice": True, "lattice_beam": 4.0, "nbest": 4}
    both(section, ctc_output(), None, kernel=kernel, cuda_graphs=cuda_graphs, pinned_copies=cuda_graphs)


@pytest.mark.parametrize("cuda_graphs", [False, True])
@pytest.mark.parametrize("topology", ["compact", "normal"])
@pytest.mark.parametrize("lattice", [False, True])
def test_wfst_fused_windows_and_overflow(nemo_graphs, cuda_graphs, topology, lattice, monkeypatch):
    """`kernel: fused` in windows of 8 frames from capacities far too small (every buffer, the
    lattice-arc arena too, overflows, is grown and its window rerun), max_active binding: the CPU's
    per-frame search."""
    from asrdecode.decoders.wfst.fused import FusedSearch

    small = {"tok": 2, "arc": 2, "hash": 4, "eps": 2, "rec": 4, "lat": 4}
    monkeypatch.setattr(FusedSearch, "START_CAPACITY", small)
    section = {"type": "wfst", "graph": str(nemo_graphs[topology]), "backend": "torch"}
    section |= {"beam": 10.0, "max_active": 50, "min_active": 20}
    if lattice:
        section |= {"lattice": True, "lattice_beam": 4.0, "nbest": 4}
    both(section, ctc_output(), None, kernel="fused", sync_frames=8, cuda_graphs=cuda_graphs)


@pytest.mark.parametrize("lm_on_host", [False, True])
def test_wfst_otf(otf_graphs: Path, lm_on_host):
    section = {
        "type": "wfst-otf",
        "graph": str(otf_graphs / "small"),
        "lm": str(otf_graphs / "large.arpa"),
        "beam": 14.0,
        "backend": "torch",
    }
    both(section, ctc_output(), None, lm_on_host=lm_on_host, cuda_graphs=not lm_on_host)


@pytest.mark.parametrize("history", [{}, {"history_beam": 2.0, "history_max": 2}])
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_wfst_otf_fused(otf_graphs: Path, cuda_graphs, history, monkeypatch):
    """`wfst-otf` on the fused kernels (the LM tables on the device, looked up in the kernels) in
    windows of 8 frames from capacities far too small (every window rerun), max_active binding,
    with and without history pruning: the CPU's per-frame search."""
    from asrdecode.decoders.wfst.fused import FusedSearch

    small = {"tok": 2, "arc": 2, "hash": 4, "eps": 2, "rec": 4, "lat": 4}
    monkeypatch.setattr(FusedSearch, "START_CAPACITY", small)
    section = {"type": "wfst-otf", "graph": str(otf_graphs / "small"), "lm": str(otf_graphs / "large.arpa")}
    section |= {"beam": 12.0, "max_active": 50, "min_active": 20, "backend": "torch", "lm_on_host": False}
    both(section | history, ctc_output(), None, kernel="fused", sync_frames=8, cuda_graphs=cuda_graphs)


@pytest.mark.parametrize(
    "section",
    [
        {"type": "ctc-greedy"},
        {"type": "ctc-beam", "beam_size": 4},
        {"type": "ctc-beam", "beam_size": 4, "ngram_lm": str(ARPA), "ngram_lm_alpha": 0.5},
    ],
    ids=["greedy", "beam", "beam-lm"],
)
def test_ctc(section):
    both(section, ctc_output(), context(model("ctc_bpe")))


@pytest.mark.parametrize("name", ["rnnt_bpe", "tdt_bpe"])
@pytest.mark.parametrize("loop", ["labels", "frames"])
@pytest.mark.parametrize("cuda_graphs", [False, True])
@pytest.mark.parametrize("lm", [False, True])
def test_transducer_greedy(name, loop, cuda_graphs, lm):
    section = {"type": "transducer-greedy", "loop": loop}
    if lm:
        section |= {"ngram_lm": str(ARPA), "ngram_lm_alpha": 0.5}
    both(section, transducer_output(name), context(model(name)), cuda_graphs=cuda_graphs)


@pytest.mark.parametrize(
    "name, strategy", [("rnnt_bpe", "malsd"), ("rnnt_bpe", "maes"), ("tdt_bpe", "malsd")]
)
@pytest.mark.parametrize("lm", [False, True])
def test_transducer_beam(name, strategy, lm):
    section = {"type": "transducer-beam", "strategy": strategy, "beam_size": 4}
    if lm:
        section |= {"ngram_lm": str(ARPA), "ngram_lm_alpha": 0.5}
    both(section, transducer_output(name), context(model(name)))


@pytest.mark.parametrize(
    "section", [{"type": "aed-greedy"}, {"type": "aed-beam", "beam_size": 4, "nbest": 4}]
)
@pytest.mark.parametrize("name", ["aed_canary2", "aed_canary"])
def test_aed(name, section):
    net = model(name)
    audio = audio_batch()
    with torch.inference_mode():
        output = net(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    both(section, output, context(net))


def test_a_model_on_cuda_decodes_its_own_output():
    """The pipeline's way: the whole model on the device, its output decoded there."""
    net = load_nemo(FIXTURES / "rnnt_bpe.nemo").to(DEVICE).eval()
    audio = audio_batch()
    with torch.inference_mode():
        output = net(
            torch.from_numpy(audio["audio"]).to(DEVICE), torch.from_numpy(audio["audio_len"]).to(DEVICE)
        )
    results = make_decoder({"type": "transducer-greedy", "cuda_graphs": True}, context(net)).decode(output)
    assert output.encoder_out.device.type == DEVICE and sum(len(r.tokens) for r in results) > 0
