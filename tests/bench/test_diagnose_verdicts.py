"""`asrdecode bench diagnose-pocketsphinx` verdicts: pocketsphinx's words are compared with the cost
of our words (their forced alignment when it is cheaper than the path the search returned), and a
search that kept its words but lost their best alignment is counted apart, with no verdict; a
static graph's backoff reading of the LM is checked as the cause of a model difference."""

from __future__ import annotations

import math

import pytest

from asrdecode.bench.diagnose_pocketsphinx import (
    backoff_bonus,
    lost_alignment,
    lost_to_lm_reading,
    verdict,
    words_cost,
)
from asrdecode.lm.backoff import BackoffReadings


def test_our_words_cost_their_best_path() -> None:
    assert words_cost(5000.0, 4999.5) == 4999.5  # the search lost the words' best alignment
    assert words_cost(5000.0, 5000.0004) == 5000.0  # float32 rounding of the forced alignment
    assert words_cost(5000.0, None) == 5000.0


def test_search_error_only_when_their_words_beat_our_words() -> None:
    ours, theirs = ["a", "b"], ["a", "c"]
    # cheaper than the path the search returned, not than our words' best path: not a search error
    assert verdict(ours, theirs, words_cost(5000.0, 4999.5), 4999.7) == "model differs"
    assert verdict(ours, theirs, words_cost(5000.0, 4999.5), 4999.3) == "search error"
    assert verdict(ours, theirs, 5000.0, 5000.0 - 1e-4) == "model differs"  # within float32 rounding
    assert verdict(ours, theirs, 5000.0, None) == "unreachable"
    assert verdict(ours, list(ours), 5000.0, 4000.0) == "same"


def test_alignment_gap_is_beyond_rounding() -> None:
    row = {"asrdecode_cost": 5000.0, "asrdecode_forced_cost": 4999.5}
    assert lost_alignment(row)
    assert not lost_alignment({"asrdecode_cost": 5000.0, "asrdecode_forced_cost": 4999.999})
    assert not lost_alignment({"asrdecode_cost": 5000.0, "asrdecode_forced_cost": None})


def test_lm_reading_takes_each_bonus_back() -> None:
    # theirs cost 1 more in our model, but G gave our words 3 more of a backoff bonus
    assert lost_to_lm_reading(100.0, 101.0, 3.0, 0.0)
    assert not lost_to_lm_reading(100.0, 101.0, 0.5, 0.0)
    assert not lost_to_lm_reading(100.0, 101.0, 3.0, 2.5)  # both bonuses back: ours still cheaper


def test_backoff_bonus_of_an_explicit_bigram_below_its_route(tmp_path) -> None:
    # "a b" is explicit at log10 -2, its backoff route bow(a) + p(b) at -0.5: G reads the route
    arpa = tmp_path / "lm.arpa"
    arpa.write_text(
        "\\data\\\nngram 1=4\nngram 2=2\n\n\\1-grams:\n-1.0\t</s>\n-99\t<s>\t0.0\n-0.6\ta\t0.0\n"
        "-0.5\tb\t0.0\n\n\\2-grams:\n-0.1\t<s> a\n-2.0\ta b\n\n\\end\\\n"
    )
    readings = BackoffReadings.read(arpa)
    assert backoff_bonus(readings, ["a", "b"]) == pytest.approx(1.5 * math.log(10.0), abs=1e-6)
    assert backoff_bonus(readings, ["b", "a"]) == pytest.approx(0.0, abs=1e-9)
    assert backoff_bonus(readings, ["a", "zebra"]) is None
