"""build-graph (small LM) + transcribe --decoder wfst-otf decoder.lm=<large LM> through the CLI, checked
against kaldi-decoder's FasterDecoder on a TLG built with the large LM, on the log-probs the run saved;
its lattice archive's best paths are the transcripts; bad LM paths are one-line errors."""

from __future__ import annotations

from pathlib import Path

import kaldifst
import numpy as np
import pytest
from helpers.cli import AUDIO, MODEL, read_jsonl, run
from helpers.lattice_paths import lattice_best_path
from helpers.otf_ref import cli_small_and_large_graphs  # noqa: E402
from helpers.wfst_ref import kaldi_best_path  # noqa: E402

from asrdecode.decoders.wfst.lattice import read_kaldi_text


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> Path:
    return cli_small_and_large_graphs(tmp_path_factory.mktemp("cli_wfst_otf"), run, MODEL)


def test_wfst_otf_cli_equals_kaldi_on_the_large_lm_graph(tmp_path, graphs):
    out = tmp_path / "otf"
    proc = run(
        "transcribe", str(AUDIO), "--model", str(MODEL), "--decoder", "wfst-otf",
        f"decoder.graph={graphs / 'small'}", f"decoder.lm={graphs / 'large.arpa'}", "decoder.beam=30",
        "threads=1", "--save-logprobs", "decoder.lattice=true", "decoder.lattice_beam=3", "--out", str(out),
    )  # fmt: skip
    rows = {r["utt_id"]: r for r in read_jsonl(out / "transcripts.jsonl")}
    assert len(rows) == 6
    # reading the large LM (its tables built, or loaded from the cache) is announced and timed
    said = proc.stdout + proc.stderr
    assert f"reading the LM {graphs / 'large.arpa'}" in said and "LM tables ready in" in said
    # lattices (paper 002's exact lattices of the composed search): one archive for the run, one
    # OpenFst word acceptor per utterance; each lattice's best path is the transcript
    lattices = read_kaldi_text((out / "lattices" / "lat.ark.txt").read_text())
    assert set(lattices) == set(rows)
    words = {
        int(i): w for w, i in (ln.split() for ln in (graphs / "large" / "words.txt").read_text().splitlines())
    }
    tlg = kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(graphs / "large" / "TLG.fst")))
    spoken = 0
    for utt, row in rows.items():
        lp = np.load(out / "logprobs" / f"{utt}.npy", allow_pickle=False)
        ref = kaldi_best_path(tlg, lp, beam=30.0)
        assert row["pred_text"] == " ".join(words[o] for o in ref[3] if o > 0)
        assert row["score"] == pytest.approx(-ref[0], rel=1e-4)
        best = lattice_best_path(*lattices[utt])
        assert " ".join(words[w] for w in best[0]) == row["pred_text"]
        assert -best[1] == pytest.approx(row["score"], abs=2e-3) and len(best[2]) == len(lp)
        assert (out / "lattices" / f"{utt}.fst").is_file()
        spoken += len(row["words"])
    assert spoken > 5


def test_wfst_otf_cli_bad_lm_is_one_line_error(tmp_path, graphs):
    proc = run(
        "transcribe", str(AUDIO), "--model", str(MODEL), "--decoder", "wfst-otf",
        f"decoder.graph={graphs / 'small'}", f"decoder.lm={tmp_path / 'nope.arpa'}",
        "--out", str(tmp_path / "o"), check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "nope.arpa: file not found" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
