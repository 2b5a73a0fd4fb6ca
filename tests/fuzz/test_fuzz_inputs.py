"""Mutated inputs of every format a user can hand asrdecode: only `AsrDecodeError` (a one-line
message) or a correct result comes out, never another exception; nothing runs longer than a few
seconds, and nothing is written outside the given folders.

Formats: ARPA, pocketsphinx binary trie LM, JSONL manifest, Kaldi data dir files, WAV / FLAC / OGG
audio bytes, M4A (AAC) / WebM (Opus) read by FFmpeg, `.nemo` members (config YAML, weights), graph
meta.json, run config YAML. Each starts
from a valid file and flips, inserts, deletes or truncates bytes (or, for JSON/YAML, replaces
values with arbitrary JSON)."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from helpers.fuzz import SECONDS, case_dir, cuts, edits, json_values, mutate, only_asrdecode_errors  # noqa: F401
from hypothesis import given
from hypothesis import strategies as st

from asrdecode.audio.containers import encode_audio
from asrdecode.errors import AsrDecodeError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One folder per module: every case overwrites the same files (10,000 cases must not leave
    10,000 folders behind)."""
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def originals() -> dict[str, bytes]:
    tone = (0.1 * np.sin(np.arange(8000) / 5.0)).astype(np.float32)
    audio = {}
    for fmt in ("WAV", "FLAC", "OGG"):
        buf = io.BytesIO()
        sf.write(buf, tone, 16000, format=fmt)
        audio[fmt] = buf.getvalue()
    buf = io.BytesIO()
    sf.write(buf, np.tile(tone, 5), 16000, format="WAV")
    audio["long WAV"] = buf.getvalue()  # 2.5 s: longer than a resampling piece of 1 s
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("M4A", "WEBM"):  # read by FFmpeg (PyAV)
            path = f"{tmp}/a.{fmt.lower()}"
            encode_audio(path, [tone[:, None]], 16000)
            audio[fmt] = Path(path).read_bytes()
    return {
        "arpa": (ROOT / "data/demo/otf/small-lm.arpa").read_bytes(),
        "manifest": (ROOT / "data/demo/real/manifest.jsonl").read_bytes()[:1500],
        **{f"audio_{k}": v for k, v in audio.items()},
    }


@given(edits=edits, cut=cuts)
def test_arpa(originals, scratch, edits, cut):
    from asrdecode.lm.ngram_tensor import BatchedNgramLM

    path = case_dir(scratch, "arpa") / "lm.arpa"
    path.write_bytes(mutate(originals["arpa"], edits, cut))
    only_asrdecode_errors(lambda: BatchedNgramLM.from_arpa(path))


@given(edits=edits, cut=cuts)
def test_sphinx_trie_lm(scratch, edits, cut):
    from asrdecode.lm.sphinx_trie import read_trie_lm
    from asrdecode.models.loading import resolve_packaged_path

    head = Path(resolve_packaged_path("embedded:sphinx-en-us/../en-us.lm.bin")).read_bytes()[:300000]
    path = case_dir(scratch, "trie") / "lm.bin"
    path.write_bytes(mutate(head, edits, cut))
    only_asrdecode_errors(lambda: read_trie_lm(path))


@given(edits=edits, cut=cuts)
def test_manifest(originals, scratch, edits, cut):
    from asrdecode.io.manifests import read_inputs

    folder = case_dir(scratch, "manifest")
    path = folder / "m.jsonl"
    path.write_bytes(mutate(originals["manifest"], edits, cut))
    only_asrdecode_errors(lambda: read_inputs(path))


@given(wav_scp=st.text(max_size=200), segments=st.text(max_size=200), text=st.text(max_size=200))
def test_kaldi_dir(scratch, wav_scp, segments, text):
    from asrdecode.io.manifests import read_inputs

    folder = case_dir(scratch, "kaldi")
    (folder / "wav.scp").write_text(wav_scp)
    (folder / "segments").write_text(segments)
    (folder / "text").write_text(text)
    only_asrdecode_errors(lambda: read_inputs(folder))


@pytest.mark.parametrize("fmt", ["WAV", "FLAC", "OGG", "M4A", "WEBM"])
@given(edits=edits, cut=cuts)
def test_audio(originals, scratch, fmt, edits, cut):
    from asrdecode.audio.loading import load_audio
    from asrdecode.io.manifests import Utterance

    path = case_dir(scratch, "audio") / f"a.{fmt.lower()}"
    path.write_bytes(mutate(originals[f"audio_{fmt}"], edits, cut))
    only_asrdecode_errors(lambda: load_audio(Utterance("a", str(path))))


@given(edits=edits, cut=cuts)
def test_audio_resampled_as_it_is_read(originals, scratch, edits, cut):
    """A damaged long WAV read with a target rate (resampled piece by piece as it is read)."""
    from unittest import mock

    import asrdecode.audio.loading as loading
    from asrdecode.io.manifests import Utterance

    path = case_dir(scratch, "audio") / "long.wav"
    path.write_bytes(mutate(originals["audio_long WAV"], edits, cut))
    with mock.patch.object(loading, "RESAMPLE_PIECE_SECONDS", 1):
        only_asrdecode_errors(lambda: loading.load_audio(Utterance("a", str(path)), target_sr=22050))


def _nemo_members(name: str) -> dict[str, bytes]:
    with tarfile.open(ROOT / f"tests/fixtures/nemo/{name}.nemo") as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isreg()}


NEMO = {name: _nemo_members(name) for name in ("ctc_bpe", "aed_canary2")}


def _leaf_paths(node, prefix=()):
    """Every scalar's key path in a config (lists by index)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
    if items is None:
        yield prefix
        return
    for key, value in items:
        yield from _leaf_paths(value, (*prefix, key))


AED_CONFIG = yaml.safe_load(NEMO["aed_canary2"]["./model_config.yaml"])
AED_PATHS = [
    p for p in _leaf_paths(AED_CONFIG)
    if p[0] in ("encoder", "transf_decoder", "transf_encoder", "head", "tokenizer", "prompt_defaults",
                "prompt_format", "model_defaults", "preprocessor")
]  # fmt: skip
CONFIG_VALUES = st.sampled_from(
    [0, -1, 1, 3, 2.5, "x", None, True, [], {}, "nemo:../x", "<|en|>", "\n", 10**12]
)


@given(path=st.sampled_from(AED_PATHS), value=CONFIG_VALUES)
def test_aed_config_values(scratch, path, value):
    """A Canary config with one value replaced (a size of 0, -1 or 10**12, a string, a list, ...):
    loading it and writing its prompt end in a model or one line."""
    from asrdecode.models.loading import load_model

    cfg = json.loads(json.dumps(AED_CONFIG))
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    members = {**NEMO["aed_canary2"], "./model_config.yaml": yaml.safe_dump(cfg, sort_keys=False).encode()}
    archive = case_dir(scratch, "nemo") / "aed.nemo"
    with tarfile.open(archive, "w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))

    def load():
        model = load_model(str(archive))
        if model.has_languages():
            model.prompt_ids()

    only_asrdecode_errors(load)


@pytest.mark.parametrize("model", sorted(NEMO))
@pytest.mark.parametrize("member", ["./model_config.yaml", "./model_weights.ckpt"])
@given(edits=edits, cut=cuts)
def test_nemo_members(scratch, model, member, edits, cut):
    from asrdecode.models import load_nemo

    path = case_dir(scratch, "nemo") / "m.nemo"
    with tarfile.open(path, "w") as tf:
        for name, data in NEMO[model].items():
            data = mutate(data, edits, cut) if name == member else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    only_asrdecode_errors(lambda: load_nemo(path))


@given(meta=json_values)
def test_graph_meta(scratch, meta):
    from asrdecode.graph.staging import read_graph_meta

    path = case_dir(scratch, "meta") / "meta.json"
    path.write_text(json.dumps(meta))
    only_asrdecode_errors(lambda: read_graph_meta(path))


@given(tree=json_values, key=st.sampled_from(["model", "decoder", "batch", "features", "output", "device"]))
def test_run_config_yaml(scratch, tree, key):
    import yaml

    from asrdecode.config import build_config

    path = case_dir(scratch, "cfg") / "c.yaml"
    path.write_text(
        yaml.safe_dump({key: tree, "decoder": {"type": "ctc-greedy"}} if key != "decoder" else {key: tree})
    )
    only_asrdecode_errors(lambda: build_config(path))


@given(edits=edits, cut=cuts)
def test_run_config_bytes(scratch, edits, cut):
    """A shipped config's bytes mutated: text that is not UTF-8, numbers of thousands of digits."""
    from asrdecode.config import build_config

    path = case_dir(scratch, "cfg") / "c.yaml"
    path.write_bytes(mutate((ROOT / "configs/ctc-beam.yaml").read_bytes(), edits, cut))
    only_asrdecode_errors(lambda: build_config(path))


NESTINGS = st.tuples(st.integers(1, 20_000), st.sampled_from(["list", "mapping"]))


def _nested(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a": ' * depth + "1" + "}" * depth


@given(nesting=NESTINGS, where=st.sampled_from(["manifest", "config", "override"]))
def test_nested_values(scratch, nesting, where):
    """Values nested up to 20,000 levels deep in a manifest line, a config file or an override
    (Python's parsers recurse: a RecursionError is not a message)."""
    from asrdecode.config import build_config
    from asrdecode.io.manifests import read_inputs

    folder = case_dir(scratch, "nested")
    value = _nested(*nesting)
    if where == "manifest":
        (folder / "m.jsonl").write_text('{"audio_filepath": "a.wav", "duration": 1, "k": ' + value + "}\n")
        only_asrdecode_errors(lambda: read_inputs(folder / "m.jsonl"))
    elif where == "config":
        (folder / "c.yaml").write_text("decoder:\n  type: wfst\n  boost: " + value + "\n")
        only_asrdecode_errors(lambda: build_config(folder / "c.yaml"))
    else:
        only_asrdecode_errors(lambda: build_config(None, ["decoder.type=wfst", "decoder.boost=" + value]))


@given(
    rate=st.integers(0, (1 << 32) - 1),
    peak=st.floats(width=32, allow_nan=True, allow_infinity=True),
    channels=st.integers(1, 3),
)
def test_wav_header_rate_and_sample_values(scratch, rate, peak, channels):
    """Any sample rate a WAV header can declare and any float sample value: a one-line error, or
    samples a model can take (finite, within `MAX_SAMPLE`)."""
    import struct

    from asrdecode.audio.loading import MAX_SAMPLE, load_audio
    from asrdecode.io.manifests import Utterance

    x = np.zeros((4000, channels), np.float32)
    x[10] = peak
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format="WAV", subtype="FLOAT")
    data = bytearray(buf.getvalue())
    data[24:28] = struct.pack("<I", rate)  # the fmt chunk's sample rate
    path = case_dir(scratch, "wav") / "a.wav"
    path.write_bytes(bytes(data))
    got = {}
    only_asrdecode_errors(lambda: got.update(result=load_audio(Utterance("a", str(path)))))
    if "result" in got:
        samples, _ = got["result"]
        assert np.isfinite(samples).all() and np.abs(samples).max() <= MAX_SAMPLE


def test_kaldi_entry_with_an_unknown_home(scratch):
    """wav.scp naming `~0` (the home of a user that does not exist), found by `make fuzz`: the
    path is taken as written, and reading it is a one-line error, not a RuntimeError."""
    from asrdecode.audio.loading import load_audio
    from asrdecode.io.manifests import read_inputs

    folder = case_dir(scratch, "home")
    (folder / "wav.scp").write_text("0 ~0\n")
    utts = read_inputs(folder).utterances
    assert [u.utt_id for u in utts] == ["0"]
    with pytest.raises(AsrDecodeError, match="~0"):
        load_audio(utts[0])


def test_decoder_options_without_a_type_with_odd_keys(scratch):
    """A `decoder:` section with no type and a key that is a newline, or keys of mixed types, found
    by `make fuzz`: one line naming the keys (escaped), not a message cut in two or a TypeError."""
    import yaml

    from asrdecode.config import build_config

    path = case_dir(scratch, "cfg") / "c.yaml"
    for section in ({"\n": None}, {1: 2, "beam": 3}):
        path.write_text(yaml.safe_dump({"decoder": section}))
        with pytest.raises(AsrDecodeError) as err:
            build_config(path)
        assert "\n" not in str(err.value) and "need an explicit decoder.type" in str(err.value)
