"""asrdecode bench ctc-beam without NeMo: a quick run prints its rows; the ARPA it hands NeMo (unit
strings rewritten as NeMo's token names) is the same LM."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from asrdecode.bench.ctc_beam import DEFAULT_LM, main, ngpu_arpa
from asrdecode.lm.ngram_tensor import BatchedNgramLM
from asrdecode.models.loading import resolve_model_path
from asrdecode.models.nemo import load_nemo


def test_quick_run_writes_its_rows(tmp_path, capsys):
    out = tmp_path / "ctc_beam.json"
    argv = ["--beams", "2", "--batch-sizes", "2", "--utts", "2", "--repeats", "1", "--warmup", "0"]
    assert main([*argv, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = [(r["decoder"], r["beam_size"], r["lm"]) for r in report["results"]]
    assert rows == [("ctc-greedy", 1, False), ("ctc-beam", 2, False), ("ctc-beam", 2, True)]
    assert report["results"][0]["wer"] == report["results"][1]["wer"]  # no LM: greedy's path
    assert "| 2 | ctc-beam | 2 | 1 |" in capsys.readouterr().out


def test_ngpu_arpa_is_the_same_lm(tmp_path):
    units = list(load_nemo(resolve_model_path("embedded:demo_ctc_bpe")).units)
    words = BatchedNgramLM.from_arpa(DEFAULT_LM, vocab=units, token_ids="words")
    path = ngpu_arpa(Path(DEFAULT_LM), units, tmp_path / "ngpu.arpa")
    ngpu = BatchedNgramLM.from_arpa(path, token_ids="ngpu", vocab_size=len(units))
    states = torch.tensor([words.bos_state()])
    ngpu_states = torch.tensor([ngpu.bos_state()])
    for token in (3, 17, 3, 40, 0, 63):
        a, next_a = words.advance(states)
        b, next_b = ngpu.advance(ngpu_states)
        assert torch.allclose(a, b)
        states, ngpu_states = next_a[:, token], next_b[:, token]
    assert torch.allclose(words.final_scores(states), ngpu.final_scores(ngpu_states))
