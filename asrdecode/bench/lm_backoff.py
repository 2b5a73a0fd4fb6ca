"""Two readings of a backoff LM, and what they do to `wfst-otf` against `wfst` on the big graph.

    .venv/bin/asrdecode bench lm-backoff                 # the 20k case: LM costs and decodes
    .venv/bin/asrdecode bench lm-backoff --case sphinx   # the real sets' references, the static ARPA

A static graph's G reads an LM as its **cheapest path** (backoff arcs are epsilons); the on-the-fly
decoders' LM lookups, like pocketsphinx, read it **exactly** (`asrdecode.lm.backoff`).

`wfst-otf` scores the small graph's cheapest path plus ``large - small`` read exactly, so over a
wide beam it approaches the big LM read exactly, not the big graph's cheapest paths. Printed per
case: the references' LM cost (-ln p, ``</s>`` included) under both readings, and how many differ.
The ``20k`` case (`asrdecode bench wfst-otf`'s: 64 spelled sentences, beam 16, max_active 10000)
also decodes with `wfst` on the large-LM graph, `wfst-otf` on the graph of the LM pruned at
1e-5, and `wfst-otf` on a graph of the large LM's unigrams only (a unigram G has no backoff arcs,
so this composition *is* the large LM read exactly; at max_active 30000). Check: for every
reference, the static graph's forced-alignment cost minus the unigram composition's equals
``cheapest path - exact`` of its words (the same acoustic path; both decoders' own costs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from asrdecode.bench.harness import bench_parser, machine_info, parse, write_report
from asrdecode.lm.arpa import ArpaReader
from asrdecode.lm.backoff import BackoffReadings

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "out" / "bench"


def compare_readings(lm: BackoffReadings, sentences: list[list[str]]) -> dict:
    """Both readings of every in-vocabulary sentence: mean costs, how many differ, the largest gap."""
    exact, cheapest = [], []
    for words in sentences:
        if lm.in_vocabulary(words):
            exact.append(lm.exact(words))
            cheapest.append(lm.cheapest_path(words))
    gap = np.array(exact) - np.array(cheapest)
    return {
        "sentences": len(exact),
        "skipped_out_of_vocabulary": len(sentences) - len(exact),
        "mean_exact": float(np.mean(exact)),
        "mean_cheapest_path": float(np.mean(cheapest)),
        "differ": int((gap > 1e-6).sum()),
        "mean_gap": float(gap.mean()),
        "max_gap": float(gap.max()),
        "gaps": [float(g) for g in gap],
    }


def unigram_arpa(large: Path, out: Path) -> Path:
    """The large LM's unigrams alone (no backoff weights), as an ARPA file."""
    if not out.is_file():
        ones = {(e.words[0],): e.log10_prob for e in ArpaReader(large) if e.order == 1}
        BackoffReadings(ones, {}).write(out)
    return out


def decode_20k(args) -> dict:
    """The 20k case's decodes: WER of the three models and the forced-alignment check."""
    import jiwer
    import torch

    from asrdecode.bench.wfst_otf import build, case_20k
    from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
    from asrdecode.decoders.wfst.align import force_align
    from asrdecode.decoders.wfst_otf import WfstOtfConfig, WfstOtfDecoder
    from asrdecode.graph import GraphBuildConfig
    from asrdecode.graph.restrict import WordSequenceGraphs
    from asrdecode.models.base import ModelOutput

    large_graph, small_graph, large_lm, lp, lengths, refs = case_20k(1e-5, args.utterances)
    meta = json.loads((large_graph / "meta.json").read_text())["config"]
    uni_lm = unigram_arpa(large_lm, BENCH / "wfst-otf" / "lm_20000_unigram.arpa")
    uni_graph = build(
        GraphBuildConfig(**{**meta, "arpa": str(uni_lm)}), BENCH / "wfst-otf" / "graph-20k-unigram"
    )
    opts = {"beam": args.beam, "max_active": 10000, "min_active": 200, "threads": 1, "backend": "compiled"}
    decoders = {
        "wfst, large-LM graph (cheapest paths)": WfstDecoder(WfstConfig(graph=str(large_graph), **opts)),
        "wfst-otf, 1e-5 graph + large LM": WfstOtfDecoder(
            WfstOtfConfig(graph=str(small_graph), lm=str(large_lm), **opts)
        ),
        "wfst-otf, unigram graph + large LM (exact)": WfstOtfDecoder(
            WfstOtfConfig(graph=str(uni_graph), lm=str(large_lm), **{**opts, "max_active": 30000})
        ),
    }
    static_name, *_, exact_name = decoders
    static, exact_model = decoders[static_name], decoders[exact_name]
    static_graphs = WordSequenceGraphs(static.paths.graph)  # per-word closures, made once
    exact_graphs = WordSequenceGraphs(exact_model.paths.graph)
    readings = BackoffReadings.read(large_lm)
    hyps: dict[str, list[list[str]]] = {name: [] for name in decoders}
    check, search_errors = [], 0
    blank = lp.shape[2] - 1
    for i in range(len(lp)):
        n = int(lengths[i])
        out = ModelOutput(torch.from_numpy(lp[i : i + 1, :n]), torch.tensor([n]), 0.04, blank, [])
        best = {}
        for name, dec in decoders.items():
            best[name] = dec.decode(out)[0]
            hyps[name].append([w.word for w in best[name].words])
        ref = tuple(refs[i])
        forced = {ref: force_align(exact_model, out, [refs[i]], exact_graphs)[0]}  # by word sequence
        forced_static = force_align(static, out, [refs[i]], static_graphs)[0]
        if forced_static is not None and forced[ref] is not None:
            decoded = forced[ref].score - forced_static.score  # = static - exact-model cost
            lm_gap = readings.cheapest_path(refs[i]) - readings.exact(refs[i])
            check.append(abs(decoded - lm_gap))
        # a search error of the exact model: another system's words (or the reference) cost less in it
        for words in {tuple(h[-1]) for h in hyps.values()} | {ref}:
            if words != tuple(hyps[exact_name][-1]):
                if words not in forced:
                    forced[words] = force_align(exact_model, out, [list(words)], exact_graphs)[0]
                f = forced[words]
                if f is not None and f.score > best[exact_name].score + 1e-3:
                    search_errors += 1
                    break
    texts = [" ".join(r) for r in refs]
    rows = [
        {"system": name, "wer": float(jiwer.wer(texts, [" ".join(h) or "<none>" for h in hyps[name]]))}
        for name in decoders
    ]
    return {
        "rows": rows,
        "exact_model_search_errors": search_errors,
        "forced_check_max_abs": float(max(check)),
        "forced_check_sentences": len(check),
        "options": opts,
    }


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report=None, threads=1, aliases=("--out",))
    ap.add_argument("--case", choices=["20k", "sphinx"], default="20k")
    ap.add_argument("--utterances", type=int, default=64, help="20k case: spelled sentences")
    ap.add_argument("--beam", type=float, default=16.0, help="20k case: the decoders' beam")
    args = parse(ap, argv)
    load_start = os.getloadavg()
    report: dict = {"case": args.case}
    if args.case == "20k":
        from asrdecode.bench.wfst_otf import case_20k

        _, _, large_lm, _, _, refs = case_20k(1e-5, args.utterances)
        report["lm"] = str(large_lm)
        report["references"] = compare_readings(BackoffReadings.read(large_lm), refs)
        report["decodes"] = decode_20k(args)
    else:
        from asrdecode.io.manifests import read_inputs

        arpa = ROOT / "data" / "lm" / "sphinx-en-us-72k.arpa.gz"
        readings = BackoffReadings.read(arpa)
        report["lm"] = str(arpa.relative_to(ROOT))
        for name in ("data/demo/real", "data/real/dev", "data/real/test"):
            utts = read_inputs(ROOT / name / "manifest.jsonl").utterances
            report[name] = compare_readings(readings, [(u.text or "").split() for u in utts])
    report["machine"] = machine_info(load_start)
    for key, value in report.items():
        if isinstance(value, dict) and "sentences" in value:
            print(
                f"{key}: {value['sentences']} references; LM cost exact {value['mean_exact']:.2f}, "
                f"cheapest path {value['mean_cheapest_path']:.2f} (mean); {value['differ']} differ, "
                f"by up to {value['max_gap']:.2f}"
            )
    if "decodes" in report:
        d = report["decodes"]
        for row in d["rows"]:
            print(f"  {row['system']}: WER {100 * row['wer']:.2f}%")
        print(
            f"  exact model: {d['exact_model_search_errors']} utterances with a search error; "
            f"forced-alignment check on {d['forced_check_sentences']} references: "
            f"|forced cost difference - LM cost difference| <= {d['forced_check_max_abs']:.4f}"
        )
    write_report(args.json or BENCH / f"lm_backoff_{args.case}.json", report)


if __name__ == "__main__":
    main()
