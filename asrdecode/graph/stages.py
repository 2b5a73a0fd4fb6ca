"""Named, timed stages of a graph build (G, LG, CLG, H∘CLG, determinize, minimize, write...).

The recipes run each step inside ``stages("name")``; the CLI passes a callback that shows the
running stage and each finished one with its seconds, and the seconds go into the graph's
meta.json. Without a callback the stages are only timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: callback(stage name, "start" | "done", seconds since the stage started: 0.0 at "start")
StageCallback = Callable[[str, str, float], None]


def finished_line(name: str, seconds: float) -> str:
    """The line every display prints for a finished stage (`bench first-use` reads it back)."""
    return f"graph build: {name} done in {seconds:.1f} s"


def report_finished(say: Callable[[str], object]) -> StageCallback:
    """A stage callback that passes each finished stage's line (`finished_line`) to `say`."""

    def on_stage(name: str, event: str, seconds: float) -> None:
        if event == "done":
            say(finished_line(name, seconds))

    return on_stage


class BuildStages:
    """Times named build stages in order and reports them to `on_stage`."""

    def __init__(self, on_stage: StageCallback | None = None):
        self.on_stage = on_stage
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.on_stage is not None:
            self.on_stage(name, "start", 0.0)
        start = time.perf_counter()
        yield
        took = time.perf_counter() - start
        self.seconds[name] = round(self.seconds.get(name, 0.0) + took, 3)
        if self.on_stage is not None:
            self.on_stage(name, "done", took)
