"""NeMo's own transcription as a sweep peer, run by another Python (one with NeMo installed; NeMo is
never a dependency of asrdecode): ``NEMO_PYTHON nemo_peer.py JOB.json`` prints one JSON object.

The job names a ``.nemo`` model, the audio files (utt_id -> path), a decoding strategy
(``greedy_batch`` or ``malsd_batch``) and its settings. The model is restored on the CPU with
dither off, the strategy set with ``change_decoding_strategy`` (NeMo's default RNNTDecodingConfig
with the job's strategy, ``max_symbols_per_step`` and ``beam.beam_size``), one file transcribed to warm up,
then all files with ``transcribe`` (batch 16). The printed object holds the texts and the wall
seconds of that call: NeMo's own front end, encoder and decoding. This file imports nothing from
asrdecode.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(job_path: str) -> None:
    import torch
    from nemo.collections.asr.models import ASRModel
    from nemo.collections.asr.parts.submodules.rnnt_decoding import RNNTDecodingConfig
    from omegaconf import OmegaConf, open_dict

    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    torch.set_num_threads(int(job.get("threads", 0)) or torch.get_num_threads())
    model = ASRModel.restore_from(job["model"], map_location="cpu").eval()
    model.preprocessor.featurizer.dither = 0.0
    if "validation_ds" not in model.cfg:  # transcribe() reads it; the demo models' configs have none
        with open_dict(model.cfg):
            model.cfg.validation_ds = {}
    decoding = OmegaConf.structured(RNNTDecodingConfig(strategy=job["strategy"]))
    decoding.greedy.max_symbols_per_step = int(job.get("max_symbols", 10))
    decoding.beam.beam_size = int(job.get("beam_size", 4))
    decoding.beam.max_symbols_per_step = int(job.get("max_symbols", 10))
    model.change_decoding_strategy(decoding, verbose=False)
    ids, paths = list(job["audio"]), list(job["audio"].values())

    def texts(files: list[str]) -> list[str]:
        with torch.inference_mode():
            out = model.transcribe(files, batch_size=16, verbose=False)
        out = out[0] if isinstance(out, tuple) else out
        return [h if isinstance(h, str) else h.text for h in out]

    texts(paths[:1])
    start = time.perf_counter()
    hyps = texts(paths)
    seconds = time.perf_counter() - start
    print(json.dumps({"hyps": dict(zip(ids, hyps, strict=True)), "seconds": seconds}))


if __name__ == "__main__":
    main(sys.argv[1])
