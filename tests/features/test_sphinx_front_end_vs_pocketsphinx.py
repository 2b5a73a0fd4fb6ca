"""The sphinx front end against pocketsphinx 5.1.1's own cepstra on every real recording we ship.

pocketsphinx writes the cepstra it computes (before CMN) with ``mfclogdir`` (big-endian float32,
13 per frame); its front end is re-initialised before each file (``reinit_feat``) so that its
noise-removal state starts from the file's first frame, as asrdecode's does. Files at other
rates are resampled once by asrdecode and both front ends get the same 16-bit samples.

The peer searches with a one-word grammar and no phone loop: ``end_utt`` closes the cepstra's log
(``acmod_end_utt``) before it runs the search over the utterance, and the front end is the acoustic
model's alone, so the grammar changes no logged byte (the default language model's search would
add only time).
"""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from asrdecode.audio.loading import resample_batch
from asrdecode.features.sphinx_mfcc import SphinxFeConfig, SphinxMFCC
from asrdecode.models.loading import resolve_model_path
from asrdecode.models.sphinx_io import read_feat_params

DATA = Path(__file__).resolve().parents[2] / "data"
MANIFESTS = sorted([DATA / "demo/real/manifest.jsonl", *DATA.glob("real/*/manifest.jsonl")])


def recordings() -> list[Path]:
    out = []
    for manifest in MANIFESTS:
        for line in manifest.read_text().splitlines():
            if line.strip():
                out.append(manifest.parent / json.loads(line)["audio_filepath"])
    return out


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The front end on one thread, as the CLI's sphinx setups run it (``threads: 1``): its
    operations on a few hundred frames gain nothing from a second thread, and wait for it whenever
    the other core is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    from pocketsphinx import Decoder

    logdir = tmp_path_factory.mktemp("mfc")
    decoder = Decoder(loglevel="FATAL", mfclogdir=str(logdir), lm=None, pl_window=0)
    decoder.add_jsgf_string("one_word", "#JSGF V1.0;\ngrammar one_word;\npublic <s> = go;\n")
    decoder.activate_search("one_word")
    return decoder, logdir


@pytest.fixture(scope="module")
def front_end():
    folder = resolve_model_path("embedded:sphinx-en-us")
    return SphinxMFCC(SphinxFeConfig.from_feat_params(read_feat_params(folder / "feat.params")))


@pytest.mark.parametrize("path", recordings(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cepstra_equal_pocketsphinx(path, peer, front_end):
    decoder, logdir = peer
    wave, rate = soundfile.read(path, dtype="float32", always_2d=True)
    wave = torch.from_numpy(wave.mean(1))
    if rate != 16000:
        wave = resample_batch([wave], [rate], 16000)[0]
    pcm = np.clip(np.round(wave.numpy() * 32768), -32768, 32767).astype(np.int16)
    for old in logdir.iterdir():
        old.unlink()
    decoder.reinit_feat()
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), no_search=True, full_utt=True)
    decoder.end_utt()
    (logged,) = list(logdir.iterdir())
    theirs = np.fromfile(logged, dtype=">f4")[1:].reshape(-1, 13)
    samples = torch.from_numpy(pcm.astype(np.float32) / 32768)[None]
    ours, frames = front_end.cepstra(samples, torch.tensor([samples.shape[1]]))
    assert int(frames[0]) == len(theirs)
    np.testing.assert_allclose(ours[0].numpy(), theirs, atol=2e-4, rtol=0)
