"""The one decoder interface: a batch of model outputs in, one DecodeResult per utterance out."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from asrdecode.errors import ConfigError
from asrdecode.models.base import ModelOutput


@dataclass
class Word:
    """A recognised word with start/end time in seconds (None: the decoder aligns no word to the
    audio, as an attention encoder-decoder's) and an optional confidence."""

    word: str
    start: float | None
    end: float | None
    confidence: float | None = None


@dataclass
class DecodeResult:
    """Per-utterance decoder output.

    tokens: unit ids (model output columns) of the 1-best; token_frames: output frame of each.
    score: total log score of the 1-best (higher is better); acoustic/lm parts where known.
    nbest: optional list of (words, score); lattice: optional decoder-specific lattice object.
    token_durations: TDT transducers: the predicted duration (frames) of each token, else None.
    model_text: the tokens' text as the model's toolkit writes it, where the words are that text
    split at whitespace (`set_model_texts`: NeMo keeps a space a character model emits at either
    end or twice in a row); None: the text is the words joined by one space.
    """

    words: list[Word]
    tokens: list[int] = field(default_factory=list)
    token_frames: list[int] = field(default_factory=list)
    score: float = 0.0
    acoustic_score: float | None = None
    lm_score: float | None = None
    nbest: list[tuple[list[str], float]] | None = None
    lattice: Any = None
    token_durations: list[int] | None = None
    model_text: str | None = None

    @property
    def text(self) -> str:
        """`model_text` where set, else the words joined by one space."""
        if self.model_text is not None:
            return self.model_text
        return " ".join(w.word for w in self.words)


@dataclass
class DecoderContext:
    """What a decoder may know about the model: its units, blank and how units form words;
    ``text_of``: the tokens' text as the model's toolkit writes it (None: the words joined)."""

    units: list[str]
    blank_id: int
    frame_shift: float
    words_of: Callable[[list[int]], list[tuple[str, int, int]]]
    text_of: Callable[[list[int]], str] | None = None


def set_model_texts(results: Iterable[DecodeResult], text_of: Callable[[list[int]], str] | None) -> None:
    """Give each result the text of its tokens (``text_of``, e.g. NeMo's detokenisation) as its
    `model_text` where its words are that text split at whitespace, so that the text keeps the
    model's spacing; a result whose words came otherwise (a graph's word outputs, joined segments)
    keeps its words joined by one space."""
    if text_of is None:
        return
    for result in results:
        text = text_of(list(result.tokens))
        if text.split() == [w.word for w in result.words]:
            result.model_text = text


class Decoder(Protocol):
    """Pure tensor algorithm with a small dataclass config and no I/O.

    Built once per run as `DecoderClass(config, context)`; `decode` takes a batch of model
    outputs (log-probs/encoder states + lengths, on any device) and returns one result per
    utterance, in batch order.
    """

    name: ClassVar[str]
    config_type: ClassVar[type]

    def decode(self, output: ModelOutput) -> list[DecodeResult]: ...


class DecoderBase:
    """What the decoder classes share: the registry's `name` and `config_type`, and a constructor
    that runs the option checks (`check_options`, also run when a config is built: none by default)
    and keeps the config and the model's `context`."""

    name: ClassVar[str]
    config_type: ClassVar[type]

    @staticmethod
    def check_options(config: Any) -> None:
        """One-line ConfigErrors for option values the decoder cannot use (none by default)."""

    def __init__(self, config: Any, context: DecoderContext) -> None:
        self.check_options(config)
        self.config = config
        self.context = context


def check_values(checks: Iterable[tuple[str, Any, bool, str]]) -> None:
    """A decoder's option checks as (key, value, ok, what it must be) rows: a one-line ConfigError
    ``decoder.<key> must be <what>, got <value>`` for the first row that is not ok."""
    for key, value, ok, want in checks:
        if not ok:
            raise ConfigError(f"decoder.{key} must be {want}, got {value!r}")


def check_fusion_weight(config: Any) -> None:
    """A shallow-fusion weight (``ngram_lm_alpha``) needs the LM (``ngram_lm``)."""
    if config.ngram_lm_alpha and not config.ngram_lm:
        raise ConfigError("decoder.ngram_lm_alpha is set but decoder.ngram_lm (an ARPA file) is not")


def nbest_words(
    ranked: Iterable[tuple[list[int], float]], words_of: Callable[[list[int]], list[tuple[str, int, int]]]
) -> list[tuple[list[str], float]]:
    """A beam search's n-best list from its (tokens, score) hypotheses in rank order: each distinct
    token sequence once (its best), as its words (`DecoderContext.words_of`); empty slots (score
    -inf) left out."""
    out, seen = [], set()
    for tokens, score in ranked:
        if score == float("-inf") or tuple(tokens) in seen:
            continue
        seen.add(tuple(tokens))
        out.append(([w for w, _, _ in words_of(tokens)], score))
    return out


@dataclass
class PendingDecode:
    """A batch being decoded (`start_decode`): ``result()`` waits for its results, ``cancel()``
    drops the work no worker has started."""

    result: Callable[[], list[DecodeResult]]
    cancel: Callable[[], None] = lambda: None

    @classmethod
    def done(cls, results: list[DecodeResult]) -> PendingDecode:
        return cls(lambda: results)


def start_decode(decoder: Decoder, output: ModelOutput) -> PendingDecode:
    """Start decoding a batch. A decoder whose workers take batches from a queue (``start``: the
    compiled WFST searches on the CPU) returns at once, the batch queued behind the one before,
    so that the caller can read the next batch while this one is decoded and no worker waits
    between batches; any other decodes it here, now."""
    start = getattr(decoder, "start", None)
    if start is not None:
        return start(output)
    return PendingDecode.done(decoder.decode(output))
