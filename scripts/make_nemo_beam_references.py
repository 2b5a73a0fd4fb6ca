"""NeMo 3.0.0 beam-search references for the LM fusion modes the shared fixture set does not cover.

Runs in the NeMo venv (not a dependency of asrdecode; see scripts/make_nemo_fixtures.py for the venv):

    /work/nemo-venv/bin/python scripts/make_nemo_beam_references.py

Decodes NeMo's own encoder outputs stored in tests/fixtures/nemo/reference/{rnnt_bpe,tdt_bpe}.npz with
``malsd_batch`` / ``maes_batch`` (beam 4, CUDA graphs off, max_symbols 10, score_norm, best hypothesis)
and the token LM tests/fixtures/nemo/lm_tokens.arpa at alpha 0.5 in every ``blank_lm_score_mode`` x
``pruning_mode`` pair, and writes tokens, timestamps (TDT: start frames and durations) and scores per
utterance, with the versions and the exact overrides, to tests/fixtures/nemo/reference/beam_modes.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "nemo"
MODES = [(b, p) for b in ("no_score", "lm_weighted_full") for p in ("early", "late")]
CASES = [("rnnt_bpe", "malsd_batch"), ("rnnt_bpe", "maes_batch"), ("tdt_bpe", "malsd_batch")]


def main() -> int:
    import nemo
    from nemo.collections.asr.models import ASRModel
    from omegaconf import OmegaConf

    torch.set_num_threads(1)
    out = {"nemo": nemo.__version__, "torch": torch.__version__, "alpha": 0.5, "beam_size": 4, "cases": {}}
    for name, strategy in CASES:
        model = ASRModel.restore_from(str(FIX / f"{name}.nemo"), map_location="cpu").eval()
        data = np.load(FIX / "reference" / f"{name}.npz")
        enc = torch.from_numpy(data["encoder_out"])
        enc_len = torch.from_numpy(data["encoder_len"])
        for blank_mode, pruning in MODES:
            beam = {
                "beam_size": 4,
                "return_best_hypothesis": True,
                "score_norm": True,
                "allow_cuda_graphs": False,
                "max_symbols": 10,
                "ngram_lm_model": str(FIX / "lm_tokens.arpa"),
                "ngram_lm_alpha": 0.5,
                "blank_lm_score_mode": blank_mode,
                "pruning_mode": pruning,
            }
            over = {"strategy": strategy, "beam": beam}
            if name.startswith("tdt"):
                over["tdt_include_token_duration"] = True
            base = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
            model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
            with torch.inference_mode():
                (hyps,) = model.decoding.decoding(encoder_output=enc, encoded_lengths=enc_len)
            rows = []
            for h in hyps:
                row = {
                    "tokens": torch.as_tensor(h.y_sequence).tolist(),
                    "timestamps": torch.as_tensor(h.timestamp).tolist(),
                    "score": float(h.score),
                }
                if h.token_duration is not None:
                    row["durations"] = torch.as_tensor(h.token_duration).tolist()
                rows.append(row)
            key = f"{name}/{strategy}/{blank_mode}/{pruning}"
            beam["ngram_lm_model"] = "lm_tokens.arpa"
            out["cases"][key] = {"overrides": over, "hyps": rows}
            print(key, [len(r["tokens"]) for r in rows], flush=True)
    path = FIX / "reference" / "beam_modes.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
