"""What `transcribe` prints: one file's transcript on the terminal (no --out needed), the report
whole when piped, and a closing line that names only the files written."""

from __future__ import annotations

import shutil

from helpers.cli import AUDIO, MODEL, read_jsonl, run


def test_one_file_prints_its_transcript_and_needs_no_out(tmp_path):
    deep = tmp_path / ("a-rather-long-folder-name-" * 4)
    deep.mkdir()
    wav = deep / "ps_goforward.wav"
    shutil.copy(AUDIO / "ps_goforward.wav", wav)
    proc = run("transcribe", str(wav), "--model", str(MODEL), "threads=1")
    out = deep / "ps_goforward.wav.asrdecode"
    (row,) = read_jsonl(out / "transcripts.jsonl")
    assert f"transcript: {row['pred_text']}" in proc.stdout.splitlines()
    closing = proc.stdout.strip().splitlines()[-1]
    assert closing.startswith(f"results in {out}/") and "errors.jsonl" not in closing and "hyp.ctm" in closing
    assert "…" not in proc.stdout  # piped: long values fold onto more lines, never cut
    folder = run("transcribe", str(deep), "--model", str(MODEL), check=False)
    assert folder.returncode == 2 and "--out DIR is required" in folder.stderr
