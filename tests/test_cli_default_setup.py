"""The default setup: `asrdecode transcribe AUDIO --out O` with no --config and no --model transcribes
English with hama's phoneme CTC model, a small TLG built into the cache on first use and
pocketsphinx's full trigram (`en-us.lm.bin`) applied on the fly by `wfst-otf`; the sphinx setup
(`--model embedded:sphinx-en-us`): pocketsphinx's en-us HMM with a small HCLG and the same LM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.wfst_graphs import device_graph

from asrdecode.config import (
    DEFAULT_SETUP,
    MODEL_SETUPS,
    SPHINX_SETUP,
    build_config,
    setup_of,
    uses_default_setup,
)
from asrdecode.decoders.wfst import WfstDecoder
from asrdecode.errors import ConfigError
from asrdecode.models.loading import resolve_packaged_path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "data" / "demo" / "real"
GRAPH_CONFIG = "embedded:configs/graph/hama-en-us-small.yaml"
SPHINX_GRAPH_CONFIG = "embedded:configs/graph/sphinx-en-us-small.yaml"
CLIPS = ("ps_goforward", "ps_tidigits_dhd.2934z", "ps_cards_001")  # short clips, 6.3 s in all
ONE_STATE = {"num_states": 1, "start": 0, "final": [0.0], "arcs": [(0, 1, 1, 0.5, 0)]}


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "asrdecode.cli", *args], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_when_the_default_setup_applies(tmp_path):
    assert uses_default_setup(None, [], REAL)
    assert uses_default_setup(None, ["decoder.type=let", "batch.max_seconds=60"], REAL)
    assert not uses_default_setup(ROOT / "configs/ctc-greedy.yaml", [], REAL)
    assert not uses_default_setup(None, ["model.path=embedded:demo_ctc_bpe"], REAL)
    assert not uses_default_setup(None, ["model.type=nemo-ctc"], REAL)
    assert uses_default_setup(None, ["model.threads=0", "model.topn=0"], REAL)  # the default model tuned
    (tmp_path / "logprobs.json").write_text("{}")
    assert not uses_default_setup(None, [], tmp_path)  # saved log-probs: the decoder follows their model


def test_an_embedded_model_with_a_setup_of_its_own_starts_from_it(tmp_path):
    for model, setup in MODEL_SETUPS.items():
        assert setup_of(None, [f"model.path={model}", "decoder.beam=10"], REAL) == setup
        assert Path(resolve_packaged_path(setup)).is_file()
        assert build_config(None, [f"model.path={model}"], setup=setup).model.path == model
    assert setup_of(None, ["model.path=embedded:hama-ipa-ctc", "model.type=hama"], REAL) is None
    assert setup_of(ROOT / "configs/ctc-greedy.yaml", ["model.path=embedded:hama-ipa-ctc"], REAL) is None
    assert setup_of(None, ["model.path=embedded:demo_ctc_bpe"], REAL) is None
    (tmp_path / "logprobs.json").write_text("{}")
    assert setup_of(None, ["model.path=embedded:hama-ipa-ctc"], tmp_path) is None
    out = run("transcribe", str(REAL), "--model", "embedded:sphinx-en-us", "--print-config").stdout
    assert out.startswith(f"# the model's own setup ({SPHINX_SETUP}")
    assert yaml.safe_load(out)["model"]["type"] == "sphinx"


def test_default_setup_is_hama_on_the_fly():
    cfg = build_config(None, [], default_setup=True)
    assert cfg.model.path == "embedded:hama-ipa-ctc"
    dec = cfg.to_dict()["decoder"]
    assert dec["type"] == "wfst-otf" and dec["graph"] == f"cache:{GRAPH_CONFIG}"
    lm = Path(resolve_packaged_path(dec["lm"]))
    assert lm.name == "en-us.lm.bin" and lm.is_file()
    assert cfg.batch.segment_seconds == 30
    graph = yaml.safe_load(Path(resolve_packaged_path(GRAPH_CONFIG)).read_text())
    for key in ("arpa", "lexicon", "model"):
        assert Path(resolve_packaged_path(graph[key])).is_file()
    # the same files are the repository's configs/*-otf.yaml
    assert (ROOT / "configs/hama-en-us-otf.yaml").resolve() == Path(resolve_packaged_path(DEFAULT_SETUP))
    assert (ROOT / "configs/sphinx-en-us-otf.yaml").resolve() == Path(resolve_packaged_path(SPHINX_SETUP))
    # without the default setup the plain defaults stay: the demo CTC model and its natural decoder
    plain = build_config(None, [])
    assert plain.model.path == "embedded:demo_ctc_bpe" and plain.to_dict()["decoder"] == {"type": "auto"}


def test_the_sphinx_setup_by_its_model():
    assert setup_of(None, ["model.path=embedded:sphinx-en-us"], REAL) == SPHINX_SETUP
    cfg = build_config(None, ["model.path=embedded:sphinx-en-us"], setup=SPHINX_SETUP)
    assert cfg.model.type == "sphinx" and cfg.decoder.graph == f"cache:{SPHINX_GRAPH_CONFIG}"
    assert Path(resolve_packaged_path(cfg.decoder.lm)).name == "en-us.lm.bin"


def test_other_decoder_on_a_setup_keeps_graph_and_drops_foreign_options():
    let = build_config(None, ["decoder.type=let"], setup=SPHINX_SETUP).to_dict()["decoder"]
    assert let["type"] == "let" and let["lm"].endswith("en-us.lm.bin") and let["beam"] == 9.5
    # the sphinx setup's history cap is wfst-otf's (let's groups have group_capacity): left out
    assert build_config(None, [], setup=SPHINX_SETUP).decoder.history_max > 0 and let["history_max"] == 0
    cfg = build_config(None, ["decoder.type=wfst"], setup=SPHINX_SETUP)
    wfst = cfg.to_dict()["decoder"]
    assert wfst["graph"].startswith("cache:") and "lm" not in wfst
    # the preset's LM history pruning, which wfst refuses, is left out too: the decoder can be made
    assert cfg.decoder.history_beam == 0
    WfstDecoder(cfg.decoder, graph=device_graph(ONE_STATE), words={1: "a"})
    with pytest.raises(ConfigError, match="decoder.lm"):  # an option the user gives is still checked
        build_config(None, ["decoder.type=wfst", "decoder.lm=x.arpa"], setup=SPHINX_SETUP)
    with pytest.raises(ConfigError, match="history_beam"):  # refused when the config is built
        build_config(None, ["decoder.type=wfst", "decoder.history_beam=6"], setup=SPHINX_SETUP)
    default = build_config(None, ["decoder.type=let"], default_setup=True).to_dict()["decoder"]
    assert default["graph"] == f"cache:{GRAPH_CONFIG}" and default["acoustic_scale"] == 1.5


def test_print_config_names_the_default():
    out = run("transcribe", str(REAL), "--print-config").stdout
    assert out.startswith(f"# the default setup ({DEFAULT_SETUP}")
    assert yaml.safe_load(out)["decoder"]["type"] == "wfst-otf"
    own = yaml.safe_load(
        run("transcribe", str(REAL), "--model", "embedded:demo_ctc_bpe", "--print-config").stdout
    )
    assert own["model"]["path"] == "embedded:demo_ctc_bpe" and own["decoder"] == {"type": "auto"}


def test_info_without_a_path_describes_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("COLUMNS", "250")
    out = run("info").stdout
    for fact in (
        "embedded:configs/hama-en-us-otf.yaml",
        "embedded:hama-ipa-ctc",
        "wfst-otf (beam 10",
        "en-us.lm.bin",
    ):
        assert fact in out
    assert str(tmp_path / "empty-cache" / "graphs" / "tlg-") in out and "not built yet" in out


def test_info_lists_the_other_cached_graphs(tmp_path, monkeypatch):
    from asrdecode.graph.cache import cache_folder, load_graph_config
    from asrdecode.info import describe_default_setup

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path))
    assert "other cached graphs" not in describe_default_setup()  # no cache folder at all
    default = cache_folder(load_graph_config(resolve_packaged_path(GRAPH_CONFIG)))
    for folder, size in ((default, 10), (tmp_path / "graphs" / "hclg-sphinx-0123456789abcdef", 2_000_000)):
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text("{}")
        (folder / "graph.pt").write_bytes(b"\0" * size)
    (tmp_path / "graphs" / "hclg-sphinx-0123456789abcdef.lock").write_text("")
    (tmp_path / "graphs" / "a-stage-without-meta").mkdir()  # not a graph folder
    stage = tmp_path / "graphs" / ".hclg-sphinx-0123456789abcdef.building-1@host-x"  # a build's stage
    stage.mkdir()
    (stage / "meta.json").write_text("{}")
    row = describe_default_setup()["other cached graphs"]
    assert row.startswith("1, 2 MB (hclg-sphinx-0123456789abcdef)") and default.name not in row


@pytest.fixture(scope="module")
def three_clips(tmp_path_factory) -> Path:
    rows = [json.loads(line) for line in (REAL / "manifest.jsonl").read_text().splitlines()]
    picked = [
        {**r, "audio_filepath": str(REAL / r["audio_filepath"])}
        for r in rows
        if Path(r["audio_filepath"]).stem in CLIPS
    ]
    assert len(picked) == len(CLIPS)
    path = tmp_path_factory.mktemp("default") / "manifest.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in picked))
    return path


def test_first_use_builds_then_reuses_and_let_agrees(three_clips, tmp_path):
    """No options: the TLG is built into the (suite's private) cache with named stages, the run
    reports hama's model and wfst-otf and gets every word of these clips; a second run reuses graph
    and LM tables (no build) and gives the same words; `--decoder let` (paper 002, same graph and
    LMs) finds the same words."""
    first = run("transcribe", str(three_clips), "--out", str(tmp_path / "a"))
    cache = Path(os.environ["ASRDECODE_CACHE"])
    assert "graph build: LG done" in first.stderr or "graph cache: building" not in first.stderr
    assert list((cache / "graphs").glob("tlg-*/meta.json"))
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["model"] == "embedded:hama-ipa-ctc" and report["decoder"] == "wfst-otf"
    assert report["wer"] == 0.0
    second = run("transcribe", str(three_clips), "--out", str(tmp_path / "b"))
    assert "graph build" not in second.stderr
    let = run("transcribe", str(three_clips), "--decoder", "let", "--out", str(tmp_path / "c"))
    texts = {
        name: {
            r["utt_id"]: r["pred_text"]
            for r in map(json.loads, (tmp_path / name / "transcripts.jsonl").open())
        }
        for name in ("a", "b", "c")
    }
    assert texts["a"] == texts["b"] == texts["c"]
    assert all(texts["a"].values()) and let.returncode == 0


def test_sphinx_setup_first_use_and_its_diagnosis(three_clips, tmp_path):
    """`--model embedded:sphinx-en-us`: the small HCLG is built into the cache with named stages,
    a second run reuses graph and LM tables, `--decoder let` finds the same words, and the
    diagnosis against pocketsphinx runs on that setup."""
    sphinx = ("--model", "embedded:sphinx-en-us")
    first = run("transcribe", str(three_clips), *sphinx, "--out", str(tmp_path / "a"))
    cache = Path(os.environ["ASRDECODE_CACHE"])
    assert "graph build: determinize done" in first.stderr or "graph cache: building" not in first.stderr
    assert list((cache / "graphs").glob("hclg-sphinx-*/meta.json"))
    assert list((cache / "lm").glob("difference-*.safetensors"))
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["model"] == "embedded:sphinx-en-us" and report["decoder"] == "wfst-otf"
    second = run("transcribe", str(three_clips), *sphinx, "--out", str(tmp_path / "b"))
    assert "graph build" not in second.stderr
    let = run("transcribe", str(three_clips), *sphinx, "--decoder", "let", "--out", str(tmp_path / "c"))
    texts = {
        name: {
            r["utt_id"]: r["pred_text"]
            for r in map(json.loads, (tmp_path / name / "transcripts.jsonl").open())
        }
        for name in ("a", "b", "c")
    }
    assert texts["a"] == texts["b"] == texts["c"]
    assert all(texts["a"].values()) and let.returncode == 0
    # the diagnosis against pocketsphinx runs on the sphinx setup too: forced alignment through the
    # small graph plus the LM difference of the words gives our own 1-best its decoded cost
    run(
        "bench", "diagnose-pocketsphinx", str(three_clips), "--config", "sphinx-otf", "--json",
        str(tmp_path / "diagnosis.json"),
    )  # fmt: skip
    diagnosis = json.loads((tmp_path / "diagnosis.json").read_text())
    # pocketsphinx gets the config's decoder.lm: for the sphinx setup its own en-us.lm.bin
    assert diagnosis["decoder"] == "wfst-otf" and Path(diagnosis["lm"]).name == "en-us.lm.bin"
    rows = diagnosis["utterances"]
    assert {r["id"]: r["asrdecode"] for r in rows} == texts["a"]
    for r in rows:
        assert r["asrdecode_forced_cost"] == pytest.approx(r["asrdecode_cost"], rel=1e-6, abs=1e-3)
        assert r["verdict"] in ("same", "model differs", "search error", "unreachable")
