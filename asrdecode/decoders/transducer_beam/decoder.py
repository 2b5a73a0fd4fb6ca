"""`transducer-beam`: batched beam search for RNN-T and TDT models (paper 004, Grigoryan et al.,
"Pushing the Limits of Beam Search Decoding for Transducer-based ASR models").

``strategy: malsd`` = ALSD++ (:mod:`.alsd`, RNN-T and TDT), ``strategy: maes`` = AES++ (:mod:`.aes`,
RNN-T); both keep their hypotheses in a :class:`~.hyps.BatchedBeamHyps` tree (back-pointers, paper 004
section 2.1) and merge identical token sequences by rolling hash. Option names are NeMo's
(``rnnt_decoding.beam.*``, ``strategy: malsd_batch | maes_batch`` accepted) so tuned values carry over.
All utterances and beam slots advance together in tensor ops ([B, K] / [B*K] rows, no per-utterance
Python in the search); the only host reads are the loop conditions (one per step) and the results.

Conventions (NeMo's, see tests/fixtures/nemo/README.md): log-probs re-normalised inside the search
(``log_softmax`` over V+1 tokens+blank; TDT durations separately); <SOS> = blank; ``max_symbols``
tokens per frame at most; the returned hypothesis maximises ``score / (tokens + 1)`` with
``score_norm`` (raw score otherwise) and ``DecodeResult.score`` is its raw log score. Token frames =
the frame each token was emitted at (TDT: its start frame; ``token_durations`` = the duration values).
TDT durations are used by value (``durations[index]``), which is the TDT definition; NeMo 3.0.0's
``malsd_batch`` jumps by the index (identical when durations = [0, 1, ..., n-1], as in the fixtures).

N-gram LM shallow fusion (``ngram_lm``, ``ngram_lm_alpha``, ``ngram_lm_token_ids``; paper 004 section
2.3, :mod:`.fusion`): one :class:`asrdecode.lm.ngram_tensor.BatchedNgramLM` state per slot (``<s>`` at
the start, advanced on tokens only, no ``</s>``); ``blank_lm_score_mode`` = eq. 3 (``lm_weighted_full``,
default) or eq. 2 (``no_score``), ``pruning_mode`` ``late`` (default) or ``early``, NeMo's defaults and
names. ``DecodeResult.score`` is the fused log score, ``lm_score`` = ln p_LM of the tokens and
``acoustic_score`` = score - alpha * lm_score (the transducer part, including eq. 3's blank/non-blank
reweighting). Differences from NeMo 3.0.0 where it is not self-consistent (tests/decoders/
test_transducer_beam.py reproduces NeMo's tokens, frames and scores in every mode exactly when these
three rules are substituted): a forced blank (``max_symbols`` reached, or AES's end-of-frame blank) is
scored like any blank of the mode (eq. 3: ``(1 + alpha) log p(blank)``), where NeMo uses the plain
``log p(blank)`` in ALSD with early pruning and in AES; AES early pruning with eq. 3 adds the model's log-prob
once (NeMo 3.0.0 adds it twice). AES: every hypothesis that just took a token may expand again; NeMo
decides by the previous occupant of the slot, so some of its hypotheses skip a frame's blank
(:func:`~.aes.aes_search`, ``nemo_expanding_rule``; same tokens on the fixtures, scores differ by exactly
the skipped blank's log-prob, tests/decoders/test_transducer_beam.py).

``return_best_hypothesis: false`` adds ``DecodeResult.nbest``: the beam's distinct token sequences
(words, raw score), best first by the same ranking.

No ``cuda_graphs`` switch: the loop body is not capturable as it stands (the candidate selection,
back-pointer storage growth and result tensors allocate per step, and the loop condition is read on the
host every step); NeMo captures only ALSD++, from a preallocated state. ``max_symbols: null`` follows
NeMo (no cap): a model that keeps preferring tokens never finishes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from asrdecode.decoders.base import (
    DecoderBase,
    DecoderContext,
    DecodeResult,
    check_fusion_weight,
    check_values,
    nbest_words,
)
from asrdecode.decoders.beam_hyps import BatchedBeamHyps
from asrdecode.decoders.lms import fusion_lm_of
from asrdecode.decoders.transducer_beam.aes import aes_search
from asrdecode.decoders.transducer_beam.alsd import FusionConfig, alsd_search
from asrdecode.decoders.transducer_beam.fusion import BLANK_LM_SCORE_MODES, PRUNING_MODES
from asrdecode.decoders.transducer_greedy import token_words, transducer_network
from asrdecode.errors import ConfigError
from asrdecode.models.base import ModelOutput

__all__ = ["STRATEGIES", "TransducerBeamConfig", "TransducerBeamDecoder"]

STRATEGIES = {"malsd": "malsd", "malsd_batch": "malsd", "maes": "maes", "maes_batch": "maes"}


@dataclass
class TransducerBeamConfig:
    """Options of the transducer beam search (NeMo ``beam.*`` names)."""

    strategy: str = "malsd"  # malsd (ALSD++, RNN-T/TDT) | maes (AES++, RNN-T); NeMo's *_batch names too
    beam_size: int = 4
    score_norm: bool = True  # pick the best by score / (tokens + 1)
    return_best_hypothesis: bool = True  # false: also the n-best list
    max_symbols: int | None = 10  # malsd: most tokens per frame (null: no cap)
    maes_num_steps: int = 2  # maes: expansion steps per frame
    maes_expansion_beta: int = 2  # maes: candidates per hypothesis = beam_size + beta
    maes_expansion_gamma: float = 2.3  # maes: prune candidates more than gamma below a hypothesis' best
    ngram_lm: str = ""  # token ARPA (plain/.gz) or NGPU-LM .nemo, shallow fusion (NeMo beam.ngram_lm_model)
    ngram_lm_alpha: float = 0.0  # LM weight (NeMo beam.ngram_lm_alpha)
    ngram_lm_token_ids: str = "ngpu"  # ngpu: NeMo's token ARPA (token i = chr(i + 100)) | words: the units
    blank_lm_score_mode: str = "lm_weighted_full"  # lm_weighted_full (paper 004 eq. 3) | no_score (eq. 2)
    pruning_mode: str = "late"  # late: add the LM, then pick candidates | early: pick, then add the LM


def _check_options(config: TransducerBeamConfig) -> None:
    """One-line ConfigErrors for values the search cannot use."""
    if config.strategy not in STRATEGIES:
        raise ConfigError(f"decoder.strategy must be one of {', '.join(STRATEGIES)}, got {config.strategy!r}")
    checks = [
        ("beam_size", config.beam_size, config.beam_size >= 1, ">= 1"),
        (
            "max_symbols",
            config.max_symbols,
            config.max_symbols is None or config.max_symbols >= 1,
            ">= 1 or null",
        ),
        ("maes_num_steps", config.maes_num_steps, config.maes_num_steps >= 1, ">= 1"),
        ("maes_expansion_beta", config.maes_expansion_beta, config.maes_expansion_beta >= 0, ">= 0"),
        (
            "maes_expansion_gamma",
            config.maes_expansion_gamma,
            math.isfinite(config.maes_expansion_gamma) and config.maes_expansion_gamma >= 0,
            "a finite number >= 0",
        ),
        ("ngram_lm_alpha", config.ngram_lm_alpha, math.isfinite(config.ngram_lm_alpha), "a finite number"),
        (
            "blank_lm_score_mode",
            config.blank_lm_score_mode,
            config.blank_lm_score_mode in BLANK_LM_SCORE_MODES,
            f"one of {', '.join(BLANK_LM_SCORE_MODES)}",
        ),
        (
            "pruning_mode",
            config.pruning_mode,
            config.pruning_mode in PRUNING_MODES,
            f"one of {', '.join(PRUNING_MODES)}",
        ),
    ]
    check_values(checks)
    check_fusion_weight(config)


class TransducerBeamDecoder(DecoderBase):
    """Batched ALSD++ / AES++ beam search over a transducer model output (needs
    ``ModelOutput.encoder_out`` and ``extra["transducer"]``, as :class:`TransducerGreedyDecoder`)."""

    name: ClassVar[str] = "transducer-beam"
    config_type: ClassVar[type] = TransducerBeamConfig
    check_options = staticmethod(_check_options)

    def __init__(self, config: TransducerBeamConfig, context: DecoderContext) -> None:
        super().__init__(config, context)
        self.strategy = STRATEGIES[config.strategy]
        self.lm = fusion_lm_of(config, context)

    def _fusion(self, device: torch.device) -> FusionConfig | None:
        """The LM fusion settings (None without an LM), the LM moved to ``device`` on first use there."""
        if self.lm is None:
            return None
        if self.lm.root_weight.device != device:
            self.lm.to(device)
        cfg = self.config
        return FusionConfig(self.lm, cfg.ngram_lm_alpha, cfg.blank_lm_score_mode, cfg.pruning_mode)

    def search(self, output: ModelOutput, nemo_expanding_rule: bool = False) -> BatchedBeamHyps:
        """Run the configured search on a batch; the final hypotheses (all finished).
        ``nemo_expanding_rule``: maes only, see :func:`~.aes.aes_search` (tests)."""
        net = transducer_network(output, self.name)
        cfg = self.config
        with torch.inference_mode():
            enc_proj = net.project_encoder(output.encoder_out)  # once per batch (paper 003 section 3.4)
        fusion = self._fusion(enc_proj.device)
        if self.strategy == "maes":
            if net.durations:
                raise ConfigError(
                    "decoder.strategy=maes supports RNN-T models only (as NeMo's maes_batch); this is a TDT "
                    "model, use decoder.strategy=malsd"
                )
            return aes_search(
                net,
                enc_proj,
                output.lengths,
                cfg.beam_size,
                cfg.maes_num_steps,
                cfg.maes_expansion_beta,
                cfg.maes_expansion_gamma,
                fusion=fusion,
                nemo_expanding_rule=nemo_expanding_rule,
            )
        return alsd_search(net, enc_proj, output.lengths, cfg.beam_size, cfg.max_symbols, fusion=fusion)

    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        hyps = self.search(output)
        tdt = bool(output.extra["transducer"].durations)
        return self.results(hyps, output.frame_shift, tdt)

    def results(self, hyps: BatchedBeamHyps, shift: float, tdt: bool) -> list[DecodeResult]:
        """Best hypothesis (and n-best) per utterance: one backtrack for the batch, one host copy per
        field, then per-utterance Python."""
        order = hyps.ranking(self.config.score_norm)
        if self.config.return_best_hypothesis:
            order = order[:, :1]
        labels, frames, durations = hyps.backtrack(order)
        is_token = (labels >= 0) & (labels != hyps.blank)
        scores = torch.gather(hyps.scores, 1, order).float().cpu().tolist()
        lm_scores = (
            torch.gather(hyps.lm_scores, 1, order[:, :1]).float().cpu().tolist()
            if hyps.lm_scores is not None
            else None
        )
        labels_h, frames_h, durs_h = labels.cpu().tolist(), frames.cpu().tolist(), durations.cpu().tolist()
        mask_h = is_token.cpu().tolist()
        alpha = self.config.ngram_lm_alpha
        results = []
        for b in range(hyps.batch):
            ranked = []
            for r in range(order.shape[1]):
                keep = mask_h[b][r]
                tokens = [x for x, m in zip(labels_h[b][r], keep, strict=True) if m]
                token_frames = [x for x, m in zip(frames_h[b][r], keep, strict=True) if m]
                token_durs = [x for x, m in zip(durs_h[b][r], keep, strict=True) if m]
                ranked.append((tokens, token_frames, token_durs, scores[b][r]))
            tokens, token_frames, token_durs, score = ranked[0]
            words = token_words(
                self.context.words_of(tokens), token_frames, token_durs if tdt else None, shift
            )
            nbest = None
            if not self.config.return_best_hypothesis:
                nbest = nbest_words(((toks, s) for toks, _, _, s in ranked), self.context.words_of)
            lm_score = lm_scores[b][0] if lm_scores is not None else None
            results.append(
                DecodeResult(
                    words=words,
                    tokens=tokens,
                    token_frames=token_frames,
                    score=score,
                    acoustic_score=score - alpha * lm_score if lm_score is not None else score,
                    lm_score=lm_score,
                    nbest=nbest,
                    token_durations=token_durs if tdt else None,
                )
            )
        return results
