"""Shallow fusion of a token-level n-gram LM into transducer beam search (paper 004 section 2.3).

Blank scoring (``blank_lm_score_mode``, NeMo's names):

* ``no_score`` — paper 004 eq. 2: tokens get ``log p(k) + alpha log p_LM(k)``, blank keeps ``log p(blank)``;
* ``lm_weighted_full`` — paper 004 eq. 3: tokens get ``log p(k) + alpha log((1 - p(blank)) p_LM(k))``, blank
  gets ``(1 + alpha) log p(blank)`` (``p(blank)`` clamped to ``1 - eps`` so the log stays finite).

Pruning (``pruning_mode``, paper 004 "Early/late pruning"): ``early`` picks each hypothesis' top
candidates by the transducer's scores and then adds the LM; ``late`` adds the LM to the whole
vocabulary first and then picks (needs LM scores for every token: the batched LM gives them in one call).

:class:`asrdecode.decoders.beam_hyps.LmFusionState` carries one LM state per beam slot: the LM reads the
slot's tokens only (blanks do not advance it), starting from ``<s>``; no ``</s>`` score is added at the
end (as NeMo).
"""

from __future__ import annotations

import torch

__all__ = [
    "BLANK_LM_SCORE_MODES",
    "PRUNING_MODES",
    "forced_blank_score",
    "fuse_all",
    "fuse_selected",
]

BLANK_LM_SCORE_MODES = ("no_score", "lm_weighted_full")
PRUNING_MODES = ("early", "late")


def _non_blank_logp(blank_logp: torch.Tensor, eps: float) -> torch.Tensor:
    """log(1 - p(blank)) with p(blank) clamped to 1 - eps."""
    return torch.log1p(-torch.clamp(blank_logp.exp(), max=1.0 - eps))


def fuse_all(
    logp: torch.Tensor, lm_scores: torch.Tensor, alpha: float, mode: str, eps: float
) -> torch.Tensor:
    """Late pruning: fused scores [..., V+1] for every token (last column = blank).
    ``lm_scores`` [..., V] are already multiplied by alpha."""
    out = logp.clone()
    if mode == "no_score":
        out[..., :-1] += lm_scores
    else:
        out[..., :-1] += alpha * _non_blank_logp(logp[..., -1], eps).unsqueeze(-1) + lm_scores
        out[..., -1] *= 1.0 + alpha
    return out


def fuse_selected(
    values: torch.Tensor,
    labels: torch.Tensor,
    blank_logp: torch.Tensor,
    lm_scores: torch.Tensor,
    alpha: float,
    mode: str,
    eps: float,
) -> torch.Tensor:
    """Early pruning: add the LM to candidates already selected by the transducer. ``values`` /
    ``labels`` [N, k] (transducer log-probs of the chosen labels), ``blank_logp`` [N], ``lm_scores``
    [N, V] (times alpha)."""
    blank = lm_scores.shape[-1]
    is_blank = labels == blank
    lm = torch.gather(lm_scores, -1, torch.where(is_blank, 0, labels))
    if mode == "no_score":
        return torch.where(is_blank, values, values + lm)
    non_blank = alpha * _non_blank_logp(blank_logp, eps).unsqueeze(-1)
    return torch.where(is_blank, values * (1.0 + alpha), values + non_blank + lm)


def forced_blank_score(blank_logp: torch.Tensor, fusion) -> torch.Tensor:
    """Score of a blank the search forces (``max_symbols`` reached; AES's end-of-frame blank): scored like
    any blank of the mode, eq. 3 ``(1 + alpha) log p(blank)`` or eq. 2 / no LM ``log p(blank)``.
    ``fusion``: an :class:`~.alsd.FusionConfig` or None."""
    if fusion is not None and fusion.blank_mode == "lm_weighted_full":
        return blank_logp * (1.0 + fusion.alpha)
    return blank_logp
