"""CMU Sphinx phonetically-tied-mixture (PTM) acoustic models, e.g. pocketsphinx's en-us model.

Model folder: ``mdef`` (binary model definition, read by :func:`asrdecode.models.sphinx_io.read_mdef`),
``means`` / ``variances`` (s3 Gaussian files, [codebooks, streams, densities, dims]), ``sendump``
(8-bit quantised -log mixture weights, [streams, densities, senones]), ``transition_matrices``,
``feat.params`` (front-end options) and optionally ``noisedict``; read (and written back byte for
byte) by :mod:`asrdecode.models.sphinx_io`.

Scoring (:class:`SphinxAcousticModel`), per frame and on any device, the valid frames of a batch
packed and scored in chunks:

- Gaussian log-densities of every codebook/stream/density as one batched matmul: with
  ``z = [x*x; x]`` per stream, ``log N = [-1/(2 var), mean/var] @ z + const`` gives
  ``[streams, codebooks, densities, frames]`` (frames innermost, so that every reduction over
  the densities is a vectorised pass over contiguous slices);
- senone log-likelihood = sum over streams of log-sum-exp over the senone's codebook densities of
  ``log w + log N``, computed in the probability domain relative to the codebook/stream's best
  density. ``topn=0`` is the exact full mixture: all densities exponentiated and mixed with the
  weights by one batched matmul per codebook over its senones (senones sorted by codebook).
  ``topn=N`` (pocketsphinx's top-N approximation, its default 4) keeps only the N best densities
  of each codebook/stream, found exactly (ties to the lower index, as a stable sort): on CPU by
  one pass of a compiled insertion into N sorted slots (:func:`top_densities_kernel`), on other
  devices by N vectorised max passes over float64 keys that make every value distinct
  (:func:`tie_broken_keys`); each senone's mixture is then a sum of N weights times densities,
  done for blocks of 32 senones of one codebook as one ``embedding_bag`` over a table of weight
  rows (a gather of N rows per block, no dense matmul).

Scores are natural-log likelihoods (not normalised per frame, no integer quantisation), so they
differ from pocketsphinx's internal integer scores by a per-frame constant plus quantisation.
Mixture weights: a ``sendump`` byte ``q`` stands for ``w = 1.0001 ** (-q * 1024)`` (pocketsphinx's
8-bit log table: base 1.0001 shifted by 10 bits).
"""

from __future__ import annotations

import math
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np
import torch
from torch import nn

from asrdecode.errors import AsrDecodeError, ModelError
from asrdecode.features.sphinx_mfcc import SphinxFeConfig, SphinxMFCC
from asrdecode.models.base import DeferredScores, ModelOutput, RecycledOutput
from asrdecode.models.sphinx_io import (
    read_feat_params,
    read_mdef,
    read_noisedict,
    read_s3_gaussians,
    read_sendump,
    read_tmat,
    read_transition_matrix_file,
)
from asrdecode.numba_status import announce_first_compile, configure_cache

__all__ = [
    "SphinxModelData",
    "SphinxAcousticModel",
    "read_sphinx_model",
    "read_s3_gaussians",
    "read_sendump",
    "read_feat_params",
    "read_noisedict",
    "parse_svspec",
    "load_sphinx",
    "MIXW_LOG_UNIT",
    "tie_broken_keys",
    "key_index",
    "top_densities_kernel",
    "mix_top_densities_kernel",
    "senone_runs",
]

configure_cache()  # before any cached kernel is defined (numba_status)

MIXW_LOG_UNIT = 1024 * math.log(1.0001)  # nats per sendump step
VARFLOOR = 1e-4
UNDERFLOW_FLOOR = 60.0  # nats below a codebook's best density that still count (see _full_mixture)
# pocketsphinx clamps every top-N density at MAX_NEG_ASCR = 96 steps of its 8-bit log table below the
# stream's best density of the frame (ptm_mgau.c, ptm_mgau_codebook_norm): 96 * 1024 * ln(1.0001) nats.
POCKETSPHINX_DENSITY_FLOOR = 96 * 1024 * math.log(1.0001)
SENONE_BLOCK = 32  # senone columns per row of the top-N lookup table (see _init_sparse_mixture)
KEY_STEP = 2.0**-40  # relative step between tie-broken keys of equal values (see tie_broken_keys)
KEY_FLOOR = 2.0**-140  # keeps the keys of exact zeros apart
MAX_ITERATIVE_TOPN = 8  # top-N by N max passes up to here, by topk beyond
CHUNK_FRAMES = 128  # frames mixed at once (default chunk_frames)
TOPN_SELECT_FRAMES = 32  # frames whose top-N are selected at once (float64 keys: 4 MB, in the L3 cache)
REQUIRED_FILES = ("mdef", "means", "variances", "sendump", "transition_matrices", "feat.params")


def parse_svspec(spec: str | None, dim: int, n_streams: int, veclen: int) -> list[list[int]]:
    """``0-12/13-25/26-38`` -> feature indices per stream (default: consecutive blocks)."""
    if not spec:
        if n_streams * veclen != dim:
            raise ModelError(f"{n_streams} streams x {veclen} dims do not cover {dim} feature dims")
        return [list(range(i * veclen, (i + 1) * veclen)) for i in range(n_streams)]
    streams: list[list[int]] = []
    try:
        for part in spec.split("/"):
            idx: list[int] = []
            for rng in part.split(","):
                a, _, b = rng.partition("-")
                idx.extend(range(int(a), int(b or a) + 1))
            streams.append(idx)
    except ValueError:
        raise ModelError(f"feat.params: bad -svspec {spec!r}") from None
    if len(streams) != n_streams or any(len(s) != veclen for s in streams):
        raise ModelError(f"-svspec {spec!r} does not match {n_streams} streams of {veclen} dims")
    if any(i < 0 or i >= dim for s in streams for i in s):
        raise ModelError(f"-svspec {spec!r} indexes past the {dim} feature dims")
    return streams


@dataclass
class SphinxModelData:
    """A PTM model's parameters as numpy arrays (see module docstring for layouts)."""

    folder: Path
    ciphones: list[str]
    n_senones: int
    sen2cb: np.ndarray  # [n_sen] codebook (= base phone) of each senone
    means: np.ndarray  # [n_cb, n_stream, n_density, veclen] float32
    variances: np.ndarray  # same, floored at VARFLOOR
    mixw_q: np.ndarray  # [n_stream, n_density, n_sen] uint8 (-log w in MIXW_LOG_UNIT steps)
    transitions: np.ndarray  # [n_tmat, n_state, n_state + 1] row-normalised (pocketsphinx tmatfloor)
    phone_tmat: np.ndarray  # [n_phone] transition matrix of each (tri)phone
    phone_senones: np.ndarray  # [n_sseq, n_emit] senone sequences (mdef sseq)
    feat_params: dict[str, str]
    noisedict: dict[str, list[str]]
    streams: list[list[int]]  # feature indices of each stream
    zero_variances: int = 0
    mdef: Any = field(default=None, repr=False)

    @property
    def n_codebooks(self) -> int:
        return int(self.means.shape[0])

    @property
    def n_streams(self) -> int:
        return int(self.means.shape[1])

    @property
    def n_density(self) -> int:
        return int(self.means.shape[2])

    @property
    def log_mixw(self) -> np.ndarray:
        """[n_stream, n_density, n_sen] natural-log mixture weights."""
        return -self.mixw_q.astype(np.float64) * MIXW_LOG_UNIT

    def senone_names(self) -> list[str]:
        """``<base phone>/<senone id>`` for every senone column."""
        return [f"{self.ciphones[int(cb)]}/{s}" for s, cb in enumerate(self.sen2cb)]


def _read_mdef(path: Path):
    if not path.is_file():
        raise ModelError(f"{path}: model definition file not found")
    try:
        return read_mdef(path)
    except AsrDecodeError as err:
        raise ModelError(str(err)) from None
    except (ValueError, struct.error, IndexError, KeyError, RecursionError, UnicodeDecodeError) as err:
        raise ModelError(f"{path}: malformed mdef ({type(err).__name__}: {err})") from None


def _read_tmat(path: Path):
    """Transition matrices as pocketsphinx uses them (rows normalised, floored): the file's layout
    is checked by :func:`read_transition_matrix_file`, the normalisation is the graph builder's."""
    if not path.is_file():
        raise ModelError(f"{path}: transition matrices file not found")
    read_transition_matrix_file(path)
    try:
        return read_tmat(path)
    except AsrDecodeError as err:
        raise ModelError(str(err)) from None
    except (ValueError, struct.error, IndexError) as err:
        raise ModelError(f"{path}: malformed transition_matrices ({type(err).__name__}: {err})") from None


def read_sphinx_model(folder: str | Path, varfloor: float = VARFLOOR) -> SphinxModelData:
    """Read and cross-check a pocketsphinx PTM model folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelError(f"{folder}: sphinx model folder not found")
    for name in REQUIRED_FILES:
        if not (folder / name).is_file():
            raise ModelError(f"{folder / name}: required sphinx model file missing")
    mdef = _read_mdef(folder / "mdef")
    means = read_s3_gaussians(folder / "means", "means")
    variances = read_s3_gaussians(folder / "variances", "variances")
    if means.shape != variances.shape:
        raise ModelError(f"{folder / 'variances'}: shape {variances.shape} != means {means.shape}")
    if (variances < 0).any():
        raise ModelError(f"{folder / 'variances'}: negative variances")
    zero_var = int((variances < varfloor).sum())
    variances = np.maximum(variances, np.float32(varfloor))
    mixw = read_sendump(folder / "sendump")
    tmat = _read_tmat(folder / "transition_matrices")
    params = read_feat_params(folder / "feat.params")
    noisedict = read_noisedict(folder / "noisedict") if (folder / "noisedict").is_file() else {}

    n_ci = len(mdef.ciphones)
    n_cb, n_stream, n_density, veclen = means.shape
    if params.get("model", "ptm") != "ptm" or n_cb != n_ci:
        raise ModelError(
            f"{folder / 'means'}: {n_cb} codebooks for {n_ci} base phones; only phonetically-tied "
            "(ptm) models are supported"
        )
    if mixw.shape != (n_stream, n_density, mdef.n_sen):
        raise ModelError(
            f"{folder / 'sendump'}: weights {list(mixw.shape)} do not match "
            f"{n_stream} streams x {n_density} densities x {mdef.n_sen} senones"
        )
    if mdef.tmat.size and (mdef.tmat.min() < 0 or mdef.tmat.max() >= tmat.shape[0]):
        raise ModelError(
            f"{folder / 'transition_matrices'}: {tmat.shape[0]} matrices, but {folder / 'mdef'} uses "
            f"ids {mdef.tmat.min()}..{mdef.tmat.max()}"
        )
    if tmat.shape[1] != mdef.n_emit_state:
        raise ModelError(
            f"{folder / 'transition_matrices'}: {tmat.shape[1]} states, mdef has {mdef.n_emit_state}"
        )
    if mdef.sseq.size and (mdef.sseq.min() < 0 or mdef.sseq.max() >= mdef.n_sen):
        raise ModelError(f"{folder / 'mdef'}: senone ids exceed n_sen={mdef.n_sen}")
    # Senone -> base phone (= codebook), as pocketsphinx's sen2cimap: from every phone's senones.
    sen2cb = np.full(mdef.n_sen, -1, dtype=np.int64)
    for ci in range(n_ci):
        sen2cb[mdef.sseq[mdef.ssid[ci]]] = ci
    for (_wpos, ci, _lc, _rc), pid in mdef.tree.items():
        if not 0 <= pid < mdef.n_phone:
            raise ModelError(f"{folder / 'mdef'}: triphone id {pid} out of range")
        sen2cb[mdef.sseq[mdef.ssid[pid]]] = ci
    if (sen2cb < 0).any():
        raise ModelError(f"{folder / 'mdef'}: {(sen2cb < 0).sum()} senones belong to no phone")
    dim = n_stream * veclen
    try:
        streams = parse_svspec(params.get("svspec"), dim, n_stream, veclen)
    except ModelError as err:
        raise ModelError(f"{folder / 'feat.params'}: {err} (streams of {folder / 'means'})") from None
    return SphinxModelData(
        folder=folder,
        ciphones=list(mdef.ciphones),
        n_senones=int(mdef.n_sen),
        sen2cb=sen2cb,
        means=means,
        variances=variances,
        mixw_q=mixw,
        transitions=tmat.astype(np.float32),
        phone_tmat=mdef.tmat.copy(),
        phone_senones=mdef.sseq.copy(),
        feat_params=params,
        noisedict=noisedict,
        streams=streams,
        zero_variances=zero_var,
        mdef=mdef,
    )


# runs of a chunk's frames and where they go: (first frame, end frame, destination rows)
Runs = list[tuple[int, int, torch.Tensor]]


def packed_pieces(counts: list[int], step: int, dest: torch.Tensor) -> list[Runs]:
    """Where each chunk of ``step`` packed frames goes: the valid frames of utterances with
    ``counts`` frames, packed in order and cut into chunks, land in ``dest`` [B, T, ...] as
    contiguous runs; per chunk, its runs as (first, end) frames of the chunk and the rows of
    ``dest`` they fill."""
    chunks: list[Runs] = []
    run: Runs = []
    filled = 0  # frames of the current chunk placed
    for b, n in enumerate(counts):
        done = 0
        while done < n:
            take = min(n - done, step - filled)
            run.append((filled, filled + take, dest[b, done : done + take]))
            done += take
            filled += take
            if filled == step:
                chunks.append(run)
                run, filled = [], 0
    if run:
        chunks.append(run)
    return chunks


def select_columns(flat: torch.Tensor, columns: torch.Tensor, out: Runs | None) -> torch.Tensor:
    """``flat[:, columns]`` as float32; with ``out``, those columns are written into its runs (see
    `packed_pieces`) instead and ``flat`` itself is returned."""
    if out is None:
        return flat.index_select(1, columns).float()
    for lo, hi, dst in out:
        if flat.dtype == dst.dtype:
            torch.index_select(flat[lo:hi], 1, columns, out=dst)
        else:
            dst.copy_(flat[lo:hi].index_select(1, columns))
    return flat


def tie_broken_keys(g: torch.Tensor, dim: int, out: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """float32 values ``g`` -> float64 keys ``out`` ordered by value, then by lower index along
    ``dim``: ``key = g + (|g| + 2^-140) (K - 1 - i) 2^-40``. The added term is below half a float32
    step of ``g``, so distinct values keep their order, ``key.float() == g`` and the index comes
    back exactly (:func:`key_index`): ``g`` has 24 significant bits, the term 31 bits starting 33
    binary places lower, and float64 holds 53. ``scratch``: a float64 buffer of ``g``'s shape."""
    k = g.shape[dim]
    shape = [1] * g.dim()
    shape[dim] = k
    rank = torch.arange(k - 1, -1, -1, dtype=torch.float64, device=g.device).mul_(KEY_STEP).view(shape)
    out.copy_(g)
    torch.abs(out, out=scratch).add_(KEY_FLOOR)
    return out.addcmul_(scratch, rank)


def key_index(key: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys of :func:`tie_broken_keys` -> (float32 values, int64 indices along the keyed dim)."""
    value = key.float()
    v = value.double()
    rank = (key - v).div_(v.abs().add_(KEY_FLOOR).mul_(KEY_STEP)).round_()
    return value, (k - 1) - rank.long()


@numba.njit(nogil=True, cache=True)
def top_densities_kernel(g: np.ndarray, values: np.ndarray, idx: np.ndarray) -> None:
    """Top-N selection in one pass: ``g`` [rows, k, N] (rows = stream x codebook, k densities,
    N frames innermost) -> ``values`` / ``idx`` [rows, topn, N], each frame's ``topn`` largest of
    the k values in descending order. Per density, every frame's value is compared with its
    N-th best so far and, if strictly larger, inserted into the sorted slots (the lower ones
    shift down), so among equal values the lower density index stays ahead, as a stable sort
    puts it. The first ``topn`` densities fill the slots unconditionally. With N = 4 the
    densities after those go through :func:`_top4_densities` (no branches). All arrays
    C-contiguous; ``idx`` int32 or int64 (int32: twice the frames per vector)."""
    rows, k, n = g.shape
    topn = values.shape[1]
    first = 4 if topn == 4 else k  # densities inserted by the loop below
    for r in range(rows):
        for j in range(first):
            last = min(j, topn - 1)  # the slot a new value enters before moving up
            for f in range(n):
                v = g[r, j, f]
                if j >= topn and not v > values[r, last, f]:
                    continue
                p = last
                while p > 0 and v > values[r, p - 1, f]:
                    values[r, p, f] = values[r, p - 1, f]
                    idx[r, p, f] = idx[r, p - 1, f]
                    p -= 1
                values[r, p, f] = v
                idx[r, p, f] = j
    if topn == 4:
        _top4_densities(g, values, idx)


@numba.njit(nogil=True, cache=True)
def _top4_densities(g: np.ndarray, values: np.ndarray, idx: np.ndarray) -> None:
    """Densities 4.. of :func:`top_densities_kernel` with N = 4, without branches, so that the
    loop over frames vectorises: the four slots are sorted, so a value above slot i is above
    every slot after it, and each slot's new content is a select of (itself, the value, the slot
    before it). Equal values do not enter above (strict compares), as in the branching loop.
    Flat unsigned indices: numba's negative-index branch would keep the loop scalar."""
    rows, k, n = g.shape
    un = np.uint64(n)
    o1, o2, o3 = un, un + un, un + un + un  # the slots' offsets in a row's [4, N] block
    for r in range(rows):
        gr = g[r].reshape(-1)
        v = values[r].reshape(-1)
        ix = idx[r].reshape(-1)
        for j in range(4, k):
            gj = np.uint64(j) * un
            jj = idx.dtype.type(j)
            for f in range(un):
                x = gr[gj + f]
                t0, t1, t2, t3 = v[f], v[o1 + f], v[o2 + f], v[o3 + f]
                i0, i1, i2, i3 = ix[f], ix[o1 + f], ix[o2 + f], ix[o3 + f]
                c0, c1, c2, c3 = x > t0, x > t1, x > t2, x > t3
                v[o3 + f] = (t2 if c2 else x) if c3 else t3
                ix[o3 + f] = (i2 if c2 else jj) if c3 else i3
                v[o2 + f] = (t1 if c1 else x) if c2 else t2
                ix[o2 + f] = (i1 if c1 else jj) if c2 else i2
                v[o1 + f] = (t0 if c0 else x) if c1 else t1
                ix[o1 + f] = (i0 if c0 else jj) if c1 else i1
                v[f] = x if c0 else t0
                ix[f] = jj if c0 else i0


def senone_runs(sen2cb: np.ndarray) -> np.ndarray:
    """[runs, 3] (codebook, first senone, end senone) of the maximal runs of consecutive senones
    sharing a codebook, in senone order (en-us: the context-independent senones of each phone,
    then the context-dependent ones grouped by phone: 81 runs)."""
    starts = np.flatnonzero(np.r_[True, sen2cb[1:] != sen2cb[:-1]])
    ends = np.r_[starts[1:], len(sen2cb)]
    return np.stack([sen2cb[starts], starts, ends], axis=1).astype(np.int64)


@numba.njit(nogil=True, cache=True)
def mix_top_densities_kernel(
    values, idx, weights, runs, offsets, floor, underflow, prod, best, lowest, p, acc
):  # fmt: skip
    """The senone mixtures of a chunk's top-N densities, `_sparse_mixture`'s arithmetic compiled:
    ``values`` / ``idx`` [streams, codebooks, n, N] (:func:`top_densities_kernel`'s, descending),
    ``weights`` the mixture weights (probability domain) of each senone run of ``runs``
    (:func:`senone_runs`) as one [streams, densities, run length] block from ``offsets[r]``.
    Writes ``prod`` [N, senones]: per senone the product over streams of ``sum_j w[idx_j]
    exp(top_j - top_0)``, and ``best`` [codebooks, N]: the sum over streams of ``top_0``, so that
    a senone's log-likelihood is ``log(prod) + best[its codebook]``. Densities count at most
    ``floor`` nats below the stream's best density of the frame (0: no floor), terms at most
    ``underflow`` nats below the codebook's best. Scratch: ``lowest`` [streams, N], ``p``
    [codebooks, streams, n, N], ``acc`` [longest run]. A run's weight block (187 kB for en-us'
    largest) stays in the cache while its frames are mixed; its rows are read by flat unsigned
    indices, so that the inner loops vectorise. ``prod`` must be contiguous."""
    n_f, n_cb, n, frames = values.shape
    n_k = weights.shape[0] // (n_f * prod.shape[1])
    for f in range(n_f):
        low = lowest[f]
        for t in range(frames):
            low[t] = -np.inf
        if floor > 0:
            for c in range(n_cb):
                v = values[f, c, 0]
                for t in range(frames):
                    if v[t] > low[t]:
                        low[t] = v[t]
            for t in range(frames):
                low[t] -= floor
    for c in range(n_cb):
        b = best[c]
        for t in range(frames):
            b[t] = 0.0
        for f in range(n_f):
            low = lowest[f]
            for t in range(frames):
                top0 = max(values[f, c, 0, t], low[t])
                b[t] += top0
                for j in range(n):
                    p[c, f, j, t] = math.exp(max(max(values[f, c, j, t], low[t]) - top0, -underflow))
    # flat unsigned indices, not slices: slices per run and frame cost twice the multiply-adds
    # (a run can be 3 senones long), and unsigned ones vectorise even without
    # `numba_status.unwrapped_indexing` (numba's negative-index branch is on signed ones only)
    flat = prod.reshape(-1)
    n_sen = prod.shape[1]
    for r in range(runs.shape[0]):
        c, s0, s1 = runs[r, 0], runs[r, 1], runs[r, 2]
        size = s1 - s0
        usize = np.uint64(size)
        for t in range(frames):
            o = np.uint64(t * n_sen + s0)
            for f in range(n_f):
                base = offsets[r] + f * n_k * size
                if n == 4:
                    a0 = np.uint64(base + idx[f, c, 0, t] * size)
                    a1 = np.uint64(base + idx[f, c, 1, t] * size)
                    a2 = np.uint64(base + idx[f, c, 2, t] * size)
                    a3 = np.uint64(base + idx[f, c, 3, t] * size)
                    q0, q1, q2, q3 = p[c, f, 0, t], p[c, f, 1, t], p[c, f, 2, t], p[c, f, 3, t]
                    if f == 0:
                        for s in range(usize):
                            flat[o + s] = (
                                weights[a0 + s] * q0 + weights[a1 + s] * q1 + weights[a2 + s] * q2
                                + weights[a3 + s] * q3
                            )  # fmt: skip
                    else:
                        for s in range(usize):
                            flat[o + s] *= (
                                weights[a0 + s] * q0 + weights[a1 + s] * q1 + weights[a2 + s] * q2
                                + weights[a3 + s] * q3
                            )  # fmt: skip
                    continue
                for j in range(n):
                    a = np.uint64(base + idx[f, c, j, t] * size)
                    q = p[c, f, j, t]
                    if j == 0:
                        for s in range(usize):
                            acc[s] = weights[a + s] * q
                    else:
                        for s in range(usize):
                            acc[s] += weights[a + s] * q
                if f == 0:
                    for s in range(usize):
                        flat[o + s] = acc[s]
                else:
                    for s in range(usize):
                        flat[o + s] *= acc[s]


@numba.njit(nogil=True, cache=True)
def add_codebook_best(scores, best, runs, first):
    """``scores[t, senone] += best[codebook of senone, first + t]`` (scores [frames, senones])."""
    for r in range(runs.shape[0]):
        c, s0, s1 = runs[r, 0], runs[r, 1], runs[r, 2]
        for t in range(scores.shape[0]):
            b = best[c, first + t]
            row = scores[t, s0:s1]
            for s in range(s1 - s0):
                row[s] += b


class SphinxAcousticModel(nn.Module):
    """A pocketsphinx PTM model as an ``AcousticModel``: waveforms -> MFCC -> senone log-likelihoods.

    ``topn``: 0 = exact full mixtures, N > 0 = pocketsphinx's top-N densities per codebook/stream.
    ``density_floor``: Gaussian log-densities more than this many nats below the frame's best
    density of their stream (over all codebooks) count as that far below, as pocketsphinx scores
    them (``POCKETSPHINX_DENSITY_FLOOR``, 9.83 nats: a senone far from the frame costs at most
    about that much per stream plus its mixture weight); 0 = no floor (exact mixtures).
    ``dtype``: precision of the Gaussians and mixtures (float32 is fast; float64 for exactness
    checks). ``chunk_frames``: frames scored at once (the valid frames of a whole batch are packed
    first); the tensor path of top-N selects ``TOPN_SELECT_FRAMES`` at a time (2 x 4 MB of
    float64 keys). The working sets stay within the CPU's last-level cache: scoring is
    memory-bound, every extra pass over the densities costs about as much as the Gaussians'
    matmul. ``threads``: on CPU, chunks are scored by that many threads at once (0 = the cores
    this process may use; torch and the compiled kernels release the GIL, and each thread has its
    own work buffers); other devices use one. ``compiled``: float32 top-N and mixtures on CPU by
    :func:`top_densities_kernel` and :func:`mix_top_densities_kernel` (False: the tensor path
    every device runs). The output memory is reused from batch to batch once the caller has let
    go of it (:class:`RecycledOutput`).
    """

    default_decoder = "wfst"
    blank_id = -1

    def __init__(
        self,
        data: SphinxModelData,
        frontend: SphinxMFCC | None = None,
        topn: int = 4,
        dtype: torch.dtype = torch.float32,
        chunk_frames: int = CHUNK_FRAMES,
        threads: int = 1,
        density_floor: float = POCKETSPHINX_DENSITY_FLOOR,
        compiled: bool = True,
    ) -> None:
        super().__init__()
        self.compiled = bool(compiled)
        if not density_floor >= 0:
            raise ModelError(f"model.density_floor={density_floor} must be >= 0 (0 = no floor)")
        self.density_floor = float(density_floor)
        if threads < 0:
            raise ModelError(f"model.threads={threads} must be >= 0 (0 = all cores)")
        self.threads = threads if threads > 0 else len(os.sched_getaffinity(0))
        self._pool: ThreadPoolExecutor | None = None
        self.data = data
        self.frontend = frontend or SphinxMFCC(SphinxFeConfig.from_feat_params(data.feat_params))
        if self.frontend.feature_dim != sum(len(s) for s in data.streams):
            raise ModelError(
                f"{data.folder}: front end gives {self.frontend.feature_dim} dims, model streams need "
                f"{sum(len(s) for s in data.streams)}"
            )
        if topn < 0 or topn > data.n_density:
            raise ModelError(f"topn={topn} must be 0 (full mixture) .. {data.n_density}")
        self.topn = int(topn)
        self.compute_dtype = dtype
        self.chunk_frames = max(int(chunk_frames), 1)
        self._units = data.senone_names()
        self._workspace: dict[tuple[str, bool, int], torch.Tensor] = {}
        self._runs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._output = RecycledOutput()
        n_cb, n_f, n_k, d = data.means.shape
        mean = torch.from_numpy(data.means).double()
        var = torch.from_numpy(data.variances).double()
        # log N(x) = A @ z + c with z = [x^2, x] per stream: A = [-1/(2 var), mean/var]; rows are
        # (codebook, density), so that a codebook's densities are one [k, frames] block.
        a = torch.cat([-0.5 / var, mean / var], dim=-1)  # [cb, f, k, 2d]
        a = a.permute(1, 0, 2, 3).reshape(n_f, n_cb * n_k, 2 * d)
        const = -0.5 * (d * math.log(2 * math.pi) + torch.log(var).sum(-1) + (mean * mean / var).sum(-1))
        self.register_buffer("gauss_a", a.to(dtype).contiguous(), persistent=False)
        self.register_buffer(
            "gauss_c", const.permute(1, 0, 2).reshape(n_f, n_cb * n_k, 1).to(dtype), persistent=False
        )
        self.register_buffer("stream_idx", torch.tensor(data.streams, dtype=torch.int64), persistent=False)
        sen2cb = torch.from_numpy(data.sen2cb)
        self.register_buffer("sen2cb", sen2cb, persistent=False)
        weights = torch.from_numpy(data.log_mixw).exp()  # [f, k, S] probability domain
        if self.topn:
            self._init_sparse_mixture(sen2cb, weights)
        else:
            self._init_full_mixture(sen2cb, weights)

    def _init_full_mixture(self, sen2cb: torch.Tensor, weights: torch.Tensor) -> None:
        """Senones sorted by codebook (codebook c owns sorted columns ``cb_bounds[c] .. cb_bounds[c+1]``),
        weights [streams, densities, sorted senones]."""
        n_cb = self.data.n_codebooks
        order = torch.argsort(sen2cb, stable=True)
        counts = torch.bincount(sen2cb, minlength=n_cb)
        self.cb_bounds = [0, *torch.cumsum(counts, 0).tolist()]
        self.register_buffer("sorted_cb", sen2cb[order].contiguous(), persistent=False)
        self.register_buffer("sorted_pos", torch.argsort(order), persistent=False)  # senone -> row
        mixw = weights[:, :, order]  # [f, k, sorted senones]
        self.register_buffer("mixw", mixw.to(self.compute_dtype).contiguous(), persistent=False)

    def _init_sparse_mixture(self, sen2cb: torch.Tensor, weights: torch.Tensor) -> None:
        """Each codebook's senones cut into blocks of ``SENONE_BLOCK`` columns (the last one padded):
        a lookup table with one row of block weights per (stream, block, density), so that a
        senone block's top-N mixture is a weighted sum of N table rows (``embedding_bag``)."""
        n_cb, n_f, n_k, _ = self.data.means.shape
        width = SENONE_BLOCK
        block_cb: list[int] = []
        column = torch.empty(self.data.n_senones, dtype=torch.int64)
        for c in range(n_cb):
            senones = torch.nonzero(sen2cb == c).squeeze(1)
            column[senones] = len(block_cb) * width + torch.arange(len(senones))
            block_cb += [c] * -(-len(senones) // width)
        n_blocks = len(block_cb)
        # padding columns get weight 1 (they are never read back; log(0) would be ~3x slower)
        table = torch.ones(n_f, n_blocks * width, n_k, dtype=torch.float64)
        table[:, column] = weights.transpose(1, 2)
        table = table.view(n_f, n_blocks, width, n_k).transpose(2, 3).reshape(-1, width)
        self.register_buffer("block_table", table.to(self.compute_dtype).contiguous(), persistent=False)
        self.register_buffer("block_cb", torch.tensor(block_cb, dtype=torch.int64), persistent=False)
        rows = (torch.arange(n_f)[:, None] * n_blocks + torch.arange(n_blocks)[None, :]) * n_k
        self.register_buffer("block_rows", rows[:, :, None, None].contiguous(), persistent=False)
        self.register_buffer("senone_column", column, persistent=False)

    # ----------------------------------------------------------------- AcousticModel protocol
    @property
    def sample_rate(self) -> int:
        return self.frontend.sample_rate

    @property
    def units(self) -> list[str]:
        return self._units

    @property
    def frame_shift(self) -> float:
        return self.frontend.cfg.frame_shift / self.frontend.cfg.samprate

    @property
    def num_senones(self) -> int:
        return self.data.n_senones

    def features(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] waveforms in [-1, 1] -> ([B, 39, T] float32 features, [B] frame counts)."""
        feats, n = self.frontend(waveforms, lengths)
        return feats.transpose(1, 2), n

    def forward_features(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput:
        """[B, 39, T] features -> ModelOutput with ``log_probs`` [B, T, n_senones] (natural-log
        likelihoods; padding frames are 0). The valid frames of all utterances are packed and
        scored together, ``chunk_frames`` at a time."""
        b, _, t = feats.shape
        x = feats.transpose(1, 2).reshape(b * t, -1)
        counts = [min(int(n), t) for n in feat_lengths.tolist()]
        lengths = torch.tensor(counts, device=x.device)
        valid = (torch.arange(t, device=x.device)[None, :] < lengths[:, None]).reshape(-1)
        rows = valid.nonzero().squeeze(1)
        scores = self._output.empty((b, t, self.num_senones), torch.float32, x.device)
        for i, n in enumerate(counts):  # padding: contiguous runs of rows
            if n < t:
                scores[i, n:] = 0.0
        packed = x.index_select(0, rows)
        self._score_pieces(packed, packed_pieces(counts, self.chunk_frames, scores), self.threads)
        return self._make_output(feat_lengths, log_probs=scores)

    def deferred_output(self, feats: torch.Tensor, feat_lengths: torch.Tensor) -> ModelOutput:
        """`forward_features` deferred (`DeferredScores`): each utterance's valid feature frames and
        `score_frames`, for a decoder that scores each utterance on the worker thread that then
        searches it (``takes_deferred_scores``). The same scores, made one utterance at a time."""
        t = feats.shape[2]
        counts = [min(int(n), t) for n in feat_lengths.tolist()]
        inputs = [feats[b, :, :n].T for b, n in enumerate(counts)]
        mode = torch.is_inference_mode_enabled()  # thread-local: carried into the workers

        def score(x: torch.Tensor, out: torch.Tensor) -> None:
            with torch.inference_mode(mode):
                self.score_frames(x, out)

        def score_wide(x: torch.Tensor, out: torch.Tensor) -> None:
            with torch.inference_mode(mode):
                self.score_frames(x, out, self.threads)

        deferred = DeferredScores(inputs, self.num_senones, score, score_wide, self.chunk_frames)
        return self._make_output(feat_lengths, deferred=deferred)

    def _make_output(
        self,
        feat_lengths: torch.Tensor,
        log_probs: torch.Tensor | None = None,
        deferred: DeferredScores | None = None,
    ) -> ModelOutput:
        """This model's output for utterances of `feat_lengths` frames: scores made or deferred."""
        return ModelOutput(
            log_probs=log_probs,
            lengths=feat_lengths.to(torch.int64),
            frame_shift=self.frame_shift,
            blank_id=self.blank_id,
            units=self.units,
            extra={"topn": self.topn},
            deferred=deferred,
        )

    def score_frames(self, x: torch.Tensor, out: torch.Tensor, threads: int = 1) -> None:
        """[N, D] features (one utterance's) -> their [N, n_senones] senone log-likelihoods written
        into ``out`` (float32), ``chunk_frames`` at a time: on the calling thread, or with
        ``threads`` > 1 on the model's pool."""
        self._score_pieces(x.contiguous(), packed_pieces([x.shape[0]], self.chunk_frames, out[None]), threads)

    def _score_pieces(self, packed: torch.Tensor, pieces: list[Runs], threads: int) -> None:
        """Score packed frames [N, D] ``chunk_frames`` at a time into their runs (`packed_pieces`),
        on the model's thread pool when ``threads`` > 1 (each chunk's arithmetic unchanged; the
        calling thread's inference mode carried into the pool's)."""
        step = self.chunk_frames
        if threads > 1 and len(pieces) > 1 and packed.device.type == "cpu":
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="sphinx-scoring")
            mode = torch.is_inference_mode_enabled()  # thread-local: carried into the workers

            def score(k: int) -> None:
                with torch.inference_mode(mode):
                    self._score_chunk(packed[k * step : (k + 1) * step], pieces[k])

            list(self._pool.map(score, range(len(pieces))))
        else:
            for k, piece in enumerate(pieces):
                self._score_chunk(packed[k * step : (k + 1) * step], piece)

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> ModelOutput:
        feats, n = self.features(waveforms, lengths)
        return self.forward_features(feats, n)

    def tokens_to_words(self, tokens: list[int]) -> list[tuple[str, int, int]]:
        """HMM decoding takes words from the graph, not from senone ids."""
        return []

    # ----------------------------------------------------------------- scoring
    def _buffer(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """A reusable work buffer (uninitialised), so that chunks do not allocate (and page-fault)
        megabytes of fresh memory each time. Kept per inference-mode state (a buffer made under
        ``torch.inference_mode`` cannot be written outside it) and per thread."""
        numel = math.prod(shape)
        key = (name, torch.is_inference_mode_enabled(), threading.get_ident())
        buf = self._workspace.get(key)
        if buf is None or buf.numel() < numel or buf.dtype != dtype or buf.device != device:
            buf = torch.empty(numel, dtype=dtype, device=device)
            self._workspace[key] = buf
        return buf[:numel].view(shape)

    def _gaussians(self, x: torch.Tensor) -> torch.Tensor:
        """[N, D] features -> [streams, codebooks, densities, N] Gaussian log-densities (a work
        buffer, overwritten by the next chunk)."""
        n_cb, n_f, n_k, _ = self.data.means.shape
        xs = x.to(self.compute_dtype)[:, self.stream_idx].permute(1, 2, 0)  # [f, d, N]
        z = torch.cat([xs * xs, xs], dim=1)  # [f, 2d, N]
        out = self._buffer("gauss", (n_f, n_cb * n_k, x.shape[0]), self.compute_dtype, x.device)
        return torch.baddbmm(self.gauss_c, self.gauss_a, z, out=out).view(n_f, n_cb, n_k, -1)

    def gaussian_scores(self, x: torch.Tensor) -> torch.Tensor:
        """[N, D] features -> [N, codebooks, streams, densities] Gaussian log-densities."""
        return self._gaussians(x).permute(3, 1, 0, 2).clone()

    def select_top(
        self, g: torch.Tensor, index_dtype: torch.dtype = torch.int64
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gaussian log-densities [f, cb, k, N] -> the ``topn`` best of every codebook/stream/frame,
        descending: (values [f, cb, topn, N], density indices [f, cb, topn, N]). Exactly ``topn``
        per codebook; among equal values the lower density index wins, as a stable sort picks.
        float32 on CPU (with ``compiled``): one pass of :func:`top_densities_kernel`, indices of
        ``index_dtype`` (int32 for the compiled mixture: faster); otherwise
        :meth:`select_top_keys` (int64)."""
        if not self._compiled_topn(g.device, g.dtype):
            return self.select_top_keys(g)
        n_f, n_cb, n_k, n = g.shape
        shape = (n_f, n_cb, self.topn, n)
        values = torch.empty(shape, dtype=g.dtype)
        idx = torch.empty(shape, dtype=index_dtype)
        announce_first_compile("sphinx scoring", top_densities_kernel)
        top_densities_kernel(
            g.contiguous().view(n_f * n_cb, n_k, n).numpy(),
            values.view(n_f * n_cb, self.topn, n).numpy(),
            idx.view(n_f * n_cb, self.topn, n).numpy(),
        )
        return values, idx

    def _compiled_topn(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether top-N runs :func:`top_densities_kernel` (float32 on CPU, with ``compiled``)."""
        return self.compiled and device.type == "cpu" and dtype == torch.float32

    def select_top_keys(
        self, g: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`select_top` as tensor operations on any device. The densities get float64 keys
        that are all distinct (:func:`tie_broken_keys`); then ``topn`` times: the best key of each
        codebook/stream/frame (a vectorised max over the densities, which reads the keys once),
        its density index decoded from the key, and that key knocked out (one element per
        codebook/stream/frame). No host reads, no special case for ties. float64 densities are
        ranked by their float32 roundings (the keys' resolution)."""
        n_f, n_cb, n_k, n = g.shape
        keys = self._buffer("keys", tuple(g.shape), torch.float64, g.device)
        scratch = self._buffer("keys_scratch", tuple(g.shape), torch.float64, g.device)
        tie_broken_keys(g if g.dtype == torch.float32 else g.float(), 2, keys, scratch)
        if out is None:
            out = (
                torch.empty(n_f, n_cb, self.topn, n, dtype=g.dtype, device=g.device),
                torch.empty(n_f, n_cb, self.topn, n, dtype=torch.int64, device=g.device),
            )
        values, idx = out
        if self.topn > MAX_ITERATIVE_TOPN:
            values[:], idx[:] = key_index(keys.topk(self.topn, dim=2).values, n_k)
        else:
            for j in range(self.topn):
                values[:, :, j : j + 1], idx[:, :, j : j + 1] = key_index(keys.amax(2, keepdim=True), n_k)
                keys.scatter_(2, idx[:, :, j : j + 1], -math.inf)
        if g.dtype != torch.float32:  # the keys hold float32-rounded values
            torch.gather(g, 2, idx, out=values)
        return values, idx

    def _score_chunk(self, x: torch.Tensor, out: Runs | None = None) -> torch.Tensor:
        """[N, D] features -> [N, n_senones] senone log-likelihoods (float32), or written into
        ``out`` (frames [lo, hi) of the chunk into each float32 [hi - lo, n_senones] tensor given).
        Top-N selects in sub-chunks of ``TOPN_SELECT_FRAMES`` on the keys path (its float64 keys
        stay in the cache), all N frames at once when compiled, and mixes all N frames at once
        (each block's weight rows are loaded once per chunk)."""
        if not self.topn:
            return self._full_mixture(self._gaussians(x), out)
        if self._compiled_topn(x.device, self.compute_dtype):
            values, idx = self.select_top(self._gaussians(x), torch.int32)
            return self._compiled_mixture(values, idx, out)
        n_f, n_cb = self.data.n_streams, self.data.n_codebooks
        shape = (n_f, n_cb, self.topn, x.shape[0])
        values = torch.empty(shape, dtype=self.compute_dtype, device=x.device)
        idx = torch.empty(shape, dtype=torch.int64, device=x.device)
        for start in range(0, x.shape[0], TOPN_SELECT_FRAMES):
            part = slice(start, start + TOPN_SELECT_FRAMES)
            self.select_top_keys(self._gaussians(x[part]), out=(values[..., part], idx[..., part]))
        return self._sparse_mixture(values, idx, out)

    def _sparse_mixture(self, top: torch.Tensor, idx: torch.Tensor, out: Runs | None = None) -> torch.Tensor:
        """Top-N log-densities and indices [f, cb, n, N] -> [N, n_senones] senone log-likelihoods.

        Per stream, frame and senone block: ``sum_j w[senone, idx_j] exp(top_j - top_0)`` as one
        ``embedding_bag`` over the block table (n rows of block weights, weighted and summed);
        the stream mixtures are multiplied (each >= its best density's weight >= e^-26), taken to
        the log domain, the streams' best log-densities added and the senones' columns picked.
        """
        n_f, _, n, frames = top.shape
        if self.density_floor:
            lowest = top[:, :, 0].amax(1) - self.density_floor  # [f, N]
            top = torch.maximum(top, lowest[:, None, None, :])
        p = (top - top[:, :, :1]).clamp_(min=-UNDERFLOW_FLOOR).exp_()
        # bags ordered (stream, block, frame), so that consecutive bags read the same block's
        # table rows: table rows / weights [f, blocks, N, n]
        bags = idx.index_select(1, self.block_cb).transpose(2, 3) + self.block_rows
        weights = p.index_select(1, self.block_cb).transpose(2, 3)
        mix = torch.nn.functional.embedding_bag(
            bags.reshape(-1, n), self.block_table, per_sample_weights=weights.reshape(-1, n), mode="sum"
        ).view(n_f, -1, frames, self.block_table.shape[1])
        prod = mix[0]
        for f in range(1, n_f):
            prod.mul_(mix[f])
        best = top[:, :, 0].sum(0).index_select(0, self.block_cb)  # [blocks, N]
        prod.log_().add_(best[:, :, None])
        return select_columns(prod.transpose(0, 1).reshape(frames, -1), self.senone_column, out)

    def _run_weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(senone runs, each run's weight block offset, the float32 weight blocks) of
        :func:`mix_top_densities_kernel`, made on first use (8 MB for en-us)."""
        if self._runs is None:
            runs = senone_runs(self.data.sen2cb)
            weights = np.exp(self.data.log_mixw).astype(np.float32)  # [f, k, S]
            blocks = [np.ascontiguousarray(weights[:, :, s0:s1]).reshape(-1) for _, s0, s1 in runs]
            offsets = np.cumsum([0] + [len(b) for b in blocks[:-1]]).astype(np.int64)
            self._runs = (runs, offsets, np.concatenate(blocks))
        return self._runs

    def _compiled_mixture(
        self, top: torch.Tensor, idx: torch.Tensor, out: Runs | None = None
    ) -> torch.Tensor:
        """:meth:`_sparse_mixture` by :func:`mix_top_densities_kernel` (float32 on CPU): the
        products of the stream mixtures in senone order, their log by torch, then each codebook's
        best log-densities added (:func:`add_codebook_best`) in the destination rows."""
        runs, offsets, weights = self._run_weights()
        n_f, n_cb, n, frames = top.shape
        cpu = torch.device("cpu")
        prod = self._buffer("mix_prod", (frames, self.num_senones), torch.float32, cpu)
        best = self._buffer("mix_best", (n_cb, frames), torch.float32, cpu).numpy()
        lowest = self._buffer("mix_lowest", (n_f, frames), torch.float32, cpu).numpy()
        p = self._buffer("mix_p", (n_cb, n_f, n, frames), torch.float32, cpu).numpy()
        acc = self._buffer("mix_acc", (int((runs[:, 2] - runs[:, 1]).max()),), torch.float32, cpu).numpy()
        announce_first_compile("sphinx scoring", mix_top_densities_kernel)
        mix_top_densities_kernel(
            top.numpy(), idx.numpy(), weights, runs, offsets, np.float32(self.density_floor),
            np.float32(UNDERFLOW_FLOOR), prod.numpy(), best, lowest, p, acc,
        )  # fmt: skip
        if out is None:
            scores = torch.log(prod)
            add_codebook_best(scores.numpy(), best, runs, 0)
            return scores
        for lo, hi, dst in out:
            torch.log(prod[lo:hi], out=dst)
            add_codebook_best(dst.numpy(), best, runs, lo)
        return prod

    def _full_mixture(self, g: torch.Tensor, out: Runs | None = None) -> torch.Tensor:
        """Gaussian log-densities [f, cb, k, N] (used as scratch) -> [N, n_senones] senone
        log-likelihoods of the full mixtures.

        Each codebook/stream's densities are shifted by their best (so the largest term is 1) and
        exponentiated (clamped ``UNDERFLOW_FLOOR`` nats below: an exp that underflows is ~60x slower
        on CPUs, and the terms changed weigh < 128 e^-60 against a mixture >= e^-26, the smallest
        mixture weight), then mixed with the weights of the codebook's senones by one batched
        (over streams) matmul per codebook; the stream mixtures are multiplied and taken back to
        the log domain.
        """
        if self.density_floor:
            lowest = g.amax(dim=(1, 2), keepdim=True) - self.density_floor  # [f, 1, 1, N]
            g = torch.maximum(g, lowest, out=g)
        best = g.amax(2, keepdim=True)
        p = g.sub_(best).clamp_(min=-UNDERFLOW_FLOOR).exp_()
        n_f, n = p.shape[0], p.shape[-1]
        mix = self._buffer("mixtures", (n_f, n, self.mixw.shape[2]), p.dtype, p.device)  # [f, N, S]
        bounds = self.cb_bounds
        for c in range(len(bounds) - 1):
            a, b = bounds[c], bounds[c + 1]
            torch.bmm(p[:, c].transpose(1, 2), self.mixw[:, :, a:b], out=mix[:, :, a:b])
        prod = mix[0]
        for f in range(1, n_f):
            prod.mul_(mix[f])
        offset = best.sum(0)[:, 0].T.index_select(1, self.sorted_cb)  # [N, S]
        return select_columns(prod.log_().add_(offset), self.sorted_pos, out)

    def senone_scores(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] features -> [B, T, n_senones] natural-log senone likelihoods (every frame)."""
        b, t, d = x.shape
        flat = x.reshape(b * t, d)
        out = torch.empty(b * t, self.num_senones, dtype=torch.float32, device=x.device)
        for start in range(0, b * t, self.chunk_frames):
            out[start : start + self.chunk_frames] = self._score_chunk(
                flat[start : start + self.chunk_frames]
            )
        return out.reshape(b, t, -1)

    def describe(self) -> dict:
        """Summary for ``asrdecode info``."""
        d = self.data
        fe = self.frontend.cfg
        return {
            "type": "sphinx",
            "folder": str(d.folder),
            "sample_rate": self.sample_rate,
            "features": {
                "type": "sphinx-mfcc",
                **{k: getattr(fe, k) for k in ("nfilt", "lowerf", "upperf", "transform", "lifter")},
                **{k: getattr(fe, k) for k in ("remove_noise", "feat", "cmn")},
            },
            "codebooks": d.n_codebooks,
            "streams": d.n_streams,
            "densities": d.n_density,
            "stream_dims": [len(s) for s in d.streams],
            "senones": d.n_senones,
            "ciphones": len(d.ciphones),
            "triphones": int(d.mdef.n_phone - len(d.ciphones)) if d.mdef is not None else None,
            "transition_matrices": int(d.transitions.shape[0]),
            "floored_variances": d.zero_variances,
            "topn": self.topn,
            "num_outputs": d.n_senones,
            "blank_id": self.blank_id,
            "frame_shift": self.frame_shift,
        }


def load_sphinx(
    folder: str | Path,
    topn: int = 4,
    dtype: torch.dtype = torch.float32,
    threads: int = 1,
    density_floor: float = POCKETSPHINX_DENSITY_FLOOR,
) -> SphinxAcousticModel:
    """Read a pocketsphinx PTM model folder into a :class:`SphinxAcousticModel`."""
    data = read_sphinx_model(folder)
    return SphinxAcousticModel(data, topn=topn, dtype=dtype, threads=threads, density_floor=density_floor)
