"""ALSD++: batched alignment-length synchronous beam search for RNN-T and TDT (paper 004 section 2.2;
NeMo's ``malsd_batch``).

Every step extends every hypothesis of every utterance by one symbol, so after step s all live
hypotheses have the same alignment length (ALSD, Saon et al. 2020); unlike the original, hypotheses
move through the frames at their own pace and the search ends when every hypothesis has passed its
utterance's last frame (at most ``max_symbols`` tokens per frame, then a blank is forced).

One step for the B x K slots at once (no loop over utterances or slots):

1. joint at each slot's own frame -> log-probs over V+1 tokens+blank (TDT: and over the durations,
   normalised separately; a candidate is a (token, duration) pair scored ``logp_token + logp_duration``);
   optional LM fusion (:mod:`.fusion`);
2. each slot's top-k candidates (k = min(K, candidates)), added to its score -> K x k per utterance;
   a finished slot offers only itself unchanged (label -1), a slot at ``max_symbols`` only a blank
   (score ``logp_blank`` + the best duration's log-prob, TDT jump = the best duration, 0 -> 1);
3. the K best of the K x k candidates become the new slots (:meth:`BatchedBeamHyps.add_step`);
4. identical hypotheses are merged (log-sum-exp, :meth:`BatchedBeamHyps.recombine_`);
5. one prediction-network step (and LM step) for all slots, kept where a token was added;
6. time = parent's frame + duration (RNN-T: blank 1, token 0; TDT: the duration value, blank 0 -> 1).

Objective: with max-merging replaced by log-sum-exp, RNN-T alignments of a token sequence y reach
(frame, y) after the same number of steps, so a beam wide enough to keep every live state gives each
finished hypothesis log P(y | x), the sum over all its alignments, and the best one is argmax_y P(y | x)
(without ``max_symbols``, which caps tokens per frame and makes merges of states with different counts
approximate). TDT alignments of y reach (frame, y) after different numbers of steps, so only some of them
merge: the score lies between the best alignment's and log P(y | x).
tests/decoders/test_transducer_beam.py checks both by enumerating every alignment of tiny transducers.
"""

from __future__ import annotations

import torch

from asrdecode.decoders.beam_hyps import NO_LABEL, BatchedBeamHyps, LmFusionState, flat_slots
from asrdecode.decoders.transducer_beam.common import SlotPrediction, joint_log_probs, slot_frames
from asrdecode.decoders.transducer_beam.fusion import (
    forced_blank_score,
    fuse_all,
    fuse_selected,
)

__all__ = ["FusionConfig", "alsd_search"]

LM_CLAMP_EPS = 1e-2  # p(blank) <= 0.99 in eq. 3 (NeMo's ALSD value, robust in bf16)


class FusionConfig:
    """LM fusion settings for a search: ``lm`` (BatchedNgramLM), ``alpha``, ``blank_mode``,
    ``pruning`` (see :mod:`.fusion`)."""

    def __init__(self, lm, alpha: float, blank_mode: str, pruning: str) -> None:
        self.lm, self.alpha, self.blank_mode, self.pruning = lm, float(alpha), blank_mode, pruning


def _candidates(
    logp: torch.Tensor,
    dur_logp: torch.Tensor | None,
    k: int,
    fusion: FusionConfig | None,
    lm: LmFusionState | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's k best (score increment, label, duration index) [N, k] (RNN-T: duration index 0)."""
    late = fusion is not None and fusion.pruning == "late"
    scores = fuse_all(logp, lm.scores, fusion.alpha, fusion.blank_mode, LM_CLAMP_EPS) if late else logp
    if dur_logp is None:
        values, labels = torch.topk(scores, k, dim=-1)
        if fusion is not None and not late:
            values = fuse_selected(
                values, labels, logp[:, -1], lm.scores, fusion.alpha, fusion.blank_mode, LM_CLAMP_EPS
            )
        return values, labels, torch.zeros_like(labels)
    D = dur_logp.shape[-1]
    if fusion is not None and not late:  # early: the k best labels by the transducer, LM, then durations
        k_labels = min(k, scores.shape[-1])
        values, labels = torch.topk(scores, k_labels, dim=-1)
        values = fuse_selected(
            values, labels, logp[:, -1], lm.scores, fusion.alpha, fusion.blank_mode, LM_CLAMP_EPS
        )
        total = (values.unsqueeze(-1) + dur_logp.unsqueeze(1)).flatten(1)
        values, idx = torch.topk(total, min(k, total.shape[-1]), dim=-1)
        return values, torch.gather(labels, 1, idx // D), idx % D
    total = (scores.unsqueeze(-1) + dur_logp.unsqueeze(1)).flatten(1)
    values, idx = torch.topk(total, k, dim=-1)
    return values, idx // D, idx % D


def live(hyps: BatchedBeamHyps, lengths: torch.Tensor) -> torch.Tensor:
    """[B, K] slots still searching: inside their utterance and in use (unused -inf slots count as
    finished, so they never keep the loop running)."""
    return (hyps.time < lengths.unsqueeze(1)) & (hyps.scores > float("-inf"))


@torch.inference_mode()
def alsd_search(
    net,
    enc_proj: torch.Tensor,
    lengths: torch.Tensor,
    beam: int,
    max_symbols: int | None = 10,
    fusion: FusionConfig | None = None,
) -> BatchedBeamHyps:
    """ALSD++ over projected encoder frames ``enc_proj`` [B, T, J] with ``lengths`` [B]; RNN-T or TDT
    (``net.durations``). Returns the final :class:`BatchedBeamHyps` (every slot finished)."""
    device, dtype = enc_proj.device, enc_proj.dtype
    B, T = enc_proj.shape[0], enc_proj.shape[1]
    K = beam
    blank = int(net.blank_id)
    num_outputs = blank + 1
    durations = torch.tensor(net.durations, dtype=torch.long, device=device) if net.durations else None
    lengths = lengths.to(device=device, dtype=torch.long)
    last_frame = (lengths - 1).clamp(min=0)
    per_frame = (max_symbols if max_symbols else 1) + 1
    hyps = BatchedBeamHyps(B, K, blank, device, dtype, capacity=max(T, 1) * per_frame)
    pred = SlotPrediction(net, B * K, device)
    lm = LmFusionState(fusion.lm, fusion.alpha, B * K, device, dtype) if fusion is not None else None
    n_cand = num_outputs * (len(durations) if durations is not None else 1)
    k = min(K, n_cand)
    slot_of_candidate = torch.arange(K, device=device).repeat_interleave(k).expand(B, -1)
    active = live(hyps, lengths)
    while bool(active.any()):
        logp, dur_logp = joint_log_probs(
            net, slot_frames(enc_proj, hyps.time, last_frame), pred.proj, num_outputs
        )
        values, labels, dur_index = _candidates(logp, dur_logp, k, fusion, lm)
        # a forced blank is scored like any blank of this mode (TDT: with its best duration)
        blank_logp = forced_blank_score(logp[:, blank], fusion)
        if durations is None:
            moves = (labels == blank).long()  # RNN-T: blank -> next frame, token stays
            forced_move = torch.ones(B * K, dtype=torch.long, device=device)
        else:
            moves = durations[dur_index]
            moves = torch.where((labels == blank) & (moves == 0), 1, moves)  # blank never stays
            best_dur, best_dur_index = dur_logp.max(dim=-1)
            forced_move = durations[best_dur_index].clamp(min=1)
            blank_logp = blank_logp + best_dur
        scores = hyps.scores.unsqueeze(-1) + values.view(B, K, k)
        labels, moves = labels.view(B, K, k), moves.view(B, K, k)
        # finished slots: only themselves, unchanged (slot 0 of their candidates, label -1)
        first = torch.zeros_like(labels, dtype=torch.bool)
        first[..., 0] = True
        scores = torch.where(
            active.unsqueeze(-1), scores, torch.where(first, hyps.scores.unsqueeze(-1), float("-inf"))
        )
        labels = torch.where(active.unsqueeze(-1), labels, NO_LABEL)
        if max_symbols:  # max_symbols tokens on this frame: only a blank
            forced = active & (hyps.frame_tokens >= max_symbols)
            forced_score = (hyps.scores + blank_logp.view(B, K)).unsqueeze(-1)
            forced3 = forced.unsqueeze(-1)
            scores = torch.where(forced3, torch.where(first, forced_score, float("-inf")), scores)
            labels = torch.where(forced3, blank, labels)
            moves = torch.where(forced3, forced_move.view(B, K, 1), moves)
        best, idx = torch.topk(scores.view(B, K * k), K, dim=-1)
        parents = torch.gather(slot_of_candidate, 1, idx)
        new_labels = torch.gather(labels.view(B, K * k), 1, idx)
        hyps.add_step(parents, new_labels, best, torch.gather(moves.view(B, K * k), 1, idx))
        hyps.recombine_()
        flat = flat_slots(parents)
        is_token = ((new_labels >= 0) & (new_labels != blank)).view(-1)
        pred.update(flat, new_labels.view(-1), is_token)
        if lm is not None:
            lm.update(flat, new_labels.view(-1), is_token)
        active = live(hyps, lengths)
    if lm is not None:
        hyps.lm_scores = lm.totals.view(B, K)
    return hyps
