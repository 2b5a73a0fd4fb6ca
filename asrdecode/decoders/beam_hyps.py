"""The beam state of the batched beam searches (`transducer-beam`, `ctc-beam`): BatchedBeamHyps, the
hypotheses of a batch as a tree of tensors (paper 004 section 2.1), and LmFusionState, each slot's
token-LM state.

Every utterance b keeps exactly K hypotheses (slots); a slot that is not in use has score -inf. One
search step extends every slot by exactly one symbol: a token, a blank, or "nothing" (label -1: a
finished hypothesis carried unchanged). The step stores, per new slot, the symbol and a back-pointer
to the parent slot of the previous step, so the transcripts form a tree (paper 004 Fig. 1) and a step
costs O(B K) whatever the hypothesis lengths; :meth:`BatchedBeamHyps.backtrack` walks the pointers
from the last step to the first (the paper's "full transcript retrieval in reverse order").

Hypotheses with the same token sequence are found in constant time by a rolling hash of the token
sequence (paper 004 eq. 1, ``H' = (H * P + token + 1) mod M``, M = 2^31 - 1 prime, P = 10^9 + 7 prime),
compared together with the token count, the last token and the next frame, so a hash collision alone
cannot merge two different hypotheses.

CTC paths (``ctc=True``, the ``ctc-beam`` decoder): every step is one frame; a symbol is a new token only
if it is not blank and differs from the path's previous symbol (blank included: ``last_label`` is then
the last symbol, so "a blank a" is two tokens and "a a" one), and identical hypotheses are merged by
taking the best path's score (``max``, NeMo's CTC rule) instead of the sum of their paths. All slots of
an utterance are on the same frame, so the frame bookkeeping (``time``, ``frames``, ``durations``,
``frame_tokens``) and ``prefix_hash`` are not kept.
"""

from __future__ import annotations

import torch

from asrdecode.decoders.workspace import grow_tensors

__all__ = [
    "HASH_BASE",
    "HASH_MODULUS",
    "NO_LABEL",
    "BatchedBeamHyps",
    "LmFusionState",
    "flat_slots",
    "rolling_hash",
]

HASH_MODULUS = 2**31 - 1  # a prime; H * HASH_BASE < 2^62, so int64 arithmetic never overflows
HASH_BASE = 1_000_000_007
NO_LABEL = -1  # "no symbol": finished hypotheses carried over, empty hypotheses' last label


def rolling_hash(prev: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Paper 004 eq. 1: the hash of a token sequence extended by ``tokens`` (broadcast with ``prev``).
    ``+ 1`` so that token 0 changes the hash of the empty sequence (0)."""
    return (prev * HASH_BASE + tokens + 1) % HASH_MODULUS


class BatchedBeamHyps:
    """B x K beam hypotheses: per-slot state tensors [B, K] and the step tree [steps, B, K].

    Slot state: ``scores`` (log score, -inf = unused), ``last_label`` (last token, -1 = none),
    ``num_tokens`` (tokens, blanks excluded), ``hash`` / ``prefix_hash`` (rolling hash of the tokens and
    of the tokens without the last one, for AES prefix search), ``time`` (the frame the hypothesis reads
    next), ``frame_tokens`` (tokens emitted since the last frame advance, for ``max_symbols``).

    Step tree (step-major, so a step is one contiguous write): ``labels`` (token, blank or -1),
    ``parents`` (slot of the previous step), ``frames`` (frame at which the symbol was emitted),
    ``durations`` (TDT: frames the symbol advanced). Storage grows by doubling on the host before a step
    (:meth:`reserve`); ``steps`` counts the steps stored (every slot gets one symbol per step).
    """

    def __init__(
        self,
        batch: int,
        beam: int,
        blank: int,
        device: torch.device,
        dtype: torch.dtype,
        capacity: int = 16,
        ctc: bool = False,
    ) -> None:
        self.batch, self.beam, self.blank, self.ctc = batch, beam, blank, ctc
        self.device = device

        def full(value, *shape, dt=torch.long):
            return torch.full(shape, value, dtype=dt, device=device)

        self.scores = full(float("-inf"), batch, beam, dt=dtype)
        self.scores[:, 0] = 0.0  # one empty hypothesis per utterance
        self.last_label = full(NO_LABEL, batch, beam)
        self.num_tokens = full(0, batch, beam)
        self.hash = full(0, batch, beam)
        self.prefix_hash = full(0, batch, beam)
        self.time = full(0, batch, beam)
        self.frame_tokens = full(0, batch, beam)
        capacity = max(int(capacity), 1)
        self.labels = full(NO_LABEL, capacity, batch, beam)
        self.parents = full(0, capacity, batch, beam)
        self.frames = full(0, capacity, batch, beam)
        self.durations = full(0, capacity, batch, beam)
        self.steps = 0
        self.lm_scores: torch.Tensor | None = None  # [B, K] ln p_LM of each slot's tokens (LM fusion only)
        self._slots = torch.arange(beam, device=device)

    # ----------------------------------------------------------------- storage
    @property
    def capacity(self) -> int:
        return self.labels.shape[0]

    def reserve(self, steps: int) -> None:
        """Room for ``steps`` stored steps (host side, doubling; content kept)."""
        grow_tensors(self, ("labels", "parents", "frames", "durations"), 0, steps, {"labels": NO_LABEL})

    # ----------------------------------------------------------------- one step
    def gather_slots(self, value: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """[B, K, ...] per-slot values of the parents [B, K] (slot order of the new step)."""
        if value.dim() == 2:
            return torch.gather(value, 1, parents)
        index = parents.view(*parents.shape, *([1] * (value.dim() - 2))).expand(-1, -1, *value.shape[2:])
        return torch.gather(value, 1, index)

    def add_step(
        self,
        parents: torch.Tensor,
        labels: torch.Tensor,
        scores: torch.Tensor,
        durations: torch.Tensor,
    ) -> torch.Tensor:
        """Store one step: slot k of utterance b becomes parent slot ``parents[b, k]`` extended by
        ``labels[b, k]`` (token, blank or -1 = unchanged) with new log score ``scores[b, k]``; the symbol
        moves the hypothesis ``durations[b, k]`` frames on (RNN-T: blank 1, token 0; -1: ignored).
        ``frame_tokens`` restarts at 0 after a frame advance and counts tokens that stay on the frame.
        Returns [B, K]: which slots took a new token."""
        self.reserve(self.steps + 1)
        is_symbol = labels >= 0
        is_token = is_symbol & (labels != self.blank)
        last_label = self.gather_slots(self.last_label, parents)
        prev_hash = self.gather_slots(self.hash, parents)
        step = self.steps
        self.labels[step] = labels
        self.parents[step] = parents
        self.scores.copy_(scores)
        if self.ctc:  # a repeat of the path's last symbol continues it; the step is the frame
            is_token &= labels != last_label
        else:
            moves = torch.where(is_symbol, durations, 0)
            time = self.gather_slots(self.time, parents)
            self.frames[step] = time
            self.durations[step] = moves
            self.time.copy_(time + moves)
            self.frame_tokens.copy_(
                torch.where(moves > 0, 0, self.gather_slots(self.frame_tokens, parents) + is_token.long())
            )
            self.prefix_hash.copy_(
                torch.where(is_token, prev_hash, self.gather_slots(self.prefix_hash, parents))
            )
        self.num_tokens.copy_(self.gather_slots(self.num_tokens, parents) + is_token.long())
        self.hash.copy_(torch.where(is_token, rolling_hash(prev_hash, labels), prev_hash))
        self.last_label.copy_(torch.where(is_symbol if self.ctc else is_token, labels, last_label))
        self.steps += 1
        return is_token

    def same_hypothesis(self) -> torch.Tensor:
        """[B, K, K]: slot i and slot j hold the same token sequence at the same frame (hash, token
        count, last token and next frame all equal)."""
        eq = self.hash.unsqueeze(2) == self.hash.unsqueeze(1)
        values = (
            (self.num_tokens, self.last_label) if self.ctc else (self.num_tokens, self.last_label, self.time)
        )
        for value in values:
            eq &= value.unsqueeze(2) == value.unsqueeze(1)
        return eq

    def recombine_(self) -> None:
        """Merge identical hypotheses (paper 004 section 2.1, "merging"): the best-scoring slot of each
        group gets the log-sum-exp of the group's scores (the probabilities of the alignments add up;
        CTC paths: the best score), the others get -inf. Ties keep the lowest slot."""
        if self.beam == 1:
            return
        group = torch.where(self.same_hypothesis(), self.scores.unsqueeze(1), float("-inf"))
        keeper = group.argmax(dim=-1) == self._slots
        merged = group.amax(dim=-1) if self.ctc else torch.logsumexp(group, dim=-1)
        self.scores.copy_(torch.where(keeper, merged, float("-inf")))

    # ----------------------------------------------------------------- results
    def backtrack(self, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Symbols, frames and durations [B, R, steps] of the slots ``order`` [B, R] (walking the
        back-pointers from the last step to the first)."""
        steps = self.steps
        B, R = order.shape
        labels = torch.full((B, R, steps), NO_LABEL, dtype=torch.long, device=self.device)
        frames = torch.zeros_like(labels)
        durations = torch.zeros_like(labels)
        slot = order
        for s in range(steps - 1, -1, -1):
            labels[:, :, s] = torch.gather(self.labels[s], 1, slot)
            frames[:, :, s] = torch.gather(self.frames[s], 1, slot)
            durations[:, :, s] = torch.gather(self.durations[s], 1, slot)
            slot = torch.gather(self.parents[s], 1, slot)
        return labels, frames, durations

    def ranking(self, score_norm: bool) -> torch.Tensor:
        """[B, K] slots from best to worst; ``score_norm``: by score / (tokens + 1) (NeMo's length
        normalisation, "+1" for the start symbol)."""
        key = self.scores / (self.num_tokens + 1).to(self.scores.dtype) if score_norm else self.scores
        return torch.argsort(key, dim=-1, descending=True, stable=True)


def flat_slots(parents: torch.Tensor) -> torch.Tensor:
    """[B, K] parent slots -> [B*K] rows of the flattened beam."""
    B, K = parents.shape
    return (parents + torch.arange(B, device=parents.device).unsqueeze(1) * K).reshape(-1)


class LmFusionState:
    """Per-slot LM states of a flattened beam ([B*K] rows) and their scores for every next token.

    ``lm``: an object with ``init_states(n, device)`` and ``advance(states) -> (log-probs [n, V],
    next states [n, V])`` (:class:`asrdecode.lm.ngram_tensor.BatchedNgramLM`); scores are natural log.
    ``scores`` = alpha * ln p_LM(k | slot history) [n, V]; ``totals`` [n] = ln p_LM of each slot's tokens
    so far (from ``<s>``, no alpha, no ``</s>``): the LM part reported with the results.
    """

    def __init__(self, lm, alpha: float, rows: int, device: torch.device, dtype: torch.dtype) -> None:
        self.lm, self.alpha, self.dtype = lm, float(alpha), dtype
        self.states = lm.init_states(rows, device)
        self.totals = torch.zeros(rows, dtype=dtype, device=device)
        self._advance()

    def _advance(self) -> None:
        logp, self.next_states = self.lm.advance(self.states)
        self.logp = logp.to(self.dtype)
        self.scores = self.logp * self.alpha

    def update(self, flat_parents: torch.Tensor, labels: torch.Tensor, is_token: torch.Tensor) -> None:
        """New slots = parents ``flat_parents`` [N] extended by ``labels`` [N] where ``is_token``."""
        states = self.states.index_select(0, flat_parents)
        next_states = self.next_states.index_select(0, flat_parents)
        token = torch.where(is_token, labels, 0).unsqueeze(-1)
        token_logp = torch.gather(self.logp.index_select(0, flat_parents), 1, token).squeeze(-1)
        self.totals = self.totals.index_select(0, flat_parents) + torch.where(is_token, token_logp, 0.0)
        self.states = torch.where(is_token, torch.gather(next_states, 1, token).squeeze(-1), states)
        self._advance()
