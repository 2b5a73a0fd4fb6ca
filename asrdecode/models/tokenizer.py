"""Output-unit tokenizers: sentencepiece BPE (from the model bytes) or a character label list."""

from __future__ import annotations

from collections.abc import Sequence

import sentencepiece as spm

__all__ = ["Tokenizer", "WORD_START"]

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

    def describe(self) -> dict:
        """Short summary for ``asrdecode info``."""
        return {"type": self.kind, "size": len(self.units)}
