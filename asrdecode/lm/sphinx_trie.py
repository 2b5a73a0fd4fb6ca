"""Read pocketsphinx's binary trie language model (`en-us.lm.bin`) into n-gram tables.

pocketsphinx 5.1.1 stores trigram LMs as a KenLM-style reversed trie ("Trie Language Model"):
the file holds the order, the n-gram counts, 16-bit quantisation tables for the probabilities and
backoffs of orders >= 2, the unigram array (prob, backoff, first child) as float32 triples, then
bit-packed n-gram levels and the vocabulary. Each level entry packs a word id, the quantised
prob (and backoff for middle orders) and, for middle orders, the first child's index; the trie
path of an n-gram `w1 .. wn` is `wn, wn-1, .., w1` (the predicted word first). Values are logs in
pocketsphinx's logmath base (1.0001 by default): `log10 = value * log10_per_unit`, found from `<s>`
whose ARPA log10 prob is -99 by convention.

pocketsphinx's own ARPA writer (`NGramModel.write(..., 'arpa')`) crashes on this file in 5.1.1
after the bigrams, so the trie is decoded here, vectorised with numpy. Where the model has a
trigram whose bigram history is not an n-gram of its own, the trie holds a filler bigram with the
backed-off probability and zero backoff; it is kept (it scores exactly as the backoff would).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asrdecode.errors import InputError

TRIE_HEADER = b"Trie Language Model"
QUANT_BITS = 16


@dataclass
class NgramTable:
    """All n-grams of one order: `words[i]` in natural order (history first), log10 values."""

    words: np.ndarray  # [count, order] int64 word ids
    log10_prob: np.ndarray  # [count] float64
    log10_backoff: np.ndarray | None  # [count] float64, None for the highest order


@dataclass
class TrieLM:
    """A backoff n-gram LM decoded from pocketsphinx's trie: `orders[k]` holds the (k+1)-grams."""

    vocab: list[str]
    orders: list[NgramTable]
    log10_per_unit: float


def _required_bits(max_value: int) -> int:
    return int(max_value).bit_length()


def _read_field(mem: np.ndarray, bit_offsets: np.ndarray, bits: int) -> np.ndarray:
    """Little-endian bit fields of `bits` (<= 57) bits starting at each bit offset."""
    byte = bit_offsets >> 3
    raw = mem[byte[:, None] + np.arange(8)].copy().view("<u8")[:, 0]
    return (raw >> (bit_offsets & 7).astype(np.uint64)) & np.uint64((1 << bits) - 1)


def _level_size(entries: int, word_bits: int, rest_bits: int) -> int:
    return ((1 + entries) * (word_bits + rest_bits) + 7) // 8 + 8


def is_sphinx_trie(path: str | Path) -> bool:
    """True if the file starts with the trie LM header (False for anything else, unreadable included)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(TRIE_HEADER)) == TRIE_HEADER
    except OSError:
        return False


def read_trie_lm(path: str | Path) -> TrieLM:
    """Decode a pocketsphinx binary trie LM; one-line `InputError` on a malformed file."""
    path = Path(path)
    data = np.fromfile(path, dtype=np.uint8)
    pos = len(TRIE_HEADER)
    if data[:pos].tobytes() != TRIE_HEADER:
        raise InputError(f"{path}: not a pocketsphinx trie LM (header is not {TRIE_HEADER.decode()!r})")
    try:
        order = int(data[pos])
        pos += 1
        counts = [int(c) for c in data[pos : pos + 4 * order].view("<u4")]
        pos += 4 * order
        if order < 2 or order > 5:
            raise InputError(f"{path}: n-gram order {order} out of range 2..5")
        n_quant = (order - 2) * (2 << QUANT_BITS) + (1 << QUANT_BITS)
        pos += 4  # former quantisation type
        with np.errstate(invalid="ignore"):  # a NaN in a damaged file: refused below
            quant = data[pos : pos + 4 * n_quant].view("<f4").astype(np.float64)
        pos += 4 * n_quant
        uni = data[pos : pos + 12 * (counts[0] + 1)].view(
            np.dtype([("p", "<f4"), ("b", "<f4"), ("n", "<u4")])
        )
        pos += 12 * (counts[0] + 1)
        word_bits = _required_bits(counts[0])
        sizes = [
            _level_size(counts[k], word_bits, 2 * QUANT_BITS + _required_bits(counts[k + 1]))
            for k in range(1, order - 1)
        ] + [_level_size(counts[order - 1], word_bits, QUANT_BITS)]
        mem = data[pos : pos + sum(sizes)]
        pos += sum(sizes)
        n_chars = int(data[pos : pos + 4].view("<i4")[0])
        pos += 4
        vocab = [w.decode("utf-8") for w in data[pos : pos + n_chars].tobytes().split(b"\0")[: counts[0]]]
    except (IndexError, ValueError) as exc:  # short file: slices come back too small
        raise InputError(f"{path}: truncated or malformed trie LM ({exc})") from None
    if len(mem) != sum(sizes) or len(vocab) != counts[0]:
        raise InputError(f"{path}: truncated trie LM (expected {sum(sizes)} bytes of n-grams)")
    if not (np.isfinite(quant).all() and np.isfinite(uni["p"]).all() and np.isfinite(uni["b"]).all()):
        raise InputError(f"{path}: damaged trie LM (a probability or backoff weight is not a finite number)")
    mem = np.concatenate([mem, np.zeros(8, np.uint8)])

    s_id = vocab.index("<s>") if "<s>" in vocab else None
    if s_id is None:
        raise InputError(f"{path}: vocabulary has no <s>")
    per_unit = -99.0 / float(uni["p"][s_id])

    tables = [
        NgramTable(
            words=np.arange(counts[0], dtype=np.int64)[:, None],
            log10_prob=uni["p"][: counts[0]].astype(np.float64) * per_unit,
            log10_backoff=uni["b"][: counts[0]].astype(np.float64) * per_unit,
        )
    ]
    # paths[k]: for every entry of level k, its trie path (predicted word first)
    parent_paths = np.arange(counts[0], dtype=np.int64)[:, None]
    child_begin = uni["n"].astype(np.int64)  # [count+1] ranges into the next level
    base = 0
    for k in range(1, order):
        n = int(child_begin[-1])  # the header's count may exceed what was inserted (see module doc)
        if n > counts[k]:
            raise InputError(f"{path}: inconsistent trie ({n} {k + 1}-grams referenced, {counts[k]} stored)")
        middle = k < order - 1
        next_bits = _required_bits(counts[k + 1]) if middle else 0
        total = word_bits + (2 * QUANT_BITS + next_bits if middle else QUANT_BITS)
        offsets = base * 8 + np.arange(n + 1, dtype=np.int64) * total
        word = _read_field(mem, offsets[:n] if n else offsets[:0], word_bits).astype(np.int64)
        owner = np.repeat(np.arange(len(parent_paths)), np.diff(child_begin))
        paths = np.concatenate([parent_paths[owner], word[:, None]], axis=1)
        q_tab = quant[(k - 1) * (2 << QUANT_BITS) :]
        if middle:
            q = _read_field(mem, offsets[:n] + word_bits, 2 * QUANT_BITS).astype(np.int64)
            bo = q_tab[(1 << QUANT_BITS) + (q & 0xFFFF)]
            prob = q_tab[q >> QUANT_BITS]
            child_begin = _read_field(mem, offsets + word_bits + 2 * QUANT_BITS, next_bits).astype(np.int64)
        else:
            prob = q_tab[_read_field(mem, offsets[:n] + word_bits, QUANT_BITS).astype(np.int64)]
            bo = None
        tables.append(
            NgramTable(
                words=paths[:, ::-1].copy(),
                log10_prob=prob * per_unit,
                log10_backoff=None if bo is None else bo * per_unit,
            )
        )
        parent_paths = paths
        base += sizes[k - 1]
    return TrieLM(vocab=vocab, orders=tables, log10_per_unit=per_unit)


def _keys(words: np.ndarray, bits: int) -> np.ndarray:
    """One int64 key per n-gram (word ids packed `bits` apart) for sorted look-ups."""
    key = np.zeros(len(words), dtype=np.int64)
    for j in range(words.shape[1]):
        key = (key << bits) | words[:, j]
    return key


class NgramLookup:
    """Backoff log10 probabilities of arbitrary n-grams from a `TrieLM` (for checks and BOWs)."""

    def __init__(self, lm: TrieLM) -> None:
        self.lm = lm
        self.bits = max(1, _required_bits(len(lm.vocab)))
        self.sorted = []
        for table in lm.orders:
            keys = _keys(table.words, self.bits)
            order = np.argsort(keys, kind="stable")
            self.sorted.append((keys[order], order))

    def find(self, words: np.ndarray) -> np.ndarray:
        """Index of each row of `words` [n, k] in order k's table, -1 where absent."""
        keys, order = self.sorted[words.shape[1] - 1]
        q = _keys(words, self.bits)
        pos = np.searchsorted(keys, q)
        pos = np.minimum(pos, len(keys) - 1)
        return np.where(keys[pos] == q, order[pos], -1) if len(keys) else np.full(len(q), -1)

    def log10_prob(self, words: np.ndarray) -> np.ndarray:
        """log10 p(w_k | w_1..w_k-1) for each row (history first), backing off as ARPA defines."""
        words = np.asarray(words, dtype=np.int64)
        k = words.shape[1]
        if k == 1:
            return self.lm.orders[0].log10_prob[words[:, 0]]
        idx = self.find(words)
        out = np.empty(len(words))
        hit = idx >= 0
        out[hit] = self.lm.orders[k - 1].log10_prob[idx[hit]]
        miss = ~hit
        if miss.any():
            lower = self.log10_prob(words[miss, 1:])
            hist = self.find(words[miss, :-1])
            bo = np.where(hist >= 0, self.lm.orders[k - 2].log10_backoff[np.maximum(hist, 0)], 0.0)
            out[miss] = lower + bo
        return out


def limit_vocabulary(lm: TrieLM, keep: set[str]) -> TrieLM:
    """Restrict `lm` to the words in `keep` (plus `<s>`, `</s>`): n-grams with other words are
    dropped, unigrams renormalised, and every backoff weight recomputed so each conditional
    distribution sums to one over the kept vocabulary (as SRILM's `-limit-vocab` + BOW renormalisation):
    bo(h) = (1 - sum_w p(w|h)) / (1 - sum_w p(w|h')) over the explicit n-grams `h w` kept."""
    keep = set(keep) | {"<s>", "</s>"}
    old_ids = np.array([i for i, w in enumerate(lm.vocab) if w in keep], dtype=np.int64)
    remap = np.full(len(lm.vocab), -1, dtype=np.int64)
    remap[old_ids] = np.arange(len(old_ids))
    vocab = [lm.vocab[i] for i in old_ids]
    uni_p = lm.orders[0].log10_prob[old_ids]
    finite = uni_p > -90  # <s> (-99) is never predicted
    uni_p = uni_p - np.log10(np.sum(10.0 ** uni_p[finite]))
    uni_p[~finite] = -99.0
    tables = [
        NgramTable(np.arange(len(vocab), dtype=np.int64)[:, None], uni_p, lm.orders[0].log10_backoff[old_ids])
    ]
    for table in lm.orders[1:]:
        mapped = remap[table.words]
        ok = (mapped >= 0).all(axis=1)
        tables.append(
            NgramTable(
                mapped[ok],
                table.log10_prob[ok],
                None if table.log10_backoff is None else table.log10_backoff[ok].copy(),
            )
        )
    out = TrieLM(vocab=vocab, orders=tables, log10_per_unit=lm.log10_per_unit)
    # recompute backoffs from the lowest order up: the lower-order distribution must be final first
    for k in range(len(tables) - 1):
        lookup = NgramLookup(out)
        ctx, children = tables[k], tables[k + 1]
        parent = lookup.find(children.words[:, :-1])
        explicit = np.bincount(parent, weights=10.0**children.log10_prob, minlength=len(ctx.words))
        lower = 10.0 ** lookup.log10_prob(children.words[:, 1:])
        lower_sum = np.bincount(parent, weights=lower, minlength=len(ctx.words))
        num = np.clip(1.0 - explicit, 1e-12, None)
        den = np.clip(1.0 - lower_sum, 1e-12, None)
        ctx.log10_backoff = np.log10(num / den)
    return out


def write_arpa(lm: TrieLM, path: str | Path) -> Path:
    """Write `lm` as an ARPA file (plain, or gzip when `path` ends in .gz)."""
    import gzip

    path = Path(path)
    vocab = np.array(lm.vocab, dtype=object)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("\\data\\\n")
        for k, table in enumerate(lm.orders):
            f.write(f"ngram {k + 1}={len(table.words)}\n")
        for k, table in enumerate(lm.orders):
            f.write(f"\n\\{k + 1}-grams:\n")
            text = vocab[table.words[:, 0]]
            for j in range(1, table.words.shape[1]):
                text = text + " " + vocab[table.words[:, j]]
            probs = np.char.mod("%.6f", table.log10_prob)
            if table.log10_backoff is not None and k < len(lm.orders) - 1:
                bows = np.char.mod("%.6f", table.log10_backoff)
                lines = probs.astype(object) + "\t" + text + "\t" + bows.astype(object)
            else:
                lines = probs.astype(object) + "\t" + text
            f.write("\n".join(lines.tolist()))
            f.write("\n")
        f.write("\n\\end\\\n")
    return path
