#!/usr/bin/env python3
"""Build data/demo/: real English clips (pocketsphinx 5.1.1 sdist) and held-out synthetic speech.

    .venv/bin/python scripts/prepare_demo_data.py            # both parts
    .venv/bin/python scripts/prepare_demo_data.py --only real

Outputs (audio paths in each manifest are relative to the manifest's folder):
    data/demo/real/*.wav + manifest.jsonl        14 clips, 16 kHz mono PCM16
    data/demo/synthetic/*.wav + manifest.jsonl   30 TTS sentences never used for training
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_common import (  # noqa: E402
    CACHE,
    DATA,
    SAMPLE_RATE,
    heldout_sentences,
    normalize_text,
    pocketsphinx_sdist,
    random_voice,
    real_transcripts,
    require_tools,
    synthesize,
    voice_dict,
    write_manifest,
)

DIGIT_CODES = {
    "z": "zero",
    "o": "oh",
    "1": "one",
    "2": "two",
    "3": "three",
    "4": "four",
    "5": "five",
    "6": "six",
    "7": "seven",
    "8": "eight",
    "9": "nine",
}


def _strip_sphinx(line: str) -> tuple[str, str]:
    """'<s> words </s> (id)' -> (id, words)."""
    m = re.match(r"\s*(.*?)\s*\((\S+)\)\s*$", line)
    if not m:
        raise ValueError(f"unexpected transcription line: {line!r}")
    words = m.group(1).replace("<s>", " ").replace("</s>", " ")
    return m.group(2), normalize_text(words)


def _read_audio(path: Path) -> np.ndarray:
    """.raw (16-bit LE mono 16 kHz) or .wav -> int16 samples (must already be 16 kHz mono)."""
    if path.suffix == ".raw":
        return np.fromfile(path, dtype="<i2")
    data, sr = sf.read(str(path), dtype="int16", always_2d=True)
    if sr != SAMPLE_RATE or data.shape[1] != 1:
        raise ValueError(f"{path}: expected 16 kHz mono, got {sr} Hz x {data.shape[1]}")
    return data[:, 0]


def real_clips(src: Path) -> list[tuple[str, Path, str, str]]:
    """(utt id, source file, transcript, where the transcript comes from) for every real clip."""
    d = src / "test" / "data"
    clips = [
        (
            "ps_goforward",
            d / "goforward.raw",
            "go forward ten meters",
            "test/data/goforward.gram + cython/test/alignment_test.py",
        )
    ]
    # tidigits: the file name encodes the digits (z = zero, o = oh), as in tidigits.lsn
    for raw in sorted((d / "tidigits").glob("*.raw")):
        digits = raw.stem.split(".")[-1]
        words = " ".join(DIGIT_CODES[c] for c in digits)
        clips.append((f"ps_tidigits_{raw.stem}", raw, words, "tidigits file name (z=zero)"))
    for line in (d / "cards" / "cards.transcription").read_text().splitlines():
        if line.strip():
            uid, words = _strip_sphinx(line)
            clips.append(
                (f"ps_cards_{uid}", d / "cards" / f"{uid}.wav", words, "test/data/cards/cards.transcription")
            )
    for line in (d / "librivox" / "transcription").read_text().splitlines():
        if line.strip():
            uid, words = _strip_sphinx(line)
            clips.append(
                (
                    f"ps_librivox_{uid.rsplit('-', 1)[-1]}",
                    d / "librivox" / f"{uid}.wav",
                    words,
                    "test/data/librivox/transcription",
                )
            )
    forever = "feels like these days go on forever"
    clips.append(
        ("ps_forever_2", d / "forever" / "input_2_16k.wav", forever, "cython/test/alignment_test.py")
    )
    clips.append(
        (
            "ps_forever_4",
            d / "forever" / "input_4_16k.wav",
            forever,
            "inferred: same prompt as input_2 (no transcript in the sdist)",
        )
    )
    return clips


def prepare_real(out_dir: Path) -> None:
    """Convert the real clips to wav and write their manifest."""
    src = pocketsphinx_sdist(CACHE)
    rows = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for uid, path, text, origin in real_clips(src):
        samples = _read_audio(path)
        wav = out_dir / f"{uid}.wav"
        sf.write(str(wav), samples, SAMPLE_RATE, subtype="PCM_16")
        rows.append(
            {
                "audio_filepath": wav.name,
                "duration": round(len(samples) / SAMPLE_RATE, 4),
                "text": text,
                "source": f"pocketsphinx-5.1.1/{path.relative_to(src)}",
                "transcript_source": origin,
            }
        )
        print(f"{uid:28s} {rows[-1]['duration']:6.2f}s  {text}")
    write_manifest(out_dir / "manifest.jsonl", rows)
    print(f"real: {len(rows)} clips, {sum(r['duration'] for r in rows):.1f} s -> {out_dir}")


def prepare_synthetic(out_dir: Path, n: int, seed: int) -> None:
    """Synthesise n held-out ("test" split) sentences with varied flite/espeak-ng voices."""
    require_tools(["flite", "espeak-ng", "sox"])
    rng = random.Random(seed + 1)
    items = heldout_sentences("test", seed, n, real_transcripts())
    rows = []
    for old in out_dir.glob("*.wav"):
        old.unlink()
    for i, (source, text) in enumerate(items):
        # about half flite, half espeak so both kinds of voice are measured
        voice = random_voice(rng, p_flite=0.5)
        wav = out_dir / f"synth_{i:03d}.wav"
        dur = synthesize(text, voice, wav)
        rows.append(
            {
                "audio_filepath": wav.name,
                "duration": round(dur, 4),
                "text": text,
                "source": source,
                "voice": voice.tag(),
                "voice_params": voice_dict(voice),
            }
        )
        print(f"{wav.name} {dur:5.2f}s {voice.tag():34s} {text}")
    write_manifest(out_dir / "manifest.jsonl", rows)
    print(f"synthetic: {len(rows)} clips, {sum(r['duration'] for r in rows):.1f} s -> {out_dir}")


def main() -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DATA / "demo")
    ap.add_argument("--only", choices=["real", "synthetic"])
    ap.add_argument("--n-synthetic", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.only in (None, "real"):
        prepare_real(args.out / "real")
    if args.only in (None, "synthetic"):
        prepare_synthetic(args.out / "synthetic", args.n_synthetic, args.seed)


if __name__ == "__main__":
    main()
