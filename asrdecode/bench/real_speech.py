#!/usr/bin/env python3
"""Real English speech: asrdecode (pocketsphinx's HMM on the device + HCLG + `wfst`) vs pocketsphinx.

    .venv/bin/asrdecode bench real-speech                      # every real set; the graph from the cache
    .venv/bin/asrdecode bench real-speech --manifest data/real/test/manifest.jsonl
    .venv/bin/asrdecode bench real-speech --on-the-fly wfst-otf,let   # + the default setup
    .venv/bin/asrdecode bench real-speech --on-the-fly wfst-otf --no-static   # no static graph build

Sets (each printed with how it was used): `data/demo/real` (pocketsphinx 5.1.1's test clips; a tuning
set: the graph's pruning was chosen on it), `data/real/dev` (the tuning set of the decoding defaults)
`data/real/phone-dev` (60 telephone prompts, 8 kHz; tuning) and `data/real/test` and
`data/real/phone-test` (59 more prompts; both held out: no choice was ever made by looking at
them); see data/README.md.
Both decoders get the same 16 kHz recordings. Per set, three rows besides asrdecode's:
pocketsphinx with the LM file the graph was built from ("same LM": the exported en-us trigram,
72.5k words, entropy-pruned; `configs/graph/sphinx-en-us.yaml`) and with its own full en-us.lm.bin
("its own LM": 72.5k / 2.05M / 1.67M n-grams), each through its Python API with its defaults
otherwise, one thread, its front end re-initialised before each utterance
(asrdecode/bench/peers.py: otherwise its noise estimate carries over from the previous file).
asrdecode runs `asrdecode transcribe` with `configs/sphinx-en-us.yaml`, twice: with one thread
everywhere (`threads=1 model.threads=1 decoder.threads=1`, like for like with pocketsphinx) and
with senone scoring and the search on all cores (`model.threads=0 decoder.threads=0`: Python
threads over utterances, each scoring the utterance it then searches, docs/design.md; torch's own
intra-op pool stays at one thread).
All are scored with `asrdecode.scoring` (jiwer) against the same references, and every asrdecode
row is compared with each pocketsphinx row utterance by utterance: fewer / more / as many errors,
and the WER difference with a 95% paired bootstrap interval over the utterances
(`scoring.compare_paired`; on a set of 17 recordings a 1-point difference is well inside it).
RTFx = audio seconds / wall seconds of the work each decoder does per utterance (front end,
acoustic scoring, search), measured the same way for all: one-time costs (model and graph
loading, asrdecode's warm-up batch that loads the compiled search, pocketsphinx's Decoder()) and
reading the audio files are excluded. asrdecode: the sum of its report's `features`, `model` and
`decode` stage seconds; pocketsphinx: start_utt .. end_utt around each utterance. "vs PS" is the
ratio to pocketsphinx with the same LM. The end-to-end wall RTFx of each asrdecode command (incl.
warm-up and writing outputs) is in the JSON. `--on-the-fly wfst-otf,let` adds rows for the default
setup of `asrdecode transcribe` (no --config: the small HCLG from the cache + pocketsphinx's full
trigram on the fly) with each of those decoders, on all cores. `--same-lm-config
configs/sphinx-en-us-same-lm.yaml` adds a row with the same LM as "pocketsphinx, same LM", read
exactly as pocketsphinx reads it (`wfst-otf` over the small graph), on all cores. The load average
before and after is printed: on a shared machine run it when the CPU is quiet (the decoders run
one after the other). `--repeats N` runs every row N times, in rounds, and keeps each row's
fastest run (others' load only slows a run down; pocketsphinx's own RTFx moved by a quarter
between two single runs here).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import soundfile

from asrdecode.bench.harness import bench_parser, machine_info, parse
from asrdecode.bench.peers import Pocketsphinx
from asrdecode.graph.cache import cached_graph, load_graph_config
from asrdecode.graph.stages import report_finished
from asrdecode.scoring import PairedComparison, compare_paired, score

ROOT = Path(__file__).resolve().parents[2]


def read_manifest(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        row["id"] = Path(row["audio_filepath"]).stem
        row["path"] = (path.parent / row["audio_filepath"]).resolve()
    return rows


def run_pocketsphinx(rows: list[dict], lm: Path | None) -> dict:
    """pocketsphinx's own decoder (`lm` None = its default LM), one utterance at a time, from a
    fresh front end per utterance (asrdecode/bench/peers.py)."""
    peer = Pocketsphinx(lm)
    hyps, seconds, audio = {}, 0.0, 0.0
    for row in rows:
        pcm, rate = soundfile.read(row["path"], dtype="int16")
        if rate != 16000:
            sys.exit(f"{row['path']}: {rate} Hz, pocketsphinx's en-us model needs 16 kHz")
        words, spent = peer.words(pcm)
        seconds += spent
        audio += len(pcm) / rate
        hyps[row["id"]] = " ".join(words)
    return {
        "hyps": hyps,
        "decode_seconds": seconds,
        "audio_seconds": audio,
        "load_seconds": peer.load_seconds,
    }


def run_checked(cmd: list[str], what: str) -> None:
    """Run a child process; on failure print its stderr and stop."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(f"{what} failed (exit code {proc.returncode}): {' '.join(cmd)}")


def run_asrdecode(
    manifest: Path, config: Path | None, graph: Path | None, out: Path, overrides: list[str]
) -> dict:
    """`asrdecode transcribe` in a child process (as a user runs it); its report gives stage times.
    No config and no graph: the default setup (its graph from the cache, built on first use)."""
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(manifest)]
    cmd += ["--config", str(config)] if config is not None else []
    cmd += [f"decoder.graph={graph}"] if graph is not None else []
    cmd += [*overrides, "--out", str(out), "--overwrite"]
    t0 = time.perf_counter()
    run_checked(cmd, "asrdecode transcribe")
    wall = time.perf_counter() - t0
    report = json.loads((out / "report.json").read_text())
    hyps = {}
    for line in (out / "transcripts.jsonl").read_text().splitlines():
        rec = json.loads(line)
        hyps[Path(rec["audio_filepath"]).stem] = rec["pred_text"]
    return {"hyps": hyps, "report": report, "process_seconds": wall}


def run_seconds(run: dict) -> float:
    """The seconds a run's RTFx counts: pocketsphinx's decoding, or asrdecode's front end, scoring
    and search (its report's stage times; loading the audio and the model not counted)."""
    if "report" not in run:
        return run["decode_seconds"]
    stages = run["report"]["stage_seconds"]
    return sum(stages[k] for k in ("features", "model", "decode"))


def fastest(repeats: list[dict]) -> tuple[dict, list[float], bool]:
    """The fastest of a row's repeated runs (this machine is shared: the minimum is the least
    disturbed, as timeit takes it), the seconds of every repeat, and whether the hypotheses
    differed between repeats (they must not)."""
    seconds = [run_seconds(run) for run in repeats]
    best = repeats[seconds.index(min(seconds))]
    return best, seconds, any(run["hyps"] != repeats[0]["hyps"] for run in repeats[1:])


def setup_row(setup: str) -> str:
    """The row of a setup (`--setup "CONFIG [KEY=VALUE ...]"`): its config file's name and overrides."""
    config, *overrides = setup.split()
    return " ".join([f"setup {Path(config).name.removesuffix('.yaml')}", *overrides])


SETS = {  # manifest -> how it was used
    "data/demo/real/manifest.jsonl": "tuning set (pocketsphinx's test clips)",
    "data/real/dev/manifest.jsonl": "tuning set",
    "data/real/test/manifest.jsonl": "held out: never used for any choice",
    "data/real/phone-dev/manifest.jsonl": "tuning set (telephone prompts, 8 kHz)",
    "data/real/phone-test/manifest.jsonl": "held out: never used for any choice (telephone prompts, 8 kHz)",
}


def evaluate_set(args: argparse.Namespace, manifest: Path, lm: Path) -> dict:
    """asrdecode (one thread, all cores) and pocketsphinx (same LM, its default LM) on one set."""
    rows = read_manifest(manifest)
    refs = {row["id"]: row.get("text", "") for row in rows}
    cores = len(os.sched_getaffinity(0))
    one_thread = ["threads=1", "model.threads=1", "decoder.threads=1"]
    all_cores = ["threads=1", "model.threads=0", "decoder.threads=0"]
    runs = {}  # name -> (config, graph, overrides, output folder)
    if not args.no_static:
        runs["asrdecode 1 thread"] = (args.config, args.graph, one_thread, "1-thread")
        runs[f"asrdecode {cores} cores"] = (args.config, args.graph, all_cores, "all-cores")
    if args.same_lm_config is not None:  # the same LM read exactly, on the fly over the small graph
        runs["asrdecode wfst-otf, same LM read exactly"] = (args.same_lm_config, None, all_cores, "same-lm")
    for decoder in args.on_the_fly:  # the default setup: the small graph + the full LM, all cores
        overrides = [*all_cores, f"decoder.type={decoder}"]
        runs[f"asrdecode {decoder}, full LM"] = (None, None, overrides, decoder)
    for i, setup in enumerate(args.setup):  # a setup as a user runs it (its own threads)
        config, *overrides = setup.split()
        runs[setup_row(setup)] = (Path(config), None, overrides, f"setup-{i}-{Path(config).stem}")
    out = args.out / manifest.parent.name
    peer_lms = {"pocketsphinx, same LM": lm}
    if not args.no_default_lm:
        peer_lms["pocketsphinx, its own LM"] = None
    repeats: dict[str, list[dict]] = {name: [] for name in [*runs, *peer_lms]}
    for _ in range(args.repeats):  # in rounds, so that a slow spell of the machine hits every row
        for name, (config, graph, overrides, folder) in runs.items():
            repeats[name].append(
                run_asrdecode(manifest, config, graph, out / folder, [*overrides, *args.overrides])
            )
        for name, peer_lm in peer_lms.items():
            repeats[name].append(run_pocketsphinx(rows, peer_lm))
    chosen = {name: fastest(runs_of_row) for name, runs_of_row in repeats.items()}
    ours = {name: chosen[name][0] for name in runs}
    peers = {name: chosen[name][0] for name in peer_lms}
    same_lm = peers["pocketsphinx, same LM"]
    audio = same_lm["audio_seconds"]
    ps_rtfx = audio / same_lm["decode_seconds"]
    rel = (
        str(manifest.resolve().relative_to(ROOT))
        if manifest.resolve().is_relative_to(ROOT)
        else str(manifest)
    )
    result = {
        "manifest": rel,
        "use": SETS.get(rel, "not listed"),
        "audio_seconds": audio,
        "utterances": len(rows),
        "cores": cores,
        "repeats": args.repeats,
        "rows": {},
    }
    peer_scores = {name: score(refs, run["hyps"]) for name, run in peers.items()}
    setup_scores = {setup_row(s): score(refs, ours[setup_row(s)]["hyps"]) for s in args.setup}
    for name, run in ours.items():
        stages = run["report"]["stage_seconds"]
        seconds = sum(stages[k] for k in ("features", "model", "decode"))
        run_score = score(refs, run["hyps"])
        others = {**peer_scores, **{k: v for k, v in list(setup_scores.items())[:1] if k != name}}
        paired = {other: compare_paired(run_score, other_score) for other, other_score in others.items()}
        result["rows"][name] = {
            "wer": run_score.wer,
            "cer": run_score.cer,
            "errors": run_score.errors,
            "ref_words": run_score.ref_words,
            "rtfx": audio / seconds,
            "rtfx_vs_pocketsphinx": audio / seconds / ps_rtfx,
            "decode_seconds": seconds,
            "rtfx_end_to_end": run["report"]["rtfx"],
            "stage_seconds": stages,
            "config": str(runs[name][0]),
            "overrides": [*runs[name][2], *args.overrides],
            "seconds_per_repeat": chosen[name][1],
            "paired": {peer: c.to_dict() for peer, c in paired.items()},
        }
    for name, run in peers.items():
        run_score = peer_scores[name]
        rtfx = audio / run["decode_seconds"]
        result["rows"][name] = {
            "wer": run_score.wer,
            "cer": run_score.cer,
            "errors": run_score.errors,
            "ref_words": run_score.ref_words,
            "rtfx": rtfx,
            "rtfx_vs_pocketsphinx": rtfx / ps_rtfx,
            "decode_seconds": run["decode_seconds"],
            "load_seconds": run["load_seconds"],
            "seconds_per_repeat": chosen[name][1],
        }
    first = next(iter(ours.values()))["hyps"]
    result["per_utterance"] = [
        {
            "id": u,
            "ref": refs[u],
            "asrdecode": first.get(u, ""),
            **{name: run["hyps"].get(u, "") for name, run in ours.items() if "full LM" in name},
            **{name: run["hyps"][u] for name, run in peers.items()},
        }
        for u in refs
    ]
    others = [] if args.no_static else [n for n in list(ours)[1:2] if ours[n]["hyps"] != first]
    result["hypotheses_differ_between_thread_settings"] = others
    result["hypotheses_differ_between_repeats"] = [name for name, (_, _, differ) in chosen.items() if differ]
    return result


def print_set(result: dict) -> None:
    print(f"\n{result['manifest']} ({result['use']}): {result['utterances']} recordings, "
          f"{result['audio_seconds']:.1f} s\n")  # fmt: skip
    width = max(26, *(len(name) + 2 for name in result["rows"]))
    print(f"{'decoder':<{width}}{'WER':>8}{'CER':>8}{'RTFx':>9}{'vs PS':>8}{'end-to-end':>12}")
    for name, r in result["rows"].items():
        e2e = f"{r['rtfx_end_to_end']:>12.1f}" if "rtfx_end_to_end" in r else f"{'':>12}"
        print(
            f"{name:<{width}}{r['wer']:>8.1%}{r['cer']:>8.1%}{r['rtfx']:>9.1f}"
            f"{r['rtfx_vs_pocketsphinx']:>7.2f}x{e2e}"
        )
    for name, r in result["rows"].items():
        for peer, c in r.get("paired", {}).items():
            print(PairedComparison(**c).summary(name, peer))
    width = max(len(u["id"]) for u in result["per_utterance"])
    for item in result["per_utterance"]:
        print(f"{item['id']:<{width}}  REF {item['ref']}")
        print(f"{'':<{width}}  ASR {item['asrdecode']}")
        print(f"{'':<{width}}  PS  {item['pocketsphinx, same LM']}")
    if result["hypotheses_differ_between_thread_settings"]:
        print(f"(hypotheses of {', '.join(result['hypotheses_differ_between_thread_settings'])} differ)")
    if result["hypotheses_differ_between_repeats"]:
        names = ", ".join(result["hypotheses_differ_between_repeats"])
        print(f"(hypotheses of {names} differ between repeats)")
    if result["repeats"] > 1:
        print(f"RTFx: the fastest of {result['repeats']} runs per row (every run's seconds in the JSON)")


def print_pooled(results: list[dict]) -> dict:
    """Each row's WER over the tuning sets together and over the held-out ones together."""
    pooled: dict = {}
    for group, keyword in (("tuning sets", "tuning"), ("held-out sets", "held out")):
        chosen = [r for r in results if keyword in r["use"]]
        names = [n for n in (chosen[0]["rows"] if chosen else {}) if all(n in r["rows"] for r in chosen)]
        if not chosen or not names:
            continue
        print(f"\npooled over the {group} ({', '.join(r['manifest'] for r in chosen)}):")
        for name in names:
            errors = sum(r["rows"][name]["errors"] for r in chosen)
            words = sum(r["rows"][name]["ref_words"] for r in chosen)
            pooled.setdefault(group, {})[name] = {"errors": errors, "ref_words": words, "wer": errors / words}
            print(f"  {name:<40}{errors / words:>8.1%}  ({errors} errors / {words} words)")
    return pooled


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, report=ROOT / "out/eval_real_speech.json", repeats=1)
    ap.add_argument(
        "--manifest", type=Path, action="append", help="a set (repeatable); default: every real set"
    )
    ap.add_argument("--config", type=Path, default=ROOT / "configs/sphinx-en-us.yaml")
    ap.add_argument("--graph-config", type=Path, default=ROOT / "configs/graph/sphinx-en-us.yaml")
    ap.add_argument(
        "--graph",
        type=Path,
        default=None,
        help="the static graph folder (built there from --graph-config if missing); default: "
        "--graph-config's graph in the graph cache, built on first use as configs/sphinx-en-us.yaml does",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out/eval-real-speech")
    ap.add_argument("--no-default-lm", action="store_true", help="skip pocketsphinx with its own LM")
    ap.add_argument(
        "--no-static",
        action="store_true",
        help="skip the static `wfst` rows (no static graph is built; pocketsphinx's same LM is the "
        "`arpa` of --graph-config): with --on-the-fly, the default setup against pocketsphinx alone",
    )
    ap.add_argument(
        "--on-the-fly",
        default="",
        type=lambda v: [d for d in v.split(",") if d],
        help="also these decoders (wfst-otf,let) on the default setup (no --config: the small graph "
        "from the cache + pocketsphinx's full trigram)",
    )
    ap.add_argument(
        "--setup",
        action="append",
        default=[],
        help="also this setup as a user runs it: 'CONFIG [KEY=VALUE ...]' (repeatable; e.g. "
        "'configs/hama-en-us-otf.yaml decoder.type=let'); the first one is each asrdecode row's "
        "utterance-by-utterance comparison",
    )
    ap.add_argument(
        "--same-lm-config",
        type=Path,
        help="also this config on all cores (configs/sphinx-en-us-same-lm.yaml: the same LM read exactly)",
    )
    ap.add_argument("overrides", nargs="*", help="asrdecode config overrides, e.g. decoder.beam=16")
    args = parse(ap, argv, intermixed=True)

    if args.no_static and not args.on_the_fly and args.same_lm_config is None and not args.setup:
        sys.exit(
            "bench real-speech: --no-static leaves no asrdecode row (add --on-the-fly or --same-lm-config)"
        )
    if args.no_static:
        arpa = Path(load_graph_config(args.graph_config).arpa)
        lm = arpa if arpa.is_absolute() else ROOT / arpa
    else:
        if args.graph is None:
            say = functools.partial(print, flush=True)
            args.graph = cached_graph(load_graph_config(args.graph_config), report_finished(say), say)
        if not (args.graph / "graph.pt").is_file():
            print(f"building {args.graph} from {args.graph_config} ...", flush=True)
            cmd = [sys.executable, "-m", "asrdecode.cli", "build-graph", "--config", str(args.graph_config)]
            run_checked([*cmd, "--out", str(args.graph)], "asrdecode build-graph")
        meta = json.loads((args.graph / "meta.json").read_text())
        lm = Path(meta["inputs"]["arpa"]["path"])
    manifests = args.manifest or [ROOT / m for m in SETS if (ROOT / m).is_file()]
    load = os.getloadavg()
    results = [evaluate_set(args, m, lm) for m in manifests]
    for result in results:
        print_set(result)
    pooled = print_pooled(results)
    load_after = os.getloadavg()
    machine = machine_info(load)
    print(f"\n{machine['cpu']} (L2 {machine['caches'].get('L2', '?')} per core), "
          f"load average (1/5/15 min) before {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}")  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "graph": None if args.no_static else str(args.graph),
        "config": str(args.config),
        "pocketsphinx_same_lm": str(lm),
        "machine": machine,
        "load_average_before": load,
        "load_average_after": load_after,
        "sets": results,
        "pooled": pooled,
    }
    args.json.write_text(json.dumps(summary, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
