"""`transducer-greedy`: batched greedy decoding of RNN-T and TDT models (paper 003, Bataev et al.,
"Label-Looping: Highly Efficient Decoding for Transducers").

Two batched algorithms with identical results:

* ``loop: labels`` (default) — label looping, paper 003 Algorithm 3 (section 3.2): the outer loop
  emits one label per still-active utterance, the inner loop consumes blanks (each utterance moves along
  its own frames with the *same* prediction-network output, no prediction-network calls), and the
  prediction network runs once per outer iteration for the whole batch. TDT (section 3.3): the time
  index advances by the predicted duration after blanks *and* tokens (blank with duration 0 -> 1).
* ``loop: frames`` — the conventional frame-synchronous batched algorithm, paper 003 Algorithm 2:
  all utterances share the frame index; at each frame an inner loop emits tokens until every utterance
  predicts blank (or ``max_symbols``). For TDT each utterance also keeps its own next frame and only
  takes part in the frames it lands on, which makes the baseline exact (the paper's TDT baseline takes
  the batch-minimum duration and is approximate).

Both precompute the encoder projection once per batch and the prediction projection once per
prediction-network step (section 3.4), keep partial hypotheses in a :class:`BatchedHyps` of tensors
(section 3.1) and update them with masked tensor operations (``torch.where`` / ``scatter``) — no
boolean indexing and no per-utterance Python in the loops; the only host synchronisations are the
loop conditions (``mask.any()``), one per outer/inner iteration. Label looping keeps all of its state
in tensors preallocated once per batch and updated in place (:class:`LabelLoopingRunner`).

Decision rules (NeMo conventions, see tests/fixtures/nemo/README.md): start with the blank id as
<SOS>; per step the label is the argmax over the V+1 token+blank logits, the TDT duration is
``durations[argmax(duration logits)]`` (independent argmax); a token is recorded at the frame where it
was found; after ``max_symbols`` tokens on one frame the utterance is forced to the next frame.

Scores: ``DecodeResult.score`` = sum over the emitted tokens (blanks excluded) of the token's log-prob
under ``log_softmax`` of the V+1 token+blank logits (TDT: duration logits excluded, so the value does not
depend on the duration head). For RNN-T this equals NeMo's CPU greedy ``Hypothesis.score``. Word
confidence = the smallest token probability of the word.

N-gram LM shallow fusion (``ngram_lm``, ``ngram_lm_alpha``; NeMo's ``greedy_batch`` with an NGPU-LM,
paper 004 section 2.3 / its ref. [22]): a :class:`asrdecode.lm.ngram_tensor.BatchedNgramLM` over the
model's tokens keeps one LM state per utterance (``<s>`` at the start, advanced on emitted tokens only,
no ``</s>``). Blank vs token stays the transducer's decision; a token decision takes
``argmax_k log p(k) + alpha ln p_LM(k | history)`` over the V tokens instead (:meth:`_Step.fuse`), in
both loops. ``DecodeResult.score`` = ``acoustic_score + alpha * lm_score`` = that fused value summed
over the emitted tokens (``acoustic_score``: the transducer log-probs above, ``lm_score``: the LM's
ln-probs). Tokens, frames and durations equal NeMo's; NeMo 3.0.0's reported ``Hypothesis.score``
differs: it adds the fused value only for a token found at the first joint evaluation after the
previous token, and the unfused best log-prob for a token found after blanks
(tests/decoders/test_transducer_greedy_lm.py re-derives NeMo's number).

Word times: start = first token's frame x frame shift; end = (last token's frame + 1) x frame shift for
RNN-T, (last token's frame + max(its duration, 1)) x frame shift for TDT, but never past the next word's
start (tokens can share a frame) nor before the word's own start.

CUDA graphs (``cuda_graphs: true``, ``loop: labels``, CUDA devices only; ignored on CPU): the three
stages of :class:`LabelLoopingRunner` work only on buffers allocated when the runner is built
(``out=``/in-place ops and masked ``torch.where(..., out=)`` updates; the joint and the LSTM step run
through the network's ``*_into`` methods) and never read back to the host, so each is captured once as
a CUDA graph and replayed, with the loop flags read on the host between stages (the partial-graph
scheme of prior-art A.3). The eager path (CPU, the tests) runs exactly the same stage code; the tests
check op by op that a stage allocates nothing and syncs nothing. Only the capture itself is untested
here (no GPU on the development machines).

Chunked / streaming use: :meth:`TransducerGreedyDecoder.decode_chunk` carries a
:class:`TransducerStreamState` (prediction-network state and output, last label, the TDT time overshoot
past the chunk end, frames consumed) between calls; decoding an encoder output in consecutive chunks
gives the same tokens and frames as decoding it at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from asrdecode.decoders.base import (
    DecoderBase,
    DecoderContext,
    DecodeResult,
    Word,
    check_fusion_weight,
    check_values,
)
from asrdecode.decoders.lms import fusion_lm_of
from asrdecode.decoders.workspace import grow_tensors
from asrdecode.errors import ConfigError
from asrdecode.models.base import ModelOutput
from asrdecode.models.buffered import WindowRows

__all__ = [
    "BatchedHyps",
    "LabelLoopingRunner",
    "TransducerGreedyConfig",
    "TransducerGreedyDecoder",
    "TransducerStreamState",
    "greedy_decode",
    "merge_windows",
    "token_words",
]

PredState = tuple[torch.Tensor, ...]


@dataclass
class TransducerGreedyConfig:
    """Options of the greedy transducer decoder."""

    max_symbols: int = 10  # most tokens emitted on one encoder frame (NeMo greedy.max_symbols)
    loop: str = "labels"  # labels (paper 003 Alg. 3) | frames (Alg. 2, the baseline)
    cuda_graphs: bool = False  # loop labels on CUDA: replay the loop stages as CUDA graphs (ignored on CPU)
    ngram_lm: str = ""  # token ARPA (plain/.gz) or NGPU-LM .nemo (NeMo greedy.ngram_lm_model)
    ngram_lm_alpha: float = 0.0  # LM weight (NeMo greedy.ngram_lm_alpha)
    ngram_lm_token_ids: str = "ngpu"  # ngpu: NeMo's token ARPA (token i = chr(i + 100)) | words: the units


class BatchedHyps:
    """Partial hypotheses of a batch held in dense tensors (paper 003 section 3.1).

    ``transcript``/``timestamps``/``durations``/``token_logp``/``token_lm`` [B, capacity]; ``lengths``
    [B]; ``scores`` [B] (sum of ``token_logp``); ``lm_scores`` [B] (sum of ``token_lm``, the fused LM's
    log-probs; zero without an LM); ``last_timestamp`` / ``last_timestamp_lasts`` [B]: frame of the last
    token and how many tokens were emitted on it (for ``max_symbols``). Storage grows by doubling on the
    host side (:meth:`make_room` before each append: a host-side count, no sync) or is fixed up front
    (``static``, for CUDA graphs); :meth:`add_masked_` only updates the tensors in place through ``out=``
    / in-place ops and two scratch rows, so it allocates nothing.
    """

    def __init__(
        self,
        batch: int,
        capacity: int,
        device: torch.device,
        float_dtype: torch.dtype = torch.float32,
        last_timestamp: torch.Tensor | None = None,
        last_timestamp_lasts: torch.Tensor | None = None,
    ) -> None:
        capacity = max(int(capacity), 1)
        self.batch = batch
        self.transcript = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.timestamps = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.durations = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.token_logp = torch.zeros(batch, capacity, dtype=float_dtype, device=device)
        self.token_lm = torch.zeros(batch, capacity, dtype=float_dtype, device=device)
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)
        self.scores = torch.zeros(batch, dtype=float_dtype, device=device)
        self.lm_scores = torch.zeros(batch, dtype=float_dtype, device=device)
        self.last_timestamp = (
            last_timestamp.clone()
            if last_timestamp is not None
            else torch.full((batch,), -1, dtype=torch.long, device=device)
        )
        self.last_timestamp_lasts = (
            last_timestamp_lasts.clone()
            if last_timestamp_lasts is not None
            else torch.zeros(batch, dtype=torch.long, device=device)
        )
        self._same = torch.zeros(batch, dtype=torch.bool, device=device)  # scratch rows of add_masked_
        self._count = torch.zeros(batch, dtype=torch.long, device=device)
        self._logp = torch.zeros(batch, dtype=float_dtype, device=device)
        self.adds = 0  # host-side upper bound of every row's length
        self.static = False  # True: capacity fixed up front (CUDA graphs), never reallocated

    @property
    def capacity(self) -> int:
        return self.transcript.shape[1]

    def reserve(self, needed: int) -> None:
        """Make room for ``needed`` tokens per row (doubling), preserving the content."""
        names = ("transcript", "timestamps", "durations", "token_logp", "token_lm")
        grow_tensors(self, names, 1, needed, {})

    def make_room(self) -> None:
        """Host side, before an append: grow (doubling) so one more token per row fits (static: no-op)."""
        if not self.static:
            self.reserve(self.adds + 1)
            self.adds += 1

    def add_masked_(
        self,
        mask: torch.Tensor,
        labels: torch.Tensor,
        frames: torch.Tensor,
        durations: torch.Tensor,
        logp: torch.Tensor,
        lm_logp: torch.Tensor | None = None,
    ) -> None:
        """Append one token to the rows where ``mask`` is set (others are written past their length and
        ignored): the paper's ``add_results`` with a mask. Needs room (:meth:`make_room`). ``lm_logp``:
        the fused LM's log-prob of the token (LM fusion only)."""
        idx = self.lengths.unsqueeze(1)
        self.transcript.scatter_(1, idx, labels.unsqueeze(1))
        self.timestamps.scatter_(1, idx, frames.unsqueeze(1))
        self.durations.scatter_(1, idx, durations.unsqueeze(1))
        self.token_logp.scatter_(1, idx, logp.unsqueeze(1))
        self.scores.add_(torch.mul(logp, mask, out=self._logp))
        if lm_logp is not None:
            self.token_lm.scatter_(1, idx, lm_logp.unsqueeze(1))
            self.lm_scores.add_(torch.mul(lm_logp, mask, out=self._logp))
        # tokens on the frame so far: previous count + 1 on the same frame, else 1
        torch.eq(self.last_timestamp, frames, out=self._same)
        torch.mul(self.last_timestamp_lasts, self._same, out=self._count).add_(1)
        torch.where(mask, self._count, self.last_timestamp_lasts, out=self.last_timestamp_lasts)
        torch.where(mask, frames, self.last_timestamp, out=self.last_timestamp)
        self.lengths.add_(mask)


@dataclass
class TransducerStreamState:
    """Decoder state carried between chunks of one batch of streams (all tensors have batch dim B).

    pred_state: prediction-network state (LSTM h, c: [layers, B, H]); pred_proj [B, J]: the joint
    projection of the last prediction-network output; last_label [B] (blank = none yet);
    time_jump [B]: frames the next chunk must skip (TDT overshoot past the chunk end; 0 for RNN-T);
    frame_offset [B]: encoder frames consumed so far (timestamps are global);
    last_timestamp / last_timestamp_lasts [B]: for ``max_symbols`` across chunk boundaries;
    lm_state [B]: state of the fused n-gram LM (None without one).
    """

    pred_state: PredState
    pred_proj: torch.Tensor
    last_label: torch.Tensor
    time_jump: torch.Tensor
    frame_offset: torch.Tensor
    last_timestamp: torch.Tensor
    last_timestamp_lasts: torch.Tensor
    lm_state: torch.Tensor | None = None


def initial_stream_state(net, batch: int, device: torch.device, lm=None) -> TransducerStreamState:
    """Fresh state: the prediction network has consumed <SOS> (= blank, zero embedding, zero state);
    the fused LM (if any) is in its ``<s>`` state."""
    labels = torch.full((batch,), net.blank_id, dtype=torch.long, device=device)
    out, state = net.predict(labels, net.initial_prediction_state(batch, device))
    zeros = torch.zeros(batch, dtype=torch.long, device=device)
    return TransducerStreamState(
        pred_state=tuple(state),
        pred_proj=net.project_prediction(out),
        last_label=labels,
        time_jump=zeros,
        frame_offset=zeros.clone(),
        last_timestamp=torch.full((batch,), -1, dtype=torch.long, device=device),
        last_timestamp_lasts=zeros.clone(),
        lm_state=lm.init_states(batch, device) if lm is not None else None,
    )


class _Step:
    """Joint evaluation and the greedy decision rules shared by both loops.

    The loops keep the raw joint logits of each row's current decision in a buffer (one masked
    ``torch.where`` per step) and derive label, duration and log-prob from it once per emitted token,
    so a blank-consuming step costs only the joint, one argmax and a few mask operations.
    """

    def __init__(self, net, device: torch.device) -> None:
        self.net = net
        self.blank = int(net.blank_id)
        self.num_labels = self.blank + 1
        self.tdt = bool(net.durations)
        self.durations = torch.tensor(net.durations, dtype=torch.long, device=device) if self.tdt else None
        # TDT: durations used after a blank (0 is forced to 1)
        self.blank_durations = self.durations.clamp(min=1) if self.tdt else None

    def logits(self, enc_frames: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor:
        """[B, J] + [B, J] projections -> [B, V+1(+durations)] raw joint logits."""
        return self.net.joint_after_projection(enc_frames, pred_proj)

    def label(self, logits: torch.Tensor) -> torch.Tensor:
        """Argmax over the V+1 token+blank logits."""
        return logits[:, : self.num_labels].argmax(dim=-1)

    def blank_advance(self, logits: torch.Tensor, is_blank: torch.Tensor) -> torch.Tensor:
        """Frames a row moves after a blank decision (0 where ``is_blank`` is False)."""
        if not self.tdt:
            return is_blank.long()
        return self.blank_durations[logits[:, self.num_labels :].argmax(dim=-1)] * is_blank

    def token(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(label, duration of a token decision (RNN-T: 0), log-prob of the label) from logits."""
        tok = logits[:, : self.num_labels]
        best, label = tok.max(dim=-1)
        logp = best - torch.logsumexp(tok, dim=-1)
        if self.tdt:
            dur = self.durations[logits[:, self.num_labels :].argmax(dim=-1)]
        else:
            dur = torch.zeros_like(label)
        return label, dur, logp

    def fuse(
        self, logits: torch.Tensor, label: torch.Tensor, lm_scores: torch.Tensor, alpha: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Greedy shallow fusion (NeMo ``greedy_batch`` with an NGPU-LM): blank vs token is the
        transducer's own decision (``label``, the argmax over V+1); a token decision takes instead
        ``argmax_k log p(k) + alpha * ln p_LM(k)`` over the V tokens (log p = log-softmax over the V+1
        token+blank logits). Returns (label, its transducer log-prob, its LM log-prob (0 for blank))."""
        logp = torch.log_softmax(logits[:, : self.num_labels], dim=-1)
        fused = logp[:, : self.blank] + alpha * lm_scores
        is_token = label != self.blank
        label = torch.where(is_token, fused.argmax(dim=-1), label)
        token_logp = logp.gather(1, label.unsqueeze(1)).squeeze(1)
        lm_logp = lm_scores.gather(1, torch.where(is_token, label, 0).unsqueeze(1)).squeeze(1)
        return label, token_logp, torch.where(is_token, lm_logp, 0.0)


def lm_next_state(
    lm_state: torch.Tensor, lm_next: torch.Tensor, found: torch.Tensor, label: torch.Tensor
) -> torch.Tensor:
    """LM states after the step: rows that emitted a token move along it, the others stay."""
    moved = lm_next.gather(1, torch.where(found, label, 0).unsqueeze(1)).squeeze(1)
    return torch.where(found, moved, lm_state)


def _update_prediction(
    net, found: torch.Tensor, labels: torch.Tensor, pred_state: PredState, pred_proj: torch.Tensor, blank: int
) -> tuple[PredState, torch.Tensor]:
    """One batched prediction-network step; rows without a new token keep their state (masked)."""
    out, new_state = net.predict(labels, pred_state)
    new_proj = net.project_prediction(out)
    keep = found.unsqueeze(-1)
    pred_proj = torch.where(keep, new_proj, pred_proj)
    pred_state = tuple(
        torch.where(keep.unsqueeze(0), n, o) for n, o in zip(new_state, pred_state, strict=True)
    )
    return pred_state, pred_proj


def _inputs(net, encoder_out, lengths, state, enc_proj, lm=None):
    """The projected encoder output, the lengths (long, on its device) and the stream state of a
    chunk (`greedy_decode`'s arguments)."""
    device = encoder_out.device
    if enc_proj is None:
        enc_proj = net.project_encoder(encoder_out)  # paper 003 section 3.4: once per batch
    lengths = lengths.to(device=device, dtype=torch.long)
    if state is None:
        state = initial_stream_state(net, enc_proj.shape[0], device, lm)
    elif lm is not None and state.lm_state is None:
        raise ValueError("LM fusion needs a stream state made with the LM (initial_stream_state)")
    return enc_proj, lengths, state


def _final_state(
    pred_state, pred_proj, last_label, time, lengths, state, hyps, lm_state=None
) -> TransducerStreamState:
    return TransducerStreamState(
        pred_state=pred_state,
        pred_proj=pred_proj,
        last_label=last_label,
        time_jump=time - lengths,
        frame_offset=state.frame_offset + lengths,
        last_timestamp=hyps.last_timestamp,
        last_timestamp_lasts=hyps.last_timestamp_lasts,
        lm_state=lm_state,
    )


class LabelLoopingRunner:
    """Label looping (paper 003 Algorithm 3) over preallocated buffers.

    The loop is split into three stages: :meth:`outer_start` (joint at each row's frame, blanks move
    on), :meth:`inner_step` (rows still on a blank re-run the joint at their next frame with the same
    prediction output) and :meth:`after_inner` (record the tokens, TDT token jumps, ``max_symbols``, one
    batched prediction-network step with masked state updates). Every stage works only on the buffers
    made in ``__init__``: ``out=`` and in-place ops, ``torch.where(mask, new, old, out=old)`` for the
    masked updates, the network's ``*_into`` methods (:class:`asrdecode.models.transducer.TransducerNetwork`)
    for the joint and the prediction network; no tensor is allocated and nothing is read back to the
    host inside a stage (tests/decoders/test_transducer_greedy.py checks both op by op). The loop
    conditions are 0-dim tensors (``active_any``, ``need_any``). :meth:`run` reads them between stages;
    it drives the stages eagerly (CPU and the tests: the same code) or, after :meth:`capture`, replays
    each stage as a CUDA graph (the ``no_while_loops`` scheme of prior-art A.3: one host read of a flag
    per iteration). The hypothesis storage is fixed (``static``: room for ``max_symbols`` tokens on every
    frame, needed by captured graphs) or grows between iterations on the host (eager default).

    LM shallow fusion (``lm``: a :class:`asrdecode.lm.ngram_tensor.BatchedNgramLM` on the device,
    ``lm_alpha``): :meth:`after_inner` queries the LM once per outer iteration for every row's LM state
    and picks tokens by :meth:`_Step.fuse`; the LM call and the fusion allocate their outputs (a captured
    graph keeps those in its private pool) but still read nothing back to the host.
    """

    STAGES = ("outer_start", "inner_step", "after_inner")

    def __init__(
        self,
        net,
        batch: int,
        max_time: int,
        max_symbols: int,
        device,
        dtype,
        static: bool = False,
        lm=None,
        lm_alpha: float = 0.0,
    ):
        self.net = net
        self.step = _Step(net, device)
        self.lm, self.lm_alpha = lm, float(lm_alpha)
        self.lm_state = lm.init_states(batch, device) if lm is not None else None
        self.batch, self.max_time, self.max_symbols = batch, max_time, max_symbols
        blank = self.step.blank
        self.num_labels = self.step.num_labels
        state0 = initial_stream_state(net, batch, device)
        joint_dim = state0.pred_proj.shape[-1]
        width = self.num_labels + (len(net.durations) if net.durations else 0)
        frames = max(max_time, 1)

        def zeros(*shape, dtype=dtype):
            return torch.zeros(*shape, device=device, dtype=dtype)

        long, flag = torch.long, torch.bool
        # inputs of a batch (load)
        self.enc_proj = zeros(batch, frames, joint_dim)
        self.enc_rows = self.enc_proj.view(batch * frames, joint_dim)
        self.row_start = torch.arange(batch, device=device) * frames
        self.lengths, self.last_frame, self.offset = (
            zeros(batch, dtype=long),
            zeros(batch, dtype=long),
            zeros(batch, dtype=long),
        )
        # loop state
        self.time = zeros(batch, dtype=long)
        self.active, self.need = zeros(batch, dtype=flag), zeros(batch, dtype=flag)
        self.active_any, self.need_any = zeros((), dtype=flag), zeros((), dtype=flag)
        self.logits = zeros(batch, width)  # each row's decision logits (kept while it searches)
        self.pred_proj = state0.pred_proj.clone()
        self.pred_state = tuple(x.clone() for x in state0.pred_state)
        self.last_label = torch.full((batch,), blank, dtype=long, device=device)
        # scratch of one step
        self.frame_index = zeros(batch, dtype=long)
        self.frames = zeros(batch, joint_dim)
        self.hidden = zeros(batch, net.joint_hidden_size)
        self.new_logits = zeros(batch, width)
        self.label, self.dur_index, self.advance = (
            zeros(batch, dtype=long),
            zeros(batch, dtype=long),
            zeros(batch, dtype=long),
        )
        self.duration, self.t_emit, self.emit_frame = (
            zeros(batch, dtype=long),
            zeros(batch, dtype=long),
            zeros(batch, dtype=long),
        )
        self.is_blank, self.found, self.flag = (
            zeros(batch, dtype=flag),
            zeros(batch, dtype=flag),
            zeros(batch, dtype=flag),
        )
        self.best, self.logp = zeros(batch), zeros(batch)
        self.exp_logits = zeros(batch, self.num_labels)
        self.pred_ws = net.prediction_workspace(batch, device)
        self.new_proj = zeros(batch, joint_dim)
        capacity = max_time * max_symbols + 1 if static else frames + 1
        self.hyps = BatchedHyps(batch, capacity, device, dtype)
        self.hyps.static = static
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}

    def load(self, enc_proj: torch.Tensor, lengths: torch.Tensor, state: TransducerStreamState) -> None:
        """Copy a batch (B <= batch rows, T <= max_time frames; extra rows get length 0) into the buffers."""
        B, T = enc_proj.shape[0], enc_proj.shape[1]
        self.enc_proj.zero_()
        self.enc_proj[:B, :T].copy_(enc_proj)
        self.lengths.zero_()
        self.lengths[:B].copy_(lengths)
        self.last_frame.copy_((self.lengths - 1).clamp(min=0, max=max(self.max_time - 1, 0)))
        self.offset.zero_()
        self.offset[:B].copy_(state.frame_offset)
        self.time.zero_()
        self.time[:B].copy_(state.time_jump)
        self.pred_proj[:B].copy_(state.pred_proj)
        for buf, value in zip(self.pred_state, state.pred_state, strict=True):
            buf[:, :B].copy_(value)
        self.last_label[:B].copy_(state.last_label)
        if self.lm is not None:
            if state.lm_state is None:
                raise ValueError("LM fusion needs a stream state made with the LM (initial_stream_state)")
            self.lm_state.fill_(self.lm.bos_state())
            self.lm_state[:B].copy_(state.lm_state)
        h = self.hyps
        for buf in (h.lengths, h.scores, h.lm_scores, h.last_timestamp_lasts):
            buf.zero_()
        h.last_timestamp.fill_(-1)
        h.last_timestamp[:B].copy_(state.last_timestamp)
        h.last_timestamp_lasts[:B].copy_(state.last_timestamp_lasts)
        h.adds = 0
        torch.lt(self.time, self.lengths, out=self.active)
        torch.any(self.active, out=self.active_any)

    # ----------------------------------------------------------------- stage helpers (buffers only)
    def _joint_at_time(self, out: torch.Tensor) -> None:
        """Joint logits of each row's current frame (clamped to its last frame) with its prediction."""
        torch.minimum(self.time, self.last_frame, out=self.frame_index)
        self.frame_index.add_(self.row_start)
        torch.index_select(self.enc_rows, 0, self.frame_index, out=self.frames)
        self.net.joint_after_projection_into(self.frames, self.pred_proj, self.hidden, out)

    def _blank_step(self, logits: torch.Tensor, searching: torch.Tensor) -> None:
        """``is_blank`` = searching rows whose label is blank; they move on (RNN-T: 1 frame, TDT: the
        predicted duration, 0 -> 1); ``need`` = those still inside their utterance."""
        step = self.step
        torch.argmax(logits[:, : self.num_labels], dim=-1, out=self.label)
        torch.eq(self.label, step.blank, out=self.is_blank)
        self.is_blank.logical_and_(searching)
        if step.tdt:
            torch.argmax(logits[:, self.num_labels :], dim=-1, out=self.dur_index)
            torch.index_select(step.blank_durations, 0, self.dur_index, out=self.advance)
            self.time.add_(self.advance.mul_(self.is_blank))
        else:
            self.time.add_(self.is_blank)
        torch.lt(self.time, self.lengths, out=self.need)
        self.need.logical_and_(self.is_blank)
        torch.any(self.need, out=self.need_any)

    # ----------------------------------------------------------------- the three stages
    def outer_start(self) -> None:
        self._joint_at_time(self.logits)
        self._blank_step(self.logits, self.active)

    def inner_step(self) -> None:
        self._joint_at_time(self.new_logits)
        torch.where(self.need.unsqueeze(-1), self.new_logits, self.logits, out=self.logits)
        self._blank_step(self.new_logits, self.need)

    def after_inner(self) -> None:
        step, net, hyps = self.step, self.net, self.hyps
        tokens = self.logits[:, : self.num_labels]
        # label, log-prob of the label = -log(sum(exp(logits - best))), TDT duration of the token
        torch.max(tokens, dim=-1, out=(self.best, self.label))
        torch.sub(tokens, self.best.unsqueeze(-1), out=self.exp_logits)
        torch.sum(self.exp_logits.exp_(), dim=-1, out=self.logp)
        self.logp.log_().neg_()
        if step.tdt:
            torch.argmax(self.logits[:, self.num_labels :], dim=-1, out=self.dur_index)
            torch.index_select(step.durations, 0, self.dur_index, out=self.duration)
        lm_logp = lm_next = None
        if self.lm is not None:  # the token (not the blank/token decision) follows the fused scores
            lm_scores, lm_next = self.lm.advance(self.lm_state)
            lm_scores = lm_scores.to(self.logp.dtype)
            label, logp, lm_logp = step.fuse(self.logits, self.label, lm_scores, self.lm_alpha)
            self.label.copy_(label)
            self.logp.copy_(logp)
        torch.ne(self.label, step.blank, out=self.found)
        self.found.logical_and_(self.active)
        self.t_emit.copy_(self.time)  # a row's time only moves on blanks until its token is found
        torch.add(self.t_emit, self.offset, out=self.emit_frame)
        hyps.add_masked_(self.found, self.label, self.emit_frame, self.duration, self.logp, lm_logp)
        if lm_next is not None:
            self.lm_state.copy_(lm_next_state(self.lm_state, lm_next, self.found, self.label))
        if step.tdt:  # tokens may jump too (RNN-T: duration 0)
            self.time.add_(torch.mul(self.duration, self.found, out=self.advance))
        # max_symbols tokens on this frame: move on
        torch.ge(hyps.last_timestamp_lasts, self.max_symbols, out=self.flag)
        self.flag.logical_and_(self.found)
        self.flag.logical_and_(torch.eq(self.time, self.t_emit, out=self.is_blank))
        self.time.add_(self.flag)
        # one prediction-network step for the whole batch; rows without a token keep their state
        out = net.predict_into(self.label, self.pred_state, self.pred_ws)
        net.project_prediction_into(out, self.new_proj)
        keep = self.found.unsqueeze(-1)
        torch.where(keep, self.new_proj, self.pred_proj, out=self.pred_proj)
        for buf, value in zip(self.pred_state, self.pred_ws.state, strict=True):
            torch.where(keep.unsqueeze(0), value, buf, out=buf)
        torch.where(self.found, self.label, self.last_label, out=self.last_label)
        torch.lt(self.time, self.lengths, out=self.active)
        torch.any(self.active, out=self.active_any)

    def capture(self) -> None:  # pragma: no cover - needs a CUDA device
        """Record the three stages as CUDA graphs (after a warm-up on a side stream)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                for name in self.STAGES:
                    getattr(self, name)()
        torch.cuda.current_stream().wait_stream(stream)
        for name in self.STAGES:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                getattr(self, name)()
            self.graphs[name] = graph

    def _stage(self, name: str) -> None:
        graph = self.graphs.get(name)
        if graph is not None:
            graph.replay()
        else:
            getattr(self, name)()

    def run(self) -> None:
        """Outer loop over labels, inner loop over blanks; the flags are the only host reads."""
        if self.max_time == 0:
            return
        while bool(self.active_any):
            self._stage("outer_start")
            while bool(self.need_any):
                self._stage("inner_step")
            self.hyps.make_room()  # host side (static: no-op)
            self._stage("after_inner")

    def results(self, batch: int, lengths: torch.Tensor, time_jump_base: torch.Tensor) -> tuple:
        """(hypotheses, state) of the first ``batch`` rows (copies, safe to keep across runs)."""
        h = self.hyps
        n = h.capacity
        out = BatchedHyps(batch, n, h.lengths.device, h.scores.dtype)
        for name in ("transcript", "timestamps", "durations", "token_logp", "token_lm", "lengths", "scores"):
            getattr(out, name).copy_(getattr(h, name)[:batch])
        out.lm_scores.copy_(h.lm_scores[:batch])
        out.last_timestamp.copy_(h.last_timestamp[:batch])
        out.last_timestamp_lasts.copy_(h.last_timestamp_lasts[:batch])
        state = TransducerStreamState(
            pred_state=tuple(x[:, :batch].clone() for x in self.pred_state),
            pred_proj=self.pred_proj[:batch].clone(),
            last_label=self.last_label[:batch].clone(),
            time_jump=self.time[:batch] - lengths,
            frame_offset=time_jump_base + lengths,
            last_timestamp=out.last_timestamp.clone(),
            last_timestamp_lasts=out.last_timestamp_lasts.clone(),
            lm_state=self.lm_state[:batch].clone() if self.lm is not None else None,
        )
        return out, state


@torch.inference_mode()
def greedy_decode(
    net,
    encoder_out: torch.Tensor,
    lengths: torch.Tensor,
    max_symbols: int = 10,
    state: TransducerStreamState | None = None,
    enc_proj: torch.Tensor | None = None,
    loop: str = "labels",
    runner: LabelLoopingRunner | None = None,
    lm=None,
    lm_alpha: float = 0.0,
) -> tuple[BatchedHyps, TransducerStreamState]:
    """Batched greedy decoding of a chunk, ``loop="labels"``: label looping (paper 003 Algorithm 3;
    TDT section 3.3, see :class:`LabelLoopingRunner`), ``"frames"``: frame looping (Algorithm 2),
    the baseline.

    encoder_out [B, T, D] (or ``enc_proj`` [B, T, J] already projected), lengths [B]. Returns the
    hypotheses (timestamps are global frames: ``state.frame_offset`` + frame) and the state after the
    chunk. ``runner`` (label looping): a prebuilt (possibly CUDA-graph-captured) runner with at least
    B rows and T frames (built with the same ``lm``). ``lm`` / ``lm_alpha``: greedy shallow fusion
    (:meth:`_Step.fuse`).
    """
    if loop not in ("labels", "frames"):
        raise ValueError(f"loop must be 'labels' or 'frames', got {loop!r}")
    enc_proj, lengths, state = _inputs(net, encoder_out, lengths, state, enc_proj, lm)
    if loop == "frames":
        return _frame_looping(net, enc_proj, lengths, state, max_symbols, lm, lm_alpha)
    B, T = enc_proj.shape[0], enc_proj.shape[1]
    if runner is None:
        runner = LabelLoopingRunner(
            net, B, T, max_symbols, enc_proj.device, enc_proj.dtype, lm=lm, lm_alpha=lm_alpha
        )
    runner.load(enc_proj, lengths, state)
    runner.run()
    return runner.results(B, lengths, state.frame_offset)


def _frame_looping(
    net,
    enc_proj: torch.Tensor,
    lengths: torch.Tensor,
    state: TransducerStreamState,
    max_symbols: int,
    lm,
    lm_alpha,
) -> tuple[BatchedHyps, TransducerStreamState]:
    """Frame looping (paper 003 Algorithm 2): the frame index is shared by the batch; the inner loop
    at each frame runs the joint and the prediction network for the whole batch until no utterance
    emits a token (or ``max_symbols``). TDT: each row takes part only in the frames it lands on
    (exact, per-row durations)."""
    B, T = enc_proj.shape[0], enc_proj.shape[1]
    hyps = BatchedHyps(
        B, max(T, 1) + 1, enc_proj.device, enc_proj.dtype, state.last_timestamp, state.last_timestamp_lasts
    )
    step = _Step(net, enc_proj.device)
    pred_state, pred_proj, offset = state.pred_state, state.pred_proj, state.frame_offset
    lm_state = state.lm_state
    last_label = state.last_label.clone()
    next_t = state.time_jump.clone()
    t_max = min(int(lengths.max()), T) if B else 0
    for t in range(t_max):
        at = (next_t == t) & (t < lengths)
        frame = enc_proj[:, t]
        frame_t = offset + t
        for symbol in range(max_symbols):
            logits = step.logits(frame, pred_proj)
            label, dur, logp = step.token(logits)
            lm_logp = None
            if lm is not None:
                lm_scores, lm_next = lm.advance(lm_state)
                label, logp, lm_logp = step.fuse(logits, label, lm_scores.to(logits.dtype), lm_alpha)
            is_blank = label == step.blank
            next_t = next_t + step.blank_advance(logits, at & is_blank)
            emit = at & ~is_blank
            if not bool(emit.any()):
                break
            hyps.make_room()
            hyps.add_masked_(emit, label, frame_t, dur, logp, lm_logp)
            if lm is not None:
                lm_state = lm_next_state(lm_state, lm_next, emit, label)
            pred_state, pred_proj = _update_prediction(net, emit, label, pred_state, pred_proj, step.blank)
            last_label = torch.where(emit, label, last_label)
            next_t = next_t + dur * emit  # TDT: a token with a duration leaves the frame
            at = emit & (dur == 0)
            if symbol == max_symbols - 1:  # max_symbols reached: force the next frame
                next_t = next_t + at.long()
    return hyps, _final_state(pred_state, pred_proj, last_label, next_t, lengths, state, hyps, lm_state)


def token_words(
    spans: list[tuple[str, int, int]],
    frames: list[int],
    durations: list[int] | None,
    shift: float,
    probs: list[float] | None = None,
) -> list[Word]:
    """Words with times from their tokens' frames (see the module docstring, "Word times"): ``spans``
    = (word, first token, last token) from ``DecoderContext.words_of``; ``durations``: TDT token
    durations (None for RNN-T); ``probs``: token probabilities -> word confidence = the smallest."""
    words = []
    for i, (word, first, last) in enumerate(spans):
        end = frames[last] + (max(durations[last], 1) if durations is not None else 1)
        if i + 1 < len(spans):  # several tokens can share a frame: no overlap with the next word
            end = max(frames[first], min(end, frames[spans[i + 1][1]]))
        conf = min(probs[first : last + 1]) if probs is not None else None
        words.append(Word(word, round(frames[first] * shift, 3), round(end * shift, 3), conf))
    return words


def merge_windows(
    windows: WindowRows,
    results: list[DecodeResult],
    words_of: Callable[[list[int]], list[tuple[str, int, int]]],
) -> list[DecodeResult]:
    """One result per input of a buffered transducer output from its windows' results (NeMo's
    middle-token merge, `asrdecode.models.buffered.WindowRows`): the tokens of each window's kept
    frames, in window order, at frame ``k * tokens_per_chunk + (frame - kept.start)`` of the k-th
    window, minus `lag`; words rebuilt from the joined tokens, their times kept within the audio.
    Scores add up over the windows."""
    n = len(windows.audio_seconds)
    kept = windows.kept
    tokens: list[list[int]] = [[] for _ in range(n)]
    frames: list[list[int]] = [[] for _ in range(n)]
    scores = [0.0] * n
    seen = [0] * n
    for owner, res in zip(windows.owner, results, strict=True):
        k = seen[owner]
        seen[owner] += 1
        scores[owner] += res.score
        for token, frame in zip(res.tokens, res.token_frames, strict=True):
            if kept.start <= frame < kept.stop:
                tokens[owner].append(token)
                frames[owner].append(max(k * windows.tokens_per_chunk + frame - kept.start - windows.lag, 0))
    out = []
    for b in range(n):
        limit = windows.audio_seconds[b]
        words = token_words(words_of(tokens[b]), frames[b], None, windows.frame_shift)
        for w in words:
            w.start, w.end = min(w.start, limit), min(w.end, limit)
        out.append(DecodeResult(words=words, tokens=tokens[b], token_frames=frames[b], score=scores[b]))
    return out


def transducer_network(output: ModelOutput, decoder: str) -> Any:
    """The prediction + joint network a transducer model put in `output` (``extra["transducer"]``),
    or a one-line ConfigError naming `decoder` when the output has none (e.g. a CTC model)."""
    net = output.extra.get("transducer")
    if net is None or output.encoder_out is None:
        raise ConfigError(
            f"decoder.type={decoder} needs a transducer model (model.type=nemo-transducer, an RNN-T/TDT "
            ".nemo); this model output has no prediction/joint network"
        )
    return net


class TransducerGreedyDecoder(DecoderBase):
    """Batched greedy RNN-T / TDT decoding (label looping or frame looping), see the module docstring.

    Needs ``ModelOutput.encoder_out`` and ``ModelOutput.extra["transducer"]`` (a
    :class:`asrdecode.models.transducer.TransducerNetwork`, set by ``NemoTransducerModel``).
    """

    name: ClassVar[str] = "transducer-greedy"
    config_type: ClassVar[type] = TransducerGreedyConfig

    @staticmethod
    def check_options(config: TransducerGreedyConfig) -> None:
        """One-line ConfigErrors for values the search cannot use."""
        alpha = config.ngram_lm_alpha
        checks = [
            ("max_symbols", config.max_symbols, config.max_symbols >= 1, ">= 1"),
            ("loop", config.loop, config.loop in ("labels", "frames"), "'labels' or 'frames'"),
            ("ngram_lm_alpha", alpha, math.isfinite(alpha), "a finite number"),
        ]
        check_values(checks)
        check_fusion_weight(config)

    def __init__(self, config: TransducerGreedyConfig, context: DecoderContext) -> None:
        super().__init__(config, context)
        self.lm = fusion_lm_of(config, context)

    def _lm_on(self, device: torch.device):
        """The fusion LM (None without one), moved to ``device`` on first use there."""
        if self.lm is not None and self.lm.root_weight.device != device:
            self.lm.to(device)
        return self.lm

    def _run(self, output: ModelOutput, state: TransducerStreamState | None):
        net = transducer_network(output, self.name)
        enc = output.encoder_out
        lm, alpha = self._lm_on(enc.device), self.config.ngram_lm_alpha
        loop, runner = self.config.loop, None
        if loop == "labels" and self.config.cuda_graphs and enc.device.type == "cuda":
            runner = self._graph_runner(net, enc.shape[0], enc.shape[1], enc.device, enc.dtype)
        max_symbols = self.config.max_symbols
        hyps, new_state = greedy_decode(
            net, enc, output.lengths, max_symbols, state, loop=loop, runner=runner, lm=lm, lm_alpha=alpha
        )
        return net, hyps, new_state

    @torch.inference_mode()
    def _graph_runner(self, net, batch: int, frames: int, device, dtype) -> LabelLoopingRunner:
        """A CUDA-graph-captured runner with room for the batch (re-captured when a batch is larger;
        smaller batches are padded with zero-length rows). Not exercised by the tests (no CUDA here)."""
        cached = getattr(self, "_runner", None)
        if (
            cached is not None
            and cached.net is net
            and cached.enc_proj.device == device
            and cached.enc_proj.dtype == dtype
            and cached.batch >= batch
            and cached.max_time >= frames
        ):
            return cached
        max_time = -(-frames // 64) * 64  # round up so nearby lengths reuse the graphs
        if cached is not None and cached.net is net:
            batch, max_time = max(batch, cached.batch), max(max_time, cached.max_time)
        runner = LabelLoopingRunner(
            net,
            batch,
            max_time,
            self.config.max_symbols,
            device,
            dtype,
            static=True,
            lm=self._lm_on(device),
            lm_alpha=self.config.ngram_lm_alpha,
        )
        runner.capture()
        self._runner = runner
        return runner

    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        """Decode a batch from the start of each utterance."""
        net, hyps, _ = self._run(output, None)
        return self._results(net, hyps, output.frame_shift)

    def initial_state(self, output: ModelOutput) -> TransducerStreamState:
        """A fresh streaming state for the batch of ``output`` (one row per stream)."""
        net = output.extra.get("transducer")
        if net is None or output.encoder_out is None:
            raise ConfigError("decoder.type=transducer-greedy needs a transducer model output")
        device = output.encoder_out.device
        return initial_stream_state(net, output.encoder_out.shape[0], device, self._lm_on(device))

    def decode_chunk(
        self, output: ModelOutput, state: TransducerStreamState | None = None
    ) -> tuple[list[DecodeResult], TransducerStreamState]:
        """Decode the next chunk of encoder frames of a batch of streams.

        Returns the tokens found in this chunk (frames are global, counted from the stream start) and
        the state to pass with the next chunk; concatenating the chunk results equals :meth:`decode`
        of the whole encoder output. ``output.lengths`` are the valid frames of this chunk per stream.
        """
        net, hyps, new_state = self._run(output, state)
        return self._results(net, hyps, output.frame_shift), new_state

    def _results(self, net, hyps: BatchedHyps, shift: float) -> list[DecodeResult]:
        """One host copy per field for the whole batch, then per-utterance Python."""
        n = int(hyps.lengths.max()) if hyps.batch else 0
        tdt = bool(net.durations)
        lengths = hyps.lengths.cpu().tolist()
        tokens_h = hyps.transcript[:, :n].cpu().tolist()
        frames_h = hyps.timestamps[:, :n].cpu().tolist()
        durs_h = hyps.durations[:, :n].cpu().tolist()
        probs_h = hyps.token_logp[:, :n].float().exp().cpu().tolist()
        scores = hyps.scores.float().cpu().tolist()
        lm_scores = hyps.lm_scores.float().cpu().tolist() if self.lm is not None else None
        alpha = self.config.ngram_lm_alpha
        results = []
        for b in range(hyps.batch):
            k = lengths[b]
            tokens, frames, durs, probs = tokens_h[b][:k], frames_h[b][:k], durs_h[b][:k], probs_h[b][:k]
            words = token_words(self.context.words_of(tokens), frames, durs if tdt else None, shift, probs)
            results.append(
                DecodeResult(
                    words=words,
                    tokens=tokens,
                    token_frames=frames,
                    score=scores[b] + alpha * lm_scores[b] if lm_scores is not None else scores[b],
                    acoustic_score=scores[b],
                    lm_score=lm_scores[b] if lm_scores is not None else None,
                    token_durations=durs if tdt else None,
                )
            )
        return results
