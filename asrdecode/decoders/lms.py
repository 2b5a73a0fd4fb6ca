"""The LMs decoders load from their config: the LM difference of on-the-fly rescoring (`wfst-otf`,
`let`: the large LM minus the one the graph was built with) and the token LM of transducer shallow
fusion (`transducer-greedy`, `transducer-beam`). Paths may be packaged (``embedded:...``); every
problem is a one-line ConfigError naming the option."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode.errors import AsrDecodeError, ConfigError, one_line
from asrdecode.graph.cache import cache_root
from asrdecode.graph.format import graph_folder
from asrdecode.lm.backoff import BackoffReadings
from asrdecode.lm.difference import DifferenceLM, ngram_lm_from_file
from asrdecode.lm.ngpu_nemo import read_ngpu_nemo
from asrdecode.lm.ngram_tensor import BatchedNgramLM
from asrdecode.lm.rescore import NbestRescorer, rescoring_vocabulary

log = logging.getLogger("asrdecode.decoders")


def small_lm_of(graph_spec: str) -> str:
    """The ARPA recorded as the graph's `arpa` input in its folder's meta.json ('' if none)."""
    folder = graph_folder(graph_spec)
    meta = folder / "meta.json" if folder is not None else None
    if meta is None or not meta.is_file():
        return ""
    try:
        return str(json.loads(meta.read_text())["inputs"]["arpa"]["path"])
    except (json.JSONDecodeError, KeyError, TypeError, OSError):
        return ""


def lm_file(key: str, spec: str) -> str:
    """The file of an LM option (`embedded:` and checkout paths resolved); a one-line ConfigError
    naming ``decoder.<key>`` if it cannot be found."""
    from asrdecode.models.loading import resolve_packaged_path

    try:
        path = resolve_packaged_path(spec)
    except AsrDecodeError as err:
        raise ConfigError(f"decoder.{key}: {err}") from None
    if not Path(path).is_file():
        raise ConfigError(f"decoder.{key}: {path}: file not found")
    return path


def graph_lm(config: Any, key: str) -> str:
    """The LM the graph was built with: the config's option `key` (``small_lm``, ``rescore_graph_lm``)
    or the ARPA recorded in the graph folder's meta.json; a one-line ConfigError if neither."""
    path = getattr(config, key) or small_lm_of(config.graph)
    if not path:
        raise ConfigError(
            f"decoder.{key}: give the LM the graph was built with (not recorded in the graph folder's "
            "meta.json)"
        )
    return path


def load_difference_lm(config: Any, words: dict[int, str], olabels: np.ndarray) -> DifferenceLM:
    """The LM difference of a `wfst-otf` or `let` config (its ``lm`` minus its ``small_lm`` or the
    LM recorded with its ``graph``, weighted by its ``lm_scale``) over the graph's words (``words``,
    arc ``olabels``), tables from the LM cache when built before; every problem a one-line
    ConfigError."""
    if not config.lm:
        raise ConfigError("decoder.lm: needs the large LM (decoder.lm=ARPA or pocketsphinx .lm.bin)")
    large, small = lm_file("lm", config.lm), lm_file("small_lm", graph_lm(config, "small_lm"))
    num_ids = max(int(olabels.max(initial=0)), max(words, default=0)) + 1
    try:
        lm = DifferenceLM.from_files(large, small, words, num_ids, config.lm_scale, cache=cache_root() / "lm")
    except AsrDecodeError as err:
        raise ConfigError(f"decoder.lm: {err}") from None
    lm.in_huge_pages()  # the searches read its tables at random places; before anything takes views
    lm.check_words(olabels, words, small, large)
    below = lm.small.ngrams_below_backoff_route()
    if below:
        log.warning(
            "decoder.small_lm %s: %d of its n-grams are less probable than their backoff route, which "
            "the graph takes instead, so the search is not %s read exactly (docs/real-speech.md; "
            "scripts/exact_readable_lm.py writes an LM without this, whose graph reads it exactly)",
            small, below, large,
        )  # fmt: skip
    return lm


def load_rescorer(config: Any) -> NbestRescorer:
    """The n-best rescorer of a WFST decoder config: its ``rescore_lm`` (an ARPA or a pocketsphinx
    binary LM, read into compact tables over the graph LM's words) read exactly in place of its
    ``rescore_graph_lm`` (default: the LM recorded with its ``graph``; an ARPA) as G reads it; every
    problem a one-line ConfigError naming the option."""
    if not config.rescore_nbest >= 1:
        raise ConfigError("decoder.rescore_nbest must be >= 1 (the word sequences rescored)")
    new_path = lm_file("rescore_lm", config.rescore_lm)
    graph_path = lm_file("rescore_graph_lm", graph_lm(config, "rescore_graph_lm"))
    key = "rescore_graph_lm"
    try:
        graph = BackoffReadings.read(graph_path)
        key = "rescore_lm"
        new = ngram_lm_from_file(new_path, rescoring_vocabulary(graph), cache=cache_root() / "lm")
    except AsrDecodeError as err:
        raise ConfigError(f"decoder.{key}: {err}") from None
    except (UnicodeDecodeError, OSError, EOFError, ValueError) as err:
        path = graph_path if key == "rescore_graph_lm" else new_path
        raise ConfigError(f"decoder.{key}: {path}: not a readable LM file ({one_line(err, 80)})") from None
    return NbestRescorer(new, graph, config.rescore_scale)


FUSION_TOKEN_IDS = ("ngpu", "words")


def load_fusion_lm(
    path: str | Path,
    token_ids: str,
    units: list[str],
    blank_id: int | None = None,
    key: str = "decoder.ngram_lm",
):
    """The token-level LM of a decoder's shallow fusion over a model's ``units`` (blank excluded):
    ``token_ids="ngpu"``: NeMo's token ARPA (ids = unit indices, ``vocab_size=len(units)``) or NeMo's
    NGPU-LM ``.nemo`` file (`asrdecode.lm.ngpu_nemo`);
    ``"words"``: the ARPA's words are the unit strings. A transducer's blank (`blank_id`) must come
    after the units. ``key`` names the config option in errors."""
    if blank_id is not None and blank_id != len(units):
        raise ConfigError(f"{key} needs the blank after the {len(units)} units (blank id {blank_id})")
    if token_ids not in FUSION_TOKEN_IDS:
        raise ConfigError(f"{key}_token_ids must be one of {', '.join(FUSION_TOKEN_IDS)}, got {token_ids!r}")
    if str(path).endswith(".nemo"):  # NeMo's NGPU-LM file (NGramGPULanguageModel.save_to)
        if token_ids != "ngpu":
            raise ConfigError(
                f"{key}: {path} is an NGPU-LM .nemo file (NeMo's token ids): {key}_token_ids must be ngpu"
            )
        return read_ngpu_nemo(path, len(units))
    if token_ids == "ngpu":
        return BatchedNgramLM.from_arpa(path, token_ids="ngpu", vocab_size=len(units))
    return BatchedNgramLM.from_arpa(path, vocab=list(units), token_ids="words")


def fusion_lm_of(config: Any, context: Any):
    """The token LM of a decoder config's shallow fusion (its ``ngram_lm``, ``ngram_lm_token_ids``)
    over the decoder context's units (`load_fusion_lm`), or None without one."""
    if not config.ngram_lm:
        return None
    return load_fusion_lm(config.ngram_lm, config.ngram_lm_token_ids, context.units, context.blank_id)
