"""`ctc-beam`: batched CTC beam search with token n-gram LM shallow fusion, NeMo's ``beam_batch``
strategy (``BatchedBeamCTCComputer``) step for step.

A hypothesis is a CTC path (one symbol per frame, blank included), kept as a slot of a
:class:`~asrdecode.decoders.beam_hyps.BatchedBeamHyps` tree in CTC mode (paper 004 section
2.1: back-pointers, rolling-hash merging). At frame t every slot s of an utterance is extended by every
output k (V tokens + blank):

    score(s, k) = score(s) + log p_t(k) [+ beam_beta + alpha * ln p_LM(k | tokens of s)]

the bracket only for a new token (k not blank and not the path's last symbol: a repeat continues the
token it repeats, as in CTC's collapse). The best ``beam_size`` of the K (V + 1) candidates become the
new slots (``torch.topk``, best first); candidates ``beam_threshold`` or more below the utterance's best
are dropped; slots with the same tokens and the same last symbol are merged, keeping the best path's
score (a max, NeMo's CTC rule: the search is over paths, not a prefix search summing them). After the
last frame ``alpha * ln p_LM(</s> | tokens)`` is added and the best score wins (no length
normalisation: NeMo decodes CTC with ``score_norm=False``).

The LM (:class:`asrdecode.lm.ngram_tensor.BatchedNgramLM`, one state per slot from ``<s>``, advanced on
new tokens only: :class:`~asrdecode.decoders.beam_hyps.LmFusionState`) reads NeMo's token
ARPA (``ngram_lm_token_ids: ngpu``, token i written as ``chr(i + 100)``, as NeMo's
``NGramGPULanguageModel``) or an ARPA over the model's unit strings (``words``); it needs the blank after
the units (NeMo's layout). ``DecodeResult.score`` is the fused score, ``lm_score`` = ln p_LM of the
tokens and ``</s>``, ``acoustic_score`` = the path's log-probs alone (score - beta * tokens - alpha *
lm_score).

One difference from NeMo 3.0.0, where it depends on the batch: NeMo keeps searching an utterance's
frames past its length (adding the padded frames' log-probs, which can reorder or merge its beams)
until the longest utterance of the batch ends; here an utterance's slots are frozen after its last
frame, so its result is the same in any batch (NeMo's for a batch of one, tested).

Word times as ``ctc-greedy``'s: a word starts at its first token's first frame and ends after the last
frame of its last token's run; a word's confidence is the least probability of its tokens at their
first frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from asrdecode.decoders.base import DecoderBase, DecoderContext, DecodeResult, Word, check_values, nbest_words
from asrdecode.decoders.beam_hyps import NO_LABEL, BatchedBeamHyps, LmFusionState, flat_slots
from asrdecode.decoders.ctc_greedy import ctc_runs
from asrdecode.decoders.lms import fusion_lm_of
from asrdecode.errors import ConfigError
from asrdecode.models.base import ModelOutput

__all__ = ["CtcBeamConfig", "CtcBeamDecoder", "ctc_beam_search"]


@dataclass
class CtcBeamConfig:
    """Options of the CTC beam search (NeMo ``ctc_decoding.beam.*`` names, strategy ``beam_batch``)."""

    beam_size: int = 4
    beam_beta: float = 0.0  # added for each new token (NeMo beam.beam_beta, an insertion bonus)
    beam_threshold: float = 20.0  # drop candidates this far or more below the frame's best
    return_best_hypothesis: bool = True  # false: also the n-best list
    ngram_lm: str = ""  # token ARPA (plain/.gz) or NGPU-LM .nemo, shallow fusion (NeMo beam.ngram_lm_model)
    ngram_lm_alpha: float = 1.0  # LM weight, used with ngram_lm (NeMo beam.ngram_lm_alpha)
    ngram_lm_token_ids: str = "ngpu"  # ngpu: NeMo's token ARPA (token i = chr(i + 100)) | words: the units


def _check_options(config: CtcBeamConfig) -> None:
    """One-line ConfigErrors for values the search cannot use."""
    checks = [
        ("beam_size", config.beam_size, isinstance(config.beam_size, int) and config.beam_size >= 1, ">= 1"),
        ("beam_beta", config.beam_beta, math.isfinite(config.beam_beta), "a finite number"),
        (
            "beam_threshold",
            config.beam_threshold,
            not math.isnan(config.beam_threshold) and config.beam_threshold > 0,
            "a number > 0 (inf: no threshold)",
        ),
        ("ngram_lm_alpha", config.ngram_lm_alpha, math.isfinite(config.ngram_lm_alpha), "a finite number"),
    ]
    check_values(checks)


def ctc_beam_search(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    blank: int,
    beam_size: int,
    beam_beta: float = 0.0,
    beam_threshold: float = 20.0,
    lm=None,
    alpha: float = 0.0,
) -> tuple[BatchedBeamHyps, LmFusionState | None]:
    """The search of the module docstring over ``log_probs`` [B, T, V+1] (``lengths`` [B] frames);
    ``lm``: a BatchedNgramLM over the V tokens (blank = V) or None. Returns the final hypotheses (with
    the LM's ``</s>`` added to their scores) and the per-slot LM states (None without an LM)."""
    B, T, V1 = log_probs.shape
    K = beam_size
    device, dtype = log_probs.device, log_probs.dtype
    lengths = lengths.to(device)
    hyps = BatchedBeamHyps(B, K, blank, device, dtype, capacity=max(T, 1), ctc=True)
    fusion = LmFusionState(lm, alpha, B * K, device, dtype) if lm is not None else None
    vocab = torch.arange(V1, device=device)
    is_blank = vocab == blank
    same_slots = torch.arange(K, device=device).expand(B, K)
    no_label = torch.full((B, K), NO_LABEL, dtype=torch.long, device=device)
    one_frame = torch.ones((B, K), dtype=torch.long, device=device)
    for t in range(T):
        active = (t < lengths).unsqueeze(1)  # [B, 1]
        repeat = hyps.last_label.unsqueeze(-1) == vocab  # [B, K, V+1]
        cand = log_probs[:, t, :].unsqueeze(1) + hyps.scores.unsqueeze(-1)
        if beam_beta:  # (NeMo adds it even when 0: the same values)
            cand = torch.where(repeat | is_blank, cand, cand + beam_beta)
        if fusion is not None:
            lm_scores = fusion.scores.view(B, K, -1)  # alpha * ln p_LM, [B, K, V]
            cand[..., :-1] += torch.where(repeat[..., :-1], 0.0, lm_scores)
        scores, index = torch.topk(cand.view(B, K * V1), K, dim=-1, largest=True, sorted=True)
        parents, labels = index // V1, index % V1
        best = scores.max(dim=-1, keepdim=True).values
        scores = scores.masked_fill(scores <= best - beam_threshold, float("-inf"))
        # an utterance past its last frame keeps its slots as they are
        parents = torch.where(active, parents, same_slots)
        labels = torch.where(active, labels, no_label)
        scores = torch.where(active, scores, hyps.scores)
        is_new = hyps.add_step(parents, labels, scores, one_frame)
        if fusion is not None:
            fusion.update(flat_slots(parents), labels.reshape(-1), is_new.reshape(-1))
        hyps.recombine_()
    if fusion is not None:
        final = lm.final_scores(fusion.states).to(dtype)
        fusion.totals = fusion.totals + final
        hyps.scores.add_(final.view(B, K) * alpha)
    return hyps, fusion


class CtcBeamDecoder(DecoderBase):
    """Batched CTC beam search (NeMo's ``beam_batch``) over a model's log-probs, with an optional token
    n-gram LM."""

    name: ClassVar[str] = "ctc-beam"
    config_type: ClassVar[type] = CtcBeamConfig
    check_options = staticmethod(_check_options)

    def __init__(self, config: CtcBeamConfig, context: DecoderContext) -> None:
        super().__init__(config, context)
        self.lm = fusion_lm_of(config, context)

    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        if output.log_probs is None:
            raise ConfigError(
                "decoder.type=ctc-beam needs a CTC model's log-probs; this model gives none (a transducer: "
                "transducer-beam; an attention encoder-decoder: aed-beam)"
            )
        lp = output.log_probs
        blank = output.blank_id if output.blank_id >= 0 else self.context.blank_id
        cfg = self.config
        lm = self.lm
        if lm is not None and lm.root_weight.device != lp.device:
            lm.to(lp.device)
        with torch.inference_mode():
            hyps, fusion = ctc_beam_search(
                lp,
                output.lengths,
                blank,
                cfg.beam_size,
                cfg.beam_beta,
                cfg.beam_threshold,
                lm,
                cfg.ngram_lm_alpha,
            )
            return self._results(hyps, fusion, lp, output.lengths, output.frame_shift)

    def _results(
        self,
        hyps: BatchedBeamHyps,
        fusion: LmFusionState | None,
        log_probs: torch.Tensor,
        lengths: torch.Tensor,
        shift: float,
    ) -> list[DecodeResult]:
        """Best path (and n-best) per utterance: one backtrack for the batch, its tokens, frames and run
        ends in tensor ops, one host copy per field."""
        order = hyps.ranking(score_norm=False)
        if self.config.return_best_hypothesis:
            order = order[:, :1]
        B, R = order.shape
        paths, _, _ = hyps.backtrack(order)  # [B, R, T]: the symbol of every frame
        T = paths.shape[-1]
        flat = paths.reshape(B * R, T)
        emit, run_end = ctc_runs(flat, lengths.to(flat.device).repeat_interleave(R), hyps.blank)
        frame_lp = log_probs.gather(-1, paths[:, 0, :].clamp(min=0).unsqueeze(-1)).squeeze(-1)
        scores = torch.gather(hyps.scores, 1, order).float().cpu().tolist()
        lm_scores = (
            torch.gather(fusion.totals.view(B, -1), 1, order[:, :1]).float().cpu().tolist()
            if fusion is not None
            else None
        )
        paths_h, emit_h, run_end_h = flat.cpu(), emit.view(B, R, T).cpu(), run_end.view(B, R, T).cpu()
        probs_h = frame_lp.float().exp().cpu()
        cfg = self.config
        results = []
        for b in range(B):
            ranked = []
            for r in range(R):
                frames = torch.nonzero(emit_h[b, r], as_tuple=False).flatten()
                ranked.append((paths_h[b * R + r, frames].tolist(), frames.tolist(), scores[b][r]))
            tokens, starts, score = ranked[0]
            ends = run_end_h[b, 0, starts].tolist()
            probs = probs_h[b, starts].tolist()
            words = [
                Word(
                    word,
                    round(starts[first] * shift, 3),
                    round((ends[last] + 1) * shift, 3),
                    min(probs[first : last + 1]),
                )
                for word, first, last in self.context.words_of(tokens)
            ]
            nbest = None
            if not cfg.return_best_hypothesis:
                nbest = nbest_words(((toks, s) for toks, _, s in ranked), self.context.words_of)
            lm_score = lm_scores[b][0] if lm_scores is not None else None
            acoustic = score - cfg.beam_beta * len(tokens)
            if lm_score is not None:
                acoustic -= cfg.ngram_lm_alpha * lm_score
            results.append(
                DecodeResult(
                    words=words,
                    tokens=tokens,
                    token_frames=starts,
                    score=score,
                    acoustic_score=acoustic,
                    lm_score=lm_score,
                    nbest=nbest,
                )
            )
        return results
