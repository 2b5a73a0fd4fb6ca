#!/usr/bin/env python3
"""Per utterance: is asrdecode's loss (or win) against pocketsphinx a search error or a model difference?

    .venv/bin/asrdecode bench diagnose-pocketsphinx data/real/dev/manifest.jsonl
    .venv/bin/asrdecode bench diagnose-pocketsphinx my_wavs/ --graph GRAPH_DIR decoder.beam=18
    .venv/bin/asrdecode bench diagnose-pocketsphinx data/real/test/manifest.jsonl --config sphinx-otf

No transcripts needed. Each recording is read and resampled to 16 kHz once; the same samples go to
pocketsphinx 5.1.1's own decoder (`asrdecode/bench/peers.py`: a fresh front end per
utterance; given the LM file the graph was built from, `--lm`; default: the graph's `arpa`) and
to asrdecode (`--config`, the pocketsphinx en-us HMM + HCLG + `wfst`; `--config sphinx-otf` is the
sphinx setup, `embedded:configs/sphinx-en-us-otf.yaml`: the small-LM HCLG + `wfst-otf` with
pocketsphinx's full trigram; with an on-the-fly config pocketsphinx gets its `decoder.lm`, for the
sphinx setup its own en-us.lm.bin, the same trigram; `decoder.type=let` works the same way).
Then both word sequences, and the reference if the input has one, are force-aligned through the
same HCLG with the same scales (`asrdecode.decoders.wfst.align`: the exhaustive best path that
outputs exactly those words; with an on-the-fly decoder plus the LM difference of the words), and
their costs in asrdecode's model are compared with the cost of asrdecode's own words (the cheaper
of the path its search returned and their forced alignment):

* ``search error``: pocketsphinx's words cost less in our model than our own words: our search
  lost them (beams, max_active, pruning);
* ``model differs``: pocketsphinx's words cost more in our model: the two systems score differently
  (front end, HMM, LM weighting, silence/filler handling), and the search is not to blame;
* ``same``: same words; ``unreachable``: pocketsphinx's words have a word our graph lacks, or no
  path of the graph outputs them in the utterance's frames.

Costs are asrdecode's (acoustic cost / lw + graph cost incl. LM, HMM transitions, word insertion
penalty; lower is better); the acoustic/graph split shows which side the difference is on. A
reference that costs less than our words is a search error as well (listed as `ref`). Where the
forced alignment of our own words costs less than the path the search returned, the search kept
the words but lost their best alignment: listed as ``alignment gap`` (it changes no word, so no
verdict).
With a static graph (`wfst`) whose G was built from an ARPA file, a ``model differs`` row also says
whether the difference is G's reading of the LM: G takes the cheaper of an explicit n-gram and its
backoff route (its **cheapest path**), pocketsphinx the n-gram (**exact**; `asrdecode.lm.backoff`).
Both word sequences' LM costs are read both ways; where, with both read exactly, pocketsphinx's words
would cost less than ours, the row is marked ``lm_reading`` (printed ``LM``; counted as
``lm_reading`` in the summary): the graph's backoff reading, not the search or the acoustics, chose
our words.
For a search error (`wfst`, `wfst-otf`) it also says where the search lost pocketsphinx's path:
the frame and the pruning step that dropped it (`asrdecode.bench.search_loss`: history beam, beam,
max_active, or the bound on the new tokens), row field ``lost``.
Prints a table per utterance and a verdict count; writes JSON (`--json`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asrdecode.audio.loading import load_audio, resample_batch
from asrdecode.bench.harness import bench_parser, parse
from asrdecode.bench.peers import Pocketsphinx
from asrdecode.bench.search_loss import follow_words
from asrdecode.config import SPHINX_SETUP, build_config
from asrdecode.decoders import DecoderContext, decoder_name, make_decoder
from asrdecode.decoders.wfst.align import cheaper, force_align
from asrdecode.errors import AsrDecodeError
from asrdecode.graph.cache import resolve_graph_spec
from asrdecode.graph.restrict import WordSequenceGraphs
from asrdecode.io.manifests import read_inputs
from asrdecode.lm.backoff import BackoffReadings
from asrdecode.models.base import ModelOutput
from asrdecode.models.loading import load_model, resolve_packaged_path
from asrdecode.scoring import score

ROOT = Path(__file__).resolve().parents[2]
DECODERS_WITH_GRAPH = ("wfst", "wfst-otf", "let")  # forced alignment runs through their graph


def words_cost(search_cost: float, forced_cost: float | None) -> float:
    """The cost of our words in our model: their forced alignment's (the exhaustive best path of
    those words), or the search's path where that is cheaper (float32 rounding) or missing."""
    return search_cost if forced_cost is None else min(search_cost, forced_cost)


def lost_alignment(row: dict) -> bool:
    """Whether the search returned a path costlier than its own words' forced alignment."""
    forced = row["asrdecode_forced_cost"]
    return forced is not None and cheaper(forced, row["asrdecode_cost"])


def verdict(ours: list[str], theirs: list[str], our_cost: float, their_cost: float | None) -> str:
    """`our_cost`: our words' cost (`words_cost`); `their_cost`: pocketsphinx's words' (None:
    no path of the graph outputs them)."""
    if theirs == ours:
        return "same"
    if their_cost is None:
        return "unreachable"
    return "search error" if cheaper(their_cost, our_cost) else "model differs"


def backoff_bonus(readings: BackoffReadings, words: list[str]) -> float | None:
    """How much less G's cheapest path charges ``<s> words </s>`` than the LM read exactly (>= 0;
    None for a word outside the LM)."""
    if not readings.in_vocabulary(words):
        return None
    return readings.exact(words) - readings.cheapest_path(words)


def lost_to_lm_reading(our_cost: float, their_cost: float, our_bonus: float, their_bonus: float) -> bool:
    """Whether pocketsphinx's words, costlier in our model, would cost less than ours if the graph
    read the LM exactly: each cost with its words' backoff bonus (`backoff_bonus`) taken back."""
    return cheaper(their_cost + their_bonus, our_cost + our_bonus)


def pcm_and_output(model: Any, utt: Any) -> tuple[np.ndarray, ModelOutput]:
    """An utterance's 16-bit samples at the model's rate (what pocketsphinx is given) and the
    model's output for exactly those samples; `AsrDecodeError` for a file that cannot be read."""
    wave, rate = load_audio(utt)
    wav = resample_batch([torch.from_numpy(np.ascontiguousarray(wave))], [rate], model.sample_rate)[0]
    if isinstance(wav, Exception):
        raise wav if isinstance(wav, AsrDecodeError) else AsrDecodeError(f"{utt.utt_id}: {wav}")
    pcm = np.clip(np.round(wav.numpy() * 32768.0), -32768, 32767).astype(np.int16)
    samples = torch.from_numpy(pcm.astype(np.float32) / 32768.0)[None]
    with torch.inference_mode():
        feats, n = model.features(samples, torch.tensor([samples.shape[1]]))
        return pcm, model.forward_features(feats, n)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report=ROOT / "out/diagnose_vs_pocketsphinx.json", threads=1)
    ap.add_argument("input", type=Path, help="manifest.jsonl, audio folder or Kaldi data dir")
    ap.add_argument(
        "--config",
        default=str(ROOT / "configs/sphinx-en-us.yaml"),
        help="a config file, or `sphinx-otf` (the sphinx on-the-fly setup)",
    )
    ap.add_argument("--graph", help="graph folder (default: the config's decoder.graph)")
    ap.add_argument(
        "--lm",
        type=Path,
        help="LM file for pocketsphinx (default: the graph's ARPA; on the fly: the config's decoder.lm)",
    )
    ap.add_argument("--default-lm", action="store_true", help="also run pocketsphinx with its own LM")
    ap.add_argument("overrides", nargs="*", help="asrdecode config overrides, e.g. decoder.beam=16")
    args = parse(ap, argv, intermixed=True)

    try:
        graph = [f"decoder.graph={args.graph}"] if args.graph else []
        setup = SPHINX_SETUP if args.config == "sphinx-otf" else None
        cfg = build_config(None if setup else args.config, [*graph, *args.overrides], setup=setup)
        kind = decoder_name(cfg.decoder)
        if kind not in DECODERS_WITH_GRAPH:
            sys.exit(f"diagnose: the config's decoder must be one of {', '.join(DECODERS_WITH_GRAPH)}")
        cfg.decoder.graph = resolve_graph_spec(cfg.decoder.graph)
        on_the_fly = kind != "wfst"
        lm = args.lm
        if lm is None and on_the_fly:
            lm = Path(resolve_packaged_path(cfg.decoder.lm))
        elif lm is None:  # the ARPA the static graph was built from
            meta = json.loads((Path(cfg.decoder.graph) / "meta.json").read_text())
            lm = Path(meta["inputs"]["arpa"]["path"])
        inputs = read_inputs(args.input)
        model = load_model(
            cfg.model.path, cfg.model.type, cfg.model.topn, cfg.model.threads, cfg.model.density_floor
        ).eval()
        context = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
        decoder = make_decoder(cfg.decoder, context)
    except (AsrDecodeError, OSError, KeyError) as err:
        sys.exit(f"diagnose: {err}")
    graphs = WordSequenceGraphs(decoder.paths.graph)

    ps_same_lm = Pocketsphinx(lm)
    readings = None  # the static graph's LM read both ways (not needed when rescoring reads it exactly)
    rescored = getattr(decoder, "rescoring", None) is not None
    if not on_the_fly and not rescored and lm.name.endswith((".arpa", ".arpa.gz", ".lm", ".lm.gz")):
        try:
            readings = BackoffReadings.read(lm)
        except AsrDecodeError as err:
            print(f"diagnose: no LM-reading check: {err}", file=sys.stderr)
    ps_default = Pocketsphinx(None) if args.default_lm else None

    rows, refs = [], {}
    for utt in inputs.utterances:
        try:
            pcm, output = pcm_and_output(model, utt)
        except AsrDecodeError as err:
            print(f"skipped: {err}", file=sys.stderr)
            continue
        ours = decoder.decode(output)[0]
        our_words = [w.word for w in ours.words]
        theirs, ps_seconds = ps_same_lm.words(pcm)
        ref = (utt.text or "").split()
        wanted = [our_words, theirs] + ([ref] if ref else [])
        forced = [force_align(decoder, output, [words], graphs)[0] for words in wanted]
        cost = [None if r is None else -r.score for r in forced]
        ours_cost = words_cost(-ours.score, cost[0])
        row = {
            "id": utt.utt_id,
            "seconds": round(len(pcm) / model.sample_rate, 2),
            "ref": " ".join(ref),
            "asrdecode": " ".join(our_words),
            "pocketsphinx": " ".join(theirs),
            "asrdecode_cost": -ours.score,
            "asrdecode_forced_cost": cost[0],
            "alignment_gap": -ours.score - ours_cost,  # the search's path above its words' best
            "asrdecode_parts": {"acoustic": -ours.acoustic_score, "graph": -ours.lm_score},
            "pocketsphinx_cost": cost[1],
            "pocketsphinx_parts": None
            if forced[1] is None
            else {"acoustic": -forced[1].acoustic_score, "graph": -forced[1].lm_score},
            "ref_cost": cost[2] if ref else None,
            "verdict": verdict(our_words, theirs, ours_cost, cost[1]),
            "pocketsphinx_seconds": ps_seconds,
        }
        if ref and ref != our_words and cost[2] is not None and cheaper(cost[2], ours_cost):
            row["ref_verdict"] = "search error"
        if readings is not None and row["verdict"] == "model differs":
            bonus = [backoff_bonus(readings, words) for words in (our_words, theirs)]
            if None not in bonus:
                row["lm_bonus"] = {"asrdecode": bonus[0], "pocketsphinx": bonus[1]}
                row["lm_reading"] = lost_to_lm_reading(ours_cost, cost[1], bonus[0], bonus[1])
        if row["verdict"] == "search error" and kind != "let":  # where the search lost their path
            followed = follow_words(decoder, output, theirs, graphs)
            if followed is not None and followed["lost"] is not None:
                row["lost"] = followed["lost"]
        if ps_default is not None:
            row["pocketsphinx_default_lm"] = " ".join(ps_default.words(pcm)[0])
        rows.append(row)
        refs[utt.utt_id] = " ".join(ref)
        print_row(row)

    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = {"utterances": len(rows), "verdicts": counts}
    if any(refs.values()):
        summary["wer"] = {
            "asrdecode": score(refs, {r["id"]: r["asrdecode"] for r in rows}).wer,
            "pocketsphinx_same_lm": score(refs, {r["id"]: r["pocketsphinx"] for r in rows}).wer,
        }
        if ps_default is not None:
            summary["wer"]["pocketsphinx_default_lm"] = score(
                refs, {r["id"]: r["pocketsphinx_default_lm"] for r in rows}
            ).wer
        summary["ref_search_errors"] = sum(1 for r in rows if r.get("ref_verdict") == "search error")
    summary["alignment_gaps"] = sum(1 for r in rows if lost_alignment(r))
    if readings is not None:
        summary["lm_reading"] = sum(1 for r in rows if r.get("lm_reading"))
    print("\n" + json.dumps(summary))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "input": str(args.input),
                "config": str(args.config),
                "decoder": kind,
                "graph": str(cfg.decoder.graph),
                "lm": str(lm),
                "overrides": args.overrides,
                "summary": summary,
                "utterances": rows,
            },
            indent=2,
        )  # fmt: skip
    )
    print(f"wrote {args.json}")


def print_row(row: dict) -> None:
    def fmt(cost: float | None, parts: dict | None = None) -> str:
        if cost is None:
            return "unreachable"
        extra = f" (ac {parts['acoustic']:.2f} + graph {parts['graph']:.2f})" if parts else ""
        return f"{cost:.3f}{extra}"

    print(f"\n{row['id']} ({row['seconds']} s): {row['verdict'].upper()}")
    if row["ref"]:
        flag = " SEARCH ERROR" if row.get("ref_verdict") else ""
        print(f"  REF  {row['ref']}   cost {fmt(row['ref_cost'])}{flag}")
    lost = f"   (its words' best path: {row['alignment_gap']:.3f} less)" if lost_alignment(row) else ""
    print(f"  ASR  {row['asrdecode']}   cost {fmt(row['asrdecode_cost'], row['asrdecode_parts'])}{lost}")
    print(f"  PS   {row['pocketsphinx']}   cost {fmt(row['pocketsphinx_cost'], row['pocketsphinx_parts'])}")
    if row.get("lost"):
        at = row["lost"]
        word = f" in '{at['in_word']}'" if "in_word" in at else ""
        if at["step"] == "bound":
            how = f": {at['new_above_best']:.2f} above the new best, bound {at['adaptive_beam']:.2f}"
        elif "rank" in at:
            how = f": {at['above_best']:.2f} above the best, rank {at['rank']} of {at['tokens']} tokens"
        else:
            how = ""
        print(f"  LOST pocketsphinx's path at frame {at['frame']}{word}, {at['step']}{how}")
    if "lm_bonus" in row:
        b = row["lm_bonus"]
        what = (
            "read exactly, pocketsphinx's words would cost less"
            if row["lm_reading"]
            else "ours still cost less read exactly"
        )
        ours, theirs = b["asrdecode"], b["pocketsphinx"]
        print(f"  LM   G's backoff bonus: ours {ours:.3f}, pocketsphinx's {theirs:.3f}: {what}")
    if "pocketsphinx_default_lm" in row:
        print(f"  PS*  {row['pocketsphinx_default_lm']}   (pocketsphinx's own LM)")


if __name__ == "__main__":
    main()
