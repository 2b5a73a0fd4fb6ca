"""Peers that decode the same audio: pocketsphinx 5.1.1's own decoder with its en-us model.

One `Decoder` (its en-us model; `lm` = an ARPA file, plain or gzip, or None for its own
en-us.lm.bin) decodes each utterance from a fresh front end: ``reinit_feat()`` before every
utterance. Without it pocketsphinx carries its noise-removal estimate from one utterance into the
next, so its features (and words) depend on the order of the files; with it, its cepstra equal
asrdecode's to 2.5e-5 (tests/features/test_sphinx_mfcc.py). Fillers and pronunciation variant
marks ("word(2)") are removed from the words.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def is_filler(word: str) -> bool:
    return word.startswith(("<", "[", "++"))


class Pocketsphinx:
    """pocketsphinx with its en-us acoustic model and dictionary; `lm` None = its default LM;
    `options`: other pocketsphinx settings (``beam``, ``wbeam``, ``pbeam``, ...)."""

    def __init__(self, lm: Path | None = None, fresh_front_end: bool = True, **options: object) -> None:
        from pocketsphinx import Decoder

        self.fresh_front_end = fresh_front_end
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:
            if lm:
                options["lm"] = str(plain_arpa(lm, Path(scratch)))
            self.decoder = Decoder(loglevel="FATAL", **options)
        self.load_seconds = time.perf_counter() - t0

    def words(self, pcm: np.ndarray) -> tuple[list[str], float]:
        """16 kHz int16 samples -> (words, seconds spent in start_utt .. end_utt)."""
        t = time.perf_counter()
        if self.fresh_front_end:
            self.decoder.reinit_feat()
        self.decoder.start_utt()
        self.decoder.process_raw(pcm.tobytes(), no_search=False, full_utt=True)
        self.decoder.end_utt()
        seconds = time.perf_counter() - t
        if self.decoder.hyp() is None:
            return [], seconds
        words = [s.word.split("(")[0] for s in self.decoder.seg()]
        return [w for w in words if not is_filler(w)], seconds


def plain_arpa(path: Path, scratch: Path) -> Path:
    """pocketsphinx reads plain ARPA: a gzip file is decompressed into `scratch`."""
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            return path
    out = scratch / "lm.arpa"
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def pcm16(path: str | Path, offset: float = 0.0, duration: float | None = None) -> np.ndarray:
    """An audio file (or a span of it) as 16 kHz mono int16 samples, the way pocketsphinx wants it."""
    from asrdecode.audio.loading import load_audio
    from asrdecode.io.manifests import Utterance

    wave, rate = load_audio(Utterance("x", str(path), offset=offset, duration=duration))
    if rate != 16000:
        import torch
        import torchaudio.functional as F

        wave = F.resample(torch.from_numpy(np.ascontiguousarray(wave)), rate, 16000).numpy()
    return np.clip(np.rint(wave * 32768.0), -32768, 32767).astype(np.int16)
