"""scripts/oracle_lookahead_lm.py: the oracle small LM holds pocketsphinx's word pairs of the
search-error utterances at the full trigram's probability in their context, read exactly (each
more probable than its backoff route), and leaves the other utterances' pairs alone."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from asrdecode.lm.backoff import BackoffReadings
from asrdecode.lm.sphinx_trie import NgramLookup, read_trie_lm
from asrdecode.models.loading import resolve_packaged_path

ROOT = Path(__file__).resolve().parents[2]


def test_oracle_lm_moves_the_refunds_into_the_graph(tmp_path: Path) -> None:
    rows = [
        {"pocketsphinx": "your call cannot be completed as dialed", "verdict": "search error"},
        {"pocketsphinx": "please enter the pound key", "verdict": "model differs"},
    ]
    diagnosis = tmp_path / "d.json"
    diagnosis.write_text(json.dumps({"utterances": rows}))
    out = tmp_path / "oracle"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts/oracle_lookahead_lm.py"), str(diagnosis), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "bigrams added" in run.stdout
    oracle = BackoffReadings.read(out / "small.arpa.gz")
    small = BackoffReadings.read(resolve_packaged_path("embedded:lm/sphinx-en-us-72k-small.arpa.gz"))
    assert yaml.safe_load((out / "graph.yaml").read_text())["arpa"] == str((out / "small.arpa.gz").resolve())
    large = read_trie_lm(resolve_packaged_path("embedded:sphinx-en-us/../en-us.lm.bin"))
    ids = {w: i for i, w in enumerate(large.vocab)}
    trigram = float(
        NgramLookup(large).log10_prob(np.array([[ids["completed"], ids["as"], ids["dialed"]]]))[0]
    )
    assert oracle.prob[("as", "dialed")] == pytest.approx(trigram, abs=1e-6)  # ARPA: 6 decimals
    # read exactly: the added bigram is more probable than its backoff route in the new LM
    assert trigram > oracle.bow.get(("as",), 0.0) + oracle.prob[("dialed",)]
    # the refund it moves is large: the small LM read "dialed" after "as" at over 10 nats more
    assert (trigram - small.word_log10(("as",), "dialed")) * math.log(10) > 10
    # pairs of utterances without a search error are as they were
    assert oracle.word_log10(("pound",), "key") == small.word_log10(("pound",), "key")
