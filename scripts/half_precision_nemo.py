"""Rewrite .nemo files with their floating-point weights in half precision, gzip-compressed (in place).

    .venv/bin/python scripts/half_precision_nemo.py data/models/demo_*_bpe.nemo

Only ``model_weights.ckpt`` changes (float tensors to float16; integer buffers as they are); every
other member is copied byte for byte, and the tar is written through gzip (no name or time in its
header: the same bytes every run), which asrdecode and NeMo's ``restore_from`` both read. Loaders
cast the weights back to float32, so a model's outputs move by float16 rounding only: the demo
models' transcripts and WERs this changes are in data/README.md. Running it twice changes nothing.
"""

from __future__ import annotations

import argparse
import gzip
import io
import tarfile
from pathlib import Path

import torch

WEIGHTS = "./model_weights.ckpt"


def halve(path: Path) -> tuple[int, int]:
    """Rewrite ``path``; returns its sizes before and after."""
    before = path.stat().st_size
    tmp = path.with_suffix(".nemo.tmp")
    with (
        tarfile.open(path) as src,
        open(tmp, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=9, mtime=0) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as out,
    ):
        for info in src.getmembers():
            fh = src.extractfile(info) if info.isreg() else None
            data = fh.read() if fh is not None else b""
            if info.name == WEIGHTS:
                state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
                state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
                buf = io.BytesIO()
                torch.save(state, buf)
                data = buf.getvalue()
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if info.isreg() else None)
    tmp.replace(path)
    return before, path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path, help=".nemo files, rewritten in place")
    for path in ap.parse_args().models:
        before, after = halve(path)
        print(f"{path}: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
