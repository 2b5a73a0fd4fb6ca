"""`asrdecode bench real-speech --repeats`: each row keeps its fastest run (the seconds its RTFx
counts), every repeat's seconds are kept, and hypotheses that change between repeats are flagged."""

from __future__ import annotations

import pytest

from asrdecode.bench.real_speech import fastest, main, run_seconds


def ours(features: float, model: float, decode: float, hyps: dict) -> dict:
    stages = {"load": 9.0, "features": features, "model": model, "decode": decode}
    return {"hyps": hyps, "report": {"stage_seconds": stages}, "process_seconds": 99.0}


def test_fastest_run_of_each_row() -> None:
    runs = [ours(0.1, 0.5, 2.0, {"a": "x"}), ours(0.1, 0.4, 1.5, {"a": "x"}), ours(0.1, 0.6, 1.9, {"a": "x"})]
    best, seconds, differ = fastest(runs)
    assert best is runs[1] and seconds == pytest.approx([2.6, 2.0, 2.6]) and not differ
    assert run_seconds(runs[1]) == pytest.approx(2.0)  # loading not counted
    peers = [{"hyps": {"a": "x"}, "decode_seconds": s} for s in (3.0, 2.5)]
    assert fastest(peers)[0] is peers[1] and fastest(peers)[1] == [3.0, 2.5]
    _, _, differ = fastest([ours(0.1, 0.5, 2.0, {"a": "x"}), ours(0.1, 0.5, 2.0, {"a": "y"})])
    assert differ


def test_repeats_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit, match="--repeats must be >= 1"):
        main(["--repeats", "0"])
