"""Mutated inputs through whole runs: `transcribe` on a mutated manifest and audio, resuming into a
folder with mutated transcripts.jsonl / errors.jsonl, `build-graph` on a mutated lexicon, units
and ARPA, loading a mutated graph folder, reading a mutated saved log-prob folder, MP3 audio.
The property: only `AsrDecodeError` or a result; nothing is written outside the output folder;
a resumed folder's lines all parse, each utterance once."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers.fuzz import case_dir, cuts, edits, json_values, mutate, only_asrdecode_errors
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests/fixtures/nemo/ctc_bpe.nemo"
CLIPS = sorted((ROOT / "tests/fixtures/nemo/audio").glob("*.wav"))[:2]
from helpers.graph_toy import toy_config, write_toy  # noqa: E402


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-runs")


def tree_state(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file and folder under root, except under `skip`."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == skip or skip in here.parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            if here / name == skip:
                continue
            st_ = (here / name).lstat()
            state[str(here / name)] = (st_.st_size, st_.st_mtime_ns)
    return state


@pytest.fixture(scope="module")
def pipeline_config():
    from asrdecode.config import build_config

    return build_config(None, [f"model.path={MODEL}", "threads=1", "batch.max_utterances=2"])


def transcribe(cfg, input_path: Path, out: Path) -> None:
    from asrdecode.pipeline import Transcriber

    Transcriber(cfg, input_path, out).run()


@given(edits=edits, cut=cuts, audio_edits=edits)
def test_transcribe_mutated_manifest_and_audio(scratch, pipeline_config, edits, cut, audio_edits):
    """A manifest and one of its WAVs mutated; the run's cwd is the case folder: nothing in it but
    --out may change."""
    folder = case_dir(scratch, "run")
    wav = folder / "a.wav"
    wav.write_bytes(mutate(CLIPS[0].read_bytes(), audio_edits, None))
    (folder / "b.wav").write_bytes(CLIPS[1].read_bytes())
    manifest = "".join(
        json.dumps({"audio_filepath": name, "duration": 1.0, "text": "a b"}) + "\n"
        for name in ("a.wav", "b.wav")
    )
    (folder / "m.jsonl").write_bytes(mutate(manifest.encode(), edits, cut))
    out = folder / "out"
    before = tree_state(folder, out)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        only_asrdecode_errors(lambda: transcribe(pipeline_config, folder / "m.jsonl", out))
    finally:
        os.chdir(cwd)
    assert tree_state(folder, out) == before
    if (out / "transcripts.jsonl").exists():
        rows = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
        assert len({r["utt_id"] for r in rows}) == len(rows)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, pipeline_config) -> dict[str, bytes]:
    """transcripts.jsonl and errors.jsonl of a finished run over two clips and a missing file."""
    folder = tmp_path_factory.mktemp("finished")
    manifest = folder / "m.jsonl"
    entries = [*map(str, CLIPS), str(folder / "missing.wav")]
    manifest.write_text("".join(json.dumps({"audio_filepath": p, "duration": 1.0}) + "\n" for p in entries))
    transcribe(pipeline_config, manifest, folder / "out")
    return {name: (folder / "out" / name).read_bytes() for name in ("transcripts.jsonl", "errors.jsonl")}


@pytest.mark.parametrize("name", ["transcripts.jsonl", "errors.jsonl"])
@given(edits=edits, cut=cuts, record=json_values)
def test_resume_from_mutated_outputs(scratch, finished, name, edits, cut, record):
    """Resuming into a folder whose transcripts.jsonl / errors.jsonl were damaged: the writer keeps
    the lines that fit the record schema and every line it leaves parses, each utterance once."""
    from asrdecode.io import OutputWriter

    out = case_dir(scratch, "resume")
    for other, data in finished.items():
        (out / other).write_bytes(data)
    damaged = mutate(finished[name], edits, cut) + json.dumps(record).encode() + b"\n"
    (out / name).write_bytes(damaged)

    def resume():
        with OutputWriter(out) as writer:
            writer.done_ids()
        rows = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
        assert len({r["utt_id"] for r in rows}) == len(rows)
        assert len((out / "text").read_text().splitlines()) == len(rows)

    only_asrdecode_errors(resume)


@pytest.mark.parametrize("member", ["units", "lexicon", "arpa"])
@given(edits=edits, cut=cuts)
def test_build_graph_from_mutated_inputs(scratch, member, edits, cut):
    from asrdecode.graph import build_graph

    folder = case_dir(scratch, f"build-{member}")
    paths = write_toy(folder / "in")
    paths[member].write_bytes(mutate(paths[member].read_bytes(), edits, cut))
    only_asrdecode_errors(lambda: build_graph(toy_config(paths, topology="compact"), folder / "g"))


@pytest.fixture(scope="module")
def graph_files(tmp_path_factory) -> dict[str, bytes]:
    from asrdecode.graph import build_graph

    folder = tmp_path_factory.mktemp("graph")
    build_graph(toy_config(write_toy(folder / "in"), topology="compact"), folder / "g")
    return {p.name: p.read_bytes() for p in (folder / "g").iterdir() if p.is_file()}


@given(
    member=st.sampled_from(["graph.safetensors", "graph.pt", "words.txt", "units.txt", "meta.json"]),
    edits=edits,
    cut=cuts,
)
def test_load_mutated_graph_folder(scratch, graph_files, member, edits, cut):
    folder = case_dir(scratch, "graph")
    for name, data in graph_files.items():
        if name == "graph.safetensors" and member == "graph.pt":
            continue  # graph.pt is read when it is the only graph file
        (folder / name).write_bytes(mutate(data, edits, cut) if name == member else data)
    only_asrdecode_errors(lambda: _checked_graph(folder))


@given(key=st.sampled_from(["kind", "sizes", "num_columns", "blank_column", "words"]), value=json_values)
def test_graph_folder_meta_values(scratch, graph_files, key, value):
    """meta.json with any JSON value at the keys it declares the graph by."""
    folder = case_dir(scratch, "graph")
    for name, data in graph_files.items():
        (folder / name).write_bytes(data)
    meta = json.loads(graph_files["meta.json"])
    (folder / "meta.json").write_text(json.dumps({**meta, key: value}))
    only_asrdecode_errors(lambda: _checked_graph(folder))


def _checked_graph(folder: Path) -> None:
    """Load a graph folder; what loads outputs only words of its words.txt, with finite weights."""
    from asrdecode.api import load_graph

    graph, words = load_graph(str(folder))
    assert not words or graph.num_arcs == 0 or int(graph.olabel.max()) <= max(words)
    assert not bool(graph.weight.isnan().any())


@given(meta=json_values, key=st.sampled_from(["frame_shift", "blank_id", "units", "utterances", "dtype"]))
def test_saved_logprob_folder(scratch, meta, key):
    from asrdecode.io.manifests import load_logprobs, read_inputs

    folder = case_dir(scratch, "logprobs")
    good = {"frame_shift": 0.04, "blank_id": 2, "units": ["a", "b"], "utterances": {"u": {"text": "a"}}}
    (folder / "logprobs.json").write_text(json.dumps({**good, key: meta}))
    np.save(folder / "u.npy", np.log(np.full((5, 3), 1 / 3, dtype=np.float32)))

    def read():
        inputs = read_inputs(folder)
        for utt in inputs.utterances:
            load_logprobs(utt, inputs.logprobs_meta)

    only_asrdecode_errors(read)


@pytest.fixture(scope="module")
def mp3_bytes() -> bytes:
    buf = io.BytesIO()
    sf.write(buf, (0.1 * np.sin(np.arange(8000) / 5.0)).astype(np.float32), 16000, format="MP3")
    return buf.getvalue()


@given(edits=edits, cut=cuts)
def test_mp3_audio(scratch, mp3_bytes, edits, cut):
    from asrdecode.audio.loading import cut_short_warning, load_audio
    from asrdecode.io.manifests import Utterance

    path = case_dir(scratch, "mp3") / "a.mp3"
    path.write_bytes(mutate(mp3_bytes, edits, cut))
    only_asrdecode_errors(lambda: load_audio(Utterance("a", str(path))))
    only_asrdecode_errors(lambda: cut_short_warning(Utterance("a", str(path))))
