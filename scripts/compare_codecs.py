#!/usr/bin/env python3
"""The real-speech sets as a phone or a browser would hand them over: each recording encoded as AAC
in M4A (a voice memo) and as Opus in WebM (a web recording), then transcribed with the default
setup like the WAVs. Prints per set the WER of each version and how many recordings' words
changed. Nothing is chosen from it (the held-out sets included): it measures what lossy codecs
cost, with the decoding defaults as they are.

    .venv/bin/python scripts/compare_codecs.py                   # the five real sets
    .venv/bin/python scripts/compare_codecs.py data/real/dev --aac-kbps 32

The load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
SETS = ["data/demo/real", "data/real/dev", "data/real/test", "data/real/phone-dev", "data/real/phone-test"]


def manifest_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines() if line.strip()]


def encoded_copy(folder: Path, out: Path, suffix: str, kbps: int) -> Path:
    """`folder`'s manifest with every recording encoded to `suffix` in `out`: the new manifest."""
    from asrdecode.audio.containers import encode_audio

    out.mkdir(parents=True)
    lines = []
    for row in manifest_rows(folder):
        audio, rate = sf.read(folder / row["audio_filepath"], dtype="float32", always_2d=True)
        name = Path(row["audio_filepath"]).with_suffix(suffix).name
        encode_audio(str(out / name), [audio], rate, bit_rate=kbps * 1000)
        lines.append(json.dumps({"audio_filepath": name, "text": row["text"]}))
    (out / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return out / "manifest.jsonl"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", default=SETS)
    ap.add_argument("--aac-kbps", type=int, default=64, help="AAC bitrate (a phone's voice memo: 64)")
    ap.add_argument("--opus-kbps", type=int, default=24, help="Opus bitrate (a web call: 24)")
    args = ap.parse_args(argv)
    import asrdecode
    from asrdecode.scoring import score

    load = os.getloadavg()
    print("| set | WAV | AAC in M4A | Opus in WebM | recordings whose words changed (AAC / Opus) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets:
            folder = ROOT / name
            versions = {"wav": folder / "manifest.jsonl"}
            for suffix, kbps in ((".m4a", args.aac_kbps), (".webm", args.opus_kbps)):
                versions[suffix] = encoded_copy(folder, Path(tmp) / name / suffix[1:], suffix, kbps)
            hyps = {}
            for version, manifest in versions.items():
                rows = asrdecode.transcribe(manifest)
                hyps[version] = {Path(r["audio_filepath"]).stem: r["pred_text"] for r in rows}
            refs = {Path(r["audio_filepath"]).stem: r["text"] for r in manifest_rows(folder)}
            wer = {v: score(refs, h).to_dict()["wer"] for v, h in hyps.items()}
            changed = [sum(hyps[v][k] != hyps["wav"][k] for k in refs) for v in (".m4a", ".webm")]
            print(
                f"| {name} ({len(refs)}) | {100 * wer['wav']:.1f}% | {100 * wer['.m4a']:.1f}% | "
                f"{100 * wer['.webm']:.1f}% | {changed[0]} / {changed[1]} |",
                flush=True,
            )
    after = os.getloadavg()
    print(f"AAC {args.aac_kbps} kbit/s, Opus {args.opus_kbps} kbit/s (FFmpeg's encoders through PyAV)")
    print("load average (1/5/15 min) before " + "/".join(f"{x:.2f}" for x in load) + ", after "
          + "/".join(f"{x:.2f}" for x in after))  # fmt: skip


if __name__ == "__main__":
    main()
