"""asrdecode.atomic_files: a file appears whole or not at all."""

from __future__ import annotations

import pytest

from asrdecode.atomic_files import atomic_target, atomic_write_text


def test_written_file_replaces_the_old_one(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    atomic_write_text(path, "new\nlines\n")
    assert path.read_text() == "new\nlines\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temporary file left


def test_a_failing_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "graph.pt"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_target(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".") and tmp.suffix == ".tmp"
        tmp.write_bytes(b"half a fi")
        raise RuntimeError("killed while writing")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["graph.pt"]


def test_the_file_has_the_usual_permissions(tmp_path):
    """0666 less the umask, as open() would create it (not mkstemp's private 0600)."""
    import os

    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o640
