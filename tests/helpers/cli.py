"""Running the `asrdecode` CLI in a subprocess, and the NeMo fixture model and audio it decodes."""

import json
import os
import subprocess
import sys
from pathlib import Path

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "nemo"
MODEL = FIX / "ctc_bpe.nemo"
AUDIO = FIX / "audio"


def run(*args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "asrdecode.cli", *args], capture_output=True, text=True, env=env, cwd=cwd
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
