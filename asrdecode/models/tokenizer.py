"""Output-unit tokenizers: sentencepiece BPE (from the model bytes) or a character label list."""

from __future__ import annotations

from collections.abc import Sequence

import sentencepiece as spm

__all__ = ["AggregateTokenizer", "Tokenizer", "WORD_START"]

WORD_START = "\u2581"  # sentencepiece's word-boundary marker '▁'


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

    def decode(self, ids: Sequence[int]) -> str:
        """Unit ids -> text (sentencepiece detokenisation, or concatenated labels)."""
        ids = [int(i) for i in ids]
        if self._sp is not None:
            return self._sp.decode(ids)
        return "".join(self.units[i] for i in ids)

    def words_of(self, token_ids: Sequence[int]) -> list[tuple[str, int, int]]:
        """Group unit ids into words: [(word, index of first token, index of last token)].

        BPE: a piece starting with '▁' starts a word; ``<unk>`` is a word of its own (it detokenises to
        '⁇' between spaces); control pieces and tokens that decode to nothing are skipped.
        Chars: the space label separates words.
        """
        ids = [int(i) for i in token_ids]
        groups: list[list[int]] = []  # token positions
        if self._sp is not None:
            sp = self._sp
            prev_unk = False
            for pos, tid in enumerate(ids):
                if sp.is_control(tid):
                    continue
                unk = sp.is_unknown(tid)
                if not groups or unk or prev_unk or sp.id_to_piece(tid).startswith(WORD_START):
                    groups.append([])
                groups[-1].append(pos)
                prev_unk = unk
            words = []
            for g in groups:
                text = sp.decode([ids[p] for p in g]).strip()
                if text:
                    words.append((text, g[0], g[-1]))
            return words
        current: list[int] = []
        for pos, tid in enumerate(ids):
            if self.units[tid] == self.space:
                if current:
                    groups.append(current)
                current = []
            else:
                current.append(pos)
        if current:
            groups.append(current)
        return [("".join(self.units[ids[p]] for p in g), g[0], g[-1]) for g in groups]

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
        return {"type": self.kind, "size": len(self.units)}


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
