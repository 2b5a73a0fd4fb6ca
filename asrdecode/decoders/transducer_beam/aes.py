"""AES++: batched modified adaptive expansion search for RNN-T (paper 004 section 2.2; NeMo's
``maes_batch``; AES: Kim et al. 2020).

Frame synchronous: all hypotheses of an utterance read the same frame t. Per frame, for the B x K
slots at once:

1. prefix search with the longest prefix only (paper 004: "maximum-length prefix search"): a
   hypothesis y = y' + [a] whose prefix y' is also in the beam gains P(y') p(a | y', t) (log-add);
2. up to ``maes_num_steps`` expansion steps: every slot still expanding offers its
   ``beam + maes_expansion_beta`` best symbols, minus those more than ``maes_expansion_gamma`` below its
   best one (prune by value); a token expansion that recreates a hypothesis already in the beam is
   dropped (prefix search counted it), duplicates among the expansions keep the best; slots that
   stopped expanding (they took a blank) compete with their current score; the K best become the new
   slots. A slot that took a blank is done with the frame, one that took a token expands again;
3. slots that still end with a token after the last step take a blank (forced);
4. t += 1.

The prediction network (and the LM) run once per expansion step for every slot (AES updates the
prediction network more often than ALSD++, which is why ALSD++ is faster; paper 004 section 4).
RNN-T only, as in NeMo (TDT hypotheses would not share a frame).
"""

from __future__ import annotations

import torch

from asrdecode.decoders.beam_hyps import NO_LABEL, BatchedBeamHyps, LmFusionState, flat_slots, rolling_hash
from asrdecode.decoders.transducer_beam.alsd import FusionConfig
from asrdecode.decoders.transducer_beam.common import SlotPrediction, joint_log_probs, slot_frames
from asrdecode.decoders.transducer_beam.fusion import (
    forced_blank_score,
    fuse_all,
    fuse_selected,
)

__all__ = ["aes_search"]

LM_CLAMP_EPS = 1e-6  # p(blank) <= 1 - 1e-6 in eq. 3 (NeMo's mAES value)
NEG_INF = float("-inf")


def _prefix_search(hyps: BatchedBeamHyps, scores_v: torch.Tensor, searching: torch.Tensor) -> None:
    """Longest-prefix search: slot i (tokens y_i = y_j + [a]) gains, for every slot j holding its prefix,
    score_j + scores_v[j, a] (log-added); ``scores_v`` [B, K, V+1] are the frame's (fused) log-probs."""
    has_prefix = hyps.num_tokens > 0
    is_prefix = (hyps.hash.unsqueeze(1) == hyps.prefix_hash.unsqueeze(2)) & (
        hyps.num_tokens.unsqueeze(1) == hyps.num_tokens.unsqueeze(2) - 1
    )  # [B, i, j]
    is_prefix &= has_prefix.unsqueeze(2)
    last = torch.where(has_prefix, hyps.last_label, 0)  # [B, i]
    # [B, i, j] = score_j + logp_j(last token of i)
    step = torch.gather(scores_v, 2, last.unsqueeze(1).expand(-1, scores_v.shape[1], -1)).transpose(1, 2)
    gain = torch.logsumexp(torch.where(is_prefix, hyps.scores.unsqueeze(1) + step, NEG_INF), dim=-1)
    update = searching & (hyps.scores > NEG_INF)
    hyps.scores.copy_(torch.where(update, torch.logaddexp(hyps.scores, gain), hyps.scores))


def _drop_duplicates(
    hyps: BatchedBeamHyps, labels: torch.Tensor, scores: torch.Tensor, blank: int
) -> torch.Tensor:
    """Expansions [B, K, E] that recreate a hypothesis in use in the beam get -inf; among identical
    expansions only the best keeps its score. Identity = rolling hash + token count + last token."""
    B, K, E = labels.shape
    is_token = (labels >= 0) & (labels != blank)
    key_hash = torch.where(is_token, rolling_hash(hyps.hash.unsqueeze(-1), labels), hyps.hash.unsqueeze(-1))
    key_len = hyps.num_tokens.unsqueeze(-1) + is_token.long()
    key_last = torch.where(is_token, labels, hyps.last_label.unsqueeze(-1))
    key_hash, key_len, key_last = (x.reshape(B, K * E) for x in (key_hash, key_len, key_last))
    in_use = hyps.scores > NEG_INF
    in_beam = (
        (key_hash.unsqueeze(2) == hyps.hash.unsqueeze(1))
        & (key_len.unsqueeze(2) == hyps.num_tokens.unsqueeze(1))
        & (key_last.unsqueeze(2) == hyps.last_label.unsqueeze(1))
        & in_use.unsqueeze(1)
    ).any(dim=-1)
    flat = torch.where(in_beam & is_token.reshape(B, K * E), NEG_INF, scores.reshape(B, K * E))
    same = (
        (key_hash.unsqueeze(2) == key_hash.unsqueeze(1))
        & (key_len.unsqueeze(2) == key_len.unsqueeze(1))
        & (key_last.unsqueeze(2) == key_last.unsqueeze(1))
    )
    group = torch.where(same, flat.unsqueeze(1), NEG_INF)
    best, arg = group.max(dim=-1)
    keep = arg == torch.arange(K * E, device=labels.device)
    return torch.where(keep, best, NEG_INF).view(B, K, E)


def _expansions(
    hyps: BatchedBeamHyps,
    logp: torch.Tensor,
    width: int,
    gamma: float,
    fusion: FusionConfig | None,
    lm: LmFusionState | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(labels, candidate scores) [B, K, width]: each slot's best symbols, pruned by value (gamma below
    the slot's best candidate -> -inf), with LM fusion when configured."""
    B, K = hyps.scores.shape
    base = hyps.scores.unsqueeze(-1)
    if fusion is not None and fusion.pruning == "late":
        fused = fuse_all(logp, lm.scores, fusion.alpha, fusion.blank_mode, LM_CLAMP_EPS)
        values, labels = torch.topk(fused, width, dim=-1)
    else:
        values, labels = torch.topk(logp, width, dim=-1)
    values, labels = values.view(B, K, width), labels.view(B, K, width)
    total = base + values
    pruned = total <= total.max(dim=-1, keepdim=True).values - gamma
    total = total.masked_fill(pruned, NEG_INF)
    if fusion is not None and fusion.pruning == "early":  # the LM comes after the choice
        fused = fuse_selected(
            values.view(B * K, width).masked_fill(pruned.view(B * K, width), NEG_INF),
            labels.view(B * K, width),
            logp[:, -1],
            lm.scores,
            fusion.alpha,
            fusion.blank_mode,
            LM_CLAMP_EPS,
        )
        total = base + fused.view(B, K, width)
    return labels, total


@torch.inference_mode()
def aes_search(
    net,
    enc_proj: torch.Tensor,
    lengths: torch.Tensor,
    beam: int,
    num_steps: int = 2,
    expansion_beta: int = 2,
    expansion_gamma: float = 2.3,
    fusion: FusionConfig | None = None,
    nemo_expanding_rule: bool = False,
) -> BatchedBeamHyps:
    """AES++ over projected encoder frames ``enc_proj`` [B, T, J] with ``lengths`` [B] (RNN-T).
    Returns the final :class:`BatchedBeamHyps`.

    ``nemo_expanding_rule`` (tests only): reproduce NeMo 3.0.0's ``maes_batch``, which decides whether
    new slot k expands again from the *previous* occupant of slot k as well (``to_update[k] and label[k]
    != blank``), so a hypothesis that moved into a slot whose previous occupant had taken a blank skips
    its blank: its score lacks log p(blank) and its frame count lags. Off: a slot expands again iff it
    just took a token."""
    if net.durations:
        raise ValueError("AES++ (maes) supports RNN-T models only; use ALSD++ (malsd) for TDT")
    device, dtype = enc_proj.device, enc_proj.dtype
    B, T = enc_proj.shape[0], enc_proj.shape[1]
    K = beam
    blank = int(net.blank_id)
    lengths = lengths.to(device=device, dtype=torch.long)
    last_frame = (lengths - 1).clamp(min=0)
    hyps = BatchedBeamHyps(B, K, blank, device, dtype, capacity=max(T, 1) * (num_steps + 1))
    pred = SlotPrediction(net, B * K, device)
    lm = LmFusionState(fusion.lm, fusion.alpha, B * K, device, dtype) if fusion is not None else None
    width = min(K + expansion_beta, blank + 1)
    slot_of_candidate = torch.arange(K, device=device).repeat_interleave(width).expand(B, -1)
    identity = torch.arange(K, device=device).expand(B, -1)
    last_col = torch.zeros(1, 1, width, dtype=torch.bool, device=device)
    last_col[..., -1] = True
    t_max = int(lengths.max()) if B else 0
    for t in range(t_max):
        frame = torch.full((B, K), t, dtype=torch.long, device=device)
        enc_rows = slot_frames(enc_proj, frame, last_frame)
        logp = joint_log_probs(net, enc_rows, pred.proj, blank + 1)[0]
        searching = (t < lengths).unsqueeze(1).expand(B, K)
        if hyps.steps > 0:
            prefix_v = (
                logp
                if lm is None
                else fuse_all(logp, lm.scores, fusion.alpha, fusion.blank_mode, LM_CLAMP_EPS)
            )
            _prefix_search(hyps, prefix_v.view(B, K, -1), searching)
        expanding = searching.clone()
        for _ in range(num_steps):
            if not bool(expanding.any()):
                break
            labels, cand = _expansions(hyps, logp, width, expansion_gamma, fusion, lm)
            labels = torch.where(expanding.unsqueeze(-1), labels, NO_LABEL)
            cand = torch.where(expanding.unsqueeze(-1), cand, NEG_INF)
            cand = _drop_duplicates(hyps, labels, cand, blank)
            # slots done with this frame compete with their current score (label -1: unchanged)
            cand = torch.where(~expanding.unsqueeze(-1) & last_col, hyps.scores.unsqueeze(-1), cand)
            best, idx = torch.topk(cand.view(B, K * width), K, dim=-1)
            parents = torch.gather(slot_of_candidate, 1, idx)
            new_labels = torch.gather(labels.view(B, K * width), 1, idx)
            hyps.add_step(parents, new_labels, best, (new_labels == blank).long())
            flat = flat_slots(parents)
            is_token = (new_labels >= 0) & (new_labels != blank)
            pred.update(flat, new_labels.view(-1), is_token.view(-1))
            if lm is not None:
                lm.update(flat, new_labels.view(-1), is_token.view(-1))
            logp = joint_log_probs(net, enc_rows, pred.proj, blank + 1)[0]
            expanding = is_token & expanding if nemo_expanding_rule else is_token
        if bool(expanding.any()):  # still on a token after the last step: a blank ends the frame
            blank_logp = forced_blank_score(logp[:, blank].view(B, K), fusion)
            scores = torch.where(expanding, hyps.scores + blank_logp, hyps.scores)
            labels = torch.where(expanding, blank, NO_LABEL)
            hyps.add_step(identity, labels, scores, torch.ones_like(labels))
    if lm is not None:
        hyps.lm_scores = lm.totals.view(B, K)
    return hyps
