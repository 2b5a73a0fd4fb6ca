"""Pieces shared by ALSD++ and AES++: the prediction network of every beam slot and the joint at each
slot's frame."""

from __future__ import annotations

import torch

__all__ = ["SlotPrediction", "joint_log_probs", "slot_frames"]


def slot_frames(enc_proj: torch.Tensor, time: torch.Tensor, last_frame: torch.Tensor) -> torch.Tensor:
    """Encoder projections [B*K, J] at each slot's frame ``time`` [B, K] (clamped to the utterance's
    ``last_frame`` [B]; finished slots read their last frame and are ignored)."""
    B, T, J = enc_proj.shape
    t = torch.minimum(time, last_frame.unsqueeze(1)).clamp(min=0)
    rows = t + torch.arange(B, device=time.device).unsqueeze(1) * T
    return enc_proj.reshape(B * T, J).index_select(0, rows.reshape(-1))


def joint_log_probs(
    net, enc_rows: torch.Tensor, pred_proj: torch.Tensor, num_outputs: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Joint of [N, J] rows -> (log_softmax over the V+1 token+blank outputs [N, V+1], TDT:
    log_softmax over the duration outputs [N, D], normalised separately, else None)."""
    logits = net.joint_after_projection(enc_rows, pred_proj)
    logp = torch.log_softmax(logits[:, :num_outputs], dim=-1)
    dur_logp = torch.log_softmax(logits[:, num_outputs:], dim=-1) if logits.shape[1] > num_outputs else None
    return logp, dur_logp


class SlotPrediction:
    """Prediction-network state and joint projection of every beam slot ([B*K] rows), all starting
    from <SOS> (blank: zero embedding, zero state)."""

    def __init__(self, net, rows: int, device: torch.device) -> None:
        self.net = net
        sos = torch.full((rows,), net.blank_id, dtype=torch.long, device=device)
        out, state = net.predict(sos, net.initial_prediction_state(rows, device))
        self.state = tuple(state)
        self.proj = net.project_prediction(out)

    def update(self, flat_parents: torch.Tensor, labels: torch.Tensor, is_token: torch.Tensor) -> None:
        """New slots = parents ``flat_parents`` [N]; one batched step for every slot, kept only where
        the slot was extended by a token (``labels`` [N]; others keep the parent's state)."""
        state = tuple(x.index_select(1, flat_parents) for x in self.state)
        proj = self.proj.index_select(0, flat_parents)
        out, new_state = self.net.predict(torch.where(is_token, labels, self.net.blank_id), state)
        keep = is_token.unsqueeze(-1)
        self.proj = torch.where(keep, self.net.project_prediction(out), proj)
        self.state = tuple(
            torch.where(keep.unsqueeze(0), n, o) for n, o in zip(new_state, state, strict=True)
        )
