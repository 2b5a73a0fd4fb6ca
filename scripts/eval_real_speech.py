#!/usr/bin/env python3
"""Real English speech: asrdecode (pocketsphinx's HMM on the device + HCLG + `wfst`) vs pocketsphinx.

    .venv/bin/python scripts/eval_real_speech.py                      # builds the graph if needed
    .venv/bin/python scripts/eval_real_speech.py --graph out/graphs/sphinx-en-us --json out/eval.json

Both decoders get the same 16 kHz recordings (`data/demo/real`, from the pocketsphinx 5.1.1 source
distribution). pocketsphinx runs through its Python API with its default settings (its own en-us
model, full trigram with 72.5k words, 2.05M bigrams and 1.67M trigrams, and its dictionary), one
thread. asrdecode runs `asrdecode transcribe` with `configs/sphinx-en-us.yaml`: the same acoustic
model and pocketsphinx's LM with every pronounceable word (72.5k), entropy-pruned
(`configs/graph/sphinx-en-us.yaml`), twice: with one thread everywhere (`threads=1
model.threads=1 decoder.threads=1`, like for like with pocketsphinx) and with senone scoring and
the search on all cores (`model.threads=0 decoder.threads=0`: Python threads over chunks of frames
and over utterances; torch's own intra-op pool stays at one thread: its OpenMP workers spin-wait,
and with another process on the second core the front end and scoring took 5x longer with two).
Both are scored with `asrdecode.scoring` (jiwer) against the same references.
RTFx = audio seconds / wall seconds of the work both decoders do per utterance (front end,
acoustic scoring, search), measured the same way for both: one-time costs (model and graph
loading, asrdecode's warm-up batch that loads the compiled search, pocketsphinx's Decoder()) and
reading the audio files are excluded. asrdecode: the sum of its report's `features`, `model` and
`decode` stage seconds; pocketsphinx: start_utt .. end_utt around each utterance. The end-to-end
wall RTFx of each asrdecode command (incl. warm-up and writing outputs) is reported as well.
Prints a table and writes JSON. On a shared machine run it when the CPU is quiet: the decoders
run one after the other, so load changes in between skew the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import soundfile

from asrdecode.scoring import score

ROOT = Path(__file__).resolve().parents[1]


def read_manifest(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        row["id"] = Path(row["audio_filepath"]).stem
        row["path"] = (path.parent / row["audio_filepath"]).resolve()
    return rows


def run_pocketsphinx(rows: list[dict]) -> dict:
    """pocketsphinx's own decoder, default configuration, one utterance at a time."""
    from pocketsphinx import Decoder

    t0 = time.perf_counter()
    decoder = Decoder(loglevel="FATAL")
    load = time.perf_counter() - t0
    hyps, seconds, audio = {}, 0.0, 0.0
    for row in rows:
        pcm, rate = soundfile.read(row["path"], dtype="int16")
        if rate != 16000:
            sys.exit(f"{row['path']}: {rate} Hz, pocketsphinx's en-us model needs 16 kHz")
        t = time.perf_counter()
        decoder.start_utt()
        decoder.process_raw(pcm.tobytes(), no_search=False, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        seconds += time.perf_counter() - t
        audio += len(pcm) / rate
        words = [s.word for s in decoder.seg()] if hyp is not None else []
        hyps[row["id"]] = " ".join(w.split("(")[0] for w in words if not _is_filler(w))
    return {"hyps": hyps, "decode_seconds": seconds, "audio_seconds": audio, "load_seconds": load}


def _is_filler(word: str) -> bool:
    return word.startswith("<") or word.startswith("[") or word.startswith("++")


def run_checked(cmd: list[str], what: str) -> None:
    """Run a child process; on failure print its stderr and stop."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(f"{what} failed (exit code {proc.returncode}): {' '.join(cmd)}")


def run_asrdecode(manifest: Path, config: Path, graph: Path, out: Path, overrides: list[str]) -> dict:
    """`asrdecode transcribe` in a child process (as a user runs it); its report gives stage times."""
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(manifest), "--config", str(config)]
    cmd += [f"decoder.graph={graph}", *overrides, "--out", str(out), "--overwrite"]
    t0 = time.perf_counter()
    run_checked(cmd, "asrdecode transcribe")
    wall = time.perf_counter() - t0
    report = json.loads((out / "report.json").read_text())
    hyps = {}
    for line in (out / "transcripts.jsonl").read_text().splitlines():
        rec = json.loads(line)
        hyps[Path(rec["audio_filepath"]).stem] = rec["pred_text"]
    return {"hyps": hyps, "report": report, "process_seconds": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", type=Path, default=ROOT / "data/demo/real/manifest.jsonl")
    ap.add_argument("--config", type=Path, default=ROOT / "configs/sphinx-en-us.yaml")
    ap.add_argument("--graph-config", type=Path, default=ROOT / "configs/graph/sphinx-en-us.yaml")
    ap.add_argument("--graph", type=Path, default=ROOT / "out/graphs/sphinx-en-us")
    ap.add_argument("--out", type=Path, default=ROOT / "out/eval-real-speech")
    ap.add_argument("--json", type=Path, default=ROOT / "out/eval_real_speech.json")
    ap.add_argument("overrides", nargs="*", help="asrdecode config overrides, e.g. decoder.beam=16")
    args = ap.parse_args()

    if not (args.graph / "graph.pt").is_file():
        print(f"building {args.graph} from {args.graph_config} ...", flush=True)
        cmd = [sys.executable, "-m", "asrdecode.cli", "build-graph", "--config", str(args.graph_config)]
        run_checked([*cmd, "--out", str(args.graph)], "asrdecode build-graph")

    rows = read_manifest(args.manifest)
    refs = {row["id"]: row.get("text", "") for row in rows}
    cores = len(os.sched_getaffinity(0))
    runs = {  # name -> (overrides, output folder)
        "asrdecode 1 thread": (["threads=1", "model.threads=1", "decoder.threads=1"], "1-thread"),
        f"asrdecode {cores} cores": (["threads=1", "model.threads=0", "decoder.threads=0"], "all-cores"),
    }
    ours = {}
    for name, (threads, folder) in runs.items():
        overrides = [*threads, *args.overrides]
        ours[name] = run_asrdecode(args.manifest, args.config, args.graph, args.out / folder, overrides)
    theirs = run_pocketsphinx(rows)

    audio = theirs["audio_seconds"]
    theirs_score = score(refs, theirs["hyps"])
    theirs_rtfx = audio / theirs["decode_seconds"]
    result = {"audio_seconds": audio, "utterances": len(rows), "cores": cores, "asrdecode": {}}
    for name, run in ours.items():
        stages = run["report"]["stage_seconds"]
        seconds = sum(stages[k] for k in ("features", "model", "decode"))
        run_score = score(refs, run["hyps"])
        result["asrdecode"][name] = {
            "wer": run_score.wer,
            "cer": run_score.cer,
            "rtfx": audio / seconds,
            "rtfx_ratio": audio / seconds / theirs_rtfx,
            "decode_seconds": seconds,
            "rtfx_end_to_end": run["report"]["rtfx"],
            "stage_seconds": stages,
            "rtfx_per_stage": run["report"].get("rtfx_per_stage"),
            "config": str(args.config),
            "graph": str(args.graph),
            "overrides": [*runs[name][0], *args.overrides],
        }
    result["pocketsphinx"] = {
        "wer": theirs_score.wer,
        "cer": theirs_score.cer,
        "rtfx": theirs_rtfx,
        "decode_seconds": theirs["decode_seconds"],
        "load_seconds": theirs["load_seconds"],
    }
    first = next(iter(ours.values()))["hyps"]
    result["per_utterance"] = [
        {"id": u, "ref": refs[u], "asrdecode": first.get(u, ""), "pocketsphinx": theirs["hyps"][u]}
        for u in refs
    ]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))

    print(f"\n{len(rows)} real recordings, {audio:.1f} s of audio ({args.manifest})\n")
    print(f"{'decoder':<22}{'WER':>8}{'CER':>8}{'RTFx':>9}{'vs PS':>8}")
    for name, r in result["asrdecode"].items():
        print(f"{name:<22}{r['wer']:>8.1%}{r['cer']:>8.1%}{r['rtfx']:>9.1f}{r['rtfx_ratio']:>7.2f}x")
    print(
        f"{'pocketsphinx':<22}{theirs_score.wer:>8.1%}{theirs_score.cer:>8.1%}{theirs_rtfx:>9.1f}{1:>7.2f}x"
    )
    for name, r in result["asrdecode"].items():
        stages = r["stage_seconds"]
        per_stage = ", ".join(f"{k} {stages[k]:.2f} s" for k in ("features", "model", "decode"))
        print(f"{name} stages: {per_stage}; end-to-end RTFx {r['rtfx_end_to_end']:.1f}")
    print()
    width = max(len(u) for u in refs)
    for item in result["per_utterance"]:
        print(f"{item['id']:<{width}}  REF {item['ref']}")
        print(f"{'':<{width}}  ASR {item['asrdecode']}")
        print(f"{'':<{width}}  PS  {item['pocketsphinx']}")
    others = [n for n in list(ours)[1:] if ours[n]["hyps"] != first]
    if others:
        print(f"\n(hypotheses of {', '.join(others)} differ from the first run's)")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
