"""N-best LM rescoring of a WFST search: the graph's LM taken back, another LM read exactly put in.

Kaldi's second pass (``lattice-lmrescore --lm-scale=-1`` with the graph's G, then
``lattice-lmrescore-const-arpa`` with the new LM) and icefall's n-best rescoring, over the n best
word sequences of the search's word lattice. Each sequence W with search cost c(W) (acoustic +
graph) gets

    c'(W) = c(W) + scale * (exact_new(W) - cheapest_graph(W))

* ``cheapest_graph(W)`` is what the graph charged for the LM: its G reads its ARPA as the cheapest
  path over the backoff arcs (`asrdecode.lm.backoff`), and the search's best path for W takes G's
  cheapest route for W's words whatever the alignment, so subtracting it takes the graph LM's share
  out exactly. (Kaldi subtracts the backoff-rule reading instead, which leaves G's cheaper backoff
  routes in the result.)
* ``exact_new(W)`` is the new LM read by the backoff rule, as pocketsphinx, KenLM and the on-the-fly
  decoders read an LM. With the graph's own ARPA as the new LM and scale 1 the result is the graph
  LM read exactly; with a larger LM, the larger LM replaces the graph's.

Both readings include ``<s>`` and ``</s>``. Words the graph LM does not know (noise words that
the lexicon adds between LM words) are in neither reading; a word the new LM does not know is read
as its ``<unk>`` (the history starts again after it), and a sequence with such a word is dropped
when it has none. The graph LM is read into dictionaries (`BackoffReadings`: it was small enough to
build the graph from); the new LM, which may have millions of n-grams or be pocketsphinx's binary
LM, into the compact tables of `BatchedNgramLM`, all n best read a word position at a time.

Only the n best sequences are rescored: G's cheapest-path reading is a minimum over G's paths per
word sequence, which a composition with the lattice cannot take back, so the exact subtraction
needs whole sequences (n-best, not whole-lattice, rescoring).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from asrdecode.lm.backoff import LN10, BackoffReadings
from asrdecode.lm.ngram_tensor import BatchedNgramLM

Frontier = dict[tuple[str, ...], float]  # G state -> lowest cost (-log10 p) of reaching it

# a vocabulary word no LM file has: the new LM reads it as its <unk> (`BatchedNgramLM`), which is
# how it reads a word of the graph LM that it lacks
UNKNOWN_WORD = "\x00unknown"


def rescoring_vocabulary(graph_lm: BackoffReadings) -> list[str]:
    """The words the new LM is read over: the graph LM's (the words a hypothesis keeps), then
    `UNKNOWN_WORD`."""
    words = sorted({ngram[0] for ngram in graph_lm.prob if len(ngram) == 1} - {"<s>", "</s>", "<unk>"})
    return [*words, UNKNOWN_WORD]


class NbestRescorer:
    """``scale * (exact_new - cheapest_graph)`` of word sequences (module docstring); `lm` is the
    new LM as compact tables over `rescoring_vocabulary(graph_lm)` (an ARPA or a pocketsphinx
    binary LM; `BatchedNgramLM.from_file`), `graph_lm` the ARPA the graph's G was built from."""

    def __init__(self, lm: BatchedNgramLM, graph_lm: BackoffReadings, scale: float = 1.0) -> None:
        self.lm, self.graph_lm, self.scale = lm, graph_lm, float(scale)
        self.ids = {w: i for i, w in enumerate(lm.vocab or [])}
        if UNKNOWN_WORD not in self.ids:
            raise ValueError("the new LM must be read over rescoring_vocabulary(graph_lm)")
        self.unknown = self.ids[UNKNOWN_WORD]

    def added_costs(self, sequences: list[list[str]]) -> list[float]:
        """The cost each word sequence gets on top of its search cost (inf: the new LM cannot read
        it). Sequences sharing a prefix share G's reading of it (an n-best list mostly does)."""
        kept = [tuple(w for w in words if (w,) in self.graph_lm.prob) for words in sequences]
        new = self.new_lm_costs(kept)
        memo: dict[tuple[str, ...], Frontier] = {}
        start: Frontier = {self.graph_lm.state(("<s>",)): 0.0}
        out = []
        for words, new_cost in zip(kept, new, strict=True):
            frontier = start
            for i in range(len(words)):
                prefix = words[: i + 1]
                if prefix not in memo:
                    memo[prefix] = self.graph_lm.cheapest_step(frontier, words[i])
                frontier = memo[prefix]
            graph_cost = min(self.graph_lm.cheapest_step(frontier, "</s>").values(), default=math.inf)
            diff = new_cost - graph_cost * LN10  # nats: new minus graph
            out.append(self.scale * diff if math.isfinite(diff) else math.inf)
        return out

    def new_lm_costs(self, sequences: list[tuple[str, ...]]) -> list[float]:
        """-ln p of each word sequence from ``<s>`` to ``</s>`` in the new LM (backoff rule), all
        sequences a word position at a time (`BatchedNgramLM.score`); inf where it is 0."""
        if not sequences:
            return []
        longest = max(len(w) for w in sequences)
        tokens = np.zeros((len(sequences), max(longest, 1)), np.int64)
        lengths = np.array([len(w) for w in sequences], np.int64)
        for b, words in enumerate(sequences):
            tokens[b, : len(words)] = [self.ids.get(w, self.unknown) for w in words]
        lm = self.lm
        tokens_t, lengths_t = torch.from_numpy(tokens), torch.from_numpy(lengths)
        states = lm.init_states(len(sequences), device="cpu")
        total = torch.zeros(len(sequences), dtype=torch.float64)
        for t in range(longest):
            logp, nxt = lm.score(states, tokens_t[:, t])
            live = t < lengths_t
            total += torch.where(live, logp.double(), 0.0)
            states = torch.where(live, nxt, states)
        total += lm.final_scores(states).double()
        return [-x if math.isfinite(x) else math.inf for x in total.tolist()]
