"""The LM difference that `wfst-otf` adds on the fly: large LM minus the small LM the graph was built with.

Paper 000 (sec. 3, Alg. 1-2) and Kaldi's biglm decoders rescore a graph built with a small LM by
composing it on the fly with ``G_large - G_small``: when a token crosses an arc with word ``w`` its
cost changes by ``lm_scale * (cost_large(w | h) - cost_small(w | h))`` (cost = -ln p), so with
``lm_scale = 1`` the small LM's weight already on the graph is replaced by the large LM's; at the
end ``lm_scale * (cost_large(</s> | h) - cost_small(</s> | h))`` is added. Other scales mix the two
in the log domain: ``(1 - lm_scale) * small + lm_scale * large``.

Both LMs are read exactly (the backoff rule). A graph's G reads its LM as its cheapest path (an
n-gram or its backoff route, whichever costs less), so the composition is the large LM read exactly
only if the graph reads the small LM exactly: a unigram LM, or `asrdecode.lm.backoff.exact_bigram`'s.

**One combined state per token** (not a pair): the state of a backoff LM after a word sequence is
the longest suffix of ``<s> w1 .. wk`` that is a history of the LM (`BatchedNgramLM.histories`). Both
history sets are prefix-closed, so their union U is too, and the longest suffix of the word sequence
in U determines the longest suffix in each LM (a suffix of it). The *difference state* is therefore
a state of U: ``large_of[u]`` and ``small_of[u]`` give the two LMs' states. The transition
``u --w--> u'`` needs no automaton of its own: the two lookups of ``w`` already return each LM's
next state, the longest suffix of ``h(u) w`` among that LM's histories, and the longest suffix in
U is the longer of the two (``union_of_large`` / ``union_of_small`` map them into U). One int per
token keeps recombination keyed on (graph state, U state), exactly the pairs (graph state, small
state, large state) that can differ. When the small LM is a pruned copy of the large one, U is
the large LM's histories.

**Histories that change no cost are merged** (`merge_equivalent_histories`): a U state whose
difference equals its backoff's for every word and at ``</s>`` (no backoff weight of its own, no
explicit n-gram whose difference differs: e.g. one of pocketsphinx's 2M bigram histories without
a trigram) has the same future as the longest proper suffix in U, so the maps send each LM's next
state to the longest suffix in R, the U states that do change a cost (closed under prefixes, so
that the longest R suffix of ``h w`` is that of ``r(h) w``). Tokens whose histories differ only
outside R then recombine: the search is as exact as before (up to float rounding where both LMs
have the same backoff weight) with fewer tokens.

Lookups: torch (`step`, batched sparse lookups, any device) and numba (`lm_step` on the
`arrays()` tuples, for the compiled search). The large LM's tables stay where they are built
(host memory); only the lookups' answers enter the search.

Building the tables of a large LM takes seconds to tens of seconds for a trigram with millions of
n-grams (ARPA text parsing dominates; pocketsphinx's binary trie is decoded without it).
`from_files` with a `cache` folder stores the finished tables as one safetensors file keyed by the
SHA-256 of both LM files and of the vocabulary, so later runs load them in about a second
(safetensors: reading runs no code; an unreadable file is rebuilt). `ngram_lm_from_file` does the
same for one LM (n-best rescoring's new LM).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numba
import numpy as np
import torch

from asrdecode.atomic_files import atomic_target
from asrdecode.errors import ConfigError
from asrdecode.huge_pages import in_huge_pages
from asrdecode.lm.ngram_tensor import HISTORY_PAD, BatchedNgramLM
from asrdecode.numba_status import configure_cache

configure_cache()  # before any cached kernel is defined (numba_status)

log = logging.getLogger("asrdecode.decoders.wfst_otf")
_NO_WORD = "\x00olabel-{}"  # vocabulary placeholder for an id that is not a word (never in an ARPA)


def word_vocabulary(words: dict[int, str], num_ids: int) -> list[str]:
    """LM vocabulary indexed by graph olabel: token id = olabel, so no mapping is needed on arcs.
    Ids that are not words (<eps>, #0, <s>, </s>, gaps) get placeholders no ARPA contains."""
    special = {"<eps>", "<s>", "</s>"}
    vocab = []
    for i in range(num_ids):
        w = words.get(i)
        ok = w is not None and w not in special and not (w.startswith("#") and w[1:].isdigit())
        vocab.append(w if ok else _NO_WORD.format(i))
    return vocab


_MAPS = ("large_of", "small_of", "union_of_large", "union_of_small", "union_order")


def union_maps(large: BatchedNgramLM, small: BatchedNgramLM, merge: bool = True) -> dict[str, np.ndarray]:
    """The union U of both LMs' histories (module docstring) as maps: U state -> each LM's state
    (longest suffix), each LM's state -> U state, and the history length of each U state. U is
    numbered by (length, tokens): the root, BOS, then longer histories (vectorised over arrays
    of histories, `BatchedNgramLM.history_array`). With `merge`, the LM -> U maps lead to merged
    histories (`merge_equivalent_histories`)."""
    hl, hs = large.history_array(), small.history_array()
    width = max(hl.shape[1], hs.shape[1])
    rows = np.full((len(hl) + len(hs), width), HISTORY_PAD, dtype=np.int64)
    rows[: len(hl), : hl.shape[1]] = hl
    rows[len(hl) :, : hs.shape[1]] = hs
    hist, inverse, lengths = unique_histories(rows)
    indexes = large.history_index(), small.history_index()
    maps = {
        "large_of": indexes[0].longest(hist),
        "small_of": indexes[1].longest(hist),
        "union_of_large": inverse[: len(hl)],
        "union_of_small": inverse[len(hl) :],
        "union_order": lengths,
    }
    return merge_equivalent_histories(large, small, maps, hist, indexes) if merge else maps


def unique_histories(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of a history array (``HISTORY_PAD`` after each history's end) ordered by
    (length, tokens): the root, BOS, then longer histories; with each input row's index among them
    and their lengths (all int64). Each row is one integer key whose numeric order is that order
    (its length, then its tokens as digits), so one sort of integers finds them; rows too wide for
    an int64 key are sorted as rows."""
    lengths = (rows != HISTORY_PAD).sum(axis=1, dtype=np.int64)
    lo = int(rows.min(initial=HISTORY_PAD))
    radix = int(rows.max(initial=HISTORY_PAD)) - lo + 1
    if (rows.shape[1] + 1) * radix ** rows.shape[1] < 2**63:
        keys = lengths.copy()
        for column in rows.T:
            keys = keys * radix + (column - lo)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return rows[first], inverse.reshape(-1).astype(np.int64), lengths[first]
    hist, inverse = np.unique(rows, axis=0, return_inverse=True)
    hist_lengths = (hist != HISTORY_PAD).sum(axis=1, dtype=np.int64)
    by_length = np.lexsort((*hist.T[::-1], hist_lengths))
    rank = np.empty_like(by_length)
    rank[by_length] = np.arange(len(by_length))
    return hist[by_length], rank[inverse.reshape(-1)].astype(np.int64), hist_lengths[by_length]


def merge_equivalent_histories(
    large: BatchedNgramLM,
    small: BatchedNgramLM,
    maps: dict[str, np.ndarray],
    hist: np.ndarray,
    indexes: tuple,
) -> dict[str, np.ndarray]:
    """`maps` with each LM's states sent to the longest suffix in R, the union states whose
    difference is not their backoff's (module docstring); `hist`: the union states' histories,
    `indexes`: both LMs' `history_index()`. U states outside R stay (``large_of`` / ``small_of``
    are unchanged) but no lookup leads there."""
    iL, iS = indexes
    ul, us, order = maps["union_of_large"], maps["union_of_small"], maps["union_order"]

    def union_state(grams: np.ndarray) -> np.ndarray:  # rows that are histories of U
        sl, ss = iL.walk(grams), iS.walk(grams)
        return np.where(sl >= 0, ul[np.maximum(sl, 0)], us[np.maximum(ss, 0)])

    suffix = np.full_like(hist, HISTORY_PAD)
    suffix[:, :-1] = hist[:, 1:]
    pl, ps = ul[iL.longest(suffix)], us[iS.longest(suffix)]
    parent = np.where(order[pl] >= order[ps], pl, ps)  # the longest proper suffix in U
    parent[0] = 0
    lo, so = maps["large_of"], maps["small_of"]
    own_l = large.state_order.numpy()[lo] == order
    own_s = small.state_order.numpy()[so] == order
    backoff = np.where(own_s, small.backoff_weight.numpy()[so], 0) - np.where(
        own_l, large.backoff_weight.numpy()[lo], 0
    )
    final = small.final_weight.numpy()[so] - large.final_weight.numpy()[lo]
    keep = (backoff != 0) | (final != final[parent])
    keep[: BatchedNgramLM.BOS + 1] = True  # the root and the start state
    lg, sm = _tables(large), _tables(small)
    for lm, to_union in ((large, ul), (small, us)):  # the explicit n-grams of each state
        off = lm.arc_offsets.numpy()
        src = to_union[np.repeat(np.arange(len(off) - 1), np.diff(off))]
        _mark_changed(lg, sm, lo, so, parent, src, lm.arc_token.numpy(), keep)
    for k in range(int(order.max()), 1, -1):  # closed under prefixes, longest first
        rows = np.flatnonzero(keep & (order == k))
        prefix = hist[rows].copy()
        prefix[:, k - 1] = HISTORY_PAD
        keep[union_state(prefix)] = True
    merged = np.arange(len(order))
    for k in range(1, int(order.max()) + 1):  # by length: a parent is resolved before its children
        rows = np.flatnonzero(order == k)
        merged[rows] = np.where(keep[rows], rows, merged[parent[rows]])
    return {**maps, "union_of_large": merged[ul], "union_of_small": merged[us]}


@numba.njit(nogil=True, cache=True)
def _mark_changed(lg, sm, large_of, small_of, parent, states, tokens, keep) -> None:
    """keep[u] for each explicit n-gram (states[i], tokens[i]) whose difference is not the one of
    the same word from u's parent (the searches' float32 lookups)."""
    for i in range(states.shape[0]):
        u = states[i]
        if keep[u]:
            continue
        w = tokens[i]
        p = parent[u]
        here = ngram_lookup(sm, small_of[u], w)[0] - ngram_lookup(lg, large_of[u], w)[0]
        there = ngram_lookup(sm, small_of[p], w)[0] - ngram_lookup(lg, large_of[p], w)[0]
        if here != there:
            keep[u] = True


class DifferenceLM:
    """``lm_scale * (large - small)`` over word ids (= graph olabels) with one combined state."""

    START = BatchedNgramLM.BOS  # the union state of <s> (as in both LMs)

    def __init__(
        self,
        large: BatchedNgramLM,
        small: BatchedNgramLM,
        lm_scale: float = 1.0,
        maps: dict[str, np.ndarray] | None = None,
    ) -> None:
        """`maps`: the union-state maps (`_MAPS`) when already known (a cache entry), else computed."""
        if large.vocab_size != small.vocab_size:
            raise ValueError("large and small LM must share the vocabulary (token ids = graph olabels)")
        self.large, self.small, self.lm_scale = large, small, float(lm_scale)
        maps = maps if maps is not None else union_maps(large, small)
        self.large_of, self.small_of = maps["large_of"], maps["small_of"]
        self.union_of_large, self.union_of_small = maps["union_of_large"], maps["union_of_small"]
        self.union_order = maps["union_order"]
        self._tensors = {k: torch.from_numpy(getattr(self, k)) for k in _MAPS}

    @property
    def num_states(self) -> int:
        return len(self.large_of)

    @classmethod
    def from_files(
        cls,
        large: str | Path,
        small: str | Path,
        words: dict[int, str],
        num_ids: int,
        lm_scale: float = 1.0,
        cache: str | Path | None = None,
    ) -> DifferenceLM:
        """Both LMs from their files (ARPA or pocketsphinx's binary trie, `BatchedNgramLM.from_file`)
        over the graph's word ids; with `cache`, the finished tables are loaded from / saved to that
        folder (module docstring)."""
        vocab = word_vocabulary(words, num_ids)
        path = _cache_file(cache, "difference", (large, small), vocab) if cache is not None else None
        loaded = _load_cached(path, vocab)
        if loaded is not None:
            lms, maps = loaded
            lms["large"].info["path"], lms["small"].info["path"] = (
                str(large),
                str(small),
            )  # not the first builder's
            return cls(lms["large"], lms["small"], lm_scale, maps)
        lm = cls(
            BatchedNgramLM.from_file(large, vocab),
            BatchedNgramLM.from_file(small, vocab),
            lm_scale,
        )
        if path is not None:
            _save_tables(path, {"large": lm.large, "small": lm.small}, {k: getattr(lm, k) for k in _MAPS})
        return lm

    def check_words(
        self, olabels: np.ndarray, words: dict[int, str], small_path: str, large_path: str
    ) -> None:
        """Every word on the graph's arcs must have a probability in both LMs (else the
        difference is infinite): a one-line ConfigError naming the file and a word."""
        ids = np.unique(olabels[olabels > 0])
        for lm, path in ((self.small, small_path), (self.large, large_path)):
            bad = ids[~np.isfinite(lm.root_weight.numpy()[ids])]
            if len(bad):
                raise ConfigError(
                    f"{path}: {len(bad)} graph words have no probability (no unigram, no <unk>), "
                    f"e.g. '{words.get(int(bad[0]), bad[0])}'"
                )

    def in_huge_pages(self) -> DifferenceLM:
        """Both LMs' CPU tables and the union-state maps moved into transparent huge pages
        (`BatchedNgramLM.in_huge_pages`), each replaced, not kept beside its copy (only the table
        being copied is there twice for a moment). Before anything takes views of them (`arrays`)."""
        self.large.in_huge_pages()
        self.small.in_huge_pages()
        if all(t.device.type == "cpu" for t in self._tensors.values()):
            for k in _MAPS:
                setattr(self, k, in_huge_pages(getattr(self, k), copy=True))
            self._tensors = {k: torch.from_numpy(getattr(self, k)) for k in _MAPS}
        return self

    def to(self, device: torch.device | str) -> DifferenceLM:
        self.large, self.small = self.large.to(device), self.small.to(device)
        self._tensors = {k: v.to(device) for k, v in self._tensors.items()}
        return self

    # ------------------------------------------------------------------ torch lookups
    def step(self, states: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """states [N] (union), words [N] -> (added cost float32 [N], next states [N]); batched."""
        t = self._tensors
        lp_l, n_l = self.large.score(t["large_of"][states], words)
        lp_s, n_s = self.small.score(t["small_of"][states], words)
        u_l, u_s = t["union_of_large"][n_l], t["union_of_small"][n_s]
        nxt = torch.where(t["union_order"][u_l] >= t["union_order"][u_s], u_l, u_s)
        return ((lp_s - lp_l) * self.lm_scale).float(), nxt

    def final_cost(self, states: torch.Tensor) -> torch.Tensor:
        """The </s> difference per state (float32)."""
        f_l = self.large.final_weight[self._tensors["large_of"][states]]
        f_s = self.small.final_weight[self._tensors["small_of"][states]]
        return ((f_s - f_l) * self.lm_scale).float()

    def lookup_tables(self) -> tuple[list[torch.Tensor], list[int]]:
        """What `step` reads, for a search that walks the same tables in its own kernels
        (`wfst.fused`): each LM's CSR arcs (offsets, tokens, next states, weights), root row
        (weights, next states) and backoff states and weights, then the union-state maps
        (`_MAPS` order); and per LM the bounds of `BatchedNgramLM.score`'s walk: order - 1 backoff
        steps, binary-search steps, the last arc (-1: none)."""
        names = ("arc_offsets", "arc_token", "arc_next", "arc_weight", "root_weight", "root_next")
        names += ("backoff_state", "backoff_weight")
        tables = [getattr(lm, k) for lm in (self.large, self.small) for k in names]
        tables += [self._tensors[k] for k in _MAPS]
        bounds = []
        for lm in (self.large, self.small):
            bounds += [lm.order - 1, max(int(lm.max_degree).bit_length(), 1), lm.num_arcs - 1]
        return tables, bounds

    def sentence_cost(self, word_ids: list[int], eos: bool = True) -> float:
        """The added cost of a whole word sequence (float64 on the host; for score splits and tests)."""
        u, total = self.START, 0.0
        for w in word_ids:
            d, n = self.step(torch.tensor([u]), torch.tensor([w]))
            total += float(d[0])
            u = int(n[0])
        if eos:
            total += float(self.final_cost(torch.tensor([u]))[0])
        return total

    # ------------------------------------------------------------------ numba lookups
    def arrays(self) -> tuple:
        """The tables of `lm_step` / `lm_final` (numba): both LMs' CSR tables and the state maps."""
        return (
            _tables(self.large),
            _tables(self.small),
            self.large_of,
            self.small_of,
            self.union_of_large,
            self.union_of_small,
            self.union_order,
            np.float32(self.lm_scale),
        )

    def describe(self) -> dict:
        return {
            "states": self.num_states,
            "large": self.large.describe(),
            "small": self.small.describe(),
            "bytes": self.state_bytes(),
        }

    def state_bytes(self) -> int:
        """Bytes of the union-state maps (on top of the two LMs' tables)."""
        return sum(getattr(self, k).nbytes for k in self._tensors)

    def table_bytes(self) -> int:
        """Bytes of everything the lookups read: both LMs' tables and the union-state maps."""
        lms = sum(b.numel() * b.element_size() for m in (self.large, self.small) for b in m.buffers())
        return lms + self.state_bytes()


# per kind; 2: pocketsphinx trie LMs restricted to the vocabulary and renormalised; difference 3:
# histories that change no cost merged (`merge_equivalent_histories`)
_CACHE_FORMAT = {"difference": 3, "ngram": 2}
_BUFFERS = (
    "arc_offsets", "arc_token", "arc_next", "arc_weight", "root_weight", "root_next",
    "backoff_state", "backoff_weight", "final_weight", "state_order",
)  # fmt: skip


def ngram_lm_from_file(path: str | Path, vocab: list[str], cache: str | Path | None = None) -> BatchedNgramLM:
    """One LM from its file (ARPA or pocketsphinx's binary trie, `BatchedNgramLM.from_file`) over
    `vocab`; with `cache`, its tables are loaded from / saved to that folder as the difference
    LM's are (module docstring)."""
    entry = _cache_file(cache, "ngram", (path,), vocab) if cache is not None else None
    loaded = _load_cached(entry, vocab)
    if loaded is not None:
        lm = loaded[0]["lm"]
        lm.info["path"] = str(path)  # this file, not the first builder's copy of the same contents
        return lm
    lm = BatchedNgramLM.from_file(path, vocab)
    if entry is not None:
        _save_tables(entry, {"lm": lm}, {})
    return lm


def _cache_file(cache: str | Path, kind: str, files: tuple[str | Path, ...], vocab: list[str]) -> Path:
    """The cache entry of `kind` ("difference", "ngram") for the contents of `files` and `vocab`."""
    digest = hashlib.sha256(f"{kind}-lm v{_CACHE_FORMAT[kind]}".encode())
    for path in files:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    digest.update("\n".join(vocab).encode())
    return Path(cache) / f"{kind}-{digest.hexdigest()[:24]}.safetensors"


def _save_tables(path: Path, lms: dict[str, BatchedNgramLM], arrays: dict[str, np.ndarray]) -> None:
    """The named LMs' buffers and the named arrays in one safetensors file (written atomically)."""
    from safetensors.torch import save_file

    tensors = {f"{side}.{b}": getattr(m, b).cpu().contiguous() for side, m in lms.items() for b in _BUFFERS}
    tensors.update({k: torch.from_numpy(a) for k, a in arrays.items()})
    meta = {side: {"vocab_size": m.vocab_size, "order": m.order, "info": m.info} for side, m in lms.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_target(path) as tmp:
            save_file(tensors, str(tmp), metadata={"asrdecode": json.dumps(meta)})
    except OSError as err:
        log.warning("%s: cannot cache the LM tables (%s)", path, err.strerror or err)


def _load_cached(path: Path | None, vocab: list[str]) -> tuple[dict[str, BatchedNgramLM], dict] | None:
    """The LMs and arrays of a cache entry (None: no cache, no entry, or a damaged one, which is
    then rebuilt)."""
    if path is None or not path.is_file():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata()["asrdecode"])
            t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        lms = {
            side: BatchedNgramLM(
                m["vocab_size"],
                m["order"],
                *(t[f"{side}.{b}"] for b in _BUFFERS),
                vocab=vocab,
                info=m["info"],
            )  # fmt: skip
            for side, m in meta.items()
        }
        arrays = {k: v.numpy() for k, v in t.items() if "." not in k}
    except Exception as err:  # a damaged cache entry is rebuilt
        log.warning("%s: cannot read cached LM tables (%s); rebuilding", path, err)
        return None
    return lms, arrays


def _tables(lm: BatchedNgramLM) -> tuple:
    """The CSR tables of one LM as numpy arrays (views of its CPU buffers)."""
    c = lm.to("cpu")
    return (
        c.arc_offsets.numpy(),
        c.arc_token.numpy(),
        c.arc_next.numpy(),
        c.arc_weight.numpy(),
        c.root_weight.numpy(),
        c.root_next.numpy(),
        c.backoff_state.numpy(),
        c.backoff_weight.numpy(),
        c.final_weight.numpy(),
    )


@numba.njit(nogil=True, cache=True, inline="always")
def ngram_lookup(t, s: int, w: int) -> tuple[np.float32, int]:
    """ln p(w | s) and the next state in one LM's tables `t` (see `_tables`): the backoff walk of
    `BatchedNgramLM.score` for one (state, token), binary search within each state's arcs."""
    off, tok, nxt, weight, root_w, root_next, bstate, bweight = t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]
    acc = np.float32(0.0)
    while s != 0:
        lo = off[s]
        hi = off[s + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if tok[mid] < w:
                lo = mid + 1
            else:
                hi = mid
        if lo < off[s + 1] and tok[lo] == w:
            return acc + weight[lo], nxt[lo]
        acc += bweight[s]
        s = bstate[s]
    return acc + root_w[w], root_next[w]


@numba.njit(nogil=True, cache=True, inline="always")
def lm_step(lm, u: int, w: int) -> tuple[np.float32, int]:
    """(added cost, next union state) of word w from union state u (`DifferenceLM.arrays()`)."""
    lg, sm, large_of, small_of, union_of_large, union_of_small, order, scale = lm
    lp_l, n_l = ngram_lookup(lg, large_of[u], w)
    lp_s, n_s = ngram_lookup(sm, small_of[u], w)
    u_l = union_of_large[n_l]
    u_s = union_of_small[n_s]
    nxt = u_l if order[u_l] >= order[u_s] else u_s  # the longer suffix: the longest in the union
    return np.float32((lp_s - lp_l) * scale), nxt


# memo of `lm_step` lookups, kept for a whole utterance by the compiled searches: sets of
# MEMO_WAYS 16-byte records of (u * vocab + w) keys, a set per 64-byte cache line (the newest first):
# a probe reads one line, as in a direct-mapped table, and up to four colliding pairs stay in it
MEMO_BITS = 16  # 65536 entries, 1 MiB per worker thread
MEMO_WAYS = 4
MEMO_DTYPE = np.dtype([("key", np.int64), ("cost", np.float32), ("next", np.int32)], align=True)


def zeros_on_cache_lines(n: int, dtype: np.dtype, line: int = 64) -> np.ndarray:
    """``np.zeros(n, dtype)`` starting on a cache line (numpy aligns to 16 bytes only), so that
    records whose size divides `line` never straddle two lines."""
    size = n * dtype.itemsize
    raw = np.zeros(size + line, np.uint8)
    skip = -raw.ctypes.data % line
    return raw[skip : skip + size].view(dtype)


def new_memo(bits: int = MEMO_BITS) -> np.ndarray:
    """An empty `memo_get` table of 2**bits entries, its sets aligned to cache lines."""
    memo = zeros_on_cache_lines(1 << bits, MEMO_DTYPE, MEMO_WAYS * MEMO_DTYPE.itemsize)
    memo["key"] = -1
    return memo


@numba.njit(nogil=True, cache=True, inline="always")
def memo_slot(u: int, w: int, vocab: int, size: int) -> tuple[int, int]:
    """(key, first entry of its set) of the pair (u, w) in a memo of `size` entries (a power of
    two)."""
    key = np.int64(u) * vocab + w
    h = key * np.int64(-7046029254386353131)
    return key, (h ^ (h >> 31)) & (size - MEMO_WAYS)


@numba.njit(nogil=True, cache=True, inline="always")
def memo_get(memo, u: int, w: int, vocab: int) -> tuple[np.float32, int, bool]:
    """The memo's entry for the (history, word) pair (paper 000 Alg. 1-2: a pair met again, in
    other graph states or later frames, costs one probe instead of two backoff walks): (added
    cost, next union state, found). On a miss the caller runs `memo_fill`: the LM tuple is then
    touched only on misses (passing it costs a reference count per array, here per arc)."""
    key, i = memo_slot(u, w, vocab, memo.shape[0])
    for k in range(i, i + MEMO_WAYS):
        e = memo[k]
        if e.key == key:
            return e.cost, np.int64(e.next), True
    return np.float32(0.0), np.int64(0), False


@numba.njit(nogil=True, cache=True)
def memo_fill(lm, memo, u: int, w: int, vocab: int) -> tuple[np.float32, int]:
    """`lm_step` of the pair, entered first in its set (after `memo_get` missed; the set's
    oldest entry drops out)."""
    key, i = memo_slot(u, w, vocab, memo.shape[0])
    c, nxt = lm_step(lm, u, w)
    for k in range(i + MEMO_WAYS - 1, i, -1):
        memo[k].key = memo[k - 1].key
        memo[k].cost = memo[k - 1].cost
        memo[k].next = memo[k - 1].next
    e = memo[i]
    e.key = key
    e.cost = c
    e.next = nxt
    return c, np.int64(nxt)


@numba.njit(nogil=True, cache=True, inline="always")
def lm_final(lm, u: int) -> np.float32:
    """The </s> difference of union state u."""
    lg, sm, large_of, small_of = lm[0], lm[1], lm[2], lm[3]
    return np.float32((sm[8][small_of[u]] - lg[8][large_of[u]]) * lm[7])


def lm_final_costs(lm: tuple, states: np.ndarray) -> np.ndarray:
    """`lm_final` of many union states at once (float32, as the searches add it)."""
    lg, sm, large_of, small_of = lm[0], lm[1], lm[2], lm[3]
    return ((sm[8][small_of[states]] - lg[8][large_of[states]]) * lm[7]).astype(np.float32)


def path_lm_cost(lm: tuple, word_ids: list[int], final: bool) -> float:
    """The LM difference a search adds along a word sequence (and at ``</s>`` when final), with
    the compiled searches' float32 steps; lm: `DifferenceLM.arrays()`."""
    u, total = DifferenceLM.START, 0.0
    for w in word_ids:
        c, u = lm_step(lm, u, w)
        total += float(c)
    if final:
        total += float(lm_final(lm, u))
    return total
