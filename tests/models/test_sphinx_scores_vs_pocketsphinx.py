"""Senone scores against pocketsphinx 5.1.1's own (``senlogdir`` with ``compallsen``: every senone
of every frame it scores, as int16 costs in 1024 steps of its base-1.0001 log table, best = 0).

pocketsphinx logs the frames of its first pass and, interleaved and a few frames behind, those of
its second pass, so each logged vector is matched with the closest of ours (all frames of a short
file). With pocketsphinx's density floor the vectors agree to its integer quantisation; without
it, senones far from the frame come out several nats apart.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from asrdecode.models.loading import resolve_model_path
from asrdecode.models.sphinx import load_sphinx

REAL = Path(__file__).resolve().parents[2] / "data" / "demo" / "real"
STEP = 1024 * math.log(1.0001)  # nats per logged unit


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """file name -> (pocketsphinx's logged costs [K, S] in nats, int16 samples)."""
    from pocketsphinx import Decoder

    logdir = tmp_path_factory.mktemp("sen")
    decoder = Decoder(loglevel="FATAL", senlogdir=str(logdir), compallsen=True)
    out = {}
    for name in ("ps_goforward.wav", "ps_cards_001.wav"):
        pcm, _ = soundfile.read(REAL / name, dtype="int16")
        for old in logdir.iterdir():
            old.unlink()
        decoder.reinit_feat()
        decoder.start_utt()
        decoder.process_raw(pcm.tobytes(), full_utt=True)
        decoder.end_utt()
        (path,) = list(logdir.iterdir())
        data = path.read_bytes()
        pos = data.index(b"endhdr\n") + len("endhdr\n") + 4  # header, byte-order magic
        frames = []
        while pos < len(data):
            n = int(np.frombuffer(data, "<i2", 1, pos)[0])
            frames.append(np.frombuffer(data, "<i2", n, pos + 2))
            pos += 2 + 2 * n
        out[name] = (np.array(frames, dtype=np.float64) * STEP, pcm)
    return out


def our_costs(model, pcm: np.ndarray) -> np.ndarray:
    wave = torch.from_numpy(pcm.astype(np.float32) / 32768)[None]
    with torch.inference_mode():
        out = model.forward_features(*model.features(wave, torch.tensor([wave.shape[1]])))
    ll = out.log_probs[0].double().numpy()
    return ll.max(1, keepdims=True) - ll


@pytest.mark.parametrize("name", ["ps_goforward.wav", "ps_cards_001.wav"])
def test_senone_scores_equal_pocketsphinx(logged, name):
    folder = resolve_model_path("embedded:sphinx-en-us")
    theirs, pcm = logged[name]
    errors = {}
    for floor in ("pocketsphinx", 0.0):
        kwargs = {} if floor == "pocketsphinx" else {"density_floor": floor}
        ours = our_costs(load_sphinx(folder, topn=4, threads=1, **kwargs), pcm)
        assert theirs.shape[1] == ours.shape[1]
        # mean |difference| of every logged vector to its closest frame of ours
        errors[floor] = np.array([np.abs(ours - row).mean(1).min() for row in theirs])
    assert np.median(errors["pocketsphinx"]) < 0.2 and errors["pocketsphinx"].max() < 0.7
    assert errors[0.0].max() > 2.0  # without the floor: far from pocketsphinx
