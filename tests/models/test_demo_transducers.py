"""The embedded demo transducers (`embedded:demo_rnnt_bpe`, `embedded:demo_tdt_bpe`,
scripts/train_demo_model.py --arch rnnt|tdt): each loads as a NeMo EncDecRNNTBPEModel sharing the CTC
demo model's tokenizer, and label-looping greedy decoding (paper 003 Alg. 3) gives the same tokens,
frames and scores as frame-looping (Alg. 2) on demo clips. NeMo parity of the decoders themselves
is tested on the NeMo fixtures (tests/decoders)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asrdecode.decoders.transducer_greedy import greedy_decode
from asrdecode.models.loading import load_model, resolve_model_path
from asrdecode.models.transducer import NemoTransducerModel

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"


@pytest.fixture(scope="module", params=["rnnt", "tdt"])
def model(request) -> NemoTransducerModel:
    torch.set_num_threads(1)
    return load_model(f"embedded:demo_{request.param}_bpe")


def _clips(names: list[tuple[str, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    waves = []
    for folder, row in names:
        manifest = DEMO / folder / "manifest.jsonl"
        item = json.loads(manifest.read_text().splitlines()[row])
        data, sr = sf.read(manifest.parent / item["audio_filepath"], dtype="float32")
        assert sr == 16000
        waves.append(torch.from_numpy(np.ascontiguousarray(data)))
    lengths = torch.tensor([len(w) for w in waves])
    x = torch.zeros(len(waves), int(lengths.max()))
    for i, w in enumerate(waves):
        x[i, : len(w)] = w
    return x, lengths


def test_demo_transducer_loads_with_the_ctc_tokenizer(model) -> None:
    assert isinstance(model, NemoTransducerModel)
    kind = "tdt" if model.durations is not None else "rnnt"
    assert model.model_class == "EncDecRNNTBPEModel" and model.describe()["transducer"] == kind
    ctc = load_model("embedded:demo_ctc_bpe")
    assert model.units == ctc.units and model.blank_id == len(ctc.units) == 64
    assert resolve_model_path(f"embedded:demo_{kind}_bpe").stat().st_size < 20e6


def test_demo_transducer_label_looping_equals_frame_looping(model) -> None:
    """A ragged batch of synthetic and real clips: both loops give identical hypotheses."""
    x, lengths = _clips([("synthetic", 0), ("synthetic", 1), ("real", 0), ("synthetic", 2)])
    with torch.inference_mode():
        out = model(x, lengths)
        labels, _ = greedy_decode(model, out.encoder_out, out.lengths)
        frames, _ = greedy_decode(model, out.encoder_out, out.lengths, loop="frames")
    assert labels.lengths.tolist() == frames.lengths.tolist()
    assert int(labels.lengths.min()) > 0  # the trained model does emit tokens on every clip
    for b in range(x.shape[0]):
        n = int(labels.lengths[b])
        assert labels.transcript[b, :n].tolist() == frames.transcript[b, :n].tolist()
        assert labels.timestamps[b, :n].tolist() == frames.timestamps[b, :n].tolist()
        assert int(labels.timestamps[b, :n].max()) < int(out.lengths[b])
    torch.testing.assert_close(labels.scores, frames.scores, rtol=1e-5, atol=1e-4)
