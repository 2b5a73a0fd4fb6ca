#!/usr/bin/env python3
"""Would a second pass over the first pass's words (pocketsphinx's fwdflat) remove search errors cheaply?

    .venv/bin/python scripts/probe_second_pass.py data/real/phone-dev/manifest.jsonl \
        out/bench/diagnose_s38_default_real-phone-dev.json --beam 15 --max-active 50000

pocketsphinx searches twice: a lexicon-tree pass, then a flat pass with a wider beam (1e-64 against
1e-48) over only the words whose ends the first pass reached. This probe tries the same with the
sphinx setup (the small HCLG + `wfst-otf`):

1. pass 1: the default settings, keeping every arc the search crossed within its beam (the search's
   raw lattice arcs, no lattice pruning); its word set is the output labels of those arcs;
2. pass 2: `wfst-otf` at `--beam` / `--max-active` over the small graph restricted to that word set
   (arcs of other words dropped, states that no longer reach a final state trimmed);
3. for comparison, one pass at `--beam` / `--max-active` over the whole graph, and the default pass
   without lattice arcs (the time pass 1 would take without them).

Per utterance it prints the words that changed; at the end the search errors of pass 1 and pass 2
against pocketsphinx's words (their forced costs from the diagnosis JSON of the same input, made by
`asrdecode bench diagnose-pocketsphinx --config sphinx-otf --json`), the WER of each and the seconds
of each pass (one thread, in this process; run it on a quiet machine). An analysis probe, not a
decoder: it reads the compiled search's per-thread workspace.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import jiwer
import numpy as np
import torch

from asrdecode.bench.diagnose_pocketsphinx import pcm_and_output
from asrdecode.config import SPHINX_SETUP, build_config
from asrdecode.decoders import DecoderContext, make_decoder
from asrdecode.decoders.wfst_otf.decoder import WfstOtfDecoder
from asrdecode.graph.cache import resolve_graph_spec
from asrdecode.graph.format import DeviceGraph
from asrdecode.graph.restrict import backward_closure, reversed_arcs
from asrdecode.io.manifests import read_inputs
from asrdecode.models.loading import load_model


def restrict_to_words(graph: DeviceGraph, arcs: dict, words: set[int]) -> DeviceGraph:
    """`graph` without the arcs of words outside `words`, trimmed to states that reach a final state
    (state numbers kept)."""
    src, olabel, nextstate = arcs["src"].astype(np.int64), arcs["olabel"], arcs["nextstate"].astype(np.int64)
    allowed = np.zeros(int(olabel.max()) + 1, bool)
    allowed[0] = True
    allowed[sorted(words)] = True
    keep = allowed[olabel]
    offsets, rev_src = reversed_arcs(src, nextstate, keep, graph.num_states)
    final = graph.final.numpy()
    seeds = np.flatnonzero(np.isfinite(final)).astype(np.int64)
    live = backward_closure(offsets, rev_src, seeds, graph.num_states)
    keep &= live[src] & live[nextstate]
    return DeviceGraph.from_arrays(
        graph.num_states, graph.start, final, src[keep], arcs["ilabel"][keep], olabel[keep],
        arcs["weight"][keep], nextstate[keep], meta=dict(graph.meta),
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="manifest.jsonl")
    ap.add_argument("diagnosis", type=Path, help="diagnose-pocketsphinx --config sphinx-otf --json of it")
    ap.add_argument("--beam", type=float, default=15.0)
    ap.add_argument("--max-active", type=int, default=50000)
    args = ap.parse_args()

    rows = {r["id"]: r for r in json.loads(args.diagnosis.read_text())["utterances"]}
    cfg = build_config(None, [], setup=SPHINX_SETUP)
    cfg.decoder.graph = resolve_graph_spec(cfg.decoder.graph)
    model = load_model(
        cfg.model.path, cfg.model.type, cfg.model.topn, cfg.model.threads, cfg.model.density_floor
    ).eval()
    context = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    torch.set_num_threads(1)
    plain = make_decoder(replace(cfg.decoder, threads=1), context)
    graph, diff, words = plain.paths.graph, plain.diff, plain.words
    arcs = graph.arc_arrays()
    on_graph = replace(cfg.decoder, word_insertion_penalty=0.0, threads=1)  # the penalty is in `graph`
    first = WfstOtfDecoder(
        replace(on_graph, lattice=True, lattice_beam=cfg.decoder.beam, prune_interval=0),
        context, graph=graph, words=words, lm=diff,
    )  # fmt: skip
    wide = replace(on_graph, beam=args.beam, max_active=args.max_active)
    whole = WfstOtfDecoder(wide, context, graph=graph, words=words, lm=diff)

    seconds = dict.fromkeys(("default", "pass 1", "restrict", "pass 2", "one wide pass"), 0.0)
    errors = {"pass 1": 0, "pass 2": 0, "one wide pass": 0}
    wrong = dict.fromkeys(errors, 0)
    ref_words, sizes = 0, []

    def timed(name: str, fn, *a):
        t = time.perf_counter()
        out = fn(*a)
        seconds[name] += time.perf_counter() - t
        return out

    for utt in read_inputs(args.input).utterances:
        row = rows[utt.utt_id]
        _, out = pcm_and_output(model, utt)
        timed("default", plain.decode, out)
        one = timed("pass 1", first.decode, out)[0]
        crossed = first.compiled_search()._local.workspace.lattice_data()[0]
        seen = {int(w) for w in np.unique(arcs["olabel"][crossed.arc]) if w > 0}
        sizes.append(len(seen))
        restricted = timed("restrict", restrict_to_words, graph, arcs, seen)
        two = timed(
            "pass 2", WfstOtfDecoder(wide, context, graph=restricted, words=words, lm=diff).decode, out
        )[0]
        full = timed("one wide pass", whole.decode, out)[0]
        theirs, their_cost = row["pocketsphinx"].split(), row["pocketsphinx_cost"]
        ref = row["ref"].split()
        ref_words += len(ref)
        hyps = {}
        for name, result in (("pass 1", one), ("pass 2", two), ("one wide pass", full)):
            hyp = [w.word for w in result.words]
            hyps[name] = hyp
            errors[name] += their_cost is not None and hyp != theirs and their_cost < -result.score - 0.01
            if ref:
                wrong[name] += round(jiwer.wer(" ".join(ref), " ".join(hyp) or "-") * len(ref))
        if len({" ".join(h) for h in hyps.values()}) > 1:
            print(f"{utt.utt_id} ({len(seen)} words after pass 1)")
            for name, hyp in hyps.items():
                print(f"  {name:14} {' '.join(hyp)}")
            print(f"  {'pocketsphinx':14} {' '.join(theirs)}")
    summary = {
        "beam": args.beam,
        "max_active": args.max_active,
        "search_errors": errors,
        "wer": {k: round(v / max(ref_words, 1), 4) for k, v in wrong.items()},
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "words_after_pass_1_median": float(np.median(sizes)) if sizes else 0.0,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
