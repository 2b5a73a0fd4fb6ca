#!/usr/bin/env python3
"""Convert hama's phoneme CTC model (PyPI `hama` 1.7.0, `hama/assets/asr_waveform.hama`) into
asrdecode's model file: safetensors with the weights under `asrdecode.models.hama`'s names and the
units, licence and provenance in its metadata.

    .venv/bin/python scripts/convert_hama_model.py asrdecode/assets/hama-ipa-ctc.safetensors
    # or from a downloaded wheel: pip download --no-deps hama==1.7.0 -d data/cache/hama
    .venv/bin/python scripts/convert_hama_model.py asrdecode/assets/hama-ipa-ctc.safetensors \
        --source data/cache/hama/hama-1.7.0-py3-none-any.whl

The source is the installed `hama` package (hama==1.7.0 is a dev dependency; its engine is the
tests' reference) or its wheel.

hama's `.hama` file is a flat tensor table, read here without hama's code: the magic `HAMAPK`, two
version bytes, a u32 count, then per tensor a u16 name length, the name, a dtype byte (0 float32,
1 float16), a rank byte, u32 dims, a u64 offset and a u64 byte count; the data follows the table,
16-byte aligned. Every tensor is checked against the shape `HamaConformerNet` expects.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from asrdecode.models.hama import HAMA_WORD_BOUNDARY, HamaCTCModel

WEIGHTS_MEMBER = "hama/assets/asr_waveform.hama"
VOCAB_MEMBER = "hama/assets/g2p_vocab.json"
LICENSE_NOTE = (
    "hama (https://github.com/hamanlp/hama, Seongmin Park and hama contributors): the PyPI wheel's "
    "metadata says Apache-2.0, the repository's LICENSE file is MIT (Copyright (c) 2025 hama "
    "contributors); both permit redistribution of the weights with this notice."
)
# hama's names of the tensors that its ONNX export left anonymous, in the network's order:
# the stem conv, then per block the FF1 / attention / FF2 matrices and the folded depthwise conv.
STEM = ("onnx::Conv_801", "onnx::Conv_802")
BLOCK_MATMULS = ((829, 830, 831, 835, 836, 837), (838, 839, 840, 844, 845, 846),
                 (847, 848, 849, 853, 854, 855), (856, 857, 858, 862, 863, 864))  # fmt: skip
BLOCK_DEPTHWISE = ((804, 805), (807, 808), (810, 811), (813, 814))


def read_hama_table(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a `.hama` file (see the module docstring)."""
    if data[:6] != b"HAMAPK":
        raise SystemExit("not a .hama tensor table (no HAMAPK magic)")
    (count,) = struct.unpack_from("<I", data, 8)
    pos = 12
    entries = []
    for _ in range(count):
        (size,) = struct.unpack_from("<H", data, pos)
        name = data[pos + 2 : pos + 2 + size].decode()
        pos += 2 + size
        dtype, rank = data[pos], data[pos + 1]
        shape = struct.unpack_from(f"<{rank}I", data, pos + 2)
        offset, nbytes = struct.unpack_from("<QQ", data, pos + 2 + 4 * rank)
        pos += 2 + 4 * rank + 16
        entries.append((name, np.float32 if dtype == 0 else np.float16, shape, offset, nbytes))
    base = (pos + 15) // 16 * 16
    out = {}
    for name, dtype, shape, offset, nbytes in entries:
        array = np.frombuffer(data[base + offset : base + offset + nbytes], dtype=dtype)
        out[name] = array.reshape(shape)
    return out


def read_source(source: Path | None) -> tuple[bytes, dict, str, str]:
    """(weights bytes, vocabulary, hama version, what was read) from a wheel or the installed package."""
    if source is not None and source.suffix == ".whl":
        with zipfile.ZipFile(source) as zf:
            version = next(
                n.split("/")[0].removesuffix(".dist-info").split("-")[1]
                for n in zf.namelist()
                if n.endswith(".dist-info/METADATA")
            )
            what = f"{source.name} (sha256 {hashlib.sha256(source.read_bytes()).hexdigest()})"
            return zf.read(WEIGHTS_MEMBER), json.loads(zf.read(VOCAB_MEMBER)), version, what
    from importlib.metadata import version
    from importlib.util import find_spec

    spec = find_spec("hama")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("hama is not installed: pip install hama==1.7.0, or pass --source WHEEL")
    folder = Path(list(spec.submodule_search_locations)[0]).parent
    raw = (folder / WEIGHTS_MEMBER).read_bytes()
    vocab = json.loads((folder / VOCAB_MEMBER).read_text(encoding="utf-8"))
    return raw, vocab, version("hama"), "the installed package"


def convert(source: Path | None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    raw, vocab, version, what = read_source(source)
    table = read_hama_table(raw)
    units = [*vocab["decoder"], HAMA_WORD_BOUNDARY]
    out: dict[str, np.ndarray] = {
        "front_end.stft_real": table["stft_real_kernel"],
        "front_end.stft_imag": table["stft_imag_kernel"],
        "front_end.mel": table["mel_fb"],
        "net.stem.weight": table[STEM[0]],
        "net.stem.bias": table[STEM[1]],
        "net.proj.weight": table["acoustic_model.model.proj.weight"],
        "net.proj.bias": table["acoustic_model.model.proj.bias"],
    }
    for i, (f1, f2, qkv, o, g1, g2) in enumerate(BLOCK_MATMULS):
        src, dst = f"acoustic_model.model.blocks.{i}", f"net.blocks.{i}"

        def matmul(number: int) -> np.ndarray:
            return table[f"onnx::MatMul_{number}"].T  # x @ W -> Linear's weight W.T

        for ffn, (w1, w2) in (("ffn1", (f1, f2)), ("ffn2", (g1, g2))):
            out[f"{dst}.{ffn}.norm.weight"] = table[f"{src}.{ffn}.norm.weight"]
            out[f"{dst}.{ffn}.norm.bias"] = table[f"{src}.{ffn}.norm.bias"]
            out[f"{dst}.{ffn}.fc1.weight"] = matmul(w1)
            out[f"{dst}.{ffn}.fc1.bias"] = table[f"{src}.{ffn}.fc1.bias"]
            out[f"{dst}.{ffn}.fc2.weight"] = matmul(w2)
            out[f"{dst}.{ffn}.fc2.bias"] = table[f"{src}.{ffn}.fc2.bias"]
        out[f"{dst}.attn.norm.weight"] = table[f"{src}.attn_norm.weight"]
        out[f"{dst}.attn.norm.bias"] = table[f"{src}.attn_norm.bias"]
        out[f"{dst}.attn.in_proj.weight"] = matmul(qkv)
        out[f"{dst}.attn.in_proj.bias"] = table[f"{src}.attn.in_proj_bias"]
        out[f"{dst}.attn.out_proj.weight"] = matmul(o)
        out[f"{dst}.attn.out_proj.bias"] = table[f"{src}.attn.out_proj.bias"]
        for part in ("norm", "pointwise1", "pointwise2"):
            out[f"{dst}.conv.{part}.weight"] = table[f"{src}.conv.{part}.weight"]
            out[f"{dst}.conv.{part}.bias"] = table[f"{src}.conv.{part}.bias"]
        out[f"{dst}.conv.depthwise.weight"] = table[f"onnx::Conv_{BLOCK_DEPTHWISE[i][0]}"]
        out[f"{dst}.conv.depthwise.bias"] = table[f"onnx::Conv_{BLOCK_DEPTHWISE[i][1]}"]
        out[f"{dst}.norm.weight"] = table[f"{src}.norm.weight"]
        out[f"{dst}.norm.bias"] = table[f"{src}.norm.bias"]

    tensors = {k: torch.from_numpy(np.ascontiguousarray(v).copy()) for k, v in out.items()}
    expected = {k: tuple(v.shape) for k, v in HamaCTCModel(units).state_dict().items()}
    wrong = {
        k: (tuple(v.shape), expected.get(k)) for k, v in tensors.items() if tuple(v.shape) != expected.get(k)
    }
    missing = sorted(set(expected) - set(tensors))
    if wrong or missing:
        raise SystemExit(f"converted weights do not fit HamaConformerNet: wrong {wrong}, missing {missing}")
    provenance = {
        "upstream": "hama (hamanlp), https://github.com/hamanlp/hama",
        "source": f"PyPI hama=={version} ({what}): {WEIGHTS_MEMBER} "
        f"(sha256 {hashlib.sha256(raw).hexdigest()})",
        "license": LICENSE_NOTE,
        "weights": "hama's float16 values (front end float32), converted by scripts/convert_hama_model.py",
    }
    meta = {
        "format": "asrdecode-hama-ctc",
        "units": json.dumps(units, ensure_ascii=False),
        "provenance": json.dumps(provenance, ensure_ascii=False),
    }
    return tensors, meta


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--source", type=Path, default=None, help="a hama wheel; default: the installed package")
    args = ap.parse_args()
    tensors, meta = convert(args.source)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out), metadata=meta)
    print(f"{args.out}: {len(tensors)} tensors, {args.out.stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
