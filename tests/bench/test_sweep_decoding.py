"""scripts/sweep_decoding.py: grid settings and `--point` settings (with environment words) decoded in
alternated `--rounds`, each keeping its fastest round, from one model run per tuning set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_points_and_rounds(tmp_path: Path) -> None:
    lines = (ROOT / "data/demo/synthetic/manifest.jsonl").read_text().splitlines()[:2]
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["audio_filepath"] = str(ROOT / "data/demo/synthetic" / row["audio_filepath"])
    manifest = tmp_path / "tuning" / "manifest.jsonl"
    manifest.parent.mkdir()
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # another code tree on PYTHONPATH (as a scratch worktree): its stand-in `asrdecode transcribe`
    # reports 123 decode seconds
    other = tmp_path / "other_tree" / "asrdecode"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "cli.py").write_text(
        "import json, sys\nfrom pathlib import Path\n"
        "out = Path(sys.argv[sys.argv.index('--out') + 1])\nout.mkdir(parents=True, exist_ok=True)\n"
        "scoring = {'substitutions': 1, 'deletions': 0, 'insertions': 0, 'ref_words': 2}\n"
        "report = {'wer': 0.5, 'scoring': scoring, 'stage_seconds': {'decode': 123.0}}\n"
        "(out / 'report.json').write_text(json.dumps(report))\n"
    )
    out = tmp_path / "sweep.json"
    cmd = [sys.executable, str(ROOT / "scripts/sweep_decoding.py"), "--config", "configs/wfst.yaml"]
    cmd += ["--graph", "cache:configs/graph/demo-ctc-bpe-tlg.yaml", "--manifest", str(manifest)]
    cmd += ["--out", str(tmp_path / "o"), "--json", str(out), "--rounds", "2"]
    cmd += ["--point", "decoder.beam=12 decoder.max_active=300", "--point", "SWEEP_MARK=1 decoder.beam=14"]
    cmd += ["--point", f"PYTHONPATH={other.parent} decoder.beam=14", "decoder.beam=16"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert [r["overrides"] for r in report["rows"]] == [
        ["decoder.beam=16"],
        ["decoder.beam=12", "decoder.max_active=300"],
        ["decoder.beam=14"],
        ["decoder.beam=14"],
    ]
    # upper-case NAME=VALUE words of a point are its runs' environment, not overrides
    envs = [{}, {}, {"SWEEP_MARK": "1"}, {"PYTHONPATH": str(other.parent)}]
    assert [r["env"] for r in report["rows"]] == envs
    # the point's PYTHONPATH decides the code that runs, also with the checkout as working directory
    assert report["rows"][3]["round_seconds"] == [123.0, 123.0]
    assert all(r["decode_seconds"] < 123.0 for r in report["rows"][:3])
    assert "x1.00" in proc.stdout and "SWEEP_MARK=1 decoder.beam=14" in proc.stdout
    for r in report["rows"]:
        assert len(r["round_seconds"]) == 2 and r["decode_seconds"] == min(r["round_seconds"])
        assert r["pooled_wer"] >= 0.0 and set(r["sets"]) == {"tuning"}
    assert "fastest round of each" in proc.stdout


def test_no_setting_is_a_one_line_error(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "scripts/sweep_decoding.py"), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and proc.stderr.strip().startswith("sweep: give a grid")


def test_held_out_sets_are_refused(tmp_path: Path) -> None:
    for held_out in ("data/real/test/manifest.jsonl", "data/real/phone-test/manifest.jsonl"):
        cmd = [sys.executable, str(ROOT / "scripts/sweep_decoding.py"), "--manifest", held_out]
        cmd += ["--out", str(tmp_path), "decoder.beam=10"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and "is a held-out set" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
