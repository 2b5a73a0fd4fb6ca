"""`ctc-greedy`: batched best-path CTC decoding (argmax per frame, merge repeats, drop blanks).

All frame work is tensor code on the model's device; one host copy per batch. Word times come
from the frames where each word's first and last tokens are emitted (end = last frame of the
last token's run + 1, times the frame shift), as NeMo's CTC timestamps do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from asrdecode.decoders.base import DecoderBase, DecodeResult, Word
from asrdecode.models.base import ModelOutput


@dataclass
class CtcGreedyConfig:
    """Options of the greedy CTC decoder."""

    blank_penalty: float = 0.0  # subtracted from the blank log-prob before the argmax (NeMo/riva name)


def ctc_best_path(
    log_probs: torch.Tensor, lengths: torch.Tensor, blank_id: int, blank_penalty: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batched CTC best path.

    Returns (frame_labels [B,T], emit_mask [B,T] (first frame of each non-blank run),
    run_end [B,T] (for emitting frames: index of the last frame of that run), frame_max [B,T]).
    """
    if blank_penalty:
        log_probs = log_probs.clone()
        log_probs[..., blank_id] -= blank_penalty
    frame_max, labels = log_probs.max(dim=-1)
    emit, run_end = ctc_runs(labels, lengths, blank_id)
    return labels, emit, run_end, frame_max


def ctc_runs(labels: torch.Tensor, lengths: torch.Tensor, blank_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens of CTC paths ``labels`` [B, T] (one symbol per frame; frames >= ``lengths`` ignored):
    (emit_mask [B, T]: the first frame of each non-blank run, run_end [B, T]: for emitting frames, the
    last frame of that run)."""
    B, T = labels.shape
    valid = torch.arange(T, device=labels.device)[None, :] < lengths.to(labels.device)[:, None]
    prev = torch.nn.functional.pad(labels, (1, 0), value=-1)[:, :-1]
    emit = valid & (labels != blank_id) & (labels != prev)
    # a run ends where the next frame's label differs (or the utterance ends)
    nxt = torch.nn.functional.pad(labels, (0, 1), value=-1)[:, 1:]
    last_valid = torch.arange(T, device=labels.device)[None, :] == (lengths.to(labels.device)[:, None] - 1)
    run_last = valid & ((labels != nxt) | last_valid)
    # index of the next run end at or after each frame: reverse cumulative min over end positions
    pos = torch.arange(T, device=labels.device).expand(B, T)
    big = torch.full_like(pos, T)
    ends = torch.where(run_last, pos, big)
    run_end = ends.flip(-1).cummin(-1).values.flip(-1)
    return emit, run_end


class CtcGreedyDecoder(DecoderBase):
    """Batched greedy CTC; score = sum of the log-probs of the non-blank best-path frames (as NeMo)."""

    name: ClassVar[str] = "ctc-greedy"
    config_type: ClassVar[type] = CtcGreedyConfig

    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        if output.log_probs is None:
            raise ValueError("ctc-greedy needs log-probs; this model produced none")
        lp = output.log_probs
        blank = output.blank_id if output.blank_id >= 0 else self.context.blank_id
        labels, emit, run_end, frame_max = ctc_best_path(lp, output.lengths, blank, self.config.blank_penalty)
        valid = torch.arange(lp.shape[1], device=lp.device)[None, :] < output.lengths.to(lp.device)[:, None]
        # NeMo greedy_batch convention: sum of the frame log-probs of every non-blank frame
        label_lp = lp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        scores = torch.where(valid & (labels != blank), label_lp, torch.zeros_like(label_lp)).sum(-1)
        tok_prob = label_lp.exp()
        # one device→host transfer for the whole batch
        labels_h, emit_h, run_end_h = labels.cpu(), emit.cpu(), run_end.cpu()
        scores_h, tok_prob_h = scores.cpu().tolist(), tok_prob.cpu()
        shift = output.frame_shift
        results = []
        for b in range(lp.shape[0]):
            frames = torch.nonzero(emit_h[b], as_tuple=False).flatten()
            tokens = labels_h[b, frames].tolist()
            starts = frames.tolist()
            ends = run_end_h[b, frames].tolist()
            probs = tok_prob_h[b, frames].tolist()
            words = []
            for word, first, last in self.context.words_of(tokens):
                conf = min(probs[first : last + 1]) if probs else None
                words.append(
                    Word(word, round(starts[first] * shift, 3), round((ends[last] + 1) * shift, 3), conf)
                )
            results.append(DecodeResult(words=words, tokens=tokens, token_frames=starts, score=scores_h[b]))
        return results
