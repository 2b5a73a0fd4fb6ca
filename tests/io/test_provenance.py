"""What made an output folder's results: setup.json refuses a resume by another setup, and resumed
lines of inputs that are gone or now name another file move to stale.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asrdecode.config import build_config
from asrdecode.decoders.base import DecodeResult, Word
from asrdecode.errors import OutputError
from asrdecode.io import OutputWriter, Utterance
from asrdecode.io.provenance import file_identity, run_setup, same_source, setup_differences, source_of


def utt(name: str, folder: Path, duration: float = 1.0) -> Utterance:
    path = str(folder / f"{name}.wav")
    return Utterance(name, path, duration=duration, record={"audio_filepath": path, "duration": duration})


def result() -> DecodeResult:
    return DecodeResult(words=[Word("hi", 0.1, 0.3)], score=-1.0)


def test_the_setup_names_result_changing_settings_and_file_contents(tmp_path):
    model = tmp_path / "m.nemo"
    model.write_bytes(b"x" * 300_000)
    base = run_setup(build_config(None, [f"model.path={model}", "decoder.type=ctc-greedy"]))
    assert base["model.path"] == str(model) and "model.path:file" in base
    same = run_setup(
        build_config(None, [f"model.path={model}", "decoder.type=ctc-greedy", "model.threads=3"])
    )
    assert same == base  # threads change speed, not transcripts
    other = run_setup(build_config(None, [f"model.path={model}", "decoder.type=ctc-beam"]))
    assert setup_differences(base, other).startswith('decoder.type "ctc-greedy", now "ctc-beam"')
    model.write_bytes(b"x" * 150_000 + b"y" + b"x" * 149_999)  # retrained: same path, same size
    changed = run_setup(build_config(None, [f"model.path={model}", "decoder.type=ctc-greedy"]))
    assert setup_differences(base, changed) == "model.path: the file's contents changed"
    assert "missing or damaged" in setup_differences(None, base)


def test_file_identity_of_small_files_and_folders(tmp_path):
    (tmp_path / "a").write_bytes(b"abc")
    first = file_identity(tmp_path)
    assert file_identity(tmp_path / "a").startswith("3:")
    (tmp_path / "a").write_bytes(b"abd")
    assert file_identity(tmp_path) != first


def test_a_folder_of_another_setup_is_refused_and_kept(tmp_path):
    out, setup = tmp_path / "out", {"model.path": "a.nemo", "decoder.type": "auto"}
    with OutputWriter(out, setup=setup) as w:
        w.write_results([utt("u1", tmp_path)], [result()])
    before = (out / "transcripts.jsonl").read_bytes()
    with pytest.raises(OutputError, match=r'model.path "a.nemo", now "b.nemo".*--overwrite'):
        OutputWriter(out, setup={**setup, "model.path": "b.nemo"})
    assert (out / "transcripts.jsonl").read_bytes() == before
    OutputWriter(out, setup=setup).close()  # the same setup resumes (the lock was released)
    with OutputWriter(out, setup={**setup, "model.path": "b.nemo"}, overwrite=True) as w:
        assert w.done_ids() == set()
    assert json.loads((out / "setup.json").read_text())["settings"]["model.path"] == "b.nemo"
    (out / "setup.json").write_text("{damaged")
    OutputWriter(out, setup=setup).close()  # no results: the setup is simply recorded
    with OutputWriter(out, setup=setup) as w:
        w.write_results([utt("u1", tmp_path)], [result()])
    (out / "setup.json").write_text("[]")
    with pytest.raises(OutputError, match="setup.json is missing or damaged"):
        OutputWriter(out, setup=setup)


def test_results_of_other_inputs_move_to_stale_jsonl(tmp_path):
    out = tmp_path / "out"
    kept, gone, moved = utt("kept", tmp_path), utt("gone", tmp_path), utt("moved", tmp_path)
    with OutputWriter(out) as w:
        w.write_results([kept, gone, moved], [result()] * 3)
    now_moved = utt("moved", tmp_path / "elsewhere")  # the id now names another file
    sources = {u.utt_id: source_of(u) for u in (kept, now_moved)}
    w = OutputWriter(out, sources=sources)
    assert w.done_ids() == {"kept"}
    assert len(w.warnings) == 1 and "'gone'" in w.warnings[0] and "'moved'" in w.warnings[0]
    w.close()
    assert [json.loads(x)["utt_id"] for x in (out / "transcripts.jsonl").read_text().splitlines()] == ["kept"]
    assert [json.loads(x)["utt_id"] for x in (out / "stale.jsonl").read_text().splitlines()] == [
        "gone",
        "moved",
    ]
    assert (out / "text").read_text() == "kept hi\n"


def test_same_source_compares_file_offset_and_duration(tmp_path):
    one = utt("a", tmp_path, duration=2.0)
    record = {"audio_filepath": str(tmp_path / "a.wav"), "duration": 2.0}
    assert same_source(record, source_of(one))
    assert not same_source({**record, "duration": 3.0}, source_of(one))
    assert not same_source({**record, "offset": 1.0}, source_of(one))
    assert not same_source({**record, "audio_filepath": str(tmp_path / "b.wav")}, source_of(one))
    assert same_source({"utt_id": "a"}, source_of(one))  # a record that does not say: by its id


def test_kept_segments_count_as_results_of_their_setup(tmp_path):
    """A long input's kept segments (no transcript line yet) are results: another setup is
    refused, --overwrite removes them, and those of an input whose line is written go."""
    out, setup = tmp_path / "out", {"model.path": "a.nemo"}
    OutputWriter(out, setup=setup).close()
    (out / "segments").mkdir()
    (out / "segments" / "long.jsonl").write_text("{}\n")
    with pytest.raises(OutputError, match="another setup"):
        OutputWriter(out, setup={"model.path": "b.nemo"})
    OutputWriter(out, setup={"model.path": "b.nemo"}, overwrite=True).close()
    assert not (out / "segments" / "long.jsonl").exists()
    with OutputWriter(out, setup=setup, overwrite=True) as w:
        w.write_results([utt("u1", tmp_path)], [result()])
    (out / "segments" / "u1.jsonl").write_text("{}\n")  # killed before it was removed
    OutputWriter(out, setup=setup).close()
    assert not (out / "segments" / "u1.jsonl").exists()
