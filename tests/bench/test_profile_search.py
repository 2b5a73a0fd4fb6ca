"""scripts/profile_search.py: perf's map of the compiled kernels names them, with their code."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("profile_search", ROOT / "scripts/profile_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_short_names() -> None:
    short = _script().short_name
    assert short("_ZN9asrdecode8decoders4wfst8compiled12kth_smallestB3v67B40c8t") == "compiled.kth_smallest"
    assert short("_ZN7cpython9asrdecode8decoders4wfst8compiled4_addB3v6") == "cpython.compiled._add"
    assert short("cfunc._ZN9asrdecode2lm10difference7lm_stepB3v6") == "cfunc.difference.lm_step"
    assert short("NRT_decref") == "NRT_decref"


def test_map_names_compiled_kernels_with_their_code() -> None:
    from asrdecode.decoders.wfst.compiled import kth_smallest

    assert kth_smallest(np.arange(8, dtype=np.float32), 8, 2) == 2.0
    script = _script()
    functions = script.jit_functions()
    names = {name for _, _, name in functions}
    assert "compiled.kth_smallest" in names
    script.write_maps(os.getpid())
    written = [Path(f"/tmp/perf-{os.getpid()}.map"), Path(f"/tmp/perf-{os.getpid()}.code")]
    try:
        lines = written[0].read_text().splitlines()
        code = json.loads(written[1].read_text())
    finally:
        for path in written:
            path.unlink()
    start, size, name = next(line.split() for line in lines if line.endswith(" compiled.kth_smallest"))
    assert len(bytes.fromhex(code[start])) == int(size, 16) > 0
