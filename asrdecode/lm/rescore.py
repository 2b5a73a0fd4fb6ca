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
as its ``<unk>``, and a sequence with such a word is dropped when it has none.

Only the n best sequences are rescored: G's cheapest-path reading is a minimum over G's paths per
word sequence, which a composition with the lattice cannot take back, so the exact subtraction
needs whole sequences (n-best, not whole-lattice, rescoring).
"""

from __future__ import annotations

import math

from asrdecode.lm.backoff import LN10, BackoffReadings

Frontier = dict[tuple[str, ...], float]  # G state -> lowest cost (-log10 p) of reaching it
Reading = tuple[tuple[str, ...], float, Frontier]  # new LM state, its log10 p so far, G's frontier


class NbestRescorer:
    """``scale * (exact_new - cheapest_graph)`` of word sequences (module docstring); `lm` is the
    new LM, `graph_lm` the ARPA the graph's G was built from."""

    def __init__(self, lm: BackoffReadings, graph_lm: BackoffReadings, scale: float = 1.0) -> None:
        self.lm, self.graph_lm, self.scale = lm, graph_lm, float(scale)
        self.unk = ("<unk>",) in lm.prob

    def added_costs(self, sequences: list[list[str]]) -> list[float]:
        """The cost each word sequence gets on top of its search cost (inf: the new LM cannot read
        it). Sequences sharing a prefix share its reading (an n-best list mostly does)."""
        memo: dict[tuple[str, ...], Reading] = {}
        start: Reading = (self.lm.state(("<s>",)), 0.0, {self.graph_lm.state(("<s>",)): 0.0})
        out = []
        for words in sequences:
            kept = tuple(w for w in words if (w,) in self.graph_lm.prob)
            reading = start
            for i in range(len(kept)):
                prefix = kept[: i + 1]
                if prefix not in memo:
                    memo[prefix] = self._advance(reading, kept[i])
                reading = memo[prefix]
            _, logp, frontier = self._advance(reading, "</s>")
            diff = -logp - min(frontier.values(), default=math.inf)  # -log10 p: new minus graph
            out.append(self.scale * diff * LN10 if math.isfinite(diff) else math.inf)
        return out

    def _advance(self, reading: Reading, word: str) -> Reading:
        """One word further: the new LM's state and log10 p by the backoff rule, and G's frontier
        (every G state the words can end in, with its cheapest cost; `BackoffReadings.cheapest_step`)."""
        hist, logp, frontier = reading
        lm, g = self.lm, self.graph_lm
        w = word if word == "</s>" or (word,) in lm.prob else "<unk>" if self.unk else None
        if w is None or not math.isfinite(logp):
            new_hist, new_logp = hist, -math.inf
        else:
            new_hist, new_logp = lm.state(hist + (w,)), logp + lm.word_log10(hist, w)
        return new_hist, new_logp, g.cheapest_step(frontier, word)
