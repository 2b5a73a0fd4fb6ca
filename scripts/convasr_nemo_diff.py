"""Print how far asrdecode's ConvASR log-probs are from NeMo's single-utterance references on the
deep fixtures (tests/fixtures/nemo: quartznet_deep, citrinet_deep; two real inputs of 12.6 and
11.5 s), each utterance decoded alone and in one padded batch, next to NeMo's own batched-vs-single
difference recorded with the references. One thread, CPU.

    .venv/bin/python scripts/convasr_nemo_diff.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "nemo"


def main() -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_audio import long_inputs

    from asrdecode.models import load_nemo

    torch.set_num_threads(1)
    waves = long_inputs()
    lengths = torch.tensor([len(w) for w in waves])
    batch = torch.zeros(len(waves), int(lengths.max()))
    for b, w in enumerate(waves):
        batch[b, : len(w)] = torch.from_numpy(w)
    for name in ("quartznet_deep", "citrinet_deep"):
        ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
        info = json.loads((FIX / "reference" / f"{name}.json").read_text())
        model = load_nemo(FIX / f"{name}.nemo")
        with torch.inference_mode():
            together = model(batch, lengths)
            alone = [model(batch[b : b + 1, : len(w)], lengths[b : b + 1]) for b, w in enumerate(waves)]
        gaps = {"alone": 0.0, "batched": 0.0}
        for b in range(len(waves)):
            want = ref[f"log_probs_{b}"]
            n = want.shape[0]
            gaps["alone"] = max(gaps["alone"], float(np.abs(alone[b].log_probs[0, :n].numpy() - want).max()))
            gaps["batched"] = max(
                gaps["batched"], float(np.abs(together.log_probs[b, :n].numpy() - want).max())
            )
        alone_gap, batched_gap = gaps["alone"], gaps["batched"]
        nemo = info["nemo_batched_vs_single_max_abs"]
        print(
            f"{name}: max |log-prob - NeMo's alone| {alone_gap:.3g} alone, {batched_gap:.3g} batched; "
            f"NeMo's batched vs alone {nemo:.3g}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
