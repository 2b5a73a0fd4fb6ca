"""What a transcription imports is declared: every installed distribution whose modules a
`transcribe` run loads is one of asrdecode's requirements or one of theirs, extras left out, so an
install without extras (`pip install asrdecode`) runs it. The tests' environment has the dev extras
too (ray, hama, ...), which can bring a library in that a run then uses without declaring it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from helpers.cli import FIX, MODEL
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# a run in a fresh interpreter; prints the files of the modules it loaded that were not loaded at
# its start (site's .pth hooks are the environment's, not the run's)
RUN = """
import json, sys
before = set(sys.modules)
from asrdecode.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    files = [getattr(m, "__file__", None) for n, m in list(sys.modules.items()) if n not in before]
    print("MODULE-FILES", json.dumps(sorted({f for f in files if f})))
"""


def required_closure(name: str) -> set[str]:
    """`name` and every distribution it requires, transitively, without extras (markers evaluated
    for this interpreter)."""
    env = {**default_environment(), "extra": ""}
    seen: set[str] = set()
    todo = [canonicalize_name(name)]
    while todo:
        dist = todo.pop()
        if dist in seen:
            continue
        seen.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(canonicalize_name(req.name))
    return seen


def owners(files: list[str]) -> dict[str, str]:
    """The distribution that installed each of `files` (files of no distribution left out)."""
    wanted = {str(Path(f).resolve()) for f in files}
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        for entry in dist.files or []:
            path = str(Path(dist.locate_file(entry)).resolve())
            if path in wanted:
                found[path] = canonicalize_name(dist.metadata["Name"])
    return found


def test_a_transcription_loads_only_declared_distributions(tmp_path):
    out = tmp_path / "out"
    args = ["transcribe", str(FIX / "audio"), "--model", str(MODEL), "--out", str(out), "device=cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULE-FILES "))
    loaded = owners(json.loads(line.split(" ", 1)[1]))
    declared = required_closure("asrdecode")
    undeclared = sorted({d for d in loaded.values() if d not in declared})
    assert not undeclared, f"loaded by a transcription but not required by asrdecode: {undeclared}"
    assert {"torch", "sentencepiece", "soundfile"} <= set(loaded.values())  # the run loaded its libraries


def test_the_requirements_script_prints_them_for_another_torch():
    """scripts/requirements.py (`make test-gpu-versions`): asrdecode's and the dev extra's
    requirements, less the ones named, as pip words."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "requirements.py"
    cmd = [sys.executable, str(script), "--extra", "dev", "--without", "torch", "torchaudio"]
    words = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
    names = {canonicalize_name(Requirement(w).name) for w in words}
    assert {"protobuf", "sentencepiece", "pytest", "kaldi-decoder"} <= names
    assert not names & {"torch", "torchaudio"} and all(";" not in w for w in words)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout
    assert any(w.startswith("torch==") for w in plain.split()) and "pytest" not in plain
