"""Real speech through the CLI: pocketsphinx's en-us HMM + an HCLG + the wfst decoder on the
pocketsphinx recording `goforward` (its transcript is the independent reference)."""

import json
import shutil

import pytest
from helpers.cli import read_jsonl, run
from helpers.sphinx_graph import GOFORWARD, ROOT, tiny_sphinx_hclg

CLIP = GOFORWARD


def test_goforward_decodes_with_sphinx_hclg(tmp_path):
    graph = tiny_sphinx_hclg(tmp_path)
    audio = tmp_path / "audio"
    audio.mkdir()
    shutil.copy(CLIP, audio / CLIP.name)
    out = tmp_path / "out"
    printed = run(
        "transcribe",
        str(audio),
        "--model",
        "embedded:sphinx-en-us",
        "--decoder",
        "wfst",
        f"decoder.graph={graph}",
        "decoder.acoustic_scale=0.1538",
        "threads=1",
        "--out",
        str(out),
    )
    (row,) = read_jsonl(out / "transcripts.jsonl")
    assert row["pred_text"] == "go forward ten meters"
    times = [(w["start"], w["end"]) for w in row["words"]]
    assert all(a < b for a, b in times) and all(times[i][1] <= times[i + 1][0] + 1e-6 for i in range(3))
    assert times[0][0] >= 0.0 and times[-1][1] <= row["duration"] + 0.05
    report = json.loads((out / "report.json").read_text())
    assert report["decoder"] == "wfst"
    # the senone scores were made by the search's worker, not for the batch up front; saving the
    # log-probs makes them up front, with the same transcript
    assert report["scores_deferred"] is True
    assert "model: in decode" in " ".join(printed.stdout.replace("│", " ").split())  # a wrapped cell
    saved_run = run(
        "transcribe", str(audio), "--model", "embedded:sphinx-en-us", "--decoder", "wfst",
        f"decoder.graph={graph}", "decoder.acoustic_scale=0.1538", "threads=1",
        "output.save_logprobs=true", "--out", str(tmp_path / "saved"),
    )  # fmt: skip
    (saved,) = read_jsonl(tmp_path / "saved" / "transcripts.jsonl")
    assert saved["pred_text"] == row["pred_text"] and saved["words"] == row["words"]
    assert json.loads((tmp_path / "saved" / "report.json").read_text())["scores_deferred"] is False
    assert "model: in decode" not in " ".join(saved_run.stdout.replace("│", " ").split())


def test_shipped_sphinx_configs_map_pocketsphinx_defaults():
    """configs/sphinx-en-us.yaml and configs/graph/sphinx-en-us.yaml load through the typed config
    loaders and carry pocketsphinx's defaults in asrdecode's cost convention: its final pass's LM
    weight bestpathlw 9.5 -> acoustic_scale = transition_scale = 1/9.5; pocketsphinx's density floor
    (model.density_floor -1); silprob 0.005, fillprob 1e-8; and the graph LM is the committed export
    of en-us.lm.bin. The word insertion penalty is not pocketsphinx's wip 0.65 (-ln(0.65)/6.5 in lw
    6.5 scores) but tuned above it on the tuning sets, for the static path and the default setup."""
    import math

    import yaml

    from asrdecode.config import build_config, dataclass_from_dict
    from asrdecode.decoders.wfst import WfstConfig
    from asrdecode.graph import GraphBuildConfig
    from asrdecode.lm.arpa import check_arpa

    run_cfg = build_config(ROOT / "configs/sphinx-en-us.yaml")
    dec = run_cfg.decoder
    assert isinstance(dec, WfstConfig)
    graph_yaml = yaml.safe_load((ROOT / "configs/graph/sphinx-en-us.yaml").read_text())
    graph = dataclass_from_dict(GraphBuildConfig, graph_yaml)
    lw, bestpath_lw, wip = 6.5, 9.5, 0.65
    assert run_cfg.model.type == "sphinx" and run_cfg.model.topn == 4 and run_cfg.model.density_floor == -1
    assert dec.acoustic_scale == pytest.approx(1 / bestpath_lw, abs=1e-4)
    assert graph.transition_scale == pytest.approx(1 / bestpath_lw, abs=1e-4)
    default = build_config(None, [], default_setup=True).decoder
    for penalty in (dec.word_insertion_penalty, default.word_insertion_penalty):
        assert penalty > -math.log(wip) / lw
    # no word beam (pocketsphinx's wbeam): on the tuning sets it added search errors
    assert dec.word_beam == 0 and default.word_beam == 0
    assert (graph.silprob, graph.fillprob) == (0.005, 1e-8)
    assert check_arpa(ROOT / graph.arpa).counts[1] > 72000  # every pronounceable word of en-us.lm.bin


def test_exact_reading_config_is_the_static_path_with_its_lm_read_exactly():
    """configs/sphinx-en-us-exact.yaml: `wfst-otf` over the HCLG of the exact-readable LM, the static
    path's LM on the fly, the static path's scales, penalty and beam (real-speech.md)."""
    import yaml

    from asrdecode.config import build_config, dataclass_from_dict
    from asrdecode.decoders.wfst_otf import WfstOtfConfig
    from asrdecode.graph import GraphBuildConfig

    exact = build_config(ROOT / "configs/sphinx-en-us-exact.yaml").decoder
    static = build_config(ROOT / "configs/sphinx-en-us.yaml").decoder
    assert isinstance(exact, WfstOtfConfig)
    graph = dataclass_from_dict(
        GraphBuildConfig, yaml.safe_load((ROOT / "configs/graph/sphinx-en-us-exact.yaml").read_text())
    )
    static_graph = dataclass_from_dict(
        GraphBuildConfig, yaml.safe_load((ROOT / "configs/graph/sphinx-en-us.yaml").read_text())
    )
    assert graph.arpa == "data/lm/sphinx-en-us-72k-exact.arpa.gz" and exact.lm == static_graph.arpa
    assert exact.graph == "cache:configs/graph/sphinx-en-us-exact.yaml"
    assert static.graph == "cache:configs/graph/sphinx-en-us.yaml"
    for key in ("acoustic_scale", "word_insertion_penalty", "beam", "min_active"):
        assert getattr(exact, key) == getattr(static, key)
    assert graph.transition_scale == static_graph.transition_scale


def test_batches_queue_on_the_search_workers(tmp_path, monkeypatch):
    """With two search workers each batch is started before the one before it is collected and
    written (its utterances queue behind that batch's on the same workers, and the next batch is
    read meanwhile); the results are those of one batch after another. When starting a batch
    fails, the one queued before it is cancelled, not left running."""
    from click.testing import CliRunner

    from asrdecode.cli import main
    from asrdecode.decoders.base import PendingDecode
    from asrdecode.decoders.wfst import WfstDecoder

    graph = tiny_sphinx_hclg(tmp_path)
    audio = tmp_path / "audio"
    audio.mkdir()
    for k in range(3):
        shutil.copy(CLIP, audio / f"clip{k}.wav")
    events: list[str] = []
    start = WfstDecoder.start

    def recording_start(self, output):
        pending = start(self, output)
        k = sum(e.startswith("start") for e in events)
        events.append(f"start {k}")

        def result():
            events.append(f"result {k}")
            return pending.result()

        def cancel():
            events.append(f"cancel {k}")
            pending.cancel()

        return PendingDecode(result, cancel)

    monkeypatch.setattr(WfstDecoder, "start", recording_start)
    args = [
        "transcribe", str(audio), "--model", "embedded:sphinx-en-us", "--decoder", "wfst",
        f"decoder.graph={graph}", "decoder.acoustic_scale=0.1538", "threads=1", "decoder.threads=2",
        "batch.max_utterances=1",
    ]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert events[:2] == ["start 0", "result 0"]  # the warm-up
    assert events[2:] == ["start 1", "start 2", "result 1", "start 3", "result 2", "result 3"]
    rows = read_jsonl(tmp_path / "out" / "transcripts.jsonl")
    assert [r["pred_text"] for r in rows] == ["go forward ten meters"] * 3

    from asrdecode.pipeline import Transcriber

    start_batch, calls = Transcriber._start_batch, []

    def failing_second(self, utts, began):
        calls.append(len(calls))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return start_batch(self, utts, began)

    monkeypatch.setattr(Transcriber, "_start_batch", failing_second)
    events.clear()
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "stopped")])
    assert result.exit_code != 0 and events[2:] == ["start 1", "cancel 1"]
    assert not (tmp_path / "stopped" / "transcripts.jsonl").exists() or not read_jsonl(
        tmp_path / "stopped" / "transcripts.jsonl"
    )


def test_segments_of_a_long_input_queue_on_the_search_workers(tmp_path, monkeypatch):
    """A long input's segments are decoded in batches that queue as whole inputs' do (each started
    before the one before is collected); the joined transcript is that of one worker."""
    import numpy as np
    import soundfile as sf
    from click.testing import CliRunner

    from asrdecode.cli import main
    from asrdecode.decoders.base import PendingDecode
    from asrdecode.decoders.wfst import WfstDecoder

    graph = tiny_sphinx_hclg(tmp_path)
    audio = tmp_path / "audio"
    audio.mkdir()
    wave, rate = sf.read(CLIP, dtype="int16")
    sf.write(audio / "long.wav", np.concatenate([wave] * 4), rate)
    events: list[str] = []
    start = WfstDecoder.start

    def recording_start(self, output):
        pending = start(self, output)
        events.append("start")

        def result():
            events.append("result")
            return pending.result()

        return PendingDecode(result, pending.cancel)

    monkeypatch.setattr(WfstDecoder, "start", recording_start)
    texts = []
    for threads in (1, 2):
        out = tmp_path / f"out{threads}"
        args = [
            "transcribe", str(audio), "--model", "embedded:sphinx-en-us", "--decoder", "wfst",
            f"decoder.graph={graph}", "decoder.acoustic_scale=0.1538", "threads=1",
            f"decoder.threads={threads}", "batch.segment_seconds=3", "batch.max_seconds=3", "--out", str(out),
        ]  # fmt: skip
        events.clear()
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        (row,) = read_jsonl(out / "transcripts.jsonl")
        texts.append(row["pred_text"])
        segments = events.count("start") - 1  # the warm-up's
        assert segments >= 3 and events[2:5] == ["start", "start", "result"]
    assert texts[0] == texts[1] and texts[0].count("forward") == 4
