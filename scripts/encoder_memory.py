#!/usr/bin/env python3
"""Peak memory of a whole-input FastConformer encoder with sliding-window attention, as NeMo's
parakeet models run hour-long audio: random weights at a model's size (no checkpoint needed),
random log-mel features of the given length, one process per run.

    .venv/bin/python scripts/encoder_memory.py --minutes 60            # parakeet-like: d 1024, 8x
    .venv/bin/python scripts/encoder_memory.py --minutes 60 --d-model 512 --layers 2

Prints the peak RSS above the process's RSS before encoding (the weights and the features are in
the base; a layer's temporaries are freed before the next, so 4 layers peak as 24 would) and the
seconds it took, with the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import torch

from asrdecode.models.conformer import ConformerConfig, ConformerEncoder


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = ConformerConfig(
        feat_in=80, n_layers=args.layers, d_model=args.d_model, subsampling="dw_striding",
        subsampling_factor=8, subsampling_conv_channels=256, n_heads=8, conv_kernel_size=9,
        att_context_size=[128, 128], self_attention_model="rel_pos_local_attn",
    )  # fmt: skip
    torch.manual_seed(0)
    encoder = ConformerEncoder(cfg).eval()
    frames = int(args.minutes * 60 * 100)
    features = torch.randn(1, 80, frames)
    load = os.getloadavg()
    with torch.inference_mode():
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        start = time.perf_counter()
        out, _ = encoder(features, torch.tensor([frames]))
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.minutes:g} min, d_model {args.d_model}, {args.layers} layers, 8x subsampling, window "
        f"128+128: encodings {tuple(out.shape)}, peak {peak:.0f} MB, {peak - base:.0f} MB above the base, "
        f"{seconds:.1f} s"
    )
    print("load average before " + "/".join(f"{x:.2f}" for x in load) + ", after "
          + "/".join(f"{x:.2f}" for x in os.getloadavg()))  # fmt: skip


if __name__ == "__main__":
    main()
