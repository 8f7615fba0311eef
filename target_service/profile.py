"""Where a step's time goes: cumulative seconds per phase, read by GetModelInfo and the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StepTimer:
    """The phases of one step: ``with timer.phase("forward"): ...``; ``seconds`` holds each phase's time."""

    seconds: dict[str, float] = field(default_factory=lambda: {"forward": 0.0, "draft": 0.0})
    counted: bool = True

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def cancel(self) -> None:
        """An idle step: not counted."""
        self.counted = False


@dataclass
class StepProfile:
    """Cumulative seconds per step phase over every step that ran work."""

    steps: int = 0
    forward_s: float = 0.0
    draft_s: float = 0.0
    other_s: float = 0.0  # scheduling, acceptance, bookkeeping

    @contextmanager
    def step(self) -> Iterator[StepTimer]:
        timer, t0 = StepTimer(), time.perf_counter()
        yield timer
        if timer.counted:
            total = time.perf_counter() - t0
            self.steps += 1
            self.forward_s += timer.seconds["forward"]
            self.draft_s += timer.seconds["draft"]
            self.other_s += total - timer.seconds["forward"] - timer.seconds["draft"]
