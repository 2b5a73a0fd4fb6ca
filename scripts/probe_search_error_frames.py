#!/usr/bin/env python3
"""Where does the search lose pocketsphinx's words? The frame, and the pruning step that dropped them.

    .venv/bin/python scripts/probe_search_error_frames.py data/real/phone-dev/manifest.jsonl \
        out/bench/diagnose_default_phone-dev.json [--json OUT] [--all | --own] [KEY=VALUE ...]

Input: a diagnosis of the same input with the sphinx setup (`asrdecode bench
diagnose-pocketsphinx DATA --config sphinx-otf --json`): pocketsphinx's words per utterance and their
cost in our model. For each of its search errors (`--all`: every utterance where the words
differ) the search at the sphinx setup's pruning, or with the KEY=VALUE overrides
(`decoder.beam=13`, `decoder.graph=DIR`, ...), runs beside the best path of pocketsphinx's words
(`asrdecode.bench.search_loss.follow_path`): the first frame where the search lost it and the
pruning step (history, beam, max_active, bound), the cost the path added there in parts, and
whether the search then ends costlier than those words (a search error at these settings, against
our words' forced cost as the diagnosis's verdict). Prints a JSON row per utterance and a summary
(`--json` writes both). No pocketsphinx run: about 30 s on phone-dev, so it counts search errors
of any setting quickly (tuning sets only). `--own` follows our own words instead: a check, they
are never a search error. Run it where nothing is timed: it is a probe, not a benchmark. The
diagnosis itself prints the same (a `LOST` line) for its search errors at its own settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from asrdecode.bench.diagnose_pocketsphinx import pcm_and_output, words_cost
from asrdecode.bench.search_loss import follow_words
from asrdecode.config import SPHINX_SETUP, build_config
from asrdecode.decoders import DecoderContext, make_decoder
from asrdecode.decoders.wfst.align import cheaper, force_align
from asrdecode.errors import AsrDecodeError
from asrdecode.graph.cache import resolve_graph_spec
from asrdecode.graph.restrict import WordSequenceGraphs
from asrdecode.io.manifests import read_inputs
from asrdecode.models.loading import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="manifest.jsonl")
    ap.add_argument("diagnosis", type=Path, help="diagnose-pocketsphinx --config sphinx-otf --json of it")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--own", action="store_true", help="follow our own words (a check: never lost)")
    ap.add_argument(
        "--all", action="store_true", help="every utterance where the words differ, not only search errors"
    )
    ap.add_argument("overrides", nargs="*", help="config overrides of the sphinx setup")
    args = ap.parse_intermixed_args()

    try:
        rows = {r["id"]: r for r in json.loads(args.diagnosis.read_text())["utterances"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        sys.exit(f"probe: {args.diagnosis}: not a diagnosis JSON ({err})")
    try:
        cfg = build_config(None, args.overrides, setup=SPHINX_SETUP)
        cfg.decoder.graph = resolve_graph_spec(cfg.decoder.graph)
        model = load_model(
            cfg.model.path, cfg.model.type, cfg.model.topn, cfg.model.threads, cfg.model.density_floor
        ).eval()
        context = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
        decoder = make_decoder(cfg.decoder, context)
        inputs = read_inputs(args.input)
    except (AsrDecodeError, OSError) as err:
        sys.exit(f"probe: {err}")
    graphs = WordSequenceGraphs(decoder.paths.graph)
    torch.set_num_threads(1)
    results = []
    for utt in inputs.utterances:
        row = rows.get(utt.utt_id)
        if row is None or row["pocketsphinx_cost"] is None:
            continue
        wanted = row["verdict"] == "search error" or (args.all and row["verdict"] != "same")
        if not (wanted or args.own):
            continue
        words = (row["asrdecode"] if args.own else row["pocketsphinx"]).split()
        try:
            _, output = pcm_and_output(model, utt)
        except AsrDecodeError as err:
            print(f"skipped: {err}", file=sys.stderr)
            continue
        got = follow_words(decoder, output, words, graphs)
        if got is None:
            print(f"{utt.utt_id}: a word is not in the graph, or no path of those words", file=sys.stderr)
            continue
        their_cost = row["asrdecode_forced_cost"] if args.own else row["pocketsphinx_cost"]
        forced = force_align(decoder, output, [got["ours"]], graphs)[0]
        got["our_cost"] = words_cost(got["search_cost"], None if forced is None else -forced.score)
        got.update(id=utt.utt_id, words=" ".join(words), ours=" ".join(got["ours"]), their_cost=their_cost)
        got["search_error"] = got["lost"] is not None and cheaper(their_cost, got["our_cost"])
        results.append(got)
        print(json.dumps(got), flush=True)
    steps: dict[str, int] = {}
    for r in results:
        if r["search_error"]:
            steps[r["lost"]["step"]] = steps.get(r["lost"]["step"], 0) + 1
    summary = {
        "followed": len(results),
        "lost": sum(r["lost"] is not None for r in results),
        "search_errors": sum(r["search_error"] for r in results),
        "steps_of_search_errors": steps,
    }
    print(json.dumps(summary))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"input": args.input, "overrides": args.overrides, "summary": summary, "rows": results}
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
