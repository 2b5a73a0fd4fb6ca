"""HCLG for a CMU Sphinx (pocketsphinx 5.x) acoustic model: binary `mdef`, `transition_matrices`,
a pronunciation dictionary and `noisedict`.

Phones carry a word position (i internal, b begin, e end, s single word) as in the model
definition; context windows come from kaldifst.compose_context, triphone lookup follows
pocketsphinx's `bin_mdef_phone_id_nearest`: exact (phone, left, right, position), then other
positions, then silence for filler contexts (and word-edge contexts of b/e/s phones), then the
context-independent phone. Filler contexts map to silence, utterance edges to silence.
HCLG ilabel = senone id + 1 (model column = senone).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode.errors import GraphError
from asrdecode.graph.hclg import compile_hclg
from asrdecode.graph.stages import BuildStages

WPOS = "ibes"  # pocketsphinx mdef.h: WORD_POSN_INTERNAL=0, BEGIN=1, END=2, SINGLE=3
_BMDF = 0x46444D42
_S3_MAGIC = 0x11223344


@dataclass
class SphinxMdef:
    """The parts of a binary model definition the graph needs."""

    ciphones: list[str]
    sil: int
    filler: list[bool]
    n_emit_state: int
    n_ci_sen: int
    n_sen: int
    ssid: np.ndarray  # [n_phone]
    tmat: np.ndarray  # [n_phone]
    sseq: np.ndarray  # [n_sseq, n_emit_state] senone ids
    tree: dict[tuple[int, int, int, int], int] = field(default_factory=dict)  # (wpos, ci, lc, rc) -> pid

    @property
    def n_phone(self) -> int:
        return len(self.ssid)

    def phone_id(self, ci: int, lc: int, rc: int, wpos: int) -> int:
        """Exact triphone id or -1; filler contexts count as silence."""
        if self.sil >= 0:
            lc = self.sil if self.filler[lc] else lc
            rc = self.sil if self.filler[rc] else rc
        return self.tree.get((wpos, ci, lc, rc), -1)

    def phone_id_nearest(self, b: int, l: int, r: int, pos: int) -> int:
        """pocketsphinx's back-off order (bin_mdef.c, bin_mdef_phone_id_nearest)."""
        p = self.phone_id(b, l, r, pos)
        if p >= 0:
            return p
        for other in range(len(WPOS)):
            if other != pos and (p := self.phone_id(b, l, r, other)) >= 0:
                return p
        if self.sil >= 0:
            newl = self.sil if self.filler[l] or pos in (1, 3) else l
            newr = self.sil if self.filler[r] or pos in (2, 3) else r
            if (newl, newr) != (l, r):
                for wp in [pos] + [o for o in range(len(WPOS)) if o != pos]:
                    if (p := self.phone_id(b, newl, newr, wp)) >= 0:
                        return p
        return b


def read_mdef(path: str | Path) -> SphinxMdef:
    """Binary mdef (BMDF, version 1) as written by sphinx3/pocketsphinx (little-endian only)."""
    path = Path(path)
    try:
        return _read_mdef(path)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as err:
        raise GraphError(f"{path}: truncated or malformed mdef ({err})") from None


def _read_mdef(path: Path) -> SphinxMdef:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise GraphError(f"{path}: cannot read mdef ({err.strerror})") from None
    if len(data) < 12 or struct.unpack_from("<i", data, 0)[0] != _BMDF:
        raise GraphError(f"{path}: not a little-endian binary mdef (text mdef is not supported)")
    version, hdr_len = struct.unpack_from("<ii", data, 4)
    if version > 1:
        raise GraphError(f"{path}: mdef format version {version} is not supported")
    pos = 12 + hdr_len
    (n_ci, n_phone, n_emit, n_ci_sen, n_sen, _n_tmat, n_sseq, _n_ctx, n_tree, sil) = struct.unpack_from(
        "<10i", data, pos
    )
    pos += 40
    base = pos
    names = []
    for _ in range(n_ci):
        end = data.index(b"\0", pos)
        names.append(data[pos:end].decode("ascii"))
        pos = end + 1
    pos = base + ((pos - base + 3) & ~3)
    tree = np.frombuffer(
        data, dtype=np.dtype([("ctx", "<i2"), ("n_down", "<i2"), ("down", "<i4")]), count=n_tree, offset=pos
    )
    pos += 8 * n_tree
    phones = np.frombuffer(
        data,
        dtype=np.dtype([("ssid", "<i4"), ("tmat", "<i4"), ("attr", "u1", (4,))]),
        count=n_phone,
        offset=pos,
    )
    pos += 12 * n_phone
    (sseq_size,) = struct.unpack_from("<i", data, pos)
    pos += 4
    if n_emit <= 0:
        raise GraphError(f"{path}: heterogeneous HMM topologies are not supported")
    sseq = np.frombuffer(data, dtype="<u2", count=sseq_size, offset=pos).reshape(n_sseq, n_emit)
    lookup: dict[tuple[int, int, int, int], int] = {}

    def walk(start: int, count: int, prefix: tuple[int, ...]) -> None:
        for i in range(start, start + count):
            ctx, n_down, down = int(tree["ctx"][i]), int(tree["n_down"][i]), int(tree["down"][i])
            key = prefix + (ctx,)
            if n_down == 0:
                if len(key) == 4:
                    lookup[key] = down  # type: ignore[index]
            else:
                walk(down, n_down, key)

    walk(0, len(WPOS), ())
    return SphinxMdef(
        ciphones=names,
        sil=sil,
        filler=[bool(phones["attr"][i][0]) for i in range(n_ci)],
        n_emit_state=n_emit,
        n_ci_sen=n_ci_sen,
        n_sen=n_sen,
        ssid=phones["ssid"].astype(np.int64),
        tmat=phones["tmat"].astype(np.int64),
        sseq=sseq.astype(np.int64),
        tree=lookup,
    )


def read_tmat(path: str | Path, floor: float = 1e-4) -> np.ndarray:
    """s3 binary transition matrices [n_tmat, n_state, n_state+1], normalised and floored as
    pocketsphinx does (non-zero entries floored at `floor`, rows renormalised)."""
    path = Path(path)
    try:
        return _read_tmat(path, floor)
    except (struct.error, ValueError) as err:
        raise GraphError(f"{path}: truncated or malformed transition matrices ({err})") from None


def _read_tmat(path: Path, floor: float) -> np.ndarray:
    data = path.read_bytes()
    end = data.find(b"endhdr\n")
    if not data.startswith(b"s3\n") or end < 0:
        raise GraphError(f"{path}: not an s3 binary transition-matrix file")
    pos = end + len("endhdr\n")
    if struct.unpack_from("<I", data, pos)[0] != _S3_MAGIC:
        raise GraphError(f"{path}: big-endian s3 files are not supported")
    n_tmat, n_src, n_dst, count = struct.unpack_from("<4i", data, pos + 4)
    if n_dst != n_src + 1 or count != n_tmat * n_src * n_dst:
        raise GraphError(f"{path}: unexpected transition-matrix shape {n_tmat}x{n_src}x{n_dst}")
    tp = (
        np.frombuffer(data, dtype="<f4", count=count, offset=pos + 20)
        .reshape(n_tmat, n_src, n_dst)
        .astype(np.float64)
    )
    tp = tp / np.maximum(tp.sum(-1, keepdims=True), 1e-30)
    tp = np.where((tp > 0) & (tp < floor), floor, tp)
    return tp / tp.sum(-1, keepdims=True)


def read_sphinx_dict(path: str | Path) -> list[tuple[str, list[str]]]:
    """`word PH PH ...`, alternatives as `word(2) ...`; `#` starts a comment."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: dictionary not found")
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, 1):
            fields = raw.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) < 2:
                raise GraphError(f"{path}:{lineno}: word '{fields[0]}' has no phones")
            word = fields[0]
            if word.endswith(")") and "(" in word:
                word = word[: word.rindex("(")]
            out.append((word, fields[1:]))
    return out


@dataclass
class SphinxGraphConfig:
    """pocketsphinx-model HCLG inputs (defaults = pocketsphinx's silprob/fillprob/tmatfloor).

    transition_scale multiplies the HMM transition costs and the silence/filler insertion costs
    (Kaldi's `--transition-scale`). pocketsphinx adds these on the acoustic side, unweighted, and
    only the LM is multiplied by its language weight `lw`; decoding with `acoustic_scale = 1/lw`
    scores paths as pocketsphinx does when `transition_scale = 1/lw` too.
    """

    model_dir: str
    dictionary: str
    arpa: str
    noisedict: str | None = None  # default: model_dir/noisedict
    silprob: float = 0.005
    fillprob: float = 1e-8
    tmatfloor: float = 1e-4
    transition_scale: float = 1.0


def build_sphinx_hclg(
    cfg: SphinxGraphConfig, out_dir: str | Path, save_format: str = "both", stages: BuildStages | None = None
) -> dict[str, Any]:
    """HCLG for a pocketsphinx model folder (mdef, transition_matrices, noisedict) into `out_dir`;
    `save_format`: graph.pt and/or graph.safetensors (pt | safetensors | both)."""
    model = Path(cfg.model_dir)
    mdef = read_mdef(model / "mdef")
    tmat = read_tmat(model / "transition_matrices", cfg.tmatfloor)
    ci = {name: i for i, name in enumerate(mdef.ciphones)}
    n_pos = len(WPOS)

    def sym(c: int, wpos: int) -> int:  # phone symbol ids 1..n_ci*4
        return 1 + c * n_pos + wpos

    lexicon = read_sphinx_dict(cfg.dictionary)
    prons, unknown = [], 0
    for word, phones in lexicon:
        if any(p not in ci for p in phones):
            unknown += 1
            continue
        ids = [ci[p] for p in phones]
        if len(ids) == 1:
            prons.append((word, (sym(ids[0], 3),)))
        else:
            prons.append((word, (sym(ids[0], 1), *(sym(c, 0) for c in ids[1:-1]), sym(ids[-1], 2))))
    noise = Path(cfg.noisedict) if cfg.noisedict else model / "noisedict"
    optional: list[tuple[int, float]] = []
    for word, phones in read_sphinx_dict(noise) if noise.is_file() else []:
        if word in ("<s>", "</s>") or len(phones) != 1 or phones[0] not in ci:
            continue
        c = ci[phones[0]]
        cost = -math.log(cfg.silprob if c == mdef.sil else cfg.fillprob) * cfg.transition_scale
        if all(u != sym(c, 3) for u, _ in optional):
            optional.append((sym(c, 3), cost))

    def resolve(win: list[int]) -> tuple[list[int], np.ndarray, bool]:
        left, centre, right = win
        c, wpos = divmod(centre - 1, n_pos)
        lc = (left - 1) // n_pos if left > 0 else mdef.sil
        rc = (right - 1) // n_pos if right > 0 else mdef.sil
        if mdef.filler[c]:
            pid = c  # fillers are context-independent
        else:
            pid = mdef.phone_id_nearest(c, lc, rc, wpos)
        senones = [int(s) for s in mdef.sseq[mdef.ssid[pid]]]
        exact = pid >= len(mdef.ciphones) and mdef.phone_id(c, lc, rc, wpos) == pid
        # p ** scale: H's cost -ln(p) becomes scale * -ln(p)
        trans = tmat[mdef.tmat[pid]] ** cfg.transition_scale
        return senones, trans, not exact and not mdef.filler[c]

    units = [("<eps>", 0)] + [
        (f"{name}_{WPOS[w]}", sym(c, w)) for c, name in enumerate(mdef.ciphones) for w in range(n_pos)
    ]
    meta = {
        "acoustic_model": str(model.resolve()),
        "num_columns": mdef.n_sen,
        "mdef": {
            "ciphones": len(mdef.ciphones),
            "triphones": mdef.n_phone - len(mdef.ciphones),
            "senones": mdef.n_sen,
            "emitting_states": mdef.n_emit_state,
        },
        "optional_between_words": {u: c for u, c in units if any(s == c for s, _ in optional)},
        "dictionary_words_with_unknown_phones": unknown,
        "silprob": cfg.silprob,
        "fillprob": cfg.fillprob,
        "transition_scale": cfg.transition_scale,
    }
    return compile_hclg(
        len(mdef.ciphones) * n_pos,
        prons,
        cfg.arpa,
        resolve,
        out_dir,
        meta,
        tuple(optional),
        units,
        edge_silence=sym(mdef.sil, 3),
        save_format=save_format,
        stages=stages,
    )
