"""A backoff n-gram LM held in tensors and queried for a whole batch of states at once.

The structure of NGPU-LM (paper 004 section 2.2 and its ref. [22], "GPU-accelerated n-gram LM"): the
ARPA file becomes a weighted acceptor whose states are the n-gram histories present in the file (plus
the empty history, the root, and the ``<s>`` history, the BOS state):

* every n-gram ``h w`` of order < N (the LM order) is an arc ``state(h) --w--> state(h w)``; an n-gram
  of order N is an arc to the longest suffix of ``h w`` that is a state;
* every state but the root has a backoff arc to the state of its longest proper suffix (``h[1:]``, or
  shorter if that n-gram is missing) with the ARPA backoff weight;
* the root holds one arc for every token (a dense table): ARPA unigrams, and for tokens the file does
  not have the ``<unk>`` probability (NGPU-LM convention: divided by the number of such tokens when
  ``normalize_unk``) leading back to the root;
* arcs are stored sorted by (state, token), contiguous per state (CSR offsets);
* ``</s>`` n-grams give final weights, resolved through the backoff chain once at build time.

``advance(states)`` returns ``log p(token | state)`` and the next state for every token of the
vocabulary: each state's backoff chain has at most N - 1 states above the root, so the chain is
walked with a fixed N - 1 steps for the whole batch, the dense root row is written first and the arcs
of the chain's states overwrite it from the lowest order to the highest (each state's arcs are
scattered with the backoff weights accumulated above it). No loop over the batch, no data-dependent
host reads (the tests check op by op), any device; all tables are buffers, so ``.to(device)`` moves
them.

Token ids: ``token_ids="ngpu"`` reads NeMo's token-level ARPA (token id ``i`` written as the single
character ``chr(i + 100)``, NGPU-LM / ``DEFAULT_TOKEN_OFFSET``), ``"words"`` maps ARPA words to ids
through a vocabulary list (ARPA words outside it are dropped with their n-grams; a vocabulary word the
file lacks gets the ``<unk>`` probability). Log-probs are natural logs (ARPA log10 x ln 10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from asrdecode.errors import GraphError
from asrdecode.huge_pages import in_huge_pages
from asrdecode.lm.arpa import FIELD_SEPARATORS, ArpaReader, open_text, split_fields

__all__ = ["NGPU_TOKEN_OFFSET", "BatchedNgramLM"]

NGPU_TOKEN_OFFSET = 100  # NeMo's token-level ARPA: token id i is the character chr(i + 100)
LN10 = math.log(10.0)
_BOS, _EOS, _UNK = -1, -2, -3  # special ARPA words inside the builder
HISTORY_PAD = -4  # after the end of a history shorter than the widest (`history_array`)
_SPECIAL = {"<s>": _BOS, "</s>": _EOS, "<unk>": _UNK}


@dataclass
class _ArpaNgrams:
    """N-grams of one LM file per order as arrays: ``ids[k]`` [n, k+1] token ids (specials negative),
    ``logp[k]`` / ``bow[k]`` [n] natural logs, ``lineno[k]`` [n] source lines (-1: no line numbers)."""

    path: Path
    order: int
    ids: list[np.ndarray] = field(default_factory=list)
    logp: list[np.ndarray] = field(default_factory=list)
    bow: list[np.ndarray] = field(default_factory=list)
    lineno: list[np.ndarray] = field(default_factory=list)
    dropped: int = 0  # n-grams with a word outside the vocabulary (or <unk> in a history)

    def add(self, ids: np.ndarray, logp: np.ndarray, bow: np.ndarray, lineno: np.ndarray) -> None:
        self.ids.append(np.asarray(ids, dtype=np.int64).reshape(len(logp), len(self.ids) + 1))
        self.logp.append(np.asarray(logp, dtype=np.float64))
        self.bow.append(np.asarray(bow, dtype=np.float64))
        self.lineno.append(np.asarray(lineno, dtype=np.int64))
        self.order = len(self.ids)


def _read_arpa(path: Path, word_id) -> _ArpaNgrams:
    """Parse an ARPA file (plain or gzip; structure checked by `ArpaReader`); ``word_id(word) ->
    int | None`` (None = out of vocabulary, raises ValueError for a word that cannot be a token).
    Every problem is one GraphError line ``file:line: problem``."""
    reader = ArpaReader(path)
    rows: list[list] = []
    dropped = 0
    for entry in reader:
        while len(rows) < entry.order:
            rows.append([])
        try:
            ids = [word_id(word) for word in entry.words]
        except ValueError as err:
            raise reader.fail(str(err)) from None
        if None in ids:
            dropped += 1
            continue
        rows[entry.order - 1].append((*ids, entry.log10_prob, entry.log10_backoff, entry.lineno))
    while len(rows) < len(reader.counts):  # declared sections whose every n-gram was dropped
        rows.append([])
    out = _ArpaNgrams(path=reader.path, order=0, dropped=dropped)
    for k, table in enumerate(rows, 1):
        a = np.array(table, dtype=np.float64).reshape(len(table), k + 3)
        out.add(a[:, :k].astype(np.int64), a[:, k] * LN10, a[:, k + 1] * LN10, a[:, k + 2].astype(np.int64))
    return out


def ngrams_of_trie(lm, vocab: list[str], path: Path) -> _ArpaNgrams:
    """The n-grams of a decoded pocketsphinx trie LM (`asrdecode.lm.sphinx_trie.TrieLM`) over the
    word ids of ``vocab`` (its words elsewhere dropped with their n-grams, as from an ARPA file)."""
    ids = {w: i for i, w in enumerate(vocab)}
    ids.update(_SPECIAL)
    missing = len(vocab) + 3  # never a token: marks words outside the vocabulary
    remap = np.array([ids.get(w, missing) for w in lm.vocab], dtype=np.int64)
    out = _ArpaNgrams(path=Path(path), order=0)
    for table in lm.orders:
        words = remap[table.words]
        keep = (words != missing).all(axis=1)
        out.dropped += int((~keep).sum())
        bow = table.log10_backoff if table.log10_backoff is not None else np.zeros(len(words))
        out.add(words[keep], table.log10_prob[keep] * LN10, bow[keep] * LN10, np.full(int(keep.sum()), -1))
    return out


class _HistoryIndex:
    """States keyed by (parent state, last token): the trie of the LM's histories, for vectorised
    lookups of whole token sequences (``walk``) and of their longest suffix that is a state."""

    def __init__(self, vocab_size: int) -> None:
        self.radix = vocab_size + 4  # tokens shifted by +3 (specials are -3..-1)
        self.keys = np.zeros(0, dtype=np.int64)
        self.states = np.zeros(0, dtype=np.int64)

    def add(self, parents: np.ndarray, tokens: np.ndarray, states: np.ndarray) -> None:
        keys = np.concatenate([self.keys, parents * self.radix + tokens + 3])
        states = np.concatenate([self.states, states])
        order = np.argsort(keys, kind="stable")
        self.keys, self.states = keys[order], states[order]

    def triples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(parent state, token, state) of every entry."""
        return self.keys // self.radix, self.keys % self.radix - 3, self.states

    def child(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """State of history(parent) + token, -1 where absent (or where parent is -1)."""
        out = np.full(len(parents), -1, dtype=np.int64)
        if not len(self.keys):
            return out
        q = parents * self.radix + tokens + 3
        pos = np.minimum(np.searchsorted(self.keys, q), len(self.keys) - 1)
        hit = (self.keys[pos] == q) & (parents >= 0)
        out[hit] = self.states[pos[hit]]
        return out

    def walk(self, grams: np.ndarray) -> np.ndarray:
        """State of each row's whole token sequence (rows may end in ``HISTORY_PAD``), -1 where it
        is not a history of the LM."""
        s = np.zeros(len(grams), dtype=np.int64)  # the root
        for j in range(grams.shape[1]):
            s = np.where(grams[:, j] == HISTORY_PAD, s, self.child(s, grams[:, j]))
        return s

    def longest(self, grams: np.ndarray) -> np.ndarray:
        """State of each row's longest suffix that is a history (the root if none)."""
        out = np.zeros(len(grams), dtype=np.int64)
        todo = np.ones(len(grams), dtype=bool)
        for i in range(grams.shape[1]):
            s = self.walk(grams[todo, i:])
            idx = np.flatnonzero(todo)[s >= 0]
            out[idx] = s[s >= 0]
            todo[idx] = False
        return out


def _ngpu_word_id(vocab_size: int):
    def word_id(word: str) -> int:
        if word in _SPECIAL:
            return _SPECIAL[word]
        if len(word) != 1:
            raise ValueError(f"'{word[:20]}' is not an NGPU-LM token (one character chr(id + 100))")
        token = ord(word) - NGPU_TOKEN_OFFSET
        if not 0 <= token < vocab_size:
            raise ValueError(
                f"token '{word}' = id {token} is outside the vocabulary 0..{vocab_size - 1} "
                "(wrong vocab_size, or not an NGPU-LM token ARPA?)"
            )
        return token

    return word_id


def _vocab_word_id(ids: dict[str, int]):
    def word_id(word: str) -> int | None:
        if word in ids:
            return ids[word]
        return _SPECIAL.get(word)  # <s>, </s>, <unk> (when not a vocabulary word); else None: dropped

    return word_id


class BatchedNgramLM(torch.nn.Module):
    """Backoff n-gram LM as tensors: batched ``advance`` over the full vocabulary (see module docstring).

    Buffers: ``arc_offsets`` [S+1] (CSR), ``arc_token`` / ``arc_next`` (int32) / ``arc_weight`` [A]
    sorted by (state, token); ``root_weight`` / ``root_next`` [V] (the dense root row);
    ``backoff_state`` [S], ``backoff_weight`` [S], ``final_weight`` [S] (ln p(</s>), backoff resolved),
    ``state_order`` [S] (history length). State 0 = root (empty history), 1 = BOS (``<s>``).
    """

    ROOT = 0
    BOS = 1

    def __init__(
        self,
        vocab_size: int,
        order: int,
        arc_offsets: torch.Tensor,
        arc_token: torch.Tensor,
        arc_next: torch.Tensor,
        arc_weight: torch.Tensor,
        root_weight: torch.Tensor,
        root_next: torch.Tensor,
        backoff_state: torch.Tensor,
        backoff_weight: torch.Tensor,
        final_weight: torch.Tensor,
        state_order: torch.Tensor,
        vocab: list[str] | None = None,
        info: dict | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.order = int(order)
        self.vocab = vocab
        self.info = dict(info or {})
        degrees = arc_offsets[1:] - arc_offsets[:-1]
        self.max_degree = int(degrees.max()) if degrees.numel() else 0  # widest state (host int, build time)
        self.register_buffer("arc_offsets", arc_offsets.long())
        self.register_buffer("arc_token", arc_token.int())
        self.register_buffer("arc_next", arc_next.int())
        self.register_buffer("arc_weight", arc_weight.float())
        self.register_buffer("root_weight", root_weight.float())
        self.register_buffer("root_next", root_next.long())
        self.register_buffer("backoff_state", backoff_state.long())
        self.register_buffer("backoff_weight", backoff_weight.float())
        self.register_buffer("final_weight", final_weight.float())
        self.register_buffer("state_order", state_order.int())
        self.register_buffer("degree_range", torch.arange(self.max_degree, dtype=torch.long))

    def in_huge_pages(self) -> BatchedNgramLM:
        """Each CPU buffer replaced by a copy, in transparent huge pages where it is large enough
        (`asrdecode.huge_pages`: the compiled searches read the tables at random places). The old
        one is freed unless something else holds it, so take views (`difference._tables`) only
        after this; small ones are copied too, so that none keeps a loaded file's mapping alive
        (safetensors' tensors share one storage per file)."""
        for name, buf in list(self.named_buffers(recurse=False)):
            if buf.device.type == "cpu":
                setattr(self, name, torch.from_numpy(in_huge_pages(buf.numpy(), copy=True)))
        return self

    # ----------------------------------------------------------------- building
    @classmethod
    def from_arpa(
        cls,
        path: str | Path,
        vocab: list[str] | None = None,
        token_ids: str = "words",
        vocab_size: int | None = None,
        normalize_unk: bool | None = None,
    ) -> BatchedNgramLM:
        """Build from an ARPA file (plain or .gz).

        token_ids="words": ARPA words are looked up in ``vocab`` (token id = list index); without a
        vocabulary the ARPA's unigrams are the vocabulary (file order, ``<s>``/``</s>`` excluded).
        token_ids="ngpu": NeMo's token ARPA (token i = ``chr(i + 100)``), ``vocab_size`` = number of
        tokens (a transducer's blank id) is required. ``normalize_unk`` (default: True for ngpu, like
        NeMo's NGPU-LM; False for words, like KenLM): divide the ``<unk>`` probability among the
        vocabulary tokens the file lacks.
        """
        path = Path(path)
        if token_ids == "ngpu":
            if vocab_size is None or vocab_size < 1:
                raise GraphError(
                    f"{path}: token_ids='ngpu' needs vocab_size (number of tokens, blank excluded)"
                )
            word_id = _ngpu_word_id(vocab_size)
            tokens = vocab
        elif token_ids == "words":
            if vocab is None:
                vocab = arpa_unigram_words(path)
            ids: dict[str, int] = {}
            for i, word in enumerate(vocab):
                if word in ("<s>", "</s>"):
                    raise GraphError(f"{path}: the vocabulary must not contain {word} (token {i})")
                if ids.setdefault(word, i) != i:
                    raise GraphError(f"{path}: the vocabulary repeats '{word}' (tokens {ids[word]} and {i})")
            if vocab_size is not None and vocab_size != len(vocab):
                raise GraphError(f"{path}: vocab_size={vocab_size} but the vocabulary has {len(vocab)} words")
            vocab_size = len(vocab)
            word_id = _vocab_word_id(ids)
            tokens = list(vocab)
        else:
            raise GraphError(f"{path}: token_ids must be 'words' or 'ngpu', got {token_ids!r}")
        if normalize_unk is None:
            normalize_unk = token_ids == "ngpu"
        ngrams = _read_arpa(path, word_id)
        return cls._build(ngrams, int(vocab_size), bool(normalize_unk), tokens, token_ids)

    @classmethod
    def from_sphinx_trie(cls, path: str | Path, vocab: list[str]) -> BatchedNgramLM:
        """Build from pocketsphinx's binary trie LM (e.g. its ``en-us.lm.bin``), decoded by
        `asrdecode.lm.sphinx_trie` with no ARPA text in between. The LM is restricted to the words of
        ``vocab`` and renormalised (`limit_vocabulary`: unigrams rescaled, backoffs recomputed), as
        ``scripts/export_sphinx_lm.py`` exports it; token id = index in ``vocab``."""
        from asrdecode.lm.sphinx_trie import limit_vocabulary, read_trie_lm

        trie = read_trie_lm(path)
        limited = limit_vocabulary(trie, set(vocab) & set(trie.vocab))
        return cls._build(ngrams_of_trie(limited, vocab, Path(path)), len(vocab), False, list(vocab), "words")

    @classmethod
    def from_file(cls, path: str | Path, vocab: list[str]) -> BatchedNgramLM:
        """A word LM over ``vocab`` from an ARPA file (plain or .gz) or a pocketsphinx binary trie
        (told apart by the file's first bytes)."""
        from asrdecode.lm.sphinx_trie import is_sphinx_trie

        if is_sphinx_trie(path):
            return cls.from_sphinx_trie(path, vocab)
        return cls.from_arpa(path, vocab=vocab)

    @classmethod
    def _build(
        cls, ngrams: _ArpaNgrams, vocab_size: int, normalize_unk: bool, vocab, token_ids: str
    ) -> BatchedNgramLM:
        """The acceptor of the module docstring from the n-gram arrays, one order at a time (states
        numbered in file order: root, BOS, then the n-grams of each order below N that are histories)."""
        path, order = ngrams.path, ngrams.order
        V = vocab_size
        index = _HistoryIndex(V)
        index.add(np.array([cls.ROOT]), np.array([_BOS]), np.array([cls.BOS]))
        backoff_state = [np.array([cls.ROOT, cls.ROOT])]
        backoff_weight = [np.zeros(2)]
        hist_len = [np.array([0, 1])]
        num_states = 2
        arcs: list[tuple[np.ndarray, ...]] = []
        root_weight = np.full(V, np.nan, dtype=np.float64)
        root_next = np.zeros(V, dtype=np.int64)
        final_root, unk_logp = -math.inf, -math.inf
        final_of: dict[int, float] = {}
        dropped = ngrams.dropped
        seen_bos = False

        def fail(lineno: int, msg: str) -> GraphError:
            return GraphError(f"{path}:{lineno}: {msg}" if lineno >= 0 else f"{path}: {msg}")

        def first_error(checks: list[tuple[np.ndarray, str]], lines: np.ndarray) -> None:
            """Raise for the earliest row (file order) that fails any check."""
            hits = [(int(np.flatnonzero(bad)[0]), msg) for bad, msg in checks if bad.any()]
            if hits:
                row, msg = min(hits, key=lambda h: h[0])
                raise fail(int(lines[row]), msg)

        def repeated(keys: np.ndarray) -> np.ndarray:
            """True at every occurrence of a key after its first (in row order)."""
            out = np.zeros(len(keys), dtype=bool)
            if len(keys):
                _, first = np.unique(keys, return_index=True)
                out[:] = True
                out[first] = False
            return out

        for k in range(1, order + 1):
            ids, logp, bow, lines = (
                ngrams.ids[k - 1],
                ngrams.logp[k - 1],
                ngrams.bow[k - 1],
                ngrams.lineno[k - 1],
            )
            w = ids[:, -1]
            if k == 1:
                for special, rows in ((_BOS, w == _BOS), (_EOS, w == _EOS), (_UNK, w == _UNK)):
                    if rows.any():
                        last = np.flatnonzero(rows)[-1]
                        if special == _BOS:
                            seen_bos = True
                            backoff_weight[0][cls.BOS] = bow[last]
                        elif special == _EOS:
                            final_root = float(logp[last])
                        else:
                            unk_logp = float(logp[last])
                regular = w >= 0
                first_error(
                    [(regular & repeated(np.where(regular, w, -1 - np.arange(len(w)))), "repeated unigram")],
                    lines,
                )
                words = w[regular]
                root_weight[words] = logp[regular]
                if order > 1:
                    new = np.arange(num_states, num_states + len(words))
                    root_next[words] = new
                    index.add(np.zeros(len(words), dtype=np.int64), words, new)
                    backoff_state.append(np.zeros(len(words), dtype=np.int64))
                    backoff_weight.append(bow[regular])
                    hist_len.append(np.ones(len(words), dtype=np.int64))
                    num_states += len(words)
                continue
            hist = ids[:, :-1]
            misplaced = (w == _BOS) | (hist == _EOS).any(axis=1) | (hist[:, 1:] == _BOS).any(axis=1)
            unk = ~misplaced & ((hist == _UNK).any(axis=1) | (w == _UNK))  # <unk> resets the history
            src = index.walk(np.where(misplaced[:, None] | unk[:, None], 0, hist))
            valid = ~misplaced & ~unk & (src >= 0)
            eos = valid & (w == _EOS)
            arc = valid & (w != _EOS)
            unique = -1 - np.arange(len(w))  # a key no other row shares
            checks = [
                (misplaced, "<s> may only start an n-gram and </s> only end one"),
                (~misplaced & ~unk & (src < 0), f"the history of this {k}-gram is not an n-gram of the file"),
                (eos & repeated(np.where(eos, src, unique)), "repeated n-gram"),
            ]
            if k < order:
                checks.append(
                    (arc & repeated(np.where(arc, src * (V + 4) + w + 3, unique)), "repeated n-gram")
                )
            first_error(checks, lines)
            dropped += int(unk.sum())  # such n-grams are never reached
            final_of.update(zip(src[eos].tolist(), logp[eos].tolist(), strict=True))
            src, w, grams, logp, bow = src[arc], w[arc], ids[arc], logp[arc], bow[arc]
            if k < order:
                dst = np.arange(num_states, num_states + len(w))
                backoff_state.append(index.longest(grams[:, 1:]))
                index.add(src, w, dst)
                backoff_weight.append(bow)
                hist_len.append(np.full(len(w), k, dtype=np.int64))
                num_states += len(w)
            else:
                dst = index.longest(grams[:, 1:])
            arcs.append((src, w, dst, logp))
        if order > 1 and not seen_bos:
            raise GraphError(f"{path}: no <s> unigram (every ARPA LM has one)")
        if order == 1:
            backoff_weight[0][cls.BOS] = 0.0  # a unigram LM has no context to back off from
        missing = np.isnan(root_weight)
        n_missing = int(missing.sum())
        if n_missing:
            fill = unk_logp - (math.log(n_missing) if normalize_unk and n_missing > 1 else 0.0)
            root_weight[missing] = fill
            root_next[missing] = cls.ROOT
        a_from, a_tok, a_to, a_w = (
            np.concatenate([a[i] for a in arcs]) if arcs else np.zeros(0) for i in range(4)
        )
        a_from, a_tok, a_to = a_from.astype(np.int64), a_tok.astype(np.int64), a_to.astype(np.int64)
        sort = np.lexsort((a_tok, a_from))
        a_from, a_tok = a_from[sort], a_tok[sort]
        if len(a_from) > 1:
            dup = (a_from[1:] == a_from[:-1]) & (a_tok[1:] == a_tok[:-1])
            if dup.any():
                raise GraphError(f"{path}: repeated {order}-gram")
        offsets = np.zeros(num_states + 1, dtype=np.int64)
        np.cumsum(np.bincount(a_from, minlength=num_states), out=offsets[1:])
        bstate = np.concatenate(backoff_state)
        bweight = np.concatenate(backoff_weight)
        lengths = np.concatenate(hist_len)
        # final weights through the backoff chain, shorter histories first
        final_resolved = np.full(num_states, -math.inf)
        final_resolved[cls.ROOT] = final_root
        if final_of:
            final_resolved[np.fromiter(final_of, dtype=np.int64)] = np.fromiter(
                final_of.values(), dtype=np.float64
            )
        for length in range(1, max(order, 2)):  # BOS has length 1 even in a unigram LM
            todo = np.flatnonzero((lengths == length) & (final_resolved == -math.inf))
            final_resolved[todo] = bweight[todo] + final_resolved[bstate[todo]]
        info = {
            "path": str(path),
            "token_ids": token_ids,
            "ngrams": {k: len(g) for k, g in enumerate(ngrams.ids, 1)},
            "dropped_ngrams": dropped,
            "tokens_without_unigram": n_missing,
            "unk_logp": unk_logp,
        }
        return cls(
            vocab_size=V,
            order=order,
            arc_offsets=torch.from_numpy(offsets),
            arc_token=torch.from_numpy(a_tok.astype(np.int32)),
            arc_next=torch.from_numpy(a_to[sort].astype(np.int32)),
            arc_weight=torch.from_numpy(np.asarray(a_w, dtype=np.float64)[sort].astype(np.float32)),
            root_weight=torch.from_numpy(root_weight.astype(np.float32)),
            root_next=torch.from_numpy(root_next),
            backoff_state=torch.from_numpy(bstate.astype(np.int64)),
            backoff_weight=torch.from_numpy(bweight.astype(np.float32)),
            final_weight=torch.from_numpy(final_resolved.astype(np.float32)),
            state_order=torch.from_numpy(lengths.astype(np.int32)),
            vocab=vocab,
            info=info,
        )

    # ----------------------------------------------------------------- queries
    @property
    def num_states(self) -> int:
        return self.backoff_state.shape[0]

    @property
    def num_arcs(self) -> int:
        return self.arc_token.shape[0]

    def bos_state(self) -> int:
        """The state after ``<s>`` (where sentences start)."""
        return self.BOS

    def init_states(self, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
        """LongTensor [batch] of BOS states."""
        device = self.root_weight.device if device is None else device
        return torch.full((batch,), self.BOS, dtype=torch.long, device=device)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """states [N] -> (scores [N, V] = ln p(token | state) for every token, next_states [N, V]).

        The backoff chain of every row is walked N-1 steps (rows that reached the root stay there:
        its backoff is itself with weight 0); the dense root row is written first, then the arcs of
        the chain's states from the root side up, each with the backoff weights accumulated above it,
        so a token takes the value of the highest-order n-gram that has it.
        """
        n, V = states.shape[0], self.vocab_size
        states = states.long()
        chain = [states]
        above = [torch.zeros(n, dtype=self.root_weight.dtype, device=states.device)]
        for _ in range(self.order - 1):
            cur = chain[-1]
            above.append(above[-1] + self.backoff_weight[cur])
            chain.append(self.backoff_state[cur])
        # chain[-1] is the root for every row (a state's history has at most order - 1 tokens)
        scores = torch.empty(n, V + 1, dtype=self.root_weight.dtype, device=states.device)
        nexts = torch.empty(n, V + 1, dtype=torch.long, device=states.device)
        scores[:, :V] = above[-1].unsqueeze(1) + self.root_weight
        nexts[:, :V] = self.root_next
        if self.max_degree:
            for level in range(self.order - 2, -1, -1):
                cur = chain[level]
                start = self.arc_offsets[cur]
                count = self.arc_offsets[cur + 1] - start
                idx = start.unsqueeze(1) + self.degree_range  # [N, W]
                valid = self.degree_range < count.unsqueeze(1)
                idx = torch.where(valid, idx, 0)
                # arcs past a state's range write into the spare column V
                tok = torch.where(valid, self.arc_token[idx].long(), V)
                scores.scatter_(1, tok, above[level].unsqueeze(1) + self.arc_weight[idx])
                nexts.scatter_(1, tok, self.arc_next[idx].long())
        dense = torch.contiguous_format  # always a copy: the same ops for every batch size
        return scores[:, :V].clone(memory_format=dense), nexts[:, :V].clone(memory_format=dense)

    def score(self, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sparse lookup: states [N], tokens [N] -> (ln p(token | state) [N], next states [N]).

        The sparse counterpart of `advance` (one token per row instead of the whole vocabulary, as
        a WFST decoder needs for the word on an arc; paper 000 sec. 3.2): the backoff chain is
        walked the fixed N-1 steps; at each step the row's token is found in the state's sorted
        arcs by a binary search of fixed depth (log2 of the widest state), and the highest-order
        hit wins; rows without a hit take the dense root row plus the accumulated backoff weights.
        No data-dependent host reads; any device."""
        states, tokens = states.long(), tokens.long()
        n = states.shape[0]
        logp = torch.zeros(n, dtype=self.root_weight.dtype, device=states.device)
        nxt = torch.zeros(n, dtype=torch.long, device=states.device)
        found = torch.zeros(n, dtype=torch.bool, device=states.device)
        above = torch.zeros_like(logp)
        cur = states
        steps = max(int(self.max_degree).bit_length(), 1)
        last = max(self.num_arcs - 1, 0)
        for _ in range(self.order - 1):
            if self.num_arcs:
                lo, hi = self.arc_offsets[cur], self.arc_offsets[cur + 1]  # search [lo, hi)
                for _ in range(steps):
                    mid = (lo + hi) // 2
                    go_right = (mid < hi) & (self.arc_token[mid.clamp(max=last)].long() < tokens)
                    lo = torch.where(go_right, mid + 1, lo)
                    hi = torch.where(go_right, hi, mid)
                pos = lo.clamp(max=last)
                hit = ~found & (lo < self.arc_offsets[cur + 1]) & (self.arc_token[pos].long() == tokens)
                logp = torch.where(hit, above + self.arc_weight[pos], logp)
                nxt = torch.where(hit, self.arc_next[pos].long(), nxt)
                found = found | hit
            above = above + self.backoff_weight[cur]
            cur = self.backoff_state[cur]
        logp = torch.where(found, logp, above + self.root_weight[tokens])
        nxt = torch.where(found, nxt, self.root_next[tokens])
        return logp, nxt

    def ngrams_below_backoff_route(self, tolerance: float = 1e-4) -> int:
        """How many explicit n-grams (above the unigrams) are less probable, by more than `tolerance`
        nats, than their backoff route (the state's backoff weight plus the word read from its
        backoff state). A graph's G reads those more cheaply than this LM does
        (`asrdecode.lm.backoff`)."""
        degrees = self.arc_offsets[1:] - self.arc_offsets[:-1]
        src = torch.repeat_interleave(torch.arange(self.num_states, device=degrees.device), degrees)
        keep = src != self.ROOT
        src, tokens, weight = src[keep], self.arc_token[keep], self.arc_weight[keep]
        route, _ = self.score(self.backoff_state[src], tokens)
        return int((self.backoff_weight[src] + route > weight + tolerance).sum())

    def history_index(self) -> _HistoryIndex:
        """The states as a trie of histories: (state, token) -> the state of the history one token
        longer (``<s>`` = -1; the unigram states hang off the root; top-order arcs, which go to
        shorter suffix states, are not part of it)."""
        order = self.state_order.cpu().numpy().astype(np.int64)
        off = self.arc_offsets.cpu().numpy()
        tok, nxt = self.arc_token.cpu().numpy().astype(np.int64), self.arc_next.cpu().numpy().astype(np.int64)
        src = np.repeat(np.arange(self.num_states), np.diff(off))
        grow = order[nxt] == order[src] + 1
        root_next = self.root_next.cpu().numpy()
        words = np.flatnonzero((root_next != self.ROOT) & (order[root_next] == 1))
        index = _HistoryIndex(self.vocab_size)
        index.add(
            np.concatenate([[self.ROOT], np.zeros(len(words), dtype=np.int64), src[grow]]),
            np.concatenate([[_BOS], words, tok[grow]]),
            np.concatenate([[self.BOS], root_next[words], nxt[grow]]),
        )
        return index

    def history_array(self) -> np.ndarray:
        """The history of every state as token ids [S, max(order - 1, 1)], ``<s>`` = -1, padded at
        the end with ``HISTORY_PAD``; row 0 (root) is empty, row 1 (BOS) is ``<s>``."""
        index = self.history_index()
        width = max(self.order - 1, 1)
        hist = np.full((self.num_states, width), HISTORY_PAD, dtype=np.int64)
        known = np.zeros(self.num_states, dtype=bool)
        known[self.ROOT] = True
        parent, token, child = index.triples()
        for _ in range(width):  # parents one token shorter than their children, level by level
            ready = known[parent] & ~known[child]
            p, c = parent[ready], child[ready]
            hist[c] = hist[p]
            lengths = self.state_order.cpu().numpy()[p].astype(np.int64)
            hist[c, lengths] = token[ready]
            known[c] = True
        if not known.all():
            missing = int(np.flatnonzero(~known)[0])
            raise GraphError(
                f"{self.info.get('path', 'LM')}: state {missing} has no history (corrupt tables)"
            )
        return hist

    def histories(self) -> list[tuple[int, ...]]:
        """The history of every state as a tuple of token ids (``<s>`` = -1): () for the root, (-1,)
        for BOS (`history_array` without the padding)."""
        return [tuple(int(t) for t in row if t != HISTORY_PAD) for row in self.history_array()]

    def final_scores(self, states: torch.Tensor) -> torch.Tensor:
        """states [N] -> ln p(</s> | state) [N] (-inf if the file has no </s> on the backoff chain)."""
        return self.final_weight[states.long()]

    def score_sentence(self, tokens: list[int], bos: bool = True, eos: bool = True) -> float:
        """ln p of a token sequence (from ``<s>`` if bos, else the root; with ``</s>`` if eos)."""
        state = torch.tensor([self.BOS if bos else self.ROOT], device=self.root_weight.device)
        total = 0.0
        for t in tokens:
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"token {t} outside 0..{self.vocab_size - 1}")
            scores, nexts = self.advance(state)
            total += float(scores[0, t])
            state = nexts[:, t]
        if eos:
            total += float(self.final_scores(state)[0])
        return total

    def describe(self) -> dict:
        """Sizes and memory of the tables (bytes per buffer and in total), plus how the file was read."""
        buffers = {name: buf.numel() * buf.element_size() for name, buf in self.named_buffers()}
        return {
            **self.info,
            "order": self.order,
            "vocab_size": self.vocab_size,
            "states": self.num_states,
            "arcs": self.num_arcs + self.vocab_size,
            "max_arcs_per_state": self.max_degree,
            "device": str(self.root_weight.device),
            "bytes": sum(buffers.values()),
            "bytes_per_buffer": buffers,
        }

    def extra_repr(self) -> str:
        return (
            f"order={self.order}, vocab_size={self.vocab_size}, states={self.num_states}, "
            f"arcs={self.num_arcs + self.vocab_size}"
        )


def arpa_unigram_words(path: Path) -> list[str]:
    """The unigram words of an ARPA file in file order, without <s> and </s> (a quick first pass;
    the file is checked by the full read that follows)."""
    if not path.is_file():
        raise GraphError(f"{path}: ARPA file not found")
    words: list[str] = []
    in_unigrams = False
    try:
        with open_text(path) as fh:
            for raw in fh:
                line = raw.rstrip("\r\n").strip(FIELD_SEPARATORS)
                if line == "\\1-grams:":
                    in_unigrams = True
                elif in_unigrams and line.startswith("\\"):
                    break
                elif in_unigrams and line:
                    fields = split_fields(line)
                    if len(fields) >= 2 and fields[1] not in ("<s>", "</s>"):
                        words.append(fields[1])
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise GraphError(f"{path}: cannot read ARPA ({err})") from None
    return words
