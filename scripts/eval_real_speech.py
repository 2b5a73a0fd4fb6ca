#!/usr/bin/env python3
"""Real English speech: asrdecode (pocketsphinx's HMM on the device + HCLG + `wfst`) vs pocketsphinx.

    .venv/bin/python scripts/eval_real_speech.py                      # builds the graph if needed
    .venv/bin/python scripts/eval_real_speech.py --graph out/graphs/sphinx-en-us --json out/eval.json

Both decoders get the same 16 kHz recordings (`data/demo/real`, from the pocketsphinx 5.1.1 source
distribution). pocketsphinx runs through its Python API with its default settings (its own en-us
model, full 72k-word trigram and dictionary); asrdecode runs `asrdecode transcribe` with
`configs/sphinx-en-us.yaml` (the same acoustic model, and pocketsphinx's LM limited to 10k words:
`configs/graph/sphinx-en-us.yaml`). Both are scored with `asrdecode.scoring` (jiwer) against the
same references. RTFx = audio seconds / wall seconds of the work both decoders do per utterance
(front end, acoustic scoring, search), measured the same way for both: one-time costs (model and
graph loading, asrdecode's warm-up batch that loads the compiled search, pocketsphinx's Decoder())
and reading the audio files are excluded. asrdecode: the sum of its report's `features`, `model`
and `decode` stage seconds; pocketsphinx: start_utt .. end_utt around each utterance. The
end-to-end wall RTFx of the asrdecode command (incl. warm-up and writing outputs) is reported as
well. Prints a table and writes JSON. On a shared machine run it when the CPU is quiet: both
decoders run one after the other, so load changes in between skew the ratio.
"""

from __future__ import annotations

import argparse
import json
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


def run_asrdecode(manifest: Path, config: Path, graph: Path, out: Path, overrides: list[str]) -> dict:
    """`asrdecode transcribe` in a child process (as a user runs it); its report gives stage times."""
    cmd = [sys.executable, "-m", "asrdecode.cli", "transcribe", str(manifest), "--config", str(config)]
    cmd += [f"decoder.graph={graph}", *overrides, "--out", str(out), "--overwrite"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
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
        subprocess.run([*cmd, "--out", str(args.graph)], check=True, capture_output=True)

    rows = read_manifest(args.manifest)
    refs = {row["id"]: row.get("text", "") for row in rows}
    ours = run_asrdecode(args.manifest, args.config, args.graph, args.out, args.overrides)
    theirs = run_pocketsphinx(rows)

    ours_score, theirs_score = score(refs, ours["hyps"]), score(refs, theirs["hyps"])
    audio = theirs["audio_seconds"]
    stages = ours["report"]["stage_seconds"]
    ours_seconds = sum(stages[k] for k in ("features", "model", "decode"))
    ours_rtfx = audio / ours_seconds
    theirs_rtfx = audio / theirs["decode_seconds"]
    result = {
        "audio_seconds": audio,
        "utterances": len(rows),
        "asrdecode": {
            "wer": ours_score.wer,
            "cer": ours_score.cer,
            "rtfx": ours_rtfx,
            "decode_seconds": ours_seconds,
            "rtfx_end_to_end": ours["report"]["rtfx"],
            "stage_seconds": stages,
            "rtfx_per_stage": ours["report"].get("rtfx_per_stage"),
            "config": str(args.config),
            "graph": str(args.graph),
            "overrides": args.overrides,
        },
        "pocketsphinx": {
            "wer": theirs_score.wer,
            "cer": theirs_score.cer,
            "rtfx": theirs_rtfx,
            "decode_seconds": theirs["decode_seconds"],
            "load_seconds": theirs["load_seconds"],
        },
        "rtfx_ratio": ours_rtfx / theirs_rtfx,
        "per_utterance": [
            {"id": u, "ref": refs[u], "asrdecode": ours["hyps"].get(u, ""), "pocketsphinx": theirs["hyps"][u]}
            for u in refs
        ],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))

    print(f"\n{len(rows)} real recordings, {audio:.1f} s of audio ({args.manifest})\n")
    print(f"{'decoder':<14}{'WER':>8}{'CER':>8}{'RTFx':>9}")
    print(f"{'asrdecode':<14}{ours_score.wer:>8.1%}{ours_score.cer:>8.1%}{ours_rtfx:>9.1f}")
    print(f"{'pocketsphinx':<14}{theirs_score.wer:>8.1%}{theirs_score.cer:>8.1%}{theirs_rtfx:>9.1f}")
    print(f"RTFx ratio asrdecode / pocketsphinx: {result['rtfx_ratio']:.2f}x")
    per_stage = ", ".join(f"{k} {stages[k]:.2f} s" for k in ("features", "model", "decode"))
    print(f"asrdecode stages: {per_stage}; end-to-end RTFx {ours['report']['rtfx']:.1f}\n")
    width = max(len(u) for u in refs)
    for item in result["per_utterance"]:
        print(f"{item['id']:<{width}}  REF {item['ref']}")
        print(f"{'':<{width}}  ASR {item['asrdecode']}")
        print(f"{'':<{width}}  PS  {item['pocketsphinx']}")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
