"""The cyclic collector is paused while `transcribe` loads and runs again, with the loaded objects
frozen, while it decodes; it is never left paused (errors, --print-config)."""

from __future__ import annotations

import gc
import weakref

import pytest
from click.testing import CliRunner
from helpers.cli import AUDIO, MODEL

from asrdecode import gc_pause
from asrdecode.cli import main
from asrdecode.pipeline import Transcriber


@pytest.fixture(autouse=True)
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


class _Node:
    pass


def test_paused_until_loading_done_then_garbage_collected_and_the_rest_frozen():
    gc.unfreeze()
    with gc_pause.paused_while_loading():
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]
        cycle = _Node()
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc_pause.loading_done()
        assert gone() is None  # the cycle made while paused was collected, not frozen
        assert gc.isenabled() and gc.get_freeze_count() >= len(kept)
        gc_pause.loading_done()  # a second call does nothing
    assert gc.isenabled()


def test_resumed_when_the_block_fails_and_left_alone_when_already_disabled():
    with pytest.raises(RuntimeError), gc_pause.paused_while_loading():
        raise RuntimeError("loading failed")
    assert gc.isenabled()
    gc.disable()
    with gc_pause.paused_while_loading():
        pass
    assert not gc.isenabled()  # someone else's choice: not turned on


def test_transcribe_loads_paused_and_decodes_collecting(tmp_path, monkeypatch):
    seen = {}
    load, start_batch = Transcriber._load, Transcriber._start_batch

    def recording_load(self):
        seen["loading"] = gc.isenabled()
        load(self)

    def recording_start_batch(self, utts, start):
        seen["decoding"] = gc.isenabled()
        return start_batch(self, utts, start)

    monkeypatch.setattr(Transcriber, "_load", recording_load)
    monkeypatch.setattr(Transcriber, "_start_batch", recording_start_batch)
    result = CliRunner().invoke(
        main, ["transcribe", str(AUDIO), "--model", str(MODEL), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    assert seen == {"loading": False, "decoding": True} and gc.isenabled()
    for args in (
        ["--print-config"],
        ["--model", str(tmp_path / "missing.nemo"), "--out", str(tmp_path / "b")],
    ):
        CliRunner().invoke(main, ["transcribe", str(AUDIO), *args])
        assert gc.isenabled()
