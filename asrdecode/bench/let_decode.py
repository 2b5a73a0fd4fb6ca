"""Benchmark `let` (paper 002: token groups + lazy evaluation) against `wfst-otf` (paper 000: one token per
(graph state, LM state)) on the same small-LM graph and large LM, and against `wfst` on the graph built
directly with the large LM, on the same log-probs.

    nice -n 5 .venv/bin/asrdecode bench let                 # the demo and 20k cases
    .venv/bin/asrdecode bench let --cases demo --capacities 4 16
    .venv/bin/asrdecode bench let --cases 20k sphinx --beams 8 10 13 16 --plot out/bench/let_sweep
    .venv/bin/asrdecode bench let --lattice --cases 20k sphinx --beams 8 10 13   # paper 002's comparison

Cases: the two of asrdecode bench wfst-otf (whose helpers this script imports), same graphs, LMs,
log-probs and beams, and the sphinx setup's:

* ``demo``: the embedded demo model on the 44 demo clips; large LM = the demo trigram, small = its
  entropy-pruned copy (data/demo/otf/small-lm.arpa); beam 16, max_active 10000.
* ``20k``: the 20k-word synthetic trigram (character lexicon, spelled 10%-confused log-probs of
  ``--utterances`` corpus sentences) and its copy pruned at ``--threshold-20k`` (1e-5: a small graph
  of 4% of the large one's bytes; 1e-6: 30%); beam 10, max_active 10000.
* ``sphinx``: the sphinx setup (`--model embedded:sphinx-en-us`): pocketsphinx's en-us HMM scored
  on the device on the tuning sets data/demo/real and data/real/dev, the small HCLG (built into the
  graph cache on first use) and pocketsphinx's full trigram on the fly; its scales, beam, max_active
  and history beam (no `wfst` row: a static graph of the full trigram does not build here).
* ``sphinx-static``: `wfst` on the static sphinx HCLG against the on-the-fly decoders on the small
  HCLG with that graph's ARPA (`sphinx_static_case`).

``--beams``: every row at each of these beams instead of the case's own (`max_active` as the
case's), a WER-vs-speed curve per decoder; the bucket-queue rows then run at the case's beam only
(``--bucket-width 0``: none). ``--plot STEM`` draws WER against RTFx, one line per decoder
(STEM-CASE.png / .svg).

Rows (one process, compiled backends on one thread, each decoder set up and warmed up on one
utterance before the clock starts): `wfst` on the large-LM graph (not with ``--lattice``); the
standard `wfst-otf` (no history cap: paper 002's baseline, one token per (graph state, LM state));
`wfst-otf` with the sphinx setup's history cap (``--history-cap``; its row name says so: at most that
many LM histories per graph state are expanded, itself a token-group approximation); and `let` at
each ``--capacities`` group capacity (default 4 16, with ``--lattice`` 4 8 16) with the exact cut-off
and with the bucket queue (``--bucket-width``).

``--lattice``: every decoder keeps exact lattices (Kaldi's lattice generation over the composed
search space, determinized; ``--lattice-beam``, default 8 as Kaldi's), and the time of a row
includes making them. Columns then add the word lattices' arcs per frame, their oracle WER (the
fewest word errors of any path, `oracle_errors`) and how many lattices' best path is the decoder's
1-best.

Columns: frames/s (``--clock``: per second of process CPU time, the default, since the machine is
shared and the search runs on one thread; or of wall time; the JSON keeps both,
``frames_per_second`` being wall time) and its ratio to the standard `wfst-otf` and to `wfst` at the
same beam; "at equal WER": a row's speed over that of the fastest standard `wfst-otf` row of the
sweep whose WER is at most its own (for the standard rows: `wfst` rows); "vs capped" (`let` rows):
the same against the capped rows, which must also have a lattice oracle WER at most the row's; WER,
1-best identical to the standard `wfst-otf`'s, arcs expanded per frame and millions of them per
second (the cost per arc), tokens (groups for `let`) per frame after the epsilon closure, and for
`let` the members evaluated at word arcs and in unions per frame. `max_active` counts groups in `let`
and tokens in the others. A summary per case and capacity prints the ranges of these ratios over the
sweep and `let`'s cost per expanded arc against the standard's. Writes JSON (``--out``) and prints
the tables.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import bench_parser, machine_info, parse, write_report
from asrdecode.bench.wfst_otf import case_result, run_cases, wer

ROOT = Path(__file__).resolve().parents[2]


def run_row(
    name: str, decoder, lp, lengths, shift: float, blank: int, refs=None, clock: str = "wall"
) -> dict:
    """Decode one utterance at a time (longest first) after a warm-up; sums the decoder's stats.
    With lattices (the decoder's ``lattice`` option) and `refs`, after the clock stops: the word
    lattices' arcs per frame, their oracle WER (`oracle_errors`) and how many lattices' best
    paths are the decoder's 1-best. `clock`: the row's ``speed`` in frames per second of wall
    time or of the process's CPU time (on a loaded machine the latter: one search thread)."""
    import torch

    from asrdecode.models.base import ModelOutput

    def out(i: int) -> ModelOutput:
        n = int(lengths[i])
        return ModelOutput(torch.from_numpy(lp[i : i + 1, :n]), torch.tensor([n]), shift, blank, [])

    decoder.decode(out(0))  # warm-up: numba cache load / compile
    results: list = [None] * len(lp)
    stats: dict[str, int] = {}
    search_arcs = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for i in np.argsort(-lengths, kind="stable"):
        results[i] = decoder.decode(out(int(i)))[0]
        for k, v in decoder.last_info["stats"].items():
            if isinstance(v, int):
                stats[k] = stats.get(k, 0) + v
        search_arcs += decoder.last_info.get("lattice_search_arcs", 0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    frames = float(lengths.sum())
    tokens = stats.get("groups", stats.get("tokens", 0))
    row = {
        "decoder": name,
        "beam": decoder.config.beam,
        "rtfx": frames * shift / wall,
        "seconds": wall,
        "cpu_seconds": cpu,
        "frames_per_second": frames / wall,
        "cpu_frames_per_second": frames / cpu,
        "speed": frames / (cpu if clock == "cpu" else wall),  # by `clock`: what the ratios compare
        "arcs_per_frame": stats.get("arcs", 0) / frames,
        "tokens_per_frame": tokens / frames if tokens else None,
        "word_members_per_frame": stats["word_members"] / frames if "word_members" in stats else None,
        "union_members_per_frame": stats["union_members"] / frames if "union_members" in stats else None,
        "lm_lookups_per_frame": stats["lm_lookups"] / frames if "lm_lookups" in stats else None,
        "stats": stats,
        "words": [[w.word for w in r.words] for r in results],
    }
    if refs is not None and getattr(decoder.config, "lattice", False):
        lats = [r.lattice for r in results]
        row["lattice_arcs_per_frame"] = sum(x.num_arcs for x in lats if x is not None) / frames
        row["lattice_search_arcs_per_frame"] = search_arcs / frames
        errors = sum(oracle_errors(x, ref) for x, ref in zip(lats, refs, strict=True))
        row["oracle_wer"] = errors / max(sum(len(ref) for ref in refs), 1)
        row["lattice_1best_same"] = sum(
            lattice_best_words(x) == w for x, w in zip(lats, row["words"], strict=True)
        )
    return row


def oracle_errors(lat, ref: list[str]) -> int:
    """Lattice oracle errors (Kaldi's lattice-oracle): the fewest word edits (substitutions,
    deletions, insertions) between `ref` and the word sequence of any complete path of the word
    lattice `lat` (a `CompactLattice`; epsilon arcs read nothing); ``len(ref)`` without a path.
    A dynamic program over the lattice's states in topological order and the reference's
    prefixes: ``e[s][j]`` = fewest edits of a path to `s` against ``ref[:j]``."""
    R = len(ref)
    if lat is None or lat.num_states == 0 or not lat.final:
        return R
    _, dst, _, out, order = lat._walk_order()  # the lattice's own arc lists and topological order
    if order is None:
        raise ValueError("word lattice has a cycle")
    ids = {v: k for k, v in lat.words.items()}
    want = np.array([ids.get(w, -1) for w in ref], np.int64)
    e = np.full((lat.num_states, R + 1), np.inf)
    e[0] = np.arange(R + 1)
    word = lat.word.tolist()
    for s in order:
        row = e[s]
        for j in range(1, R + 1):  # deletions: reference words no arc reads
            row[j] = min(row[j], row[j - 1] + 1)
        for i in out[s]:
            t = e[dst[i]]
            if word[i] == 0:
                np.minimum(t, row, out=t)
                continue
            np.minimum(t, row + 1, out=t)  # an insertion
            np.minimum(t[1:], row[:-1] + (want != word[i]), out=t[1:])  # a match or substitution
    best = min(e[f][R] for f in lat.final)
    return int(best) if np.isfinite(best) else R


def lattice_best_words(lat) -> list[str]:
    """The word sequence of the cheapest complete path of a word lattice ([] without one)."""
    if lat is None:
        return []
    best = lat.nbest(1)
    return best[0][0] if best else []


def run_case(
    name, large_graph, small_graph, large_lm, lp, lengths, refs, shift, beam, args, extra=None
) -> dict:
    """Rows of one case at its beam or at each of ``args.beams``: `wfst` on the large-LM graph
    (unless `large_graph` is None or with lattices), the standard `wfst-otf` (no history cap,
    paper 002's baseline), `wfst-otf` with the history cap ``args.history_cap`` (the sphinx
    setup's), `let` per capacity (exact cut-off, and the bucket queue at the case's beam if
    ``args.bucket_width``); with ``args.lattice`` every decoder keeps exact lattices at
    ``args.lattice_beam``. `extra`: the case's own decoder options (scales, max_active, history
    beam, blank; its history cap goes to the capped row only)."""
    from asrdecode.decoders import decoder_options
    from asrdecode.decoders.let import LetConfig, LetDecoder
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder

    extra = dict(extra or {})
    blank = extra.pop("blank", lp.shape[2] - 1)
    extra.pop("history_max", None)  # the standard row has none, the capped row args.history_cap
    base = {"max_active": 10000, "min_active": 200, "threads": 1, **extra}
    lattice = getattr(args, "lattice", False)
    if lattice:
        base.update(lattice=True, lattice_beam=args.lattice_beam)
    let_options = set(decoder_options("let"))
    print(f"\n{name}: {len(lp)} utterances, {int(lengths.sum())} frames", flush=True)
    rows = []

    def add(kind: str, label: str, decoder, **fields) -> None:
        row = run_row(label, decoder, lp, lengths, shift, blank, refs, clock)
        rows.append({"kind": kind, **row, **fields})
        print(f"  beam {decoder.config.beam:g}: {label} done", flush=True)

    cap = args.history_cap
    clock = getattr(args, "clock", "wall")
    for b in args.beams or [beam]:
        opts = {**base, "beam": b}
        if large_graph is not None and not lattice:
            plain = WfstDecoder(WfstConfig(graph=str(large_graph), backend="compiled", **opts))
            add("wfst", "wfst, large-LM graph", plain)
        graphs = {"graph": str(small_graph), "lm": str(large_lm)}
        otf = WfstOtfDecoder(WfstOtfConfig(**graphs, backend="compiled", history_max=0, **opts))
        add("standard", f"{STANDARD}, small-LM graph + large LM", otf)
        if cap:
            capped = WfstOtfDecoder(
                WfstOtfConfig(**graphs, backend="compiled", history_max=cap, **opts), lm=otf.diff
            )
            add("capped", f"wfst-otf, history cap {cap}", capped, history_cap=cap)
        for c in args.capacities:
            for width in (0.0, args.bucket_width) if b == beam and args.bucket_width else (0.0,):
                cfg = LetConfig(
                    **graphs, group_capacity=c, bucket_width=width,
                    **{k: v for k, v in opts.items() if k in let_options},  # no history cap: its capacity
                )  # fmt: skip
                label = f"let, capacity {c}, " + (f"bucket queue {width:g}" if width else "exact cut-off")
                add("let", label, LetDecoder(cfg, lm=otf.diff), group_capacity=c, bucket_width=width)
    compare(rows, refs)
    result = case_result(name, lp, lengths, beam, rows)
    result["options"].update({k: v for k, v in base.items() if k != "threads"}, beams=args.beams or [beam])
    result["options"].update(history_cap=cap, clock=clock)
    result["summary"] = summary(result["rows"])
    return result


STANDARD = "wfst-otf, standard"  # paper 002's baseline: one token per (graph state, LM state), no cap


def compare(rows: list[dict], refs: list[list[str]]) -> None:
    """Each row's WER and its ratios: to the standard `wfst-otf` at the same beam
    (``ratio_to_otf``), to `wfst` at the same beam, 1-best equal to the standard's, "at equal
    WER" (`ratio_at_equal_wer`: `let` and the capped row against the standard rows, the standard
    against the `wfst` rows), and for `let` ``ratio_to_capped``: against the capped rows at equal
    WER and (with lattices) equal lattice oracle WER."""
    for r in rows:
        r["wer"] = wer(refs, r["words"])
    by_kind = {k: [x for x in rows if x["kind"] == k] for k in ("wfst", "standard", "capped", "let")}
    for r in rows:
        same_beam = [x for x in rows if x["beam"] == r["beam"]]
        otf_row = next(x for x in same_beam if x["kind"] == "standard")
        plain_row = next((x for x in same_beam if x["kind"] == "wfst"), None)
        r["ratio_to_otf"] = speed(r) / speed(otf_row)
        r["ratio_to_wfst"] = speed(r) / speed(plain_row) if plain_row else None
        r["same_1best_as_otf"] = sum(a == b for a, b in zip(r["words"], otf_row["words"], strict=True))
        peer = "wfst" if r["kind"] == "standard" else "standard"
        r["ratio_at_equal_wer"] = ratio_at_equal_wer(r, by_kind[peer])
        r["equal_wer_peer"] = "wfst" if peer == "wfst" else "wfst-otf"
        if r["kind"] == "let":
            r["ratio_to_capped"] = ratio_at_equal_wer(r, by_kind["capped"], oracle=True)


def ratio_at_equal_wer(row: dict, peers: list[dict], oracle: bool = False) -> float | None:
    """`row`'s speed over that of the fastest of `peers` whose WER is at most row's (with `oracle`
    and lattices, whose lattice oracle WER is too); None: none is."""

    def within(p: dict) -> bool:
        if p["wer"] > row["wer"] + 1e-12:
            return False
        return not (oracle and "oracle_wer" in row) or p["oracle_wer"] <= row["oracle_wer"] + 1e-12

    fast = [speed(p) for p in peers if within(p)]
    return speed(row) / max(fast) if fast else None


def speed(row: dict) -> float:
    """The frames per second a row's ratios compare (``--clock``; wall time if the row has none)."""
    return row.get("speed", row["frames_per_second"])


def summary(rows: list[dict]) -> dict:
    """Per `let` capacity (exact cut-off rows) over the beams: the best and worst ratios to the
    standard `wfst-otf` at equal WER and at equal beam, to the capped `wfst-otf` at equal WER
    (and oracle WER), and the cost per expanded arc against the standard's at equal beam."""
    out = {}
    for cap in sorted({r["group_capacity"] for r in rows if r["kind"] == "let"}):
        mine = [
            r for r in rows if r["kind"] == "let" and r["group_capacity"] == cap and not r["bucket_width"]
        ]
        std = {r["beam"]: r for r in rows if r["kind"] == "standard"}

        def span(key: str, mine=mine) -> list[float] | None:
            xs = [r[key] for r in mine if r.get(key) is not None]
            return [min(xs), max(xs)] if xs else None

        cost = [
            arcs_per_second(std[r["beam"]]) / arcs_per_second(r)
            for r in mine
            if r["arcs_per_frame"] and std[r["beam"]]["arcs_per_frame"]
        ]
        out[str(cap)] = {
            "at_equal_wer": span("ratio_at_equal_wer"),
            "at_equal_beam": span("ratio_to_otf"),
            "vs_capped_at_equal_wer": span("ratio_to_capped"),
            "cost_per_arc_vs_standard": [min(cost), max(cost)] if cost else None,
        }
    return out


def print_summary(c: dict) -> None:
    """The ratios of a case's summary, one line per `let` capacity."""

    def rng(x: list[float] | None) -> str:
        return "-" if x is None else f"{x[0]:.2f}x" if x[0] == x[1] else f"{x[0]:.2f}-{x[1]:.2f}x"

    what = "with lattices" if c["options"].get("lattice") else "1-best"
    print(f"{c['case']} ({what}), over beams {', '.join(f'{b:g}' for b in c['options']['beams'])}:")
    for cap, s in c["summary"].items():
        print(
            f"  let capacity {cap}: {rng(s['at_equal_wer'])} the standard wfst-otf at equal WER "
            f"({rng(s['at_equal_beam'])} at equal beam); {rng(s['vs_capped_at_equal_wer'])} the capped "
            f"wfst-otf at equal WER"
            + (" and oracle WER" if c["options"].get("lattice") else "")
            + f"; cost per expanded arc {rng(s['cost_per_arc_vs_standard'])} the standard's"
        )


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
    return row["arcs_per_frame"] * speed(row) / 1e6


def print_case(c: dict) -> None:
    """The case's table (with lattices: the lattice columns) and its summary of ratios."""
    from rich.console import Console
    from rich.table import Table

    lattice = any("oracle_wer" in r for r in c["rows"])
    t = Table(
        title=f"{c['case']}: {c['utterances']} utterances, {c['frames']} frames, beam {c['options']['beam']}"
        + (f", lattice beam {c['options'].get('lattice_beam', 8.0):g}" if lattice else "")
    )
    clock = c["options"].get("clock", "wall")
    cols = [
        "decoder",
        "beam",
        "frames/s" if clock == "wall" else f"frames/{clock} s",
        "vs otf",
        "vs wfst",
        "at equal WER",
        "vs capped",
        "WER",
        "1-best = otf",
        "arcs/fr",
        "M arcs/s",
        "tokens/fr",
        "members/fr",
        "LM lookups/fr",
    ]
    if lattice:
        cols += ["lat arcs/fr", "oracle WER", "lat 1-best"]
    for col in cols:
        t.add_column(col, justify="left" if col == "decoder" else "right")

    def num(x, fmt: str = ".0f") -> str:
        return "-" if x is None else format(x, fmt)

    for r in c["rows"]:
        members = None
        if r["word_members_per_frame"] is not None:
            members = r["word_members_per_frame"] + r["union_members_per_frame"]
        at_wer = r["ratio_at_equal_wer"]
        cells = [
            r["decoder"],
            f"{r['beam']:g}",
            f"{speed(r):.0f}",
            f"{r['ratio_to_otf']:.2f}x",
            num(r["ratio_to_wfst"], ".3f"),
            "-" if at_wer is None else f"{at_wer:.2f}x {r['equal_wer_peer']}",
            num(r.get("ratio_to_capped"), ".2f"),
            f"{r['wer']:.3f}",
            f"{r['same_1best_as_otf']}/{c['utterances']}",
            num(r["arcs_per_frame"]),
            num(arcs_per_second(r), ".1f"),
            num(r["tokens_per_frame"]),
            num(members),
            num(r.get("lm_lookups_per_frame")),
        ]
        if lattice:
            cells += [
                num(r.get("lattice_arcs_per_frame"), ".1f"),
                num(r.get("oracle_wer"), ".3f"),
                f"{r.get('lattice_1best_same', 0)}/{c['utterances']}",
            ]
        t.add_row(*cells)
    Console(width=240).print(t)
    if c.get("summary"):
        print_summary(c)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report="out/bench/let_decode.json", threads=1, aliases=("--out",))
    ap.add_argument(
        "--cases", nargs="+", default=["demo", "20k"], choices=["demo", "20k", "sphinx", "sphinx-static"]
    )
    ap.add_argument("--utterances", type=int, default=64, help="20k case: spelled sentences")
    ap.add_argument("--threshold-20k", type=float, default=1e-5, help="20k case: small LM's prune threshold")
    ap.add_argument(
        "--capacities", type=int, nargs="+", help="let group capacities (default 4 16; with --lattice 4 8 16)"
    )
    ap.add_argument(
        "--bucket-width", type=float, default=0.5, help="let bucket-queue bin width (0: no bucket-queue rows)"
    )
    ap.add_argument(
        "--lattice", action="store_true", help="every decoder keeps exact lattices (no wfst rows)"
    )
    ap.add_argument("--lattice-beam", type=float, default=8.0, help="with --lattice (Kaldi's default 8)")
    ap.add_argument(
        "--clock", choices=["wall", "cpu"], default="cpu",
        help="the speed the ratios compare: frames per second of wall time or of process CPU time",
    )  # fmt: skip
    ap.add_argument(
        "--history-cap", type=int, help="the capped wfst-otf row's history_max (default: the sphinx setup's)"
    )
    ap.add_argument(
        "--beams", type=float, nargs="*", default=[], help="a beam sweep (default: each case's beam)"
    )
    ap.add_argument("--plot", type=Path, help="WER-vs-RTFx plot of each case: STEM-CASE.png / .svg")
    args = parse(ap, argv)
    from asrdecode.config import SPHINX_SETUP, build_config

    if args.capacities is None:
        args.capacities = [4, 8, 16] if args.lattice else [4, 16]
    if args.history_cap is None:
        args.history_cap = build_config(None, [], setup=SPHINX_SETUP).decoder.history_max
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
    write_report(args.json, {"machine": machine, "cases": cases})
    if args.plot:
        for c in cases:
            plot_case(c, machine, Path(f"{args.plot}-{c.get('key', c['case'].split()[0])}"))


def plot_case(case: dict, machine: dict, stem: Path) -> None:
    """WER against RTFx of a case's rows, one line per decoder (bench.plots.plot_sweep)."""
    import datetime

    from asrdecode.bench.plots import plot_sweep

    points = [
        {
            "system": r["decoder"],
            "rtfx": r["rtfx"] * speed(r) / r["frames_per_second"],  # by the run's clock
            "wer": r["wer"],
            "setting": f"beam {r['beam']:g}",
        }
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
