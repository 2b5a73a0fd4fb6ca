"""scripts/gpu_check.sh, the GPU check the GPU machine runs unchanged, here without CUDA: it says so
in one line, collects the cuda tests and writes the benchmark's CPU rows of every decoder (--quick)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from asrdecode.bench.gpu import Graphs, cases, plan

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the whole check runs (scripts/gpu_check.sh)")
def test_cpu_part(tmp_path):
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "GPU_WHEELS": str(tmp_path / "no-wheels"),
        "GPU_CHECK_GRAPHS": str(tmp_path / "graphs"),
    }
    cmd = ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path / "out"), "--quick"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [line for line in proc.stdout.splitlines() if line.startswith("gpu_check:") and "CUDA" in line]
    assert said == [
        "gpu_check: no CUDA device: running the CPU part only (cuda tests skipped, the benchmark's CPU rows)"
    ]
    tests = next(line for line in proc.stdout.splitlines() if line.startswith("gpu_check: cuda tests:"))
    assert "skipped" in tests and "error" not in tests
    report = json.loads((tmp_path / "out" / "bench_gpu.json").read_text())
    names = [c.name for c in cases(Graphs(Path("g"), Path("lm"), Path("s"), Path("c"), "300w"))]
    assert [(r["decoder"], r["batch"]) for r in report["rows"]] == [(n, 1) for n in names]
    assert {"wfst-300w", "wfst-fused-300w"} <= set(names)  # the spelled TLG, 300 words with --quick
    assert any(line.startswith("gpu_check: graphs built at") for line in proc.stdout.splitlines())
    results = ["bench_gpu.json", "bench_gpu.md", "cuda-tests.log", "graphs.log"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == results  # small enough to fetch back
    for row in report["rows"]:
        assert "error" not in row, row
        assert row["device"] == "cpu" and row["rtfx"] > 0 and row["ops_per_frame"] >= 0
    assert report["cuda_device"] is None and "| wfst | 1 |" in (tmp_path / "out" / "bench_gpu.md").read_text()


def test_bad_option_is_one_line(tmp_path):
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path), "--fast"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "gpu_check: unknown option --fast (usage: scripts/gpu_check.sh OUT_DIR [--quick])"
    ]


def test_the_targets_rows_run_first():
    """A time budget cuts the rest, never the rows the GPU run's targets are measured on."""
    chosen = cases(Graphs(Path("g"), Path("lm"), Path("s"), Path("c"), "20k"))
    rows = [(c.name, b) for c, b in plan(chosen, [1, 32, 256])]
    targets = [("wfst-20k", 256), ("wfst-fused-20k", 256), ("transducer-greedy", 32)]
    assert rows[:3] == targets and len(rows) == len(set(rows)) == 3 * len(chosen)
    assert rows[3:] == [(c.name, b) for b in (1, 32, 256) for c in chosen if (c.name, b) not in targets]


def test_the_table_says_whether_each_target_was_met():
    """And how many utterances got the same words on cuda as on the CPU."""
    from asrdecode.bench.gpu import table

    def row(decoder, device, rtfx):
        return {"decoder": decoder, "device": device, "batch": 256, "rtfx": rtfx, "ops_per_frame": 7.0}

    report = {
        "machine": {"cpu": "x", "torch": "2.11", "load_average_at_start": [1], "load_average_at_end": [1]},
        "cuda_device": "NVIDIA H100 80GB HBM3",
        "cpu_threads": 16,
        "targets": [
            {"decoder": "wfst-20k", "batch": 256, "ratio_above": 1.0},
            {"decoder": "wfst-fused-20k", "batch": 256, "ratio_above": 1.0},
            {"decoder": "transducer-greedy", "batch": 32, "ratio_above": 10.0},
        ],
        "rows": [
            row("wfst-20k", "cuda", 300.0)
            | {"syncs_per_frame": 1.2, "peak_gpu_mib": 900, "same_words_as_cpu": [250, 256]},
            row("wfst-20k", "cpu", 1200.0) | {"syncs_per_frame": 0.0},
            row("wfst-fused-20k", "cuda", 6000.0) | {"syncs_per_frame": 0.02, "peak_gpu_mib": 500.0},
            row("wfst-fused-20k", "cpu", 1200.0) | {"syncs_per_frame": 0.0},
        ],
    }
    lines = table(report).splitlines()
    assert "| wfst-20k | 256 | 300.0 | 1200.0 | 0.25 | 250/256 | 7.0 | 1.20 | 900 |" in lines
    assert lines[lines.index("Targets (cuda RTFx / CPU RTFx):") + 1 :] == [
        "- wfst-20k at batch 256, wanted above 1: 0.25, not met",
        "- wfst-fused-20k at batch 256, wanted above 1: 5.00, met",
        "- transducer-greedy at batch 32, wanted above 10: no result",
    ]


def test_graphs_only_goes_on_without_the_spelled_graph(monkeypatch, tmp_path, capsys):
    """A failed spelled-TLG build (its LM) is one line of --graphs-only's output; the other rows'
    graph is built and their compiled kernels warmed all the same."""
    import asrdecode.bench.gpu as gpu
    import asrdecode.bench.wfst_decode as wfst_decode
    import asrdecode.decoders

    why = "kaldingram could not train an LM on corpus_300.txt: ModuleNotFoundError: No module named 'tqdm'"

    def no_spelled_graph(folder, words):
        raise RuntimeError(why)

    warmed = []

    def inputs(case, *rest):
        warmed.append(case.name)
        return [None], 0.0, None

    monkeypatch.setattr(wfst_decode, "demo_graph", lambda folder, lm: folder)
    monkeypatch.setattr(wfst_decode, "spelled_graph", no_spelled_graph)
    monkeypatch.setattr(gpu, "case_inputs", inputs)
    monkeypatch.setattr(asrdecode.decoders, "make_decoder", lambda *args: SimpleNamespace(decode=str))
    gpu.main(["--graphs-only", "--graphs", str(tmp_path), "--quick"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"graphs: {tmp_path / 'gpu-graph-small'}, spelled TLG: RuntimeError({why!r})"
    assert warmed == ["wfst", "wfst-otf"]  # wfst-fused's CPU side is wfst's


def test_a_carried_wheel_whose_requirement_the_image_lacks_stops_the_check(tmp_path):
    """One line naming the missing distribution and the wheel that needs it, before any test runs."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    info = "needy-1.0.dist-info"
    files = {
        "needy/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: needy\nVersion: 1.0\n"
        "Requires-Dist: no-such-distribution>=2\nRequires-Dist: numpy\n"
        'Requires-Dist: another-missing; extra == "docs"\n',
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheels / "needy-1.0-py3-none-any.whl", "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
        whl.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    env = {**os.environ, "PYTHON": sys.executable, "GPU_WHEELS": str(wheels)}
    cmd = ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path / "out"), "--quick"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "gpu_check: missing Python packages: no-such-distribution>=2 for needy"
        " (scripts/gpu_wheels.txt lists what the image lacks: make gpu-wheels where pip works, carry .whl/)"
    ]
    assert not (tmp_path / "out" / "cuda-tests.log").exists()


CUDA_TESTS_HERE = [
    "tests/decoders/test_cuda_decoders.py::test_ctc",
    "tests/decoders/test_cuda_decoders.py::test_transducer_greedy[False-True-labels-rnnt_bpe]",
    "tests/decoders/test_cuda_decoders.py::test_transducer_beam[False-rnnt_bpe-malsd]",
    "tests/decoders/test_cuda_decoders.py::test_aed[aed_canary-section0]",
    "tests/decoders/test_cuda_decoders.py::test_a_model_on_cuda_decodes_its_own_output",
    "tests/models/test_cuda_encoders.py::test_fixture_model[ctc_bpe]",
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA they run on it (scripts/gpu_check.sh)")
def test_cuda_tests_run_with_the_cpu_in_cudas_place():
    """A few `cuda` tests of each kind run here with ASRDECODE_CUDA_TESTS_DEVICE=cpu, so their code
    cannot rot between GPU runs (`make cuda-tests-on-cpu` runs all of them, the kernels interpreted)."""
    env = {**os.environ, "ASRDECODE_CUDA_TESTS_DEVICE": "cpu"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", *CUDA_TESTS_HERE]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1].startswith("8 passed in"), proc.stdout[-500:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the cuda rows run on it")
def test_the_benchmarks_cuda_rows_run_with_the_cpu_in_cudas_place(tmp_path):
    """--cuda-rows-on-cpu: the cuda rows' settings (torch backend, CUDA graphs asked for) decode on
    the CPU, each beside its CPU row with the same words, and the table says it measured nothing."""
    names = ["ctc-greedy", "wfst-300w", "transducer-greedy", "aed-beam"]
    cmd = [sys.executable, "-m", "asrdecode.bench.gpu", "--quick", "--cuda-rows-on-cpu", "--decoders", *names]
    cmd += ["--graphs", str(tmp_path / "graphs"), "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "bench_gpu.json").read_text())
    rows = report["rows"]
    assert [(r["decoder"], r["device"]) for r in rows] == [(n, d) for n in names for d in ("cuda", "cpu")]
    for cuda_row in rows[::2]:
        assert "error" not in cuda_row and cuda_row["same_words_as_cpu"] == [1, 1], cuda_row
        assert "peak_gpu_mib" not in cuda_row
    assert report["cuda_device"] is None and report["cuda_rows_on_cpu"] is True
    table = (tmp_path / "out" / "bench_gpu.md").read_text()
    assert "the cuda rows' settings ran on the CPU (a check of their code, not a measurement)" in table
    assert "| wfst-300w | 1 |" in table and "| 1/1 |" in table
