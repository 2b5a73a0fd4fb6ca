#!/usr/bin/env python3
"""Synthesise the demo model's training corpus (flite + espeak-ng) into data/cache/synth/.

    .venv/bin/python scripts/make_synthetic_speech.py --hours 6 --jobs 2

Rerunnable and incremental: item i is always the same sentence and voice for a given seed, items
already in the manifest are kept, so `--hours 8` after `--hours 6` only adds the missing part.
Writes `train.jsonl` (appended batch by batch, so training can start on a partial corpus),
`dev.jsonl` (held-out sentences for the training-time WER probe) and `stats.json`.
Audio is 16 kHz mono 16-bit FLAC; paths in the manifests are relative to their folder.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_common import (  # noqa: E402
    CACHE,
    Voice,
    heldout_sentences,
    random_voice,
    read_manifest,
    real_transcripts,
    require_tools,
    synthesize,
    training_sentences,
    write_manifest,
)

AVG_SECONDS = 2.6  # rough mean utterance length, only used to bound the sentence generator


def _job(args: tuple[int, str, str, Voice, str]) -> dict:
    """Worker: synthesise one item and return its manifest row."""
    idx, source, text, voice, path = args
    dur = synthesize(text, voice, Path(path))
    return {"idx": idx, "duration": round(dur, 4), "text": text, "source": source, "voice": voice.tag()}


def voice_for(seed: int, idx: int, split: str) -> Voice:
    """The deterministic voice of item idx."""
    return random_voice(random.Random(f"{seed}:{split}:{idx}"))


def make_dev(out: Path, n: int, seed: int, pool: Pool) -> None:
    """Held-out dev set (the "dev" hash split) for the WER probe during training."""
    path = out / "dev.jsonl"
    if path.exists() and len(read_manifest(path)) == n:
        return
    items = heldout_sentences("dev", seed, n, real_transcripts())
    jobs = [
        (i, src, text, voice_for(seed, i, "dev"), str(out / "dev" / f"{i:05d}.flac"))
        for i, (src, text) in enumerate(items)
    ]
    rows = pool.map(_job, jobs, chunksize=4)
    write_manifest(path, [{"audio_filepath": f"dev/{r['idx']:05d}.flac", **r} for r in rows])


def make_train(out: Path, hours: float, seed: int, pool: Pool, batch: int = 200) -> None:
    """Append training items until the manifest holds at least `hours` of audio."""
    path = out / "train.jsonl"
    done = {r["idx"]: r["duration"] for r in read_manifest(path)} if path.exists() else {}
    total = sum(done.values())
    target = hours * 3600
    n_max = int(target / AVG_SECONDS * 3) + 1000
    gen = enumerate(training_sentences(seed, n_max, real_transcripts()))
    t0 = time.time()
    made = 0.0
    with path.open("a") as f:
        while total < target:
            jobs = []
            for idx, (src, text) in gen:
                if idx not in done:
                    sub = f"train/{idx // 1000:03d}/{idx:06d}.flac"
                    jobs.append((idx, src, text, voice_for(seed, idx, "train"), str(out / sub)))
                if len(jobs) == batch:
                    break
            if not jobs:
                break
            for r in pool.map(_job, jobs, chunksize=8):
                f.write(
                    json.dumps({"audio_filepath": f"train/{r['idx'] // 1000:03d}/{r['idx']:06d}.flac", **r})
                    + "\n"
                )
                total += r["duration"]
                made += r["duration"]
            f.flush()
            el = time.time() - t0
            print(
                f"{total / 3600:6.2f} h in manifest, +{made / 3600:.2f} h in {el:.0f} s "
                f"({made / max(el, 1e-6):.0f}x real time)",
                flush=True,
            )
    stats_path = out / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"runs": []}
    stats["runs"].append(
        {
            "added_hours": round(made / 3600, 3),
            "wall_seconds": round(time.time() - t0, 1),
            "jobs": pool._processes,
        }
    )  # type: ignore[attr-defined]
    stats["train_hours"] = round(total / 3600, 3)
    stats_path.write_text(json.dumps(stats, indent=2) + "\n")


def main() -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=6.0, help="training audio to reach")
    ap.add_argument("--out", type=Path, default=CACHE / "synth")
    ap.add_argument("--jobs", type=int, default=2, help="synthesis processes (keep <= 2 here)")
    ap.add_argument("--n-dev", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    require_tools(["flite", "espeak-ng", "sox", "bible"])
    args.out.mkdir(parents=True, exist_ok=True)
    with Pool(args.jobs) as pool:
        make_dev(args.out, args.n_dev, args.seed, pool)
        make_train(args.out, args.hours, args.seed, pool)


if __name__ == "__main__":
    main()
