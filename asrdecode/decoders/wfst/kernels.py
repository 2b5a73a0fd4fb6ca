"""Fused kernels of the WFST token passing, each with its torch reference.

`emitting_arcs_*` is step 2 of `core` (paper 000 Alg. 3 + paper 001 fig. 5 without boosts): for
every slot j of a fixed-size arc array, find its source token by binary search in the inclusive
prefix sum of the tokens' arc counts, take the arc, add token cost + graph weight + acoustic cost
``ac[utt, column(arc)]``, and fold the result into the per-utterance best cost with an atomic min
(the per-frame ``best`` that beam pruning needs). The torch version is about fifteen kernels with
their intermediate arrays; the Triton version is one kernel that reads each input once. Both
return the same tensors bit for bit (same float32 additions in the same order).

The Triton kernel is used with ``decoder.kernel: triton`` (``auto`` = triton on CUDA) and tested on
the CPU with ``TRITON_INTERPRET=1`` against the torch version. Utterances with word boosts run the
torch version (the boost lookup is not fused).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import torch
import triton
import triton.language as tl  # a module global: the interpreter patches the kernel's `tl` here

if TYPE_CHECKING:
    from asrdecode.decoders.wfst.core import BoostTable, TokenPassing

INF = float("inf")
KERNELS = ("auto", "torch", "triton", "fused")


def emitting_arcs(
    search: TokenPassing,
    n_arcs: torch.Tensor,
    first_arc: torch.Tensor,
    utt: torch.Tensor,
    cost: torch.Tensor,
    ac_flat: torch.Tensor,
    V: int,
    B: int,
    cap: int,
    boost: BoostTable | None = None,
    kernel: str = "torch",
) -> tuple[torch.Tensor, ...]:
    """The emitting arcs of a frame's tokens in `cap` arc slots: (src, arc, valid, utt of the arc
    (B if invalid), cost (inf if invalid), best cost per utterance [B+1], total arcs).
    ``kernel``: ``torch`` (the reference, tensor operations) or ``triton`` (one fused kernel, same
    outputs; without boosts, which take the reference)."""
    if kernel == "triton" and boost is None:
        return _emitting_arcs_triton(search, (n_arcs, first_arc, utt, cost, ac_flat), V, B, cap)
    g = search.g
    src, arc, valid, total = search._expand(n_arcs, first_arc, cap)
    u = utt.index_select(0, src).clamp(max=B - 1)
    ac = ac_flat.index_select(0, (u * V + g.column.index_select(0, arc)).clamp_(min=0))
    c = cost.index_select(0, src) + g.weight.index_select(0, arc) + ac
    if boost is not None:
        c = c + boost.lookup(u, g.olabel.index_select(0, arc))
    c = torch.where(valid, c, INF)
    u = torch.where(valid, u, B)
    best = torch.full((B + 1,), INF, dtype=c.dtype, device=c.device).scatter_reduce_(0, u, c, reduce="amin")
    return src, arc, valid, u, c, best, total


_KERNEL: Any = None


def triton_available(device: torch.device) -> bool:
    """Triton kernels can run here: a CUDA device, or the interpreter (TRITON_INTERPRET=1)."""
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def _emitting_arcs_kernel(
    end_ptr, n_ptr, first_ptr, utt_ptr, cost_ptr, weight_ptr, column_ptr, ac_ptr,
    src_out, arc_out, u_out, c_out, best_ptr,
    N, V, B, cap,
    SEARCH_STEPS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One program per BLOCK arc slots (jitted by `_kernel`)."""
    j = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    inside = j < cap
    total = tl.load(end_ptr + N - 1)
    valid = inside & (j < total)
    # source token: first i with end[i] > j (binary search over the inclusive prefix sum)
    lo = tl.zeros([BLOCK], dtype=tl.int64)
    hi = tl.zeros([BLOCK], dtype=tl.int64) + N
    for _ in tl.static_range(SEARCH_STEPS):
        active = lo < hi
        mid = (lo + hi) // 2
        e = tl.load(end_ptr + tl.minimum(mid, N - 1), mask=inside & active, other=0)
        right = e <= j
        lo = tl.where(active & right, mid + 1, lo)
        hi = tl.where(active & ~right, mid, hi)
    src = tl.minimum(lo, N - 1)
    e = tl.load(end_ptr + src, mask=inside, other=0)
    n = tl.load(n_ptr + src, mask=inside, other=0)
    arc = tl.load(first_ptr + src, mask=inside, other=0) + j - (e - n)
    arc = tl.where(valid, arc, 0)
    u = tl.minimum(tl.load(utt_ptr + src, mask=inside, other=0), B - 1)
    col = tl.load(column_ptr + arc, mask=inside, other=0)
    ac = tl.load(ac_ptr + tl.maximum(u * V + col, 0), mask=valid, other=0.0)
    c = tl.load(cost_ptr + src, mask=inside, other=0.0) + tl.load(weight_ptr + arc, mask=inside, other=0.0)
    c = c + ac
    c = tl.where(valid, c, float("inf"))
    u = tl.where(valid, u, B)
    tl.store(src_out + j, src, mask=inside)
    tl.store(arc_out + j, arc, mask=inside)
    tl.store(u_out + j, u, mask=inside)
    tl.store(c_out + j, c, mask=inside)
    tl.atomic_min(best_ptr + u, c, mask=valid)


def _kernel() -> Any:
    """The jitted kernel, built on first use (so TRITON_INTERPRET set before that use applies).
    Its scalars change from frame to frame, so it is not specialised on them (as the fused
    kernels, `fused.scalar_arguments`): one compilation per search depth."""
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = triton.jit(_emitting_arcs_kernel, do_not_specialize=["N", "V", "B", "cap"])
    return _KERNEL


def _emitting_arcs_triton(
    search: TokenPassing, tokens: tuple[torch.Tensor, ...], V: int, B: int, cap: int
) -> tuple[torch.Tensor, ...]:
    """`emitting_arcs` as one Triton kernel; `tokens` = (n_arcs, first_arc, utt, cost, ac_flat)."""
    n_arcs, first_arc, utt, cost, ac_flat = tokens
    g = search.g
    dev = cost.device
    N = len(n_arcs)
    end = torch.cumsum(n_arcs, 0)
    src = torch.empty(cap, dtype=torch.int64, device=dev)
    arc = torch.empty_like(src)
    u = torch.empty_like(src)
    c = torch.empty(cap, dtype=torch.float32, device=dev)
    best = torch.full((B + 1,), INF, dtype=torch.float32, device=dev)
    block = 128
    steps = 4 * math.ceil((math.log2(N + 1) + 1) / 4)  # a few depths: a few compilations
    _kernel()[(triton.cdiv(cap, block),)](
        end, n_arcs, first_arc, utt, cost.contiguous(), g.weight, g.column, ac_flat.contiguous(),
        src, arc, u, c, best, N, V, B, cap, SEARCH_STEPS=steps, BLOCK=block,
    )  # fmt: skip
    valid = u < B
    return src, arc, valid, u, c, best, end[-1]
