"""The NeMo fixtures' audio batch: the six clips of tests/fixtures/nemo/audio in the order of its
`text` file, read as float32 and zero-padded (the batch every reference under reference/ was
computed from)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "nemo"


def audio_batch() -> dict[str, np.ndarray]:
    """``audio`` [6, S] float32, ``audio_len`` [6] int64 and ``utt_ids`` [6]."""
    lines = (FIX / "audio" / "text").read_text().splitlines()
    ids = [line.split(" ", 1)[0] for line in lines if line.strip()]
    clips = [sf.read(FIX / "audio" / f"{u}.wav", dtype="float32")[0] for u in ids]
    audio = np.zeros((len(clips), max(len(c) for c in clips)), dtype=np.float32)
    for i, clip in enumerate(clips):
        audio[i, : len(clip)] = clip
    return {
        "audio": audio,
        "audio_len": np.array([len(c) for c in clips], dtype=np.int64),
        "utt_ids": np.array(ids),
    }


def batch_features() -> np.ndarray:
    """NeMo's features of the batch [6, 80, T] (``reference/ctc_bpe.npz``): every fixture model has
    that front end, and scripts/make_nemo_fixtures.py checks that each one's NeMo features equal these."""
    return np.load(FIX / "reference" / "ctc_bpe.npz", allow_pickle=False)["features"]


#: The long inputs of the deep ConvASR references: clips of `audio_batch` joined end to end
#: (12.6 s and 11.5 s of real speech).
LONG_CLIPS = ((0, 1, 2, 3), (4, 5, 1, 0))


def long_inputs() -> list[np.ndarray]:
    """The `LONG_CLIPS` inputs, float32."""
    batch = audio_batch()
    clips = [batch["audio"][i, : int(n)] for i, n in enumerate(batch["audio_len"])]
    return [np.concatenate([clips[k] for k in ks]) for ks in LONG_CLIPS]
