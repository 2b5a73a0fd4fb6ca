"""`asrdecode info PATH`: describe a model or a data set as a flat dict of printable values."""

from __future__ import annotations

from pathlib import Path

from asrdecode.errors import InputError


def describe_dataset(path: str) -> dict:
    from asrdecode.io.manifests import read_inputs

    inputs = read_inputs(Path(path))
    utts = inputs.utterances
    durations = [u.duration for u in utts if u.duration is not None]
    with_text = sum(u.text is not None for u in utts)
    info = {
        "kind": inputs.kind,
        "utterances": str(len(utts)),
        "with reference text": str(with_text),
        "audio": f"{sum(durations) / 3600:.3f} h over {len(durations)} utterances with known duration"
        if durations
        else "unknown duration",
    }
    if durations:
        info["duration min/mean/max"] = (
            f"{min(durations):.2f} / {sum(durations) / len(durations):.2f} / {max(durations):.2f} s"
        )
    if with_text:
        words = sum(len(u.text.split()) for u in utts if u.text)
        info["reference words"] = str(words)
    if inputs.kind != "logprobs":
        info["audio formats"] = _audio_formats(utts)
    if inputs.kind == "logprobs":
        meta = inputs.meta
        info["units"] = str(len(meta["units"]))
        info["frame shift"] = f"{meta['frame_shift']} s"
    return info


#: Audio files whose format `info` looks at (each is opened).
FORMAT_SAMPLE = 2000


def _audio_formats(utts: list) -> str:
    """How many of the data set's audio files have each format, rate and channel count (the first
    `FORMAT_SAMPLE` files)."""
    from collections import Counter

    from asrdecode.audio.loading import describe_audio_file

    paths = list(dict.fromkeys(u.audio_path for u in utts if u.audio_path))
    counts = Counter(describe_audio_file(p) for p in paths[:FORMAT_SAMPLE])
    text = "; ".join(f"{kind}: {n}" for kind, n in counts.most_common())
    if len(paths) > FORMAT_SAMPLE:
        text += f" (the first {FORMAT_SAMPLE} of {len(paths)} files)"
    return text


def describe_default_setup() -> dict:
    """What `asrdecode transcribe` uses with no --config and no --model, and what is cached."""
    from asrdecode.config import DEFAULT_SETUP, build_config
    from asrdecode.decoders import decoder_section
    from asrdecode.graph.cache import (
        CACHE_PREFIX,
        cache_folder,
        cache_root,
        cached_graph_folders,
        is_cached,
        load_graph_config,
    )
    from asrdecode.graph.staging import input_checksums
    from asrdecode.models.loading import resolve_packaged_path

    cfg = build_config(None, [], default_setup=True)
    dec = decoder_section(cfg.decoder)
    info = {
        "default setup": f"{DEFAULT_SETUP} ({resolve_packaged_path(DEFAULT_SETUP)})",
        "model": f"{cfg.model.path} ({cfg.model.type}, {resolve_packaged_path(cfg.model.path)})",
        "decoder": f"{dec['type']} (beam {dec.get('beam')}, max_active {dec.get('max_active')})",
        "cache": str(cache_root()),
    }
    graph = dec.get("graph", "")
    default_folder = None
    if isinstance(graph, str) and graph.startswith(CACHE_PREFIX):
        build = load_graph_config(resolve_packaged_path(graph[len(CACHE_PREFIX) :]))
        inputs = input_checksums(build)  # the sources' checksums, read once for both
        default_folder = cache_folder(build, inputs)
        state = "built" if is_cached(build, inputs) else "not built yet: first use builds it (~30 s)"
        info["graph"] = f"{graph} -> {default_folder} ({state})"
    others = {f: size for f, size in cached_graph_folders().items() if f != default_folder}
    if others:
        names = ", ".join(f.name for f in others)
        info["other cached graphs"] = (
            f"{len(others)}, {sum(others.values()) / 1e6:.0f} MB ({names}): other build configs or earlier"
            " versions of the default's; safe to delete (built again if a config asks for one)"
        )
    if dec.get("lm"):
        info["lm (on the fly)"] = f"{dec['lm']} ({resolve_packaged_path(dec['lm'])})"
    return info


def is_lm_file(path: Path) -> bool:
    """An n-gram LM file: pocketsphinx's binary trie, or text (plain or gzip) whose first line is
    ARPA's ``\\data\\``."""
    from asrdecode.lm.arpa import open_text
    from asrdecode.lm.sphinx_trie import is_sphinx_trie

    if not path.is_file():
        return False
    if is_sphinx_trie(path):
        return True
    try:
        with open_text(path) as fh:
            for line in fh:
                if line.strip():
                    return line.strip() == "\\data\\"
    except (OSError, UnicodeDecodeError, EOFError):
        return False
    return False


def describe_lm(path: Path) -> dict:
    """An n-gram LM: order, n-grams per order, vocabulary, and what reads it (read whole, so a
    malformed file is a one-line error naming it)."""
    from asrdecode.lm.arpa import check_arpa
    from asrdecode.lm.sphinx_trie import is_sphinx_trie, read_trie_lm

    if is_sphinx_trie(path):
        trie = read_trie_lm(path)
        kind, vocab = "pocketsphinx binary trie LM", trie.vocab
        counts = {k + 1: len(table.words) for k, table in enumerate(trie.orders)}
        use = "decoder.lm (wfst-otf, let) and decoder.rescore_lm; build-graph needs it as ARPA first"
        use += " (scripts/export_sphinx_lm.py)"
    else:
        summary = check_arpa(path)
        kind, vocab, counts = "ARPA LM", summary.vocab, summary.counts
        use = "build-graph (arpa), decoder.lm / small_lm (wfst-otf, let), decoder.rescore_lm"
    words = [w for w in vocab if w not in ("<s>", "</s>", "<unk>")]
    unk = "with <unk>" if "<unk>" in vocab else "no <unk>: a word outside it has probability 0"
    return {
        "kind": kind,
        "file": f"{path} ({path.stat().st_size / 1e6:.1f} MB)",
        "order": str(max(counts, default=0)),
        "n-grams": ", ".join(f"{n:,} {k}-grams" for k, n in sorted(counts.items())),
        "vocabulary": f"{len(words):,} words, {unk}",
        "read by": use,
    }


def describe(path: str) -> dict:
    """Model (.nemo or embedded:NAME), graph folder (graph.pt / graph.safetensors), n-gram LM (ARPA,
    pocketsphinx .lm.bin) or data set."""
    if path.startswith("embedded:") or path.endswith(".nemo"):
        from asrdecode.models.loading import load_model, resolve_model_path

        model = load_model(path)
        return {"file": str(resolve_model_path(path)), **model.describe()}
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder")
    if Path(path).is_dir() and any((Path(path) / f).is_file() for f in ("graph.pt", "graph.safetensors")):
        from asrdecode.graph import describe_graph

        return describe_graph(path)
    if is_lm_file(Path(path)):
        return describe_lm(Path(path))
    return describe_dataset(path)
