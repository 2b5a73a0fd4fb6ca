"""Print how far asrdecode's ConvASR log-probs are from NeMo's on the deep fixtures
(tests/fixtures/nemo: quartznet_deep, citrinet_deep; two real inputs of 12.6 and 11.5 s), each
utterance decoded alone and in one padded batch: in float32 from the waveforms against NeMo's
float32 single-utterance references (made on another CPU: float32 results on these stacks depend
on the CPU's summation order) and against NeMo's float64 log-probs, and in float64 from NeMo's
features against NeMo's float64 log-probs; next to NeMo's own distances recorded with the
references. One thread, CPU.

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


def padded(rows: list[torch.Tensor]) -> torch.Tensor:
    """[..., T_b] rows zero-padded into one batch."""
    batch = rows[0].new_zeros(len(rows), *rows[0].shape[:-1], max(r.shape[-1] for r in rows))
    for b, r in enumerate(rows):
        batch[b, ..., : r.shape[-1]] = r
    return batch


def largest_gap(outputs: list[tuple[torch.Tensor, int]], refs: list[np.ndarray]) -> float:
    """The largest |log-prob - reference| over the utterances: (log-probs [B, T, V], row) each."""
    return max(
        float(np.abs(lp[row, : r.shape[0]].double().numpy() - r).max())
        for (lp, row), r in zip(outputs, refs, strict=True)
    )


def main() -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.nemo_audio import long_inputs

    from asrdecode.models import load_nemo

    torch.set_num_threads(1)
    waves = [torch.from_numpy(w) for w in long_inputs()]
    lengths = torch.tensor([len(w) for w in waves])
    batch = padded(waves)
    for name in ("quartznet_deep", "citrinet_deep"):
        ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
        info = json.loads((FIX / "reference" / f"{name}.json").read_text())
        utts = range(len(waves))
        ref32, ref64 = [ref[f"log_probs_{b}"] for b in utts], [ref[f"log_probs64_{b}"] for b in utts]
        model = load_nemo(FIX / f"{name}.nemo")
        model64 = load_nemo(FIX / f"{name}.nemo").double()
        feats = [torch.from_numpy(ref[f"features_{b}"]).double() for b in utts]
        feat_len = torch.tensor([int(ref[f"features_len_{b}"]) for b in utts])
        with torch.inference_mode():
            together = model(batch, lengths).log_probs
            alone = [model(w[None], lengths[b : b + 1]).log_probs for b, w in enumerate(waves)]
            together64 = model64.forward_features(padded(feats), feat_len).log_probs
            alone64 = [
                model64.forward_features(f[None], feat_len[b : b + 1]).log_probs for b, f in enumerate(feats)
            ]
        rows = {
            "float32 vs NeMo's float32": (alone, together, ref32),
            "float32 vs NeMo's float64": (alone, together, ref64),
            "float64 vs NeMo's float64": (alone64, together64, ref64),
        }
        for what, (one, many, refs) in rows.items():
            gap_alone = largest_gap([(lp, 0) for lp in one], refs)
            gap_batched = largest_gap([(many, b) for b in utts], refs)
            print(
                f"{name}: max |log-prob difference|, {what}: {gap_alone:.3g} alone, {gap_batched:.3g} batched"
            )
        nemo32 = info["nemo_float32_vs_float64_max_abs"]
        print(
            f"{name}: NeMo's float32 vs its float64: {nemo32['committed']:.3g} (the references' CPU), "
            f"{nemo32['here']:.3g} ({nemo32['here_cpu']}); NeMo's batched vs alone: float32 "
            f"{info['nemo_batched_vs_single_max_abs']:.3g}, "
            f"float64 {info['nemo_float64_batched_vs_single_max_abs']:.3g}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
