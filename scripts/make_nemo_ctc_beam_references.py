"""NeMo 3.0.0 references for `ctc-beam`: NeMo's batched CTC beam search (``beam_batch``,
``BatchedBeamCTCComputer``) with and without the token LM.

Runs in the NeMo venv (not a dependency of asrdecode; see scripts/make_nemo_fixtures.py for the venv):

    /work/nemo-venv/bin/python scripts/make_nemo_ctc_beam_references.py

Decodes the log-probs NeMo computed for tests/fixtures/nemo/ctc_bpe.nemo (stored in
tests/fixtures/nemo/reference/ctc_bpe.npz) with ``ctc_bpe``'s own decoding module switched to
``beam_batch`` (CUDA graphs off), in the settings of ``CASES`` (beam size, ``beam_beta``,
``beam_threshold``, the token LM tests/fixtures/nemo/lm_tokens.arpa at ``ngram_lm_alpha``), each
utterance alone (its own length, a batch of one) and the six as one batch, and writes each
hypothesis' tokens, frames and score (the n-best lists where ``return_best_hypothesis`` is false),
with the versions and the exact overrides, to tests/fixtures/nemo/reference/ctc_beam.json; and the token
LM as NeMo saves it (``NGramGPULanguageModel.from_arpa(...).save_to``) to tests/fixtures/nemo/lm_tokens.nemo.
Also the texts of ``transcribe`` on the six clips (batch size 1) with the LM case ``TRANSCRIBE_CASE``, and
of the same decoding of NeMo's forward output for each clip cut to its encoded length (``transcribe``
searches the frames NeMo's forward returns past it as well).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "nemo"
LM = FIX / "lm_tokens.arpa"

CASES = {
    "plain": {"beam_size": 4},
    "wide": {"beam_size": 8, "beam_threshold": 3.0},
    "one": {"beam_size": 1},
    "lm": {"beam_size": 4, "ngram_lm_alpha": 0.5},
    "lm_beta": {"beam_size": 4, "ngram_lm_alpha": 1.0, "beam_beta": 1.5},
    "lm_light": {"beam_size": 4, "ngram_lm_alpha": 0.3, "beam_beta": 1.0},
    "lm_pruned": {"beam_size": 8, "ngram_lm_alpha": 0.5, "beam_beta": 2.0, "beam_threshold": 4.0},
    "lm_one": {"beam_size": 1, "ngram_lm_alpha": 0.5, "beam_beta": 1.0},
    "lm_nbest": {"beam_size": 6, "ngram_lm_alpha": 0.5, "beam_beta": 1.5, "return_best_hypothesis": False},
}
TRANSCRIBE_CASE = "lm_light"  # the case of the transcribe() texts


def beam_config(case: dict) -> dict:
    beam = {"beam_size": 4, "beam_beta": 0.0, "beam_threshold": 20.0, "return_best_hypothesis": True,
            "allow_cuda_graphs": False}  # fmt: skip
    beam.update(case)
    if "ngram_lm_alpha" in case:
        beam["ngram_lm_model"] = str(LM)
    return beam


def rows_of(hyps) -> list:
    def one(h) -> dict:
        return {
            "tokens": torch.as_tensor(h.y_sequence).tolist(),
            "timestamps": torch.as_tensor(h.timestamp).tolist(),
            "score": float(h.score),
        }

    out = []
    for h in hyps:
        if hasattr(h, "n_best_hypotheses"):
            out.append([one(x) for x in h.n_best_hypotheses])
        else:
            out.append(one(h))
    return out


def main() -> int:
    import nemo
    from nemo.collections.asr.models import ASRModel
    from omegaconf import OmegaConf

    torch.set_num_threads(1)
    # the token LM as NeMo saves it (NGPU-LM .nemo), for the decoders' ngram_lm=*.nemo
    from nemo.collections.asr.parts.submodules.ngram_lm import NGramGPULanguageModel

    NGramGPULanguageModel.from_arpa(str(LM), vocab_size=128).save_to(str(FIX / "lm_tokens.nemo"))
    model = ASRModel.restore_from(str(FIX / "ctc_bpe.nemo"), map_location="cpu").eval()
    data = np.load(FIX / "reference" / "ctc_bpe.npz")
    lp = torch.from_numpy(data["log_probs"])
    lens = torch.from_numpy(data["encoder_len"]).long()
    out = {"nemo": nemo.__version__, "torch": torch.__version__, "lm": LM.name, "cases": {}}
    for name, case in CASES.items():
        beam = beam_config(case)
        over = {"strategy": "beam_batch", "beam": beam}
        base = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
        model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
        alone = []
        with torch.inference_mode():
            for b in range(lp.shape[0]):
                n = int(lens[b])
                (hyps,) = model.decoding.decoding(
                    decoder_output=lp[b : b + 1, :n], decoder_lengths=lens[b : b + 1]
                )
                alone.extend(rows_of(hyps))
            (batched,) = model.decoding.decoding(decoder_output=lp, decoder_lengths=lens)
        shown = dict(beam)
        if "ngram_lm_model" in shown:
            shown["ngram_lm_model"] = LM.name
        out["cases"][name] = {"overrides": {"strategy": "beam_batch", "beam": shown}, "alone": alone,
                              "batched": rows_of(batched)}  # fmt: skip
        print(name, flush=True)
    # transcribe() on the clips, one at a time, with an LM case
    over = {"strategy": "beam_batch", "beam": beam_config(CASES[TRANSCRIBE_CASE])}
    base = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding))
    model.change_decoding_strategy(OmegaConf.merge(base, OmegaConf.create(over)), verbose=False)
    ids = [str(x) for x in data["utt_ids"]]
    paths = [str(FIX / "audio" / f"{u}.wav") for u in ids]
    # NeMo's forward of one clip can return frames past its encoded length, and beam_batch searches
    # them too (as transcribe does): the same decoding of the output cut to its length, and the counts
    trimmed, frames = {}, {}
    import soundfile as sf

    with torch.inference_mode():
        for u, path in zip(ids, paths, strict=True):
            wav = torch.from_numpy(sf.read(path, dtype="float32")[0])[None]
            lp_one, n_one, _ = model.forward(
                input_signal=wav, input_signal_length=torch.tensor([wav.shape[1]])
            )
            n = int(n_one[0])
            (hyps,) = model.decoding.decoding(decoder_output=lp_one[:, :n], decoder_lengths=n_one)
            trimmed[u] = model.tokenizer.ids_to_text([int(x) for x in hyps[0].y_sequence])
            frames[u] = [int(lp_one.shape[1]), n]
    texts = model.transcribe(paths, batch_size=1, verbose=False)
    out["transcribe_case"] = TRANSCRIBE_CASE
    out["transcribe"] = {
        u: (t.text if hasattr(t, "text") else str(t)) for u, t in zip(ids, texts, strict=True)
    }
    out["decoded_to_length"] = trimmed
    out["forward_frames_and_length"] = frames
    path = FIX / "reference" / "ctc_beam.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
