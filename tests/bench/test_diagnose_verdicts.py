"""`asrdecode bench diagnose-pocketsphinx` verdicts: pocketsphinx's words are compared with the cost
of our words (their forced alignment when it is cheaper than the path the search returned), and a
search that kept its words but lost their best alignment is counted apart, with no verdict."""

from __future__ import annotations

from asrdecode.bench.diagnose_pocketsphinx import lost_alignment, verdict, words_cost


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
