"""Peers that decode the same audio: pocketsphinx 5.1.1's own decoder with its en-us model.

One `Decoder` (its en-us model; `lm` = an ARPA file, plain or gzip, or None for its own
en-us.lm.bin) decodes each utterance from a fresh front end: ``reinit_feat()`` before every
utterance. Without it pocketsphinx carries its noise-removal estimate from one utterance into the
next, so its features (and words) depend on the order of the files; with it, its cepstra equal
asrdecode's to 2.5e-5 (tests/features/test_sphinx_mfcc.py). Fillers and pronunciation variant
marks ("word(2)") are removed from the words.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import shutil
import sys
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


class FlashlightLexiconDecoder:
    """flashlight-text's LexiconDecoder with KenLM (paper 001's CPU baseline) over CTC log-probs:
    `tokens` are the model's columns in order (`blank` and `silence` among them), `lexicon` maps
    each word to its spellings in tokens, `arpa` is the word LM. LM weight ln 10 by default (ARPA
    log10 to natural log, as asrdecode's graphs), no word score, max (not log-add) merging."""

    def __init__(
        self,
        tokens: list[str],
        blank: str,
        silence: str,
        lexicon: dict[str, list[list[str]]],
        arpa: str,
        beam_size: int,
        beam_threshold: float,
        lm_weight: float = math.log(10.0),
    ) -> None:
        from flashlight.lib.text.decoder import (
            CriterionType,
            KenLM,
            LexiconDecoder,
            LexiconDecoderOptions,
            SmearingMode,
            Trie,
        )
        from flashlight.lib.text.dictionary import Dictionary, create_word_dict

        table = Dictionary()
        for token in tokens:
            table.add_entry(token)
        sil = table.get_index(silence)
        self.word_dict = create_word_dict({**lexicon, "<unk>": []})  # flashlight wants an <unk> entry
        with quiet_native_output():  # KenLM prints a progress bar while reading
            lm = KenLM(arpa, self.word_dict)
        trie = Trie(table.index_size(), sil)
        start = lm.start(False)
        for word, spellings in lexicon.items():
            index = self.word_dict.get_index(word)
            _, lm_score = lm.score(start, index)
            for spelling in spellings:
                trie.insert([table.get_index(t) for t in spelling], index, lm_score)
        trie.smear(SmearingMode.MAX)
        options = LexiconDecoderOptions(
            beam_size=beam_size, beam_size_token=table.index_size(), beam_threshold=beam_threshold,
            lm_weight=lm_weight, word_score=0.0, unk_score=-math.inf, sil_score=0.0, log_add=False,
            criterion_type=CriterionType.CTC,
        )  # fmt: skip
        unk = self.word_dict.get_index("<unk>")
        self.decoder = LexiconDecoder(options, trie, lm, sil, table.get_index(blank), unk, [], False)
        self._keep = (lm, trie)  # the decoder holds references the bindings do not keep alive

    def words(self, log_probs: np.ndarray) -> list[str]:
        """[T, V] float32 C-contiguous log-probs -> the best word sequence."""
        x = np.ascontiguousarray(log_probs, dtype=np.float32)
        results = self.decoder.decode(x.ctypes.data, x.shape[0], x.shape[1])
        best = results[0].words if results else []
        return [self.word_dict.get_entry(i) for i in best if i >= 0]


@contextlib.contextmanager
def quiet_native_output():
    """Send what native code writes to stdout/stderr to /dev/null for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
