"""NeMo's NGPU-LM files (``NGramGPULanguageModel.save_to``: a ``.nemo`` archive of a token n-gram LM
as a suffix tree of tensors, what NeMo's beam searches load fast instead of re-reading a large ARPA)
read into a :class:`~asrdecode.lm.ngram_tensor.BatchedNgramLM`.

NGPU-LM's layout is ours but for the root: state 0 is the root (empty history; NeMo's
``START_STATE``), state 1 ``<s>`` (``separate_bos_state``); ``from_states`` / ``to_states`` /
``ilabels`` / ``arcs_weights`` are the arcs (the first ``num_arcs``; the rest padding), the root's arcs
being the unigrams; ``backoff_to_states`` / ``backoff_weights``, ``final_weights`` (ln p(</s>), -inf
where a state has none: resolved through its backoffs here, as NeMo's ``_resolve_final``) and
``state_order`` (history length + 1) per state; weights are natural logs. The root's arcs become our
dense root row, the others our CSR arcs, sorted by (state, token).

The file is untrusted: read in memory by the ``.nemo`` reader (no extraction; weights through
``torch.load(weights_only=True)``), and every index, count and weight is checked before use (states
and tokens in range, backoffs to shorter histories only, no NaN or +inf), each problem a one-line
GraphError naming the file.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from asrdecode.errors import GraphError, ModelError
from asrdecode.lm.ngram_tensor import BatchedNgramLM

__all__ = ["read_ngpu_nemo"]

_KEYS = (
    "arcs_weights",
    "backoff_weights",
    "final_weights",
    "from_states",
    "to_states",
    "ilabels",
    "backoff_to_states",
    "state_order",
)


def _config_int(cfg: dict, key: str, label: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GraphError(f"{label}: model_config.yaml: {key} must be a non-negative integer, got {value!r}")
    return value


def read_ngpu_nemo(path: str | Path, vocab_size: int) -> BatchedNgramLM:
    """The NGPU-LM ``.nemo`` file at ``path`` over ``vocab_size`` tokens (NeMo's token ids: the
    model's units, blank excluded), as a BatchedNgramLM; GraphError on any problem."""
    from asrdecode.models.nemo import read_nemo_archive

    label = str(path)
    try:
        cfg, state, archive = read_nemo_archive(path)
        archive.close()
    except ModelError as err:
        raise GraphError(str(err).replace("model file not found", "LM file not found")) from None
    num_states, num_arcs = _config_int(cfg, "num_states", label), _config_int(cfg, "num_arcs", label)
    order, tokens = _config_int(cfg, "max_order", label), _config_int(cfg, "vocab_size", label)
    if tokens != vocab_size:
        raise GraphError(f"{label}: an LM over {tokens} tokens; the model has {vocab_size} (blank excluded)")
    if cfg.get("separate_bos_state", True) is not True:
        raise GraphError(f"{label}: separate_bos_state must be true (an n-gram LM with <s>)")
    if order < 1 or num_states < 2:
        raise GraphError(f"{label}: max_order {order} and num_states {num_states}: not an n-gram LM with <s>")
    missing = [k for k in _KEYS if k not in state]
    if missing:
        raise GraphError(f"{label}: model_weights.ckpt has no {missing[0]!r} (not an NGPU-LM file)")
    arrays = {k: state[k].detach().cpu().numpy() for k in _KEYS}
    for key in _KEYS:
        want = (
            num_states
            if key in ("backoff_weights", "final_weights", "backoff_to_states", "state_order")
            else num_arcs
        )
        if arrays[key].ndim != 1 or arrays[key].shape[0] < want:
            raise GraphError(
                f"{label}: {key} has shape {tuple(arrays[key].shape)}, expected at least [{want}]"
            )
        arrays[key] = arrays[key][:want]
    src, dst, tok = (arrays[k].astype(np.int64) for k in ("from_states", "to_states", "ilabels"))
    weight = arrays["arcs_weights"].astype(np.float64)
    backoff = arrays["backoff_to_states"].astype(np.int64)
    bow = arrays["backoff_weights"].astype(np.float64)
    final = arrays["final_weights"].astype(np.float64)
    length = arrays["state_order"].astype(np.int64) - 1  # NeMo's order = history length + 1
    # each check may index by what the ones before it checked, so they run in order
    checks = [
        (
            lambda: ((src < 0) | (src >= num_states) | (dst < 0) | (dst >= num_states)).any(),
            "an arc's state is out of range",
        ),
        (lambda: ((tok < 0) | (tok >= tokens)).any(), "an arc's token is out of range"),
        (lambda: ((backoff < 0) | (backoff >= num_states)).any(), "a backoff state is out of range"),
        (lambda: np.isnan(weight).any() or np.isposinf(weight).any(), "an arc weight is NaN or +inf"),
        (lambda: not np.isfinite(bow).all(), "a backoff weight is not finite"),
        (lambda: np.isnan(final).any() or np.isposinf(final).any(), "a final weight is NaN or +inf"),
        (lambda: length[0] != 0 or length[1] != 1, "state 0 must be the root and state 1 <s>"),
        (lambda: ((length < 0) | (length >= max(order, 2))).any(), f"a state's order is outside 1..{order}"),
        (lambda: (length[backoff[1:]] >= length[1:]).any(), "a backoff does not lead to a shorter history"),
        (lambda: backoff[0] != 0 or bow[0] != 0.0, "the root must back off to itself with weight 0"),
    ]
    for bad, what in checks:
        if bad():
            raise GraphError(f"{label}: {what} (not a valid NGPU-LM file)")
    root = src == 0
    if len(np.unique(tok[root])) != int(root.sum()):
        raise GraphError(f"{label}: a token has two unigrams (not a valid NGPU-LM file)")
    root_weight = np.full(tokens, -math.inf)
    root_next = np.zeros(tokens, dtype=np.int64)
    root_weight[tok[root]] = weight[root]
    root_next[tok[root]] = dst[root]
    a_src, a_tok, a_dst, a_w = src[~root], tok[~root], dst[~root], weight[~root]
    sort = np.lexsort((a_tok, a_src))
    a_src, a_tok, a_dst, a_w = a_src[sort], a_tok[sort], a_dst[sort], a_w[sort]
    if len(a_src) > 1 and ((a_src[1:] == a_src[:-1]) & (a_tok[1:] == a_tok[:-1])).any():
        raise GraphError(f"{label}: a state has two arcs with one token (not a valid NGPU-LM file)")
    offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(a_src, minlength=num_states), out=offsets[1:])
    # final weights through the backoff chain, shorter histories first (NeMo's _resolve_final)
    for hist in range(1, max(order, 2)):
        todo = np.flatnonzero((length == hist) & (final == -math.inf))
        final[todo] = bow[todo] + final[backoff[todo]]
    return BatchedNgramLM(
        vocab_size=tokens,
        order=order,
        arc_offsets=torch.from_numpy(offsets),
        arc_token=torch.from_numpy(a_tok.astype(np.int32)),
        arc_next=torch.from_numpy(a_dst.astype(np.int32)),
        arc_weight=torch.from_numpy(a_w.astype(np.float32)),
        root_weight=torch.from_numpy(root_weight.astype(np.float32)),
        root_next=torch.from_numpy(root_next),
        backoff_state=torch.from_numpy(backoff),
        backoff_weight=torch.from_numpy(bow.astype(np.float32)),
        final_weight=torch.from_numpy(final.astype(np.float32)),
        state_order=torch.from_numpy(length.astype(np.int32)),
        info={"path": label, "format": "NGPU-LM .nemo", "states": num_states, "arcs": num_arcs},
    )
