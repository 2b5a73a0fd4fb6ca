"""`asrdecode bench let`'s table: the cost per arc of each row (millions of arcs per second)."""

from __future__ import annotations

from asrdecode.bench.let_decode import arcs_per_second, print_case


def test_table_prints_each_rows_arcs_per_second(capsys):
    row = {
        "decoder": "wfst-otf", "beam": 9.5, "frames_per_second": 2000.0, "ratio_to_otf": 1.0,
        "ratio_to_wfst": None, "ratio_at_equal_wer": None, "equal_wer_peer": "wfst", "wer": 0.4,
        "same_1best_as_otf": 2, "arcs_per_frame": 12500.0, "tokens_per_frame": 2800.0,
        "word_members_per_frame": None, "union_members_per_frame": None, "lm_lookups_per_frame": 150.0,
    }  # fmt: skip
    let = {
        **row, "decoder": "let", "frames_per_second": 1500.0, "ratio_to_otf": 0.75, "arcs_per_frame": 6000.0,
        "word_members_per_frame": 1000.0, "union_members_per_frame": 4000.0,
    }  # fmt: skip
    assert arcs_per_second(row) == 25.0 and arcs_per_second(let) == 9.0
    case = {"case": "toy", "utterances": 2, "frames": 100, "options": {"beam": 9.5}, "rows": [row, let]}
    print_case(case)
    out = capsys.readouterr().out
    assert "M arcs/s" in out and "25.0" in out and "9.0" in out and "5000" in out
