"""Saved model outputs: save_logprobs / write_logprobs_meta / read_inputs / load_logprobs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asrdecode.errors import AudioError, InputError, LogprobsError
from asrdecode.io import load_logprobs, logprobs_filename, read_inputs, save_logprobs, write_logprobs_meta

UNITS = ["a", "b", "c"]  # blank is column 3


def make_dir(tmp_path, mats: dict[str, np.ndarray], **kw):
    d = tmp_path / "lp"
    write_logprobs_meta(d, 0.04, 3, UNITS, {"model": "m.nemo"})
    for utt, m in mats.items():
        save_logprobs(d, utt, m, **kw)
    return d


def logp(t: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((t, 4))
    return (x - np.log(np.exp(x).sum(1, keepdims=True))).astype(np.float32)


def test_round_trip_with_sidecar_refs_and_odd_ids(tmp_path):
    mats = {"u1": logp(10, 1), "spk/u 2": logp(25, 2)}
    d = tmp_path / "lp"
    write_logprobs_meta(d, 0.04, 3, UNITS, {"model": "m.nemo"})
    save_logprobs(d, "u1", mats["u1"], text="hello", duration=0.41, record={"speaker": "x"})
    save_logprobs(d, "spk/u 2", mats["spk/u 2"])
    assert (d / logprobs_filename("spk/u 2")).is_file() and "/" not in logprobs_filename("spk/u 2")
    s = read_inputs(d)
    assert s.kind == "logprobs" and sorted(s.ids()) == ["spk/u 2", "u1"]
    assert s.meta["frame_shift"] == 0.04 and s.meta["units"] == UNITS and s.meta["num_columns"] == 4
    assert s.meta["model"] == "m.nemo"
    by = s.by_id()
    assert by["u1"].text == "hello" and by["u1"].duration == 0.41 and by["u1"].record == {"speaker": "x"}
    assert by["spk/u 2"].duration == pytest.approx(25 * 0.04)  # from the .npy header
    for utt, m in mats.items():
        got = load_logprobs(by[utt], s.logprobs_meta)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, m)
        np.testing.assert_array_equal(load_logprobs(by[utt]), m)  # meta read from the folder


def test_sidecar_tolerates_a_cut_line(tmp_path):
    d = make_dir(tmp_path, {})
    save_logprobs(d, "u1", logp(5), text="one")
    with open(d / "utterances.jsonl", "a") as f:
        f.write('{"utt_id": "u2", "te')  # killed mid-write
    save_logprobs(d, "u2", logp(5), text="two")
    assert read_inputs(d).references() == {"u1": "one", "u2": "two"}


def test_torch_tensor_accepted(tmp_path):
    import torch

    d = make_dir(tmp_path, {"u": torch.zeros(3, 4, dtype=torch.float64)})
    assert load_logprobs(read_inputs(d).utterances[0]).shape == (3, 4)


@pytest.mark.parametrize(
    ("write", "problem"),
    [
        (lambda p: np.save(p, np.zeros((5, 7), np.float32)), "7 columns"),
        (lambda p: np.save(p, np.zeros((5, 4), np.float64)), "dtype float64"),
        (lambda p: np.save(p, np.zeros((2, 5, 4), np.float32)), "[T, V]"),
        (lambda p: np.save(p, np.zeros((0, 4), np.float32)), "0 frames"),
        (lambda p: np.save(p, np.full((3, 4), np.nan, np.float32)), "NaN"),
        (lambda p: np.save(p, np.array([{"x": 1}], dtype=object), allow_pickle=True), "pickled"),
        (lambda p: p.write_bytes(b"not numpy at all"), "cannot read"),
    ],
)
def test_bad_npy_files_raise_one_line_errors(tmp_path, write, problem):
    d = make_dir(tmp_path, {"good": logp(4)})
    write(d / "bad.npy")
    s = read_inputs(d)
    with pytest.raises(LogprobsError) as e:
        load_logprobs(s.by_id()["bad"], s.logprobs_meta)
    assert isinstance(e.value, AudioError)
    msg = str(e.value)
    assert str(d / "bad.npy") in msg and problem in msg and "\n" not in msg


def test_truncated_npy(tmp_path):
    d = make_dir(tmp_path, {"u": logp(100)})
    p = d / "u.npy"
    p.write_bytes(p.read_bytes()[:300])
    s = read_inputs(d)
    with pytest.raises(LogprobsError, match="u.npy"):
        load_logprobs(s.utterances[0])
    p.unlink()
    with pytest.raises(LogprobsError, match="not found"):
        load_logprobs(s.utterances[0])


def test_bad_meta(tmp_path):
    d = make_dir(tmp_path, {"u": logp(3)})
    (d / "logprobs.json").write_text(json.dumps({"frame_shift": 0.04, "units": UNITS}))
    with pytest.raises(InputError, match="blank_id"):
        read_inputs(d)
    (d / "logprobs.json").write_text("{")
    with pytest.raises(InputError, match="logprobs.json: invalid JSON"):
        read_inputs(d)


def test_a_full_disk_is_one_line_naming_the_file(tmp_path, monkeypatch):
    """numpy says only "N requested and M written" when the disk fills up."""
    from asrdecode.errors import OutputError

    def short_write(*args, **kwargs):
        raise OSError("11570 requested and 8160 written")

    monkeypatch.setattr(np, "save", short_write)
    with pytest.raises(OutputError, match=r"u1\.npy: cannot write the log-probs: a short write .* disk full"):
        save_logprobs(tmp_path / "lp", "u1", np.zeros((2, 3), np.float32))
