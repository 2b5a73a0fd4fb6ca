"""The LM difference that `wfst-otf` adds on the fly: large LM minus the small LM the graph was built with.

Paper 000 (sec. 3, Alg. 1-2) and Kaldi's biglm decoders rescore a graph built with a small LM by
composing it on the fly with ``G_large - G_small``: when a token crosses an arc with word ``w`` its
cost changes by ``lm_scale * (cost_large(w | h) - cost_small(w | h))`` (cost = -ln p), so with
``lm_scale = 1`` the small LM's weight already on the graph is replaced by the large LM's; at the
end ``lm_scale * (cost_large(</s> | h) - cost_small(</s> | h))`` is added. Other scales mix the two
in the log domain: ``(1 - lm_scale) * small + lm_scale * large``.

**One combined state per token** (not a pair): the state of a backoff LM after a word sequence is
the longest suffix of ``<s> w1 .. wk`` that is a history of the LM (`BatchedNgramLM.histories`). Both
history sets are prefix-closed, so their union U is too, and the longest suffix of the word sequence
in U determines the longest suffix in each LM (a suffix of it). The *difference state* is therefore
a state of U: ``large_of[u]`` and ``small_of[u]`` give the two LMs' states, and the transition
``u --w--> u'`` (longest suffix of ``h(u) w`` in U) is a backoff walk in an automaton with the same
CSR shape as the LMs (`BatchedNgramLM` with zero weights: arcs that extend a history, backoff to
the longest proper suffix). One int per token keeps recombination keyed on (graph state, U state),
exactly the pairs (graph state, small state, large state) that can differ. When the small LM is a
pruned copy of the large one, U is the large LM's histories.

Lookups: torch (`step`, batched sparse lookups, any device) and numba (`lm_step` on the
`arrays()` tuples, for the compiled search). The large LM's tables stay where they are built
(host memory); only the lookups' answers enter the search.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import torch

from asrdecode.errors import ConfigError
from asrdecode.lm.ngram_tensor import BatchedNgramLM

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


class DifferenceLM:
    """``lm_scale * (large - small)`` over word ids (= graph olabels) with one combined state."""

    START = BatchedNgramLM.BOS  # the union state of <s> (as in both LMs)

    def __init__(self, large: BatchedNgramLM, small: BatchedNgramLM, lm_scale: float = 1.0) -> None:
        if large.vocab_size != small.vocab_size:
            raise ValueError("large and small LM must share the vocabulary (token ids = graph olabels)")
        self.large, self.small, self.lm_scale = large, small, float(lm_scale)
        hl, hs = large.histories(), small.histories()
        id_l = {h: i for i, h in enumerate(hl)}
        id_s = {h: i for i, h in enumerate(hs)}
        rest = sorted((set(hl) | set(hs)) - {(), (-1,)}, key=lambda h: (len(h), h))
        hist = [(), (-1,), *rest]
        uid = {h: i for i, h in enumerate(hist)}

        def longest(h: tuple[int, ...], table: dict, start: int = 0) -> int:
            for i in range(start, len(h)):
                if h[i:] in table:
                    return table[h[i:]]
            return 0

        U = len(hist)
        self.large_of = np.array([longest(h, id_l) for h in hist], dtype=np.int64)
        self.small_of = np.array([longest(h, id_s) for h in hist], dtype=np.int64)
        back = np.array([longest(h, uid, 1) for h in hist], dtype=np.int64)
        V = large.vocab_size
        root_next = np.zeros(V, dtype=np.int64)
        src, tok, dst = [], [], []
        for u, h in enumerate(hist[2:], 2):
            if len(h) == 1:
                root_next[h[0]] = u
            else:
                src.append(uid[h[:-1]])
                tok.append(h[-1])
                dst.append(u)
        order = np.lexsort((np.array(tok, dtype=np.int64), np.array(src, dtype=np.int64)))
        src_a = np.array(src, dtype=np.int64)[order]
        offsets = np.zeros(U + 1, dtype=np.int64)
        np.cumsum(np.bincount(src_a, minlength=U), out=offsets[1:])
        zeros = torch.zeros
        # the union automaton: a BatchedNgramLM with zero weights (only next states are used)
        self.union = BatchedNgramLM(
            vocab_size=V,
            order=max(large.order, small.order, 1),
            arc_offsets=torch.from_numpy(offsets),
            arc_token=torch.tensor(np.array(tok, dtype=np.int32)[order]),
            arc_next=torch.tensor(np.array(dst, dtype=np.int32)[order]),
            arc_weight=zeros(len(src)),
            root_weight=zeros(V),
            root_next=torch.from_numpy(root_next),
            backoff_state=torch.from_numpy(back),
            backoff_weight=zeros(U),
            final_weight=zeros(U),
            state_order=torch.tensor([len(h) for h in hist], dtype=torch.int32),
        )
        self._large_of_t = torch.from_numpy(self.large_of)
        self._small_of_t = torch.from_numpy(self.small_of)

    @property
    def num_states(self) -> int:
        return self.union.num_states

    @classmethod
    def from_arpa(
        cls, large: str | Path, small: str | Path, words: dict[int, str], num_ids: int, lm_scale: float = 1.0
    ) -> DifferenceLM:
        vocab = word_vocabulary(words, num_ids)
        return cls(
            BatchedNgramLM.from_arpa(large, vocab=vocab),
            BatchedNgramLM.from_arpa(small, vocab=vocab),
            lm_scale,
        )

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

    def to(self, device: torch.device | str) -> DifferenceLM:
        for name in ("large", "small", "union"):
            setattr(self, name, getattr(self, name).to(device))
        self._large_of_t, self._small_of_t = self._large_of_t.to(device), self._small_of_t.to(device)
        return self

    # ------------------------------------------------------------------ torch lookups
    def step(self, states: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """states [N] (union), words [N] -> (added cost float32 [N], next states [N]); batched."""
        lp_l, _ = self.large.score(self._large_of_t[states], words)
        lp_s, _ = self.small.score(self._small_of_t[states], words)
        _, nxt = self.union.score(states, words)
        return ((lp_s - lp_l) * self.lm_scale).float(), nxt

    def final_cost(self, states: torch.Tensor) -> torch.Tensor:
        """The </s> difference per state (float32)."""
        f_l = self.large.final_weight[self._large_of_t[states]]
        f_s = self.small.final_weight[self._small_of_t[states]]
        return ((f_s - f_l) * self.lm_scale).float()

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
        """(union, large, small) table tuples for `lm_step` / `lm_final`, plus large_of, small_of."""
        return (
            _tables(self.union),
            _tables(self.large),
            _tables(self.small),
            self.large_of,
            self.small_of,
            np.float32(self.lm_scale),
        )

    def describe(self) -> dict:
        return {
            "states": self.num_states,
            "large": self.large.describe(),
            "small": self.small.describe(),
            "bytes": self.union.describe()["bytes"] + self.large_of.nbytes + self.small_of.nbytes,
        }


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


@numba.njit(nogil=True, cache=True)
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


@numba.njit(nogil=True, cache=True)
def lm_step(lm, u: int, w: int) -> tuple[np.float32, int]:
    """(added cost, next union state) of word w from union state u (`DifferenceLM.arrays()`)."""
    un, lg, sm, large_of, small_of, scale = lm
    lp_l, _ = ngram_lookup(lg, large_of[u], w)
    lp_s, _ = ngram_lookup(sm, small_of[u], w)
    _, nxt = ngram_lookup(un, u, w)
    return np.float32((lp_s - lp_l) * scale), nxt


@numba.njit(nogil=True, cache=True)
def lm_final(lm, u: int) -> np.float32:
    """The </s> difference of union state u."""
    un, lg, sm, large_of, small_of, scale = lm
    return np.float32((sm[8][small_of[u]] - lg[8][large_of[u]]) * scale)
