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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode.errors import GraphError, ModelError
from asrdecode.graph.hclg import compile_hclg
from asrdecode.graph.stages import BuildStages
from asrdecode.models.sphinx_io import WPOS, read_mdef, read_tmat


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
    try:  # a bad model file fails the graph build
        mdef = read_mdef(model / "mdef")
        tmat = read_tmat(model / "transition_matrices", cfg.tmatfloor)
    except ModelError as err:
        raise GraphError(str(err)) from None
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
