"""Transducer training losses in plain PyTorch: TDT (Token-and-Duration Transducer) and, on the same
lattice code, the conventional RNN-T loss.

TDT (Xu et al. 2023, "Efficient Sequence Transduction by Jointly Predicting Tokens and Durations",
eq. 7, as NeMo defines it): the joint network emits token logits over V tokens + blank and separate
duration logits over ``durations``; P(token, d | t, u) = P_tok(token | t, u) * P_dur(d | t, u). From
lattice node (t, u) (t < T frames, u <= U labels) an arc emits label y_{u+1} with any duration d and
goes to (t + d, u + 1), or emits blank with a duration d >= 1 and goes to (t + d, u). Nodes exist for
t < T only; the sequence ends with a blank from (T - d, U) that lands exactly on T.

Forward algorithm, batched over B and vectorised over u, looping over t: alpha(t, .) collects every
arc with d >= 1 from the earlier rows alpha(t - d, .); the d = 0 label arcs inside row t form the
linear recurrence alpha(t, u) = logaddexp(x(t, u), alpha(t, u - 1) + w(t, u - 1)), solved in closed
form with a log-cumulative-sum-exp: alpha(t, u) = C(u) + logcumsumexp_k(x(t, k) - C(k)), where
C(u) = sum_{j<u} w(t, j). Gradients come from autograd.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["tdt_loss", "rnnt_loss", "transducer_lattice_logprob"]

# "impossible" as a large finite number: keeps logsumexp/logcumsumexp gradients free of NaNs
_NEG = -1.0e30


def transducer_lattice_logprob(
    blank_arcs: torch.Tensor,
    label_arcs: torch.Tensor,
    durations: Sequence[int],
    frame_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
) -> torch.Tensor:
    """log P(y | x) summed over all alignments of a transducer lattice with duration-labelled arcs.

    blank_arcs [B, T, U+1, K]: log-weight of a blank of duration ``durations[k]`` from node (t, u);
    label_arcs [B, T, U, K]: log-weight of emitting target u (0-based) with duration ``durations[k]``
    from node (t, u). Arcs may be ``-inf``/very negative to forbid them; a blank of duration 0 is never
    used. frame_lengths [B] (1 <= T_b <= T), target_lengths [B] (0 <= U_b <= U). Returns [B].
    """
    if blank_arcs.dim() != 4 or label_arcs.dim() != 4:
        raise ValueError("blank_arcs must be [B, T, U+1, K] and label_arcs [B, T, U, K]")
    B, T, U1, K = blank_arcs.shape
    if label_arcs.shape != (B, T, U1 - 1, K) or len(durations) != K:
        raise ValueError(
            f"arc shapes {tuple(blank_arcs.shape)} / {tuple(label_arcs.shape)} do not match "
            f"{K} durations {list(durations)}"
        )
    if any(int(d) < 0 for d in durations):
        raise ValueError(f"durations must be non-negative, got {list(durations)}")
    device, dtype = blank_arcs.device, blank_arcs.dtype
    neg = torch.tensor(_NEG, device=device, dtype=dtype)
    blank_arcs = torch.maximum(blank_arcs, neg)
    label_arcs = torch.maximum(label_arcs, neg)
    zero_k = [k for k, d in enumerate(durations) if int(d) == 0]
    moves = [(k, int(d)) for k, d in enumerate(durations) if int(d) > 0]
    if not moves:
        raise ValueError(f"durations {list(durations)} have no positive value: no alignment can end")

    # w(t, u) = weight of the d = 0 label arc (t, u) -> (t, u + 1); several 0 entries are summed
    if zero_k:
        w = torch.logsumexp(label_arcs[..., zero_k], dim=-1)  # [B, T, U]
        cum = torch.cat([torch.zeros(B, T, 1, device=device, dtype=dtype), torch.cumsum(w, dim=-1)], -1)
    start = torch.full((B, U1), _NEG, device=device, dtype=dtype)
    start[:, 0] = 0.0
    rows: list[torch.Tensor] = []
    for t in range(T):
        parts = [start] if t == 0 else []
        for k, d in moves:
            if t - d < 0:
                continue
            prev = rows[t - d]
            parts.append(prev + blank_arcs[:, t - d, :, k])
            if U1 > 1:
                lab = prev[:, :-1] + label_arcs[:, t - d, :, k]
                parts.append(torch.cat([torch.full_like(prev[:, :1], _NEG), lab], dim=1))
        if not parts:  # no duration reaches row t (e.g. durations {0, 2} at t = 1)
            parts = [torch.full_like(start, _NEG)]
        x = torch.logsumexp(torch.stack(parts), dim=0) if len(parts) > 1 else parts[0]
        if zero_k and U1 > 1:
            c = cum[:, t]
            x = c + torch.logcumsumexp(x - c, dim=1)
        rows.append(torch.maximum(x, neg))
    alpha = torch.stack(rows, dim=1)  # [B, T, U+1]

    frame_lengths = frame_lengths.to(device=device, dtype=torch.long)
    target_lengths = target_lengths.to(device=device, dtype=torch.long)
    b_idx = torch.arange(B, device=device)
    finals = []
    for k, d in moves:  # the last blank lands exactly on T_b
        t_idx = frame_lengths - d
        ok = t_idx >= 0
        t_safe = t_idx.clamp(min=0)
        term = alpha[b_idx, t_safe, target_lengths] + blank_arcs[b_idx, t_safe, target_lengths, k]
        finals.append(torch.where(ok, term, neg))
    return torch.logsumexp(torch.stack(finals), dim=0)


def _reduce(nll: torch.Tensor, target_lengths: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return nll
    if reduction == "sum":
        return nll.sum()
    if reduction == "mean":  # per-utterance loss / its target length, averaged (NeMo's "mean")
        return (nll / target_lengths.to(nll.dtype).clamp(min=1)).mean()
    if reduction == "mean_volume":  # total loss / total target length
        return nll.sum() / target_lengths.to(nll.dtype).sum().clamp(min=1)
    raise ValueError(f"unknown reduction {reduction!r} (none, sum, mean, mean_volume)")


def _gather_labels(token_lp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, T, U+1, V+1] log-probs, [B, U] targets -> [B, T, U] log P(target u | t, u)."""
    B, T, U1, _ = token_lp.shape
    idx = targets[:, None, :, None].expand(B, T, U1 - 1, 1).to(torch.long)
    return token_lp[:, :, : U1 - 1].gather(3, idx).squeeze(3)


def tdt_loss(
    token_logits: torch.Tensor,
    duration_logits: torch.Tensor,
    targets: torch.Tensor,
    frame_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    durations: Sequence[int],
    blank: int,
    sigma: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """TDT negative log-likelihood (TDT paper eq. 7).

    token_logits [B, T, U+1, V+1] (tokens + blank, unnormalised), duration_logits [B, T, U+1, K],
    targets [B, U] (padding anywhere past ``target_lengths``), frame_lengths/target_lengths [B].
    ``sigma``: logit under-normalisation (TDT paper: subtracted from every token log-prob).
    ``reduction``: none | sum | mean (NeMo: each utterance's loss over its length, averaged) |
    mean_volume (total loss / total target tokens).
    """
    if duration_logits.shape[-1] != len(durations):
        raise ValueError(f"{duration_logits.shape[-1]} duration logits for durations {list(durations)}")
    token_lp = torch.log_softmax(token_logits, dim=-1) - sigma
    dur_lp = torch.log_softmax(duration_logits, dim=-1)
    blank_arcs = token_lp[..., blank, None] + dur_lp
    zero = torch.tensor([int(d) == 0 for d in durations], device=dur_lp.device)
    blank_arcs = blank_arcs.masked_fill(zero, _NEG)  # a blank must advance at least one frame
    label_arcs = _gather_labels(token_lp, targets)[..., None] + dur_lp[:, :, :-1]
    nll = -transducer_lattice_logprob(blank_arcs, label_arcs, durations, frame_lengths, target_lengths)
    return _reduce(nll, target_lengths, reduction)


def rnnt_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    frame_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    blank: int,
    reduction: str = "mean",
) -> torch.Tensor:
    """Conventional RNN-T negative log-likelihood (Graves 2012) on the same lattice code: labels have
    duration 0, blanks duration 1. logits [B, T, U+1, V+1]; other arguments as :func:`tdt_loss`."""
    lp = torch.log_softmax(logits, dim=-1)
    neg = torch.full_like(lp[..., 0], _NEG)
    label = _gather_labels(lp, targets)
    blank_arcs = torch.stack([neg, lp[..., blank]], dim=-1)  # durations (0, 1)
    label_arcs = torch.stack([label, neg[:, :, :-1]], dim=-1)
    nll = -transducer_lattice_logprob(blank_arcs, label_arcs, (0, 1), frame_lengths, target_lengths)
    return _reduce(nll, target_lengths, reduction)
