"""`aed-greedy` and `aed-beam`: autoregressive decoding of attention encoder-decoder models (Canary).

Both feed the model's prompt, then one token per step, to the network a model puts in
``ModelOutput.extra["aed"]`` (`asrdecode.models.aed.NemoAEDModel`: ``start``, ``step``, its
``eos_id`` / ``pad_id`` and ``prompt_batch``: the model's prompt, or each utterance's from
``extra["prompt_slots"]``), for the whole batch at once on the model's device, as NeMo's
``GreedySequenceGenerator`` and ``BeamSearchSequenceGenerator`` do:

- greedy: the arg max token at each step; a hypothesis that wrote ``<|endoftext|>`` is padded
  after it; each utterance stops there or after ``max_generation_delta`` tokens beyond its own
  encoder frames (never past the decoder's positions), the batch when all have stopped.
- beam: the ``beam_size`` best extensions of each of the ``beam_size`` best prefixes, ranked by
  their log-probability divided by the length penalty of Wu et al. 2016 (GNMT, eq. 14:
  ((5 + |Y|) / 6) ** alpha, ``length_penalty`` = alpha, |Y| counting the prompt); an ended
  hypothesis keeps its score and is extended only by padding. Ranking, ties and the penalty's
  bookkeeping follow NeMo's ``BeamSearchSequenceGenerator`` step for step.

The text tokens are what follows the prompt, up to the end token. Words carry times only where the
model writes Canary's frame tokens (a ``<|timestamp|>`` prompt: `NemoAEDModel.timed_words`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from asrdecode.decoders.base import DecoderBase, DecoderContext, DecodeResult, Word, check_values
from asrdecode.models.base import ModelOutput

#: NeMo's penalty for an ended beam hypothesis's other extensions (``NEG_INF``)
ENDED_PENALTY = -10000.0


@dataclass
class AedGreedyConfig:
    """Options of greedy AED decoding."""

    # at most this many tokens beyond the encoder's frames (NeMo's max_generation_delta); -1: only
    # the decoder's positions bound the length
    max_generation_delta: int = 50


@dataclass
class AedBeamConfig:
    """Options of AED beam search (NeMo's ``decoding.beam``)."""

    beam_size: int = 4
    length_penalty: float = 0.0  # alpha of the GNMT length penalty ((5 + |Y|) / 6) ** alpha
    max_generation_delta: int = 50
    nbest: int = 1  # hypotheses kept in the result's n-best list (at most beam_size)


def _network(output: ModelOutput) -> Any:
    network = output.extra.get("aed")
    if network is None or output.encoder_out is None:
        raise ValueError("AED decoding needs an attention encoder-decoder model (a NeMo Canary .nemo)")
    return network


def generation_limits(network: Any, lengths: torch.Tensor, prompt: int, delta: int) -> torch.Tensor:
    """Tokens each utterance may write after its prompt: NeMo's ``_prepare_for_search``
    (min(decoder positions, encoder frames + delta) - prompt length), from the utterance's own
    frames (NeMo's from the batch's padded length: there an utterance's limit depends on its batch)."""
    limit = torch.full_like(lengths, network.max_sequence_length)
    if delta >= 0:
        limit = torch.minimum(limit, lengths + delta)
    return (limit - prompt).clamp(min=0)


def text_tokens(sequence: list[int], eos: int, pad: int) -> list[int]:
    """A generated sequence (prompt removed) without its trailing end and padding tokens."""
    end = len(sequence)
    while end > 0 and sequence[end - 1] in (eos, pad):
        end -= 1
    return sequence[:end]


def _begin(output: ModelOutput, delta: int) -> tuple[Any, torch.Tensor, torch.Tensor, Any]:
    """The network, each utterance's prompt [N, P] and length limit [N], and the state before
    the prompt (cross-attention keys and values of the encoder states)."""
    net = _network(output)
    enc = output.encoder_out
    prompt = net.prompt_batch(output.extra.get("prompt_slots"), enc.shape[0], enc.device)
    lengths = output.lengths.to(enc.device)
    limits = generation_limits(net, lengths, prompt.shape[1], delta)
    return net, prompt, limits, net.start(enc, lengths)


def _result(net: Any, tokens: list[int], log_probs: list[float], score: float, nbest=None) -> DecodeResult:
    """The words of ``tokens`` (each token's log-probability given: a word's confidence is the least
    probability of its tokens, as NeMo's ``max_prob`` confidence with ``min`` aggregation)."""
    probs = [math.exp(x) for x in log_probs[: len(tokens)]]
    words = [Word(word, start, end, conf) for word, start, end, conf in net.timed_words(tokens, probs)]
    return DecodeResult(words=words, tokens=tokens, token_frames=[], score=score, nbest=nbest)


class AedGreedyDecoder(DecoderBase):
    """Batched greedy decoding; score = the sum of the chosen tokens' log-probabilities."""

    name: ClassVar[str] = "aed-greedy"
    config_type: ClassVar[type] = AedGreedyConfig

    def __init__(self, config: AedGreedyConfig, context: DecoderContext):
        super().__init__(config, context)
        self.last_info: dict = {}  # the last batch's count of hypotheses stopped without an end token

    @torch.inference_mode()
    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        n = output.lengths.shape[0]
        if n == 0:
            return []
        net, prompt, limits, state = _begin(output, self.config.max_generation_delta)
        ended = limits <= 0
        closed = torch.zeros_like(ended)  # wrote the end token
        scores = torch.zeros(n, dtype=torch.float32, device=prompt.device)
        written, chosen = [], []
        tokens = prompt
        for step in range(int(limits.max())):
            log_probs = net.step(state, tokens)
            best, nxt = log_probs.max(dim=-1)
            scores += torch.where(ended, torch.zeros_like(best), best.float())
            nxt = torch.where(ended, torch.full_like(nxt, net.pad_id), nxt)
            closed |= nxt == net.eos_id
            ended |= (nxt == net.eos_id) | (limits <= step + 1)
            written.append(nxt)
            chosen.append(best.float())
            tokens = nxt[:, None]
            if bool(ended.all()):
                break
        rows = torch.stack(written, dim=1).tolist() if written else [[] for _ in range(n)]
        row_log_probs = torch.stack(chosen, dim=1).tolist() if chosen else [[] for _ in range(n)]
        self.last_info = {"unfinished": int((~closed).sum())}
        return [
            _result(net, text_tokens(row, net.eos_id, net.pad_id), lps, float(s))
            for row, lps, s in zip(rows, row_log_probs, scores.tolist(), strict=True)
        ]


def length_penalty(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT's length penalty ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14)."""
    return ((5 + lengths) / 6).pow(alpha)


class AedBeamDecoder(DecoderBase):
    """Batched beam search, NeMo's ``BeamSearchSequenceGenerator``: every utterance's beams in one
    [B * beam] batch of the network; score = the best hypothesis's log-probability (its n-best
    list ranked by the penalised score)."""

    name: ClassVar[str] = "aed-beam"
    config_type: ClassVar[type] = AedBeamConfig

    @staticmethod
    def check_options(config: AedBeamConfig) -> None:
        """One-line ConfigErrors for values the search cannot use."""
        size, nbest = config.beam_size, config.nbest
        checks = [
            ("beam_size", size, size >= 1, ">= 1"),
            ("nbest", nbest, 1 <= nbest <= size, "between 1 and decoder.beam_size"),
        ]
        check_values(checks)

    def __init__(self, config: AedBeamConfig, context: DecoderContext):
        super().__init__(config, context)
        self.last_info: dict = {}

    @torch.inference_mode()
    def decode(self, output: ModelOutput) -> list[DecodeResult]:
        batch, k = output.lengths.shape[0], self.config.beam_size
        if batch == 0:
            return []
        net, prompt, limits, state = _begin(output, self.config.max_generation_delta)
        device, p, alpha = prompt.device, prompt.shape[1], self.config.length_penalty
        log_probs = net.step(state, prompt)  # [B, V]
        scores, first = torch.topk(log_probs, k, dim=-1)  # [B, k]
        scores, first = scores.reshape(-1, 1), first.reshape(-1, 1)
        rows = torch.arange(batch, device=device).repeat_interleave(k)
        state = state.select(rows)
        prefixes = torch.cat((prompt[rows], first), dim=1)
        token_log_probs = scores.clone()  # [B*k, tokens so far]: each written token's log-probability
        row_limits = limits[rows][:, None]  # loop steps after the first token, per hypothesis
        ended = (row_limits <= 0).long()
        hyp_lengths = torch.full_like(scores, p + 2)
        identity = torch.arange(batch * k, device=device)
        for step in range(int(limits.max())):
            # an utterance whose hypotheses have all ended is left as it is (as NeMo's search of
            # that utterance alone stops there), whatever the rest of the batch does
            done = ended.view(batch, k).all(dim=1).repeat_interleave(k)
            pad_mask = ended.repeat(1, k).to(scores.dtype)
            log_probs = net.step(state, prefixes[:, -1:])
            scores_i, tokens_i = torch.topk(log_probs, k, dim=-1)  # [B*k, k]
            tokens_i = torch.where(pad_mask.bool(), torch.full_like(tokens_i, net.pad_id), tokens_i)
            pad_mask[:, 1:] = pad_mask[:, 1:] * ENDED_PENALTY
            scores = scores + scores_i * (1 - pad_mask)
            penalties = length_penalty(hyp_lengths, alpha)
            kept = scores.gather(1, torch.zeros_like(tokens_i[:, :1]))
            scores = scores / penalties
            scores, index = torch.topk(scores.view(batch, k * k), k, dim=1)
            scores = torch.where(done[:, None], kept, scores.view(-1, 1) * penalties)
            source = (index // k + torch.arange(batch, device=device)[:, None] * k).reshape(-1)
            source = torch.where(done, identity, source)
            written = tokens_i.view(batch, k * k).gather(1, index).view(-1, 1)
            written = torch.where(done[:, None], torch.full_like(written, net.pad_id), written)
            prefixes = torch.cat((prefixes[source], written), dim=1)
            written_lp = scores_i.view(batch, k * k).gather(1, index).view(-1, 1)
            token_log_probs = torch.cat((token_log_probs[source], written_lp), dim=1)
            state = state.select(source, same_utterances=True)  # sources stay within their utterance
            live = prefixes.ne(net.eos_id) & prefixes.ne(net.pad_id)
            hyp_lengths = 1 + live.sum(dim=1, keepdim=True).to(scores.dtype)
            ended = ((~live[:, -1:]) | (row_limits <= step + 1)).long()
            if int(ended.sum()) == batch * k:
                break
        penalised = (scores / length_penalty(hyp_lengths, alpha)).view(batch, k)
        raw = scores.view(batch, k)
        sequences = prefixes[:, p:].view(batch, k, -1).tolist()
        sequence_log_probs = token_log_probs.view(batch, k, -1).tolist()
        results = []
        unfinished = 0
        for b in range(batch):
            order = torch.argsort(penalised[b], descending=True, stable=True).tolist()
            best = int(torch.argmax(penalised[b]))
            texts = []
            for j in order[: self.config.nbest]:
                toks = text_tokens(sequences[b][j], net.eos_id, net.pad_id)
                texts.append(([w[0] for w in net.timed_words(toks)], float(raw[b, j])))
            tokens = text_tokens(sequences[b][best], net.eos_id, net.pad_id)
            unfinished += net.eos_id not in sequences[b][best]
            nbest = texts if self.config.nbest > 1 else None
            results.append(_result(net, tokens, sequence_log_probs[b][best], float(raw[b, best]), nbest))
        self.last_info = {"unfinished": unfinished}
        return results
