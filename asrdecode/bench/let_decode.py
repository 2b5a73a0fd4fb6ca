"""Benchmark `let` (paper 002: token groups + lazy evaluation) against `wfst-otf` (paper 000: one token per
(graph state, LM state)) on the same small-LM graph and large LM, and against `wfst` on the graph built
directly with the large LM, on the same log-probs.

    nice -n 5 .venv/bin/asrdecode bench let                 # the demo and 20k cases
    .venv/bin/asrdecode bench let --cases demo --capacities 4 16
    .venv/bin/asrdecode bench let --cases 20k sphinx --beams 8 10 13 16 --plot out/bench/let_sweep

Cases: the two of asrdecode bench wfst-otf (whose helpers this script imports), same graphs, LMs,
log-probs and beams, and the sphinx setup's:

* ``demo``: the embedded demo model on the 44 demo clips; large LM = the demo trigram, small = its
  entropy-pruned copy (data/demo/otf/small-lm.arpa); beam 16, max_active 10000.
* ``20k``: the 20k-word synthetic trigram (character lexicon, spelled 10%-confused log-probs of
  ``--utterances`` corpus sentences) and its copy pruned at ``--threshold-20k`` (1e-5: a small graph
  of 4% of the large one's bytes; 1e-6: 30%); beam 10, max_active 10000.
* ``sphinx``: the sphinx setup (`--model embedded:sphinx-en-us`): pocketsphinx's en-us HMM scored
  on the device on the tuning sets data/demo/real and data/real/dev, the small HCLG (built into the
  graph cache on first use) and pocketsphinx's full trigram on the fly; its scales, beam, max_active, history
  beam and (`wfst-otf` only: `let`'s group capacity is its counterpart) history cap (no `wfst` row:
  a static graph of the full trigram does not build here).

``--beams``: every row at each of these beams instead of the case's own (`max_active` as the
case's), a WER-vs-speed curve per decoder; the bucket-queue rows then run at the case's beam only.
Each row is then also compared *at equal WER*: its speed over that of the fastest `wfst-otf` row
(and, for `wfst-otf`, `wfst` row) whose WER is at most its own (none: no such row). ``--plot STEM``
draws WER against RTFx, one line per decoder (STEM.png / .svg).

Rows (one process, compiled backends on one thread, each decoder set up and warmed up on one
utterance before the clock starts): `wfst` on the large-LM graph, `wfst-otf`, and `let` at each
``--capacities`` group capacity with the exact cut-off (bucket_width 0) and with the bucket queue
(``--bucket-width``). Columns: frames/s and its ratio to `wfst-otf` and to `wfst`, WER, 1-best
identical to `wfst-otf`'s, arcs expanded per frame and millions of them per second (the cost per
arc), tokens (groups for `let`) per frame after the
epsilon closure, and for `let` the members evaluated at word arcs and in unions per frame. `max_active`
counts groups in `let` and tokens in the others. Wall-clock timings on a shared machine: compare the
ratios of one run. Writes JSON (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import machine_info, write_report
from asrdecode.bench.wfst_otf import case_result, run_cases, wer

ROOT = Path(__file__).resolve().parents[2]


def run_row(name: str, decoder, lp, lengths, shift: float, blank: int) -> dict:
    """Decode one utterance at a time (longest first) after a warm-up; sums the decoder's stats."""
    import torch

    from asrdecode.models.base import ModelOutput

    def out(i: int) -> ModelOutput:
        n = int(lengths[i])
        return ModelOutput(torch.from_numpy(lp[i : i + 1, :n]), torch.tensor([n]), shift, blank, [])

    decoder.decode(out(0))  # warm-up: numba cache load / compile
    results: list = [None] * len(lp)
    stats: dict[str, int] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    for i in np.argsort(-lengths, kind="stable"):
        results[i] = decoder.decode(out(int(i)))[0]
        for k, v in decoder.last_info["stats"].items():
            if isinstance(v, int):
                stats[k] = stats.get(k, 0) + v
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    frames = float(lengths.sum())
    tokens = stats.get("groups", stats.get("tokens", 0))
    return {
        "decoder": name,
        "beam": decoder.config.beam,
        "rtfx": frames * shift / wall,
        "seconds": wall,
        "cpu_seconds": cpu,
        "frames_per_second": frames / wall,
        "arcs_per_frame": stats.get("arcs", 0) / frames,
        "tokens_per_frame": tokens / frames if tokens else None,
        "word_members_per_frame": stats["word_members"] / frames if "word_members" in stats else None,
        "union_members_per_frame": stats["union_members"] / frames if "union_members" in stats else None,
        "lm_lookups_per_frame": stats["lm_lookups"] / frames if "lm_lookups" in stats else None,
        "stats": stats,
        "words": [[w.word for w in r.words] for r in results],
    }


def run_case(
    name, large_graph, small_graph, large_lm, lp, lengths, refs, shift, beam, args, extra=None
) -> dict:
    """Rows of one case at its beam or at each of ``args.beams``: `wfst` on the large-LM graph
    (unless `large_graph` is None), `wfst-otf`, `let` per capacity (exact cut-off, and the bucket
    queue at the case's beam); `extra`: the case's own decoder options (scales, max_active, blank)."""
    from asrdecode.decoders import decoder_options
    from asrdecode.decoders.let import LetConfig, LetDecoder
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

    extra = dict(extra or {})
    blank = extra.pop("blank", lp.shape[2] - 1)
    base = {"max_active": 10000, "min_active": 200, "threads": 1, **extra}
    let_options = set(decoder_options("let"))
    print(f"\n{name}: {len(lp)} utterances, {int(lengths.sum())} frames", flush=True)
    rows = []
    for b in args.beams or [beam]:
        opts = {**base, "beam": b}
        if large_graph is not None:
            plain = WfstDecoder(WfstConfig(graph=str(large_graph), backend="compiled", **opts))
            rows.append(run_row("wfst, large-LM graph", plain, lp, lengths, shift, blank))
        otf = WfstOtfDecoder(
            WfstOtfConfig(graph=str(small_graph), lm=str(large_lm), backend="compiled", **opts)
        )
        rows.append(run_row("wfst-otf, small-LM graph + large LM", otf, lp, lengths, shift, blank))
        print(f"  beam {b:g}: wfst, wfst-otf done", flush=True)
        for cap in args.capacities:
            for width in (0.0, args.bucket_width) if b == beam else (0.0,):
                cfg = LetConfig(
                    graph=str(small_graph), lm=str(large_lm), group_capacity=cap, bucket_width=width,
                    **{k: v for k, v in opts.items() if k in let_options},  # no history cap: its capacity
                )  # fmt: skip
                label = f"let, capacity {cap}, " + (f"bucket queue {width:g}" if width else "exact cut-off")
                rows.append(run_row(label, LetDecoder(cfg, lm=otf.diff), lp, lengths, shift, blank))
                rows[-1].update(group_capacity=cap, bucket_width=width)
                print(f"  beam {b:g}: {label} done", flush=True)
    for r in rows:
        r["wer"] = wer(refs, r["words"])
    for r in rows:
        same_beam = [x for x in rows if x["beam"] == r["beam"]]
        otf_row = next(x for x in same_beam if x["decoder"].startswith("wfst-otf"))
        plain_row = next((x for x in same_beam if x["decoder"].startswith("wfst,")), None)
        r["ratio_to_otf"] = r["frames_per_second"] / otf_row["frames_per_second"]
        r["ratio_to_wfst"] = r["frames_per_second"] / plain_row["frames_per_second"] if plain_row else None
        r["same_1best_as_otf"] = sum(a == b for a, b in zip(r["words"], otf_row["words"], strict=True))
        peer = "wfst," if r["decoder"].startswith("wfst-otf") else "wfst-otf"
        r["ratio_at_equal_wer"] = ratio_at_equal_wer(r, [x for x in rows if x["decoder"].startswith(peer)])
        r["equal_wer_peer"] = peer.rstrip(",")
    result = case_result(name, lp, lengths, beam, rows)
    result["options"].update({k: v for k, v in base.items() if k != "threads"}, beams=args.beams or [beam])
    return result


def ratio_at_equal_wer(row: dict, peers: list[dict]) -> float | None:
    """`row`'s speed over that of the fastest of `peers` whose WER is at most row's (None: none is)."""
    fast = [p["frames_per_second"] for p in peers if p["wer"] <= row["wer"] + 1e-12]
    return row["frames_per_second"] / max(fast) if fast else None


def sphinx_inputs() -> tuple:
    """The sphinx setup's model on the tuning sets: (senone log-likelihoods, lengths, references,
    frame shift, the sphinx setup's decoder config, its decoder options)."""
    import torch

    from asrdecode.audio.loading import load_audio, resample_batch
    from asrdecode.config import SPHINX_SETUP, build_config
    from asrdecode.io.manifests import read_inputs
    from asrdecode.models.loading import load_model

    cfg = build_config(None, [], setup=SPHINX_SETUP)
    d = cfg.decoder
    model = load_model(cfg.model.path, cfg.model.type, cfg.model.topn, 1, cfg.model.density_floor).eval()
    outputs, refs = [], []
    for manifest in (ROOT / "data/demo/real/manifest.jsonl", ROOT / "data/real/dev/manifest.jsonl"):
        for utt in read_inputs(manifest).utterances:
            wave, rate = load_audio(utt)
            wav = resample_batch([torch.from_numpy(np.ascontiguousarray(wave))], [rate], model.sample_rate)[0]
            with torch.inference_mode():
                feats, n = model.features(wav[None], torch.tensor([wav.shape[0]]))
                out = model.forward_features(feats, n)
            outputs.append(out.log_probs[0, : int(out.lengths[0])].numpy())
            refs.append((utt.text or "").split())
    lengths = np.array([len(x) for x in outputs])
    lp = np.zeros((len(outputs), int(lengths.max()), outputs[0].shape[1]), np.float32)
    for i, x in enumerate(outputs):
        lp[i, : len(x)] = x
    options = {
        "acoustic_scale": d.acoustic_scale, "word_insertion_penalty": d.word_insertion_penalty,
        "max_active": d.max_active, "min_active": d.min_active, "history_beam": d.history_beam,
        "history_max": d.history_max, "blank": model.blank_id,
    }  # fmt: skip
    return lp, lengths, refs, model.frame_shift, d, options


def sphinx_case(inputs: tuple) -> tuple:
    """The sphinx setup on the tuning sets: (no large graph, small HCLG, full LM, senone
    log-likelihoods, lengths, references, frame shift, beam, decoder options)."""
    from asrdecode.graph.cache import resolve_graph_spec

    lp, lengths, refs, shift, d, options = inputs
    return None, resolve_graph_spec(d.graph), d.lm, lp, lengths, refs, shift, d.beam, options


def sphinx_static_case(inputs: tuple) -> tuple:
    """The static path's LM on the fly: `wfst` on the static sphinx HCLG (configs/sphinx-en-us.yaml's
    graph, built with data/lm/sphinx-en-us-72k.arpa.gz) against the sphinx setup's small HCLG
    with that graph's ARPA on the fly; the sphinx setup's scales and beam, the static path's
    max_active, no history beam or cap (`wfst` keeps one token per graph state)."""
    from asrdecode.config import build_config
    from asrdecode.decoders import decoder_options
    from asrdecode.graph.cache import resolve_graph_spec

    lp, lengths, refs, shift, d, options = inputs
    static = build_config(ROOT / "configs" / "sphinx-en-us.yaml", []).decoder
    large = ROOT / static.graph
    if not (large / "meta.json").is_file():
        build = f"asrdecode build-graph --config configs/graph/sphinx-en-us.yaml --out {large}"
        raise SystemExit(f"{large} is missing ({build})")
    arpa = json.loads((large / "meta.json").read_text())["inputs"]["arpa"]["path"]
    # `wfst` keeps one token per graph state: no history beam or cap (the options it refuses)
    kept = set(decoder_options("wfst")) | {"blank"}
    options = {**{k: v for k, v in options.items() if k in kept}, "max_active": static.max_active}
    return large, resolve_graph_spec(d.graph), arpa, lp, lengths, refs, shift, d.beam, options


def arcs_per_second(row: dict) -> float:
    """Millions of arcs a row's decoder examined per second: its cost per arc (with `let`'s group
    and member work on top of its arcs)."""
    return row["arcs_per_frame"] * row["frames_per_second"] / 1e6


def print_case(c: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"{c['case']}: {c['utterances']} utterances, {c['frames']} frames, beam {c['options']['beam']}"
    )
    cols = (
        "decoder",
        "beam",
        "frames/s",
        "vs otf",
        "vs wfst",
        "at equal WER",
        "WER",
        "1-best = otf",
        "arcs/fr",
        "M arcs/s",
        "tokens/fr",
        "members/fr",
        "LM lookups/fr",
    )
    for col in cols:
        t.add_column(col, justify="left" if col == "decoder" else "right")

    def num(x, fmt: str = ".0f") -> str:
        return "-" if x is None else format(x, fmt)

    for r in c["rows"]:
        members = None
        if r["word_members_per_frame"] is not None:
            members = r["word_members_per_frame"] + r["union_members_per_frame"]
        at_wer = r["ratio_at_equal_wer"]
        t.add_row(
            r["decoder"],
            f"{r['beam']:g}",
            f"{r['frames_per_second']:.0f}",
            f"{r['ratio_to_otf']:.2f}x",
            num(r["ratio_to_wfst"], ".3f"),
            "-" if at_wer is None else f"{at_wer:.2f}x {r['equal_wer_peer']}",
            f"{r['wer']:.3f}",
            f"{r['same_1best_as_otf']}/{c['utterances']}",
            num(r["arcs_per_frame"]),
            num(arcs_per_second(r), ".1f"),
            num(r["tokens_per_frame"]),
            num(members),
            num(r.get("lm_lookups_per_frame")),
        )
    Console(width=200).print(t)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--cases", nargs="+", default=["demo", "20k"], choices=["demo", "20k", "sphinx", "sphinx-static"]
    )
    ap.add_argument("--utterances", type=int, default=64, help="20k case: spelled sentences")
    ap.add_argument("--threshold-20k", type=float, default=1e-5, help="20k case: small LM's prune threshold")
    ap.add_argument("--capacities", type=int, nargs="+", default=[4, 16], help="let group capacities")
    ap.add_argument("--bucket-width", type=float, default=0.5, help="let bucket-queue bin width")
    ap.add_argument(
        "--beams", type=float, nargs="*", default=[], help="a beam sweep (default: each case's beam)"
    )
    ap.add_argument("--plot", type=Path, help="WER-vs-RTFx plot of each case: STEM-CASE.png / .svg")
    ap.add_argument("--out", default="out/bench/let_decode.json")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    load_start = os.getloadavg()
    cases = run_cases(args, run_case, print_case, args.threshold_20k)  # wfst_otf's sentences and graphs
    sphinx = [c for c in ("sphinx", "sphinx-static") if c in args.cases]
    inputs = sphinx_inputs() if sphinx else None
    for c in sphinx:
        if c == "sphinx":
            *case, beam, options = sphinx_case(inputs)
            name = "sphinx HCLG, sphinx setup (demo/real + real/dev)"
        else:
            *case, beam, options = sphinx_static_case(inputs)
            name = "sphinx HCLG, the static graph's LM on the fly (demo/real + real/dev)"
        cases.append({**run_case(name, *case, beam, args, options), "key": c})
        print_case(cases[-1])
    machine = machine_info(load_start)
    write_report(args.out, {"machine": machine, "cases": cases})
    if args.plot:
        for c in cases:
            plot_case(c, machine, Path(f"{args.plot}-{c.get('key', c['case'].split()[0])}"))


def plot_case(case: dict, machine: dict, stem: Path) -> None:
    """WER against RTFx of a case's rows, one line per decoder (bench.plots.plot_sweep)."""
    import datetime

    from asrdecode.bench.plots import plot_sweep

    points = [
        {"system": r["decoder"], "rtfx": r["rtfx"], "wer": r["wer"], "setting": f"beam {r['beam']:g}"}
        for r in case["rows"]
        if not r.get("bucket_width")
    ]
    result = {
        "points": points,
        "note": f"asrdecode bench let: {case['case']}, {case['utterances']} utterances, one thread",
        "machine": f"{machine['cpu']}, {machine['cores']} cores",
        "date": datetime.date.today().isoformat(),
        "load_average": {"before": machine["load_average_at_start"], "after": machine["load_average_at_end"]},
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    plot_sweep(result, stem)
    print(f"wrote {stem}.png")


if __name__ == "__main__":
    main()
