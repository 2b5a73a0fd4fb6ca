"""Graphs built on first use into the cache folder (`asrdecode.graph.cache`): first build, reuse,
incomplete or stale folders rebuilt with a notice, two processes at once, and `decoder.graph:
cache:CONFIG` through `asrdecode transcribe`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.graph_toy import write_toy

from asrdecode.errors import GraphError
from asrdecode.graph.cache import cache_root, cached_graph, load_graph_config, resolve_graph_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy_yaml(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    toy = write_toy(tmp_path / "toy")
    cfg = tmp_path / "toy.yaml"
    cfg.write_text(
        f"arpa: {toy['arpa']}\nunits: {toy['units']}\nlexicon_type: file\nlexicon: {toy['lexicon']}\n"
        "blank: last\n"
    )
    return cfg


def build(cfg_path: Path) -> tuple[Path, list[str], list[str]]:
    stages, notes = [], []
    folder = cached_graph(
        load_graph_config(cfg_path), lambda n, e, s: stages.append(f"{n} {e}"), notes.append
    )
    return folder, stages, notes


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ASRDECODE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "asrdecode"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "asrdecode"
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_first_use_builds_then_reuses_and_rebuilds_incomplete(toy_yaml, tmp_path):
    folder, stages, notes = build(toy_yaml)
    assert folder.parent == tmp_path / "cache" / "graphs" and folder.name.startswith("tlg-")
    assert stages[-1] == "write done" and "first use" in notes[0]
    assert json.loads((folder / "meta.json").read_text())["kind"] == "TLG"
    again, stages, notes = build(toy_yaml)
    assert again == folder and stages == [] and notes == []
    (folder / "graph.pt").unlink()  # a folder left incomplete
    again, stages, notes = build(toy_yaml)
    assert again == folder and (folder / "graph.pt").is_file() and stages[-1] == "write done"
    assert notes == [f"graph cache {folder}: incomplete or stale, rebuilding"]
    (folder / "meta.json").write_text("{not json")
    assert build(toy_yaml)[2] == notes
    # another config is another folder
    other = tmp_path / "other.yaml"
    other.write_text(toy_yaml.read_text() + "topology: normal\n")
    assert build(other)[0] != folder


def test_two_processes_at_once_build_once(toy_yaml):
    code = (
        "import sys; from asrdecode.graph.cache import cached_graph, load_graph_config; ev = [];"
        "f = cached_graph(load_graph_config(sys.argv[1]), lambda n, e, s: ev.append(n));"
        "print('built' if ev else 'reused', f)"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(toy_yaml)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(o[0] for o in outs) == ["built", "reused"] and outs[0][1] == outs[1][1]


def test_missing_build_config_is_one_line():
    with pytest.raises(GraphError, match="build config nope.yaml not found"):
        resolve_graph_spec("cache:nope.yaml")
    assert resolve_graph_spec("out/graphs/x") == "out/graphs/x"


def test_transcribe_with_a_cache_graph(tmp_path):
    rows = [json.loads(x) for x in (ROOT / "data/demo/synthetic/manifest.jsonl").read_text().splitlines()[:2]]
    manifest = tmp_path / "m.jsonl"
    for row in rows:
        row["audio_filepath"] = str(ROOT / "data/demo/synthetic" / row["audio_filepath"])
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "ASRDECODE_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-m",
        "asrdecode.cli",
        "transcribe",
        str(manifest),
        "--config",
        "configs/wfst.yaml",
    ]
    cmd += ["decoder.graph=cache:configs/graph/demo-ctc-bpe-tlg.yaml"]
    first = subprocess.run(
        [*cmd, "--out", str(tmp_path / "a")], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert "first use" in first.stderr and "graph build: write done" in first.stderr
    second = subprocess.run(
        [*cmd, "--out", str(tmp_path / "b")], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert second.returncode == 0 and "graph build" not in second.stderr
    a = [json.loads(x)["pred_text"] for x in (tmp_path / "a/transcripts.jsonl").read_text().splitlines()]
    b = [json.loads(x)["pred_text"] for x in (tmp_path / "b/transcripts.jsonl").read_text().splitlines()]
    assert a == b and len(a) == 2


def test_a_build_failing_in_its_process_is_one_line(toy_yaml, tmp_path):
    """The build runs in a child process: its failure reaches the caller as one GraphError line
    naming the cache folder and the problem, and no folder is left behind."""
    lexicon = tmp_path / "toy" / "lexicon.txt"
    bad = tmp_path / "bad.yaml"
    bad.write_text(toy_yaml.read_text().replace(str(lexicon), str(tmp_path / "bad-lexicon.txt")))
    (tmp_path / "bad-lexicon.txt").write_text("word\n")  # a word without units
    with pytest.raises(GraphError) as err:
        build(bad)
    assert "\n" not in str(err.value) and str(err.value).startswith("graph cache ")
    assert "bad-lexicon.txt" in str(err.value)
    assert not [p for p in (tmp_path / "cache" / "graphs").iterdir() if p.is_dir()]


@pytest.mark.parametrize("stage", ["G", "write"])
def test_a_killed_first_use_build_is_never_loaded(toy_yaml, tmp_path, stage):
    """SIGKILL to the building run (its process group) exactly when the build reaches a stage:
    nothing in the cache passes as the graph, and the next first use builds it in full."""
    import signal

    from asrdecode.graph.cache import cache_folder, is_cached

    code = (  # the build in this process: its stage events are not relayed from a child, which
        # would go on building while the event travels (a toy graph's write can finish first)
        "import os, signal, sys\n"
        "import asrdecode.graph.cache as cache\n"
        "def on_stage(name, event, seconds):\n"
        "    if name == sys.argv[2] and event == 'start':\n"
        "        os.killpg(0, signal.SIGKILL)\n"
        "def build_here(cfg, folder, on_stage):\n"
        "    cache.build_graph(cfg, folder, force=True, on_stage=on_stage)\n"
        "cache.build_in_child_process = build_here\n"
        "cache.cached_graph(cache.load_graph_config(sys.argv[1]), on_stage)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(toy_yaml), stage], start_new_session=True, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL
    cfg = load_graph_config(toy_yaml)
    assert not is_cached(cfg)
    assert not (cache_folder(cfg) / "meta.json").exists()
    folder, stages, _ = build(toy_yaml)
    assert stages[-1] == "write done" and is_cached(cfg)
    leftovers = [p.name for p in folder.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # the killed build's staging folder was removed by the rebuild
