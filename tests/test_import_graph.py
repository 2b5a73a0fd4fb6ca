"""The package's imports point one way: scripts/import_graph.py finds no circle among asrdecode's
modules (function-level imports counted) and no import from a lower layer up to a higher one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import_graph.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_asrdecode_imports_point_one_way():
    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 circles" in proc.stdout and "0 upward imports" in proc.stdout


def test_a_function_level_circle_and_an_upward_import_are_found(tmp_path):
    pkg = tmp_path / "asrdecode"
    (pkg / "decoders").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "errors.py": "",
        "config.py": "from asrdecode.decoders import registry\n",
        "decoders/__init__.py": "",
        # a function-level import closes the circle config -> decoders.registry -> config
        "decoders/registry.py": "def f():\n    from asrdecode import config\n",
        "decoders/typed.py": textwrap.dedent(
            """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:  # never runs: not an import
                from asrdecode.pipeline import Transcriber
            from . import registry
            """
        ),
        "pipeline.py": "",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    proc = run("--package", str(pkg))
    assert proc.returncode == 1
    assert "circle of 2 modules: asrdecode.config asrdecode.decoders.registry" in proc.stdout
    assert "upward: asrdecode.decoders.registry (decoders) imports asrdecode.config (config)" in proc.stdout
    assert "Transcriber" not in proc.stdout and "decoders.typed (decoders) imports" not in proc.stdout
    assert "1 circles (2 modules), 1 upward imports" in proc.stdout
