"""`asrdecode bench sweep` and `asrdecode score --compare --plot`: every point scored like
`asrdecode score` would, the files written, the pocketsphinx peer at its defaults when the swept
beam is its default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asrdecode.bench.sweep import Setup, System, sweep
from asrdecode.scoring import read_transcripts, score

ROOT = Path(__file__).resolve().parents[2]


def test_sweep_writes_points_table_and_plots(three_clips, tmp_path):
    setup = Setup(
        "tiny",
        str(three_clips),
        "three clips of data/demo/real",
        [
            System(
                "ctc-greedy",
                "decoder.blank_penalty",
                [0.0, 2.0],
                ["model.path=embedded:demo_ctc_bpe", "decoder.type=ctc-greedy"],
            ),
            System("pocketsphinx", "beam", [1e-48], peer="pocketsphinx"),
        ],
    )
    result = sweep(setup, tmp_path / "out")
    points = result["points"]
    assert [(p["system"], p["setting"]) for p in points] == [
        ("ctc-greedy", "blank_penalty=0.0"),
        ("ctc-greedy", "blank_penalty=2.0"),
        ("pocketsphinx", "beam=1e-48"),
    ]
    refs = read_transcripts(three_clips, field="text")
    for p in points:
        assert p["rtfx"] > 0 and p["audio_seconds"] > 0 and set(p["hyps"]) == set(refs)
        assert p["wer"] == pytest.approx(score(refs, p["hyps"]).wer)
    table = (tmp_path / "out/sweep.md").read_text()
    assert table.count("\n| ") == 4 and "three clips of data/demo/real" in table
    for suffix in ("png", "svg", "json"):
        assert (tmp_path / f"out/sweep.{suffix}").stat().st_size > 1000
    assert result["machine"] and len(result["load_average"]["before"]) == 3


def test_pocketsphinx_point_at_its_default_beams_is_its_default_decoder(three_clips):
    """The swept -beam 1e-48 with -wbeam derived from it are pocketsphinx's defaults: same words."""
    from asrdecode.bench.peers import Pocketsphinx, pcm16
    from asrdecode.bench.sweep import run_pocketsphinx
    from asrdecode.io.manifests import read_inputs

    point = run_pocketsphinx(System("ps", "beam", [1e-48], peer="pocketsphinx"), 1e-48, three_clips)
    default = Pocketsphinx()
    for u in read_inputs(three_clips).utterances:
        assert point.hyps[u.utt_id] == " ".join(default.words(pcm16(u.audio_path))[0])


def test_cli_sweep_and_score_plot(three_clips, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def cli(*args):
        proc = subprocess.run(
            [sys.executable, "-m", "asrdecode.cli", *args], capture_output=True, text=True, env=env
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    cli("bench", "sweep", "--setup", "demo", "--systems", "ctc-greedy", "--manifest", str(three_clips),
        "--out", str(tmp_path / "sweep"))  # fmt: skip
    (point,) = json.loads((tmp_path / "sweep/sweep.json").read_text())["points"]
    assert point["system"] == "ctc-greedy" and (tmp_path / "sweep/sweep.png").exists()
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps({"utt_id": u, "pred_text": t}) + "\n" for u, t in point["hyps"].items()))
    refs = read_transcripts(three_clips, field="text")
    b.write_text("".join(json.dumps({"utt_id": u, "pred_text": t}) + "\n" for u, t in refs.items()))
    out = cli("score", "--ref", str(three_clips), "--hyp", str(a), "--compare", str(b),
              "--plot", str(tmp_path / "wer.png"), "--worst", "0",
              "--json", str(tmp_path / "s.json"))  # fmt: skip
    compared = json.loads((tmp_path / "s.json").read_text())["compared_with"]
    assert compared["hypotheses"] == str(b) and compared["utterances"] == 3 and compared["better"] == 0
    assert compared["low"] <= compared["wer_difference"] <= compared["high"]
    assert "0.00%" in out
    flat = " ".join(out.split())
    assert f"{a} against {b}, per utterance (3): fewer errors on 0" in flat and "interval [" in flat
    assert (tmp_path / "wer.png").stat().st_size > 1000


def test_kaldi_peer_and_wfst_agree_on_the_demo_tlg(three_clips, tmp_path):
    """The demo setup's kaldi-decoder peer and asrdecode's compiled `wfst` decode the same TLG and
    the same model: at a beam where pruning decides nothing their words are the same. The
    flashlight-text peer gives words of the LM for every utterance."""
    from dataclasses import replace

    from asrdecode.bench.sweep import DEMO
    from asrdecode.lm.ngram_tensor import arpa_unigram_words

    systems = {s.name.split(" (")[0]: s for s in DEMO.systems}
    setup = Setup("demo-part", str(three_clips), "three clips", [
        replace(systems["wfst compiled"], name="wfst", values=[16.0]),
        replace(systems["kaldi-decoder FasterDecoder"], name="kaldi", values=[16.0]),
    ])  # fmt: skip
    flashlight = systems["flashlight-text LexiconDecoder"]
    setup.systems.append(replace(flashlight, name="flashlight", values=[64]))
    wfst, kaldi, fl = sweep(setup, tmp_path / "out")["points"]
    assert kaldi["hyps"] == wfst["hyps"] and any(kaldi["hyps"].values())
    assert kaldi["rtfx"] > 0 and fl["rtfx"] > 0
    vocabulary = set(arpa_unigram_words(ROOT / "data/demo/graph/lm.arpa"))
    assert set(fl["hyps"]) == set(wfst["hyps"]) and any(fl["hyps"].values())
    assert {w for text in fl["hyps"].values() for w in text.split()} <= vocabulary


def test_nemo_peers_without_a_nemo_python_are_listed_as_not_run(three_clips, tmp_path):
    greedy = ["model.path=embedded:demo_ctc_bpe", "decoder.type=ctc-greedy"]
    setup = Setup("x", str(three_clips), "three clips", [
        System("ctc-greedy", "decoder.blank_penalty", [0.0], greedy),
        System("NeMo greedy_batch", "max_symbols", [10], peer="nemo", options={"strategy": "greedy_batch"}),
    ])  # fmt: skip
    result = sweep(setup, tmp_path / "out")
    assert [p["system"] for p in result["points"]] == ["ctc-greedy"]
    assert result["not_run"] == ["NeMo greedy_batch: no --nemo-python"]
    assert "| NeMo greedy_batch: no --nemo-python | not run |" in (tmp_path / "out/sweep.md").read_text()


def test_flashlight_lexicon_decoder_reads_the_spelled_word(tmp_path):
    """Letters a, b and a word separator over 6 frames that spell "b a |": the word "ba" (the LM
    knows "ab" and "ba" equally), not "ab"."""
    from asrdecode.bench.peers import FlashlightLexiconDecoder

    arpa = tmp_path / "lm.arpa"
    rows = [
        "\\data\\",
        "ngram 1=5",
        "ngram 2=1",
        "",
        "\\1-grams:",
        "-1.0\t</s>",
        "-99\t<s>\t0",
        "-0.5\tab\t0",
        "-0.5\tba\t0",
        "-2.0\t<unk>",
        "",
        "\\2-grams:",
        "-0.3\tab ba",
        "",
        "\\end\\",
    ]
    arpa.write_text("\n".join(rows) + "\n")  # KenLM wants tabs between the fields
    tokens = ["a", "b", "|", "<blank>"]
    decoder = FlashlightLexiconDecoder(
        tokens, "<blank>", "|", {"ab": [["a", "b", "|"]], "ba": [["b", "a", "|"]]}, str(arpa), 16, 25.0
    )
    best = [1, 3, 0, 3, 2, 3]  # b <blank> a <blank> | <blank>
    x = np.full((6, 4), np.log(0.02), dtype=np.float32)
    x[np.arange(6), best] = np.log(0.94)
    assert decoder.words(x) == ["ba"]
