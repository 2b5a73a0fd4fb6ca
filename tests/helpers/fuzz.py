"""The fuzz tests' shared pieces: byte mutations of a valid file, their hypothesis strategies, a
clean case folder, and the property every case must keep (only a one-line AsrDecodeError, within a
time limit)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from hypothesis import strategies as st

from asrdecode.errors import AsrDecodeError

SECONDS = 20.0  # one case may not take longer (a hang fails the test)


def mutate(data: bytes, edits: list[tuple[int, int, int]], cut: int | None) -> bytes:
    """Apply (kind, position, byte) edits: 0 flip, 1 insert, 2 delete; then truncate at `cut`."""
    buf = bytearray(data)
    for kind, pos, value in edits:
        if not buf:
            break
        i = pos % len(buf)
        if kind == 0:
            buf[i] ^= value or 1
        elif kind == 1:
            buf.insert(i, value)
        else:
            del buf[i]
    if cut is not None and buf:
        del buf[cut % len(buf) :]
    return bytes(buf)


edits = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 20), st.integers(0, 255)), max_size=8)
cuts = st.none() | st.integers(0, 1 << 20)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 40), 1 << 40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def case_dir(scratch: Path, name: str) -> Path:
    folder = scratch / name
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():  # the previous case's files
        shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    return folder


def only_asrdecode_errors(call) -> None:
    """Run `call` in a thread with a time limit; any exception but AsrDecodeError fails."""
    outcome: dict = {}

    def target():
        try:
            call()
        except AsrDecodeError as err:
            if "\n" in str(err):  # recorded: an assertion in this thread would only warn
                outcome["error"] = AssertionError(f"not one line: {str(err)!r}")
        except BaseException as err:  # noqa: BLE001 (the property under test)
            outcome["error"] = err

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(SECONDS)
    assert not worker.is_alive(), f"no answer within {SECONDS} s"
    if "error" in outcome:
        raise outcome["error"]
