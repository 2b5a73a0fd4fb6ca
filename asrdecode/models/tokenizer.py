"""Output-unit tokenizers: sentencepiece BPE (from the model bytes) or a character label list.

Text is NeMo's: the detokenised units (sentencepiece's decode, or the labels joined) with one
whitespace character removed before each punctuation mark of the vocabulary (`nemo_punctuation`),
as NeMo's CTC and transducer decodings write it, whitespace as it comes (a space a character model
emits at either end or twice in a row stays); words are that text split at whitespace.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

import sentencepiece as spm

__all__ = [
    "AggregateTokenizer", "Tokenizer", "WORD_START", "nemo_punctuation", "nemo_text_words", "units_text",
    "units_text_words", "units_words",
]  # fmt: skip

WORD_START = "\u2581"  # sentencepiece's word-boundary marker '▁'

# Vocabulary entries whose punctuation does not count (NeMo's extract_punctuation_from_vocab).
_SPECIAL_ENTRY = [re.compile(p) for p in (r"^\[.*\]$", r"^<.*>$", r"^##", "^" + WORD_START, r"^\s*$")]
_WORD = re.compile(r"\S+")


def nemo_punctuation(vocab: Iterable[str]) -> frozenset[str]:
    """The punctuation marks NeMo attaches to the text before them: every character of Unicode
    category P in a vocabulary entry that is not special (``[..]``, ``<..>``, ``##..``, a piece
    starting with '▁', whitespace). A word-initial piece such as ``▁'`` alone adds nothing."""
    return frozenset(
        c
        for entry in vocab
        if not any(p.match(entry) for p in _SPECIAL_ENTRY)
        for c in entry
        if unicodedata.category(c).startswith("P")
    )


def _space_before(punctuation: frozenset[str]) -> re.Pattern | None:
    """NeMo's ``space_before_punct_pattern``: one whitespace character, then a mark."""
    if not punctuation:
        return None
    return re.compile(r"(\s)(" + "|".join(re.escape(p) for p in sorted(punctuation)) + ")")


def nemo_text_words(
    surfaces: Sequence[str], pattern: re.Pattern | None, space_joins_next: bool
) -> tuple[str, list[tuple[str, int, int]]]:
    """NeMo's text of tokens whose detokenised pieces are ``surfaces`` (their concatenation is the
    plain detokenised text), and its words [(word, first token, last token)].

    The text loses the whitespace character before each match of ``pattern`` (the regex NeMo's
    ``decode_tokens_to_str_with_strip_punctuation`` applies); words are its runs of non-whitespace,
    each spanning the tokens its characters came from. With ``space_joins_next`` (sentencepiece), a
    token that is only whitespace (a lone '▁') right before a word-internal piece is the word's
    first token, as in NeMo's word offsets.
    """
    text = "".join(surfaces)
    owner = [t for t, s in enumerate(surfaces) for _ in s]
    if pattern is not None:
        drop = {m.start(1) for m in pattern.finditer(text)}
        if drop:
            keep = [i for i in range(len(text)) if i not in drop]
            text, owner = "".join(text[i] for i in keep), [owner[i] for i in keep]
    words = []
    for m in _WORD.finditer(text):
        first, last = owner[m.start()], owner[m.end() - 1]
        if space_joins_next and first > 0 and not surfaces[first][:1].isspace():
            before = surfaces[first - 1]
            if before and before.isspace():
                first -= 1
        words.append((m.group(), first, last))
    return text, words


def units_text_words(
    units: Sequence[str],
) -> Callable[[list[int]], tuple[str, list[tuple[str, int, int]]]]:
    """NeMo's text and words of unit ids for a bare unit list (saved log-probs: no tokenizer
    model), by the rule of `nemo_text_words` over the units' own text: BPE pieces with '▁' as a
    space (dropped from each piece before the text's first character) and ``<unk>`` as ' ⁇ ', as
    sentencepiece writes them; character labels with ' ', '|' or ``<space>`` as the word separator."""
    bpe = any(u.startswith(WORD_START) for u in units)
    if bpe:
        text = [" \u2047 " if u == "<unk>" else u.replace(WORD_START, " ") for u in units]
    else:
        text = [" " if u in (" ", "|", "<space>") else u for u in units]
    pattern = _space_before(nemo_punctuation(units))

    def text_words(tokens: list[int]) -> tuple[str, list[tuple[str, int, int]]]:
        surfaces = [text[int(t)] for t in tokens]
        for i, t in enumerate(tokens if bpe else ()):
            if surfaces[i] and units[int(t)] != "<unk>":
                surfaces[i] = surfaces[i][1:] if surfaces[i].startswith(" ") else surfaces[i]
            if surfaces[i]:
                break
        return nemo_text_words(surfaces, pattern, bpe)

    return text_words


def units_words(units: Sequence[str]) -> Callable[[list[int]], list[tuple[str, int, int]]]:
    """The words of `units_text_words`: [(word, first token, last token)]."""
    text_words = units_text_words(units)
    return lambda tokens: text_words(tokens)[1]


def units_text(units: Sequence[str]) -> Callable[[list[int]], str]:
    """The text of `units_text_words`, whitespace as NeMo writes it."""
    text_words = units_text_words(units)
    return lambda tokens: text_words(tokens)[0]


class Tokenizer:
    """Maps text <-> unit ids. ``units`` excludes the blank (blank id = ``len(units)`` in NeMo models).

    Build with :meth:`from_sentencepiece` (BPE/unigram model bytes) or :meth:`from_labels` (chars).
    """

    def __init__(
        self,
        units: list[str],
        kind: str,
        sp: spm.SentencePieceProcessor | None = None,
        model_bytes: bytes | None = None,
        space: str = " ",
    ) -> None:
        self.units = units
        self.kind = kind
        self._sp = sp
        self.model_bytes = model_bytes
        self.space = space
        self._index = {u: i for i, u in enumerate(units)} if kind == "char" else {}
        self.punctuation = nemo_punctuation(units)
        self._pattern = _space_before(self.punctuation)

    def without_punctuation_rule(self) -> Tokenizer:
        """This tokenizer writing the plain detokenised text (no space removed before marks), as
        NeMo's attention encoder-decoders (Canary) write theirs; returns it."""
        self.punctuation, self._pattern = frozenset(), None
        return self

    @classmethod
    def from_sentencepiece(cls, model_bytes: bytes) -> Tokenizer:
        """From the bytes of a sentencepiece ``.model`` file (never a path, nothing is executed)."""
        sp = spm.SentencePieceProcessor()
        sp.LoadFromSerializedProto(model_bytes)
        units = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        return cls(units, "bpe", sp=sp, model_bytes=bytes(model_bytes))

    @classmethod
    def from_labels(cls, labels: Sequence[str], space: str = " ") -> Tokenizer:
        """From a character label list (NeMo ``labels``); ``space`` is the word-separator label."""
        labels = [str(x) for x in labels]
        if len(set(labels)) != len(labels):
            raise ValueError("duplicate labels in the character vocabulary")
        return cls(labels, "char", space=space)

    def __len__(self) -> int:
        return len(self.units)

    @property
    def vocab_size(self) -> int:
        """Number of units (without blank)."""
        return len(self.units)

    def encode(self, text: str) -> list[int]:
        """Text -> unit ids. Chars: lower-cased if no label has upper case; unknown chars dropped."""
        if self._sp is not None:
            return list(self._sp.encode(text))
        if not any(u != u.lower() for u in self.units):
            text = text.lower()
        text = " ".join(text.split()) if self.space == " " else text
        return [self._index[c] for c in text if c in self._index]

    def surfaces(self, ids: Sequence[int]) -> list[str]:
        """Each unit's share of the plain detokenised text (sentencepiece's decode: '▁' as a space,
        the first one dropped, ``<unk>`` as ' ⁇ ', control pieces empty; chars: the labels, the
        word-separator label as a space); their concatenation is that text."""
        ids = [int(i) for i in ids]
        if self._sp is None:
            return [" " if self.units[i] == self.space else self.units[i] for i in ids]
        if not ids:  # (sentencepiece 0.2.2 fails to parse the proto of no ids)
            return []
        proto = self._sp.decode_ids_as_proto(ids)
        pieces = [p.surface for p in proto.pieces]
        if len(pieces) != len(ids) or "".join(pieces) != proto.text:  # not seen: one share for all
            return [proto.text] + [""] * (len(ids) - 1)
        return pieces

    def decode(self, ids: Sequence[int]) -> str:
        """Unit ids -> NeMo's text: detokenised, one space removed before each of the vocabulary's
        punctuation marks (`nemo_punctuation`)."""
        return nemo_text_words(self.surfaces(ids), self._pattern, self._sp is not None)[0]

    def words_of(self, token_ids: Sequence[int]) -> list[tuple[str, int, int]]:
        """The words of NeMo's text (`decode`): [(word, index of first token, index of last token)].

        A punctuation mark of the vocabulary joins the word before it (``don 't`` -> ``don't``);
        ``<unk>`` is a word of its own ('⁇' between spaces); control pieces belong to no word; a lone
        '▁' piece starts the word that follows it.
        """
        return nemo_text_words(self.surfaces(token_ids), self._pattern, self._sp is not None)[1]

    def special_id(self, token: str) -> int:
        """Id of a piece that is one token of the sentencepiece model (a user-defined symbol such as
        Canary's ``<|en|>``); KeyError if the model has no such piece."""
        if self._sp is None:
            raise KeyError(token)
        token_id = self._sp.piece_to_id(token)
        if self._sp.id_to_piece(token_id) != token:
            raise KeyError(token)
        return token_id

    def prompt_ids(self, tokens: Sequence[str]) -> list[int]:
        """A prompt of special tokens as NeMo's prompt formatter tokenizes it with a plain
        sentencepiece model: the tokens' text encoded whole (so a word-start piece may lead it)."""
        for token in tokens:
            self.special_id(token)
        return list(self._sp.encode("".join(tokens)))

    @property
    def langs(self) -> list[str] | None:
        return None

    def describe(self) -> dict:
        """Short summary for ``asrdecode info``."""
        info: dict = {"type": self.kind, "size": len(self.units)}
        if self.punctuation:
            info["punctuation"] = "".join(sorted(self.punctuation))
        return info


class AggregateTokenizer:
    """NeMo's aggregate tokenizer (Canary's ``CanaryTokenizer``): sentencepiece models side by side,
    one per language plus one of special tokens (``spl_tokens``), their ids offset in the order the
    config lists them. ``units`` is the joined vocabulary (no blank); text is the pieces joined
    with '▁' as a space, as NeMo's ``ids_to_text``."""

    kind = "agg"
    model_bytes = None

    def __init__(self, models: dict[str, bytes]) -> None:
        if not models:
            raise ValueError("an aggregate tokenizer needs at least one sentencepiece model")
        self.langs = list(models)
        self._sp: list[spm.SentencePieceProcessor] = []
        self.offsets: dict[str, int] = {}
        self.units: list[str] = []
        self._owner: list[int] = []  # unit id -> index of its sentencepiece model
        for n, (lang, data) in enumerate(models.items()):
            sp = spm.SentencePieceProcessor()
            sp.LoadFromSerializedProto(data)
            self._sp.append(sp)
            self.offsets[lang] = len(self.units)
            pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
            self.units += pieces
            self._owner += [n] * len(pieces)
        self._special = {
            u: i
            for i, u in enumerate(self.units)
            if (u.startswith("<|") and u.endswith("|>")) or u == "<pad>"
            if self.langs[self._owner[i]] == "spl_tokens"
        }

    def __len__(self) -> int:
        return len(self.units)

    @property
    def vocab_size(self) -> int:
        return len(self.units)

    def special_id(self, token: str) -> int:
        """Id of a special token (``<|en|>``, ``<pad>``) of the ``spl_tokens`` model; KeyError if none."""
        return self._special[token]

    def prompt_ids(self, tokens: Sequence[str]) -> list[int]:
        """A prompt of special tokens: each one's id (NeMo's ``CanaryTokenizer._tokenize_special_prompt``)."""
        return [self.special_id(token) for token in tokens]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> text: pieces joined, '▁' read as a space (NeMo's ``AggregateTokenizer.ids_to_text``);
        ids beyond the vocabulary (the output layer is rounded up to 8) are skipped."""
        pieces = [self.units[i] for i in map(int, ids) if 0 <= i < len(self.units)]
        return "".join(pieces).replace(WORD_START, " ")

    def words_of(self, token_ids: Sequence[int]) -> list[tuple[str, int, int]]:
        """[(word, index of first token, index of last token)]: a piece starting with '▁' starts a
        word, a special token is a word of its own, ids beyond the vocabulary are skipped."""
        groups: list[list[int]] = []
        prev_special = False
        for pos, tid in enumerate(int(t) for t in token_ids):
            if not 0 <= tid < len(self.units):
                continue
            special = self.units[tid] in self._special
            if not groups or special or prev_special or self.units[tid].startswith(WORD_START):
                groups.append([])
            groups[-1].append(pos)
            prev_special = special
        ids = [int(t) for t in token_ids]
        words = []
        for g in groups:
            text = self.decode([ids[p] for p in g]).strip()
            if text:
                words.append((text, g[0], g[-1]))
        return words

    def describe(self) -> dict:
        return {
            "type": self.kind,
            "size": len(self.units),
            "models": {lang: self._sp[n].get_piece_size() for n, lang in enumerate(self.langs)},
        }
