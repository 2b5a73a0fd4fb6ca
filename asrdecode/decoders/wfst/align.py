"""Forced alignment in a WFST decoder's own model: the best path of a given word sequence.

``force_align(decoder, output, transcripts)`` restricts the decoder's graph (with its word
insertion penalty) to each transcript (`asrdecode.graph.restrict`) and decodes the restriction
with no pruning (beam and max_active unbounded): the result's ``score`` is minus the lowest cost
(acoustic + graph) of any path outputting those words, on the same scale as the decoder's own
1-best ``score``. Comparing the two tells a search error (a transcript whose best path costs less
than the 1-best the search returned) from a model difference (it costs more): the comparison Kaldi
users make with ``compile-train-graphs`` + ``gmm-align`` against ``gmm-latgen-faster``, here with
the decoding graph's LM costs kept.

For the on-the-fly decoders (`wfst-otf`, `let`) the model is the small-LM graph composed with the
LM difference D; D's cost depends on the word sequence only, so the composed best path of a
transcript is the graph's best path for it plus ``lm_scale * (large - small)`` of its words and
``</s>`` (`difference.path_lm_cost`, the searches' own float32 steps). With n-best rescoring
(``decoder.rescore_lm``) the model is the rescored one: the words' rescoring cost is added too
(`paths.NbestRescoring.costs`).
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from asrdecode.decoders.base import DecodeResult
from asrdecode.decoders.wfst.decoder import GraphSearchConfig, WfstConfig, WfstDecoder
from asrdecode.graph.restrict import WordSequenceGraphs
from asrdecode.lm.difference import path_lm_cost
from asrdecode.models.base import ModelOutput

TOLERANCE = 1e-3  # cost units: float32 sums over thousands of frames ...
RELATIVE_TOLERANCE = 1e-6  # ... whose rounding grows with the cost (float32: 2^-24 relative per step)


def cheaper(cost: float, than: float) -> bool:
    """Whether `cost` is below `than` by more than float32 rounding of either (two searches add
    the same costs in different orders)."""
    return cost < than - max(TOLERANCE, RELATIVE_TOLERANCE * abs(than))


def force_align(
    decoder: Any,
    output: ModelOutput,
    transcripts: list[list[str]],
    graphs: WordSequenceGraphs | None = None,
) -> list[DecodeResult | None]:
    """Per utterance of `output`, the exhaustive best path of its transcript's words through the
    decoder's model (`wfst`, `wfst-otf` or `let`: its graph, and the LM difference of the
    on-the-fly ones); None where a word is not in the graph's vocabulary or no path outputs the
    words. `graphs` reuses the per-word closures across calls (made from the decoder's graph)."""
    paths = decoder.paths  # the graph the search runs on (word insertion penalty included) and its words
    lm = getattr(decoder, "path_lm", None)  # the on-the-fly decoders' `DifferenceLM.arrays()`
    graphs = graphs or WordSequenceGraphs(paths.graph)
    exhaustive = exhaustive_config(decoder)
    results: list[DecodeResult | None] = []
    for b, words in enumerate(transcripts):
        ids = [paths.word_ids.get(w) for w in words]
        if any(i is None for i in ids):
            results.append(None)
            continue
        restricted = graphs.restrict([int(i) for i in ids if i is not None])
        if restricted.num_states == 0:
            results.append(None)
            continue
        one = ModelOutput(
            log_probs=output.log_probs[b : b + 1, : int(output.lengths[b])],
            lengths=output.lengths[b : b + 1],
            frame_shift=output.frame_shift,
            blank_id=output.blank_id,
            units=output.units,
        )
        aligner = WfstDecoder(exhaustive, decoder.context, graph=restricted, words=paths.words)
        result = aligner.decode(one)[0]
        complete = (
            math.isfinite(result.score)
            and not aligner.last_info.get("not_final")
            and [w.word for w in result.words] == list(words)
        )
        if complete and lm is not None:
            d = path_lm_cost(lm, [int(i) for i in ids if i is not None], True)
            result.score -= d
            result.lm_score -= d
        rescoring = getattr(decoder, "rescoring", None)
        if complete and rescoring is not None:  # the n-best rescoring's share
            d = rescoring.costs([list(words)], lm)[0]
            complete = math.isfinite(d)
            result.score -= d
            result.lm_score -= d
        results.append(result if complete else None)
    return results


def exhaustive_config(decoder: Any) -> WfstConfig:
    """A `wfst` config searching the decoder's restricted graphs with no pruning (its acoustic
    scale and blank handling kept; the word insertion penalty is already in the graph's weights)."""
    shared = {f.name: getattr(decoder.config, f.name) for f in fields(GraphSearchConfig)}
    shared.update(
        beam=math.inf,
        max_active=2**31 - 1,
        min_active=0,
        word_beam=0.0,
        history_beam=0.0,
        history_max=0,
        word_insertion_penalty=0.0,
        nbest=1,
        lattice=False,
        rescore_lm="",  # the rescoring's share is added to the restricted search's cost here
        threads=1,
    )
    return WfstConfig(**shared)
