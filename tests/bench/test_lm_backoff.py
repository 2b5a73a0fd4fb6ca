"""`asrdecode bench lm-backoff`'s summary of the two readings (the readings themselves:
tests/lm/test_backoff.py)."""

import numpy as np
from helpers.otf_ref import random_arpa

from asrdecode.bench.lm_backoff import compare_readings
from asrdecode.lm.backoff import BackoffReadings


def test_the_summary_counts_differing_and_skipped_sentences(tmp_path):
    readings = BackoffReadings.read(
        random_arpa(tmp_path / "lm.arpa", np.random.default_rng(0), list("abcd"), 3)
    )
    sents = [list("abca"), list("dcba"), list("bbbb"), ["a", "zzz"]]
    summary = compare_readings(readings, sents)
    gaps = [readings.exact(s) - readings.cheapest_path(s) for s in sents[:3]]
    assert summary["sentences"] == 3 and summary["skipped_out_of_vocabulary"] == 1
    assert summary["differ"] == sum(g > 1e-6 for g in gaps)
    assert summary["max_gap"] == max(gaps)
