"""build-graph (small LM) + transcribe --decoder let decoder.lm=<large LM> through the CLI, checked
against kaldi-decoder's FasterDecoder on a TLG built with the large LM, on the log-probs the run saved;
its lattice archive's best paths are the transcripts; `backend=torch` is a one-line error."""

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
    return cli_small_and_large_graphs(tmp_path_factory.mktemp("cli_let"), run, MODEL)


def let(graphs: Path, out: Path, *args: str, check: bool = True):
    return run(
        "transcribe", str(AUDIO), "--model", str(MODEL), "--decoder", "let",
        f"decoder.graph={graphs / 'small'}", f"decoder.lm={graphs / 'large.arpa'}", "threads=1",
        "--out", str(out), *args, check=check,
    )  # fmt: skip


def test_let_cli_equals_kaldi_on_the_large_lm_graph(tmp_path, graphs):
    out = tmp_path / "let"
    let(
        graphs, out, "decoder.beam=30", "decoder.group_capacity=32", "--save-logprobs",
        "decoder.lattice=true", "decoder.lattice_beam=3",
    )  # fmt: skip
    rows = {r["utt_id"]: r for r in read_jsonl(out / "transcripts.jsonl")}
    assert len(rows) == 6
    # paper 002's exact lattices: one archive for the run, one OpenFst word acceptor per utterance
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
        assert (out / "lattices" / f"{utt}.fst").is_file() and row["lattice_density"] > 0
        spoken += len(row["words"])
        for w in row["words"]:
            assert 0 <= w["start"] <= w["end"] <= row["duration"] + 0.1
    assert spoken > 5


def test_let_cli_torch_backend_is_a_one_line_error(tmp_path, graphs):
    proc = let(graphs, tmp_path / "o", "decoder.backend=torch", check=False)
    assert proc.returncode != 0
    assert "decoder.backend: torch is not implemented for let" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
