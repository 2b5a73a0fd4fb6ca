"""Forced alignment in a `wfst` decoder's own model: the best path of a given word sequence.

``force_align(decoder, output, transcripts)`` restricts the decoder's graph (with its word
insertion penalty) to each transcript (`asrdecode.graph.restrict`) and decodes the restriction
with no pruning (beam and max_active unbounded): the result's ``score`` is minus the lowest cost
(acoustic + graph) of any path outputting those words, on the same scale as the decoder's own
1-best ``score``. Comparing the two tells a search error (a transcript whose best path costs less
than the 1-best the search returned) from a model difference (it costs more): the comparison Kaldi
users make with ``compile-train-graphs`` + ``gmm-align`` against ``gmm-latgen-faster``, here with
the decoding graph's LM costs kept.
"""

from __future__ import annotations

import math
from dataclasses import replace

from asrdecode.decoders.base import DecodeResult
from asrdecode.decoders.wfst.decoder import WfstDecoder
from asrdecode.graph.restrict import WordSequenceGraphs
from asrdecode.models.base import ModelOutput


def force_align(
    decoder: WfstDecoder,
    output: ModelOutput,
    transcripts: list[list[str]],
    graphs: WordSequenceGraphs | None = None,
) -> list[DecodeResult | None]:
    """Per utterance of `output`, the exhaustive best path of its transcript's words through the
    decoder's graph; None where a word is not in the graph's vocabulary or no path outputs the
    words. `graphs` reuses the per-word closures across calls (made from the decoder's graph)."""
    graphs = graphs or WordSequenceGraphs(decoder.graph_cpu)
    exhaustive = replace(
        decoder.config,
        beam=math.inf,
        max_active=2**31 - 1,
        min_active=0,
        word_insertion_penalty=0.0,  # already in decoder.graph_cpu's weights
        nbest=1,
        lattice=False,
        boost={},
        threads=1,
    )
    results: list[DecodeResult | None] = []
    for b, words in enumerate(transcripts):
        ids = [decoder.word_ids.get(w) for w in words]
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
        aligner = WfstDecoder(exhaustive, decoder.context, graph=restricted, words=decoder.words)
        result = aligner.decode(one)[0]
        complete = (
            math.isfinite(result.score)
            and not aligner.last_info.get("not_final")
            and [w.word for w in result.words] == list(words)
        )
        results.append(result if complete else None)
    return results
