"""`asrdecode bench real-speech --repeats`: each row keeps its fastest run (the seconds its RTFx
counts), every repeat's seconds are kept, and hypotheses that change between repeats are flagged;
`--no-static`: the default setup against pocketsphinx without building the static graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asrdecode.bench import real_speech
from asrdecode.bench.real_speech import ROOT, fastest, main, run_seconds


def ours(features: float, model: float, decode: float, hyps: dict) -> dict:
    stages = {"load": 9.0, "features": features, "model": model, "decode": decode}
    return {"hyps": hyps, "report": {"stage_seconds": stages, "rtfx": 1.0}, "process_seconds": 99.0}


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


def test_no_static_runs_only_the_on_the_fly_rows_and_builds_no_graph(tmp_path, monkeypatch, capsys) -> None:
    """RTFx 6.25 (10 s of audio in 1.6 s) against pocketsphinx's 5: 1.25x."""
    calls: dict[str, list] = {"asrdecode": [], "pocketsphinx": []}

    def fake_asrdecode(manifest, config, graph, out, overrides):
        calls["asrdecode"].append((config, graph, overrides))
        return ours(0.1, 0.5, 1.0, {"ps_goforward": "go forward ten meters"})

    def fake_pocketsphinx(rows, lm):
        calls["pocketsphinx"].append(lm)
        hyps = {row["id"]: "go forward ten meters" for row in rows}
        return {"hyps": hyps, "decode_seconds": 2.0, "audio_seconds": 10.0, "load_seconds": 0.1}

    def no_build(cmd, what):
        raise AssertionError(f"unexpected {what}")

    monkeypatch.setattr(real_speech, "run_asrdecode", fake_asrdecode)
    monkeypatch.setattr(real_speech, "run_pocketsphinx", fake_pocketsphinx)
    monkeypatch.setattr(real_speech, "run_checked", no_build)
    out = tmp_path / "r.json"
    manifest = ROOT / "data/demo/real/manifest.jsonl"
    main(["--no-static", "--on-the-fly", "wfst-otf", "--manifest", str(manifest), "--json", str(out)])
    (result,) = json.loads(out.read_text())["sets"]
    assert list(result["rows"]) == [
        "asrdecode wfst-otf, full LM",
        "pocketsphinx, same LM",
        "pocketsphinx, its own LM",
    ]
    assert [(c, g) for c, g, _ in calls["asrdecode"]] == [(None, None)]  # the default setup
    assert calls["pocketsphinx"] == [ROOT / "data/lm/sphinx-en-us-72k.arpa.gz", None]
    row = result["rows"]["asrdecode wfst-otf, full LM"]
    assert row["rtfx_vs_pocketsphinx"] == pytest.approx(1.25)
    # compared per utterance with each peer (the fake run leaves all but one utterance empty)
    paired = row["paired"]["pocketsphinx, its own LM"]
    assert paired["utterances"] == result["utterances"] == 14
    assert paired["better"] + paired["worse"] + paired["equal"] == 14 and paired["equal"] >= 1
    assert paired["low"] <= paired["wer_difference"] <= paired["high"]
    assert "full LM against pocketsphinx, its own LM, per utterance (14)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no asrdecode row"):
        main(["--no-static", "--manifest", str(manifest), "--json", str(out)])
    assert Path(out).is_file()
