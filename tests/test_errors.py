"""One-line messages: control characters escaped, enormous ones cut in the middle."""

from __future__ import annotations

from asrdecode.errors import MESSAGE_LIMIT, message_line


def test_a_newline_in_a_file_name_stays_on_the_line():
    assert message_line("a\nb.wav: file not found") == "a\\nb.wav: file not found"
    assert message_line("café ⁇: fine") == "café ⁇: fine"


def test_a_megabyte_long_message_is_cut_in_the_middle_saying_so():
    text = "/x" * 5_000_000 + ": File name too long"
    line = message_line(text)
    assert len(line) < MESSAGE_LIMIT + 100 and line.endswith(": File name too long")
    assert f"({len(text) - MESSAGE_LIMIT} characters left out)" in line
