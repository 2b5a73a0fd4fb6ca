"""data/demo's recordings and LMs, tracked packed in data/demo/packed/ (FLAC for the wavs, gzip for the
ARPA files, at the same relative paths); the folders the tools read hold the unpacked files.

    .venv/bin/python scripts/pack_data.py unpack   # make demo-data (make test and make demo run it)
    .venv/bin/python scripts/pack_data.py pack     # after scripts/prepare_demo_data.py or
                                                   # scripts/make_demo_graph_inputs.py rewrote a file

`unpack` writes every missing or changed wav and ARPA from its packed copy (FLAC to 16-bit PCM wav
with soundfile, as scripts/prepare_demo_data.py writes them; gunzip) and checks each against
data/demo/packed/SHA256SUMS, the SHA-256 of the files the scripts wrote: both packings are lossless, so the
unpacked files are those bytes or the command stops with one line naming the file. `pack` writes the
packed copies (gzip without a name or time, so the same bytes every time) and SHA256SUMS.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import sys
from pathlib import Path

import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
PACKED = DEMO / "packed"
SUMS = PACKED / "SHA256SUMS"
WAVS = ("real", "synthetic")  # folders of data/demo whose wavs travel as FLAC
ARPAS = ("graph/lm.arpa", "graph/tokens.arpa")  # travel as .arpa.gz


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def packed_of(rel: str) -> Path:
    path = PACKED / rel
    return path.with_suffix(".flac") if path.suffix == ".wav" else path.with_name(path.name + ".gz")


def unpacked_bytes(packed: Path) -> bytes:
    """The file `packed` stands for, as bytes."""
    if packed.suffix == ".gz":
        return gzip.decompress(packed.read_bytes())
    samples, rate = sf.read(packed, dtype="int16")
    buf = io.BytesIO()
    sf.write(buf, samples, rate, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def pack() -> None:
    files = sorted(p.relative_to(DEMO).as_posix() for folder in WAVS for p in (DEMO / folder).glob("*.wav"))
    files += list(ARPAS)
    for rel in files:
        data = (DEMO / rel).read_bytes()
        packed = packed_of(rel)
        packed.parent.mkdir(parents=True, exist_ok=True)
        if packed.suffix == ".gz":
            packed.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        else:
            samples, rate = sf.read(DEMO / rel, dtype="int16")
            sf.write(packed, samples, rate, subtype="PCM_16", format="FLAC")
        if unpacked_bytes(packed) != data:
            sys.exit(f"pack_data: {DEMO / rel} does not come back byte for byte from {packed.name}")
    SUMS.write_text("".join(f"{sha256((DEMO / rel).read_bytes())}  {rel}\n" for rel in files))
    print(f"pack_data: {len(files)} files packed, {SUMS}")


def unpack() -> None:
    written = 0
    for line in SUMS.read_text().splitlines():
        digest, _, rel = line.partition("  ")
        target = DEMO / rel
        if target.is_file() and sha256(target.read_bytes()) == digest:
            continue
        packed = packed_of(rel)
        if not packed.is_file():
            sys.exit(f"pack_data: {packed} is missing (it is tracked: git checkout it)")
        data = unpacked_bytes(packed)
        if sha256(data) != digest:
            sys.exit(f"pack_data: {packed} does not unpack to the file of {SUMS.name} ({rel})")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written += 1
    print(f"pack_data: data/demo up to date ({written} files unpacked)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["pack", "unpack"])
    args = ap.parse_args()
    pack() if args.action == "pack" else unpack()


if __name__ == "__main__":
    main()
