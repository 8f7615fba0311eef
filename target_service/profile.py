"""Where a step's time goes: cumulative seconds per phase, read by GetModelInfo and the benchmarks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field


@dataclass
class StepTimer:
    """The phases of one step: ``with timer.phase("forward"): ...``; ``seconds`` holds each phase's time."""

    seconds: dict[str, float] = field(default_factory=lambda: {"forward": 0.0, "draft": 0.0})
    counted: bool = True
    started: float = field(default_factory=time.perf_counter)

    def other(self) -> float:
        """Seconds so far outside the timed phases (scheduling, acceptance, bookkeeping)."""
        return time.perf_counter() - self.started - sum(self.seconds.values())

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
        timer = StepTimer()
        yield timer
        if timer.counted:
            self.steps += 1
            self.forward_s += timer.seconds["forward"]
            self.draft_s += timer.seconds["draft"]
            self.other_s += timer.other()


@dataclass(frozen=True)
class StepRecord:
    """One engine step as ``--step-trace`` writes it: what the draft policy priced and what it cost."""

    decode: bool  # no prefill chunk in the step (only these steps train the policy's cost model)
    starts: list[int]  # [sequences] tokens each sequence had cached
    q_lens: list[int]  # [sequences] new tokens each (prefill chunk, or 1 + drafts verified)
    split: bool  # attention ran one call per sequence
    predicted_s: float  # the policy's price of the forward before it ran (decode steps; else 0)
    forward_s: float
    draft_s: float  # the drafting round trip after the forward
    other_s: float  # the rest of the step until the record is written (scheduling, acceptance, bookkeeping)
    accepted: list[int]  # [sequences] tokens each took from this step (accepted drafts + 1; 0: a chunk sampling none)
    slots: list[int]  # [sequences] cache slot of each (a sequence keeps its slot from step to step)
    drafts_asked: list[int]  # [sequences] drafts each asked for the next step
    expected: list[float]  # [sequences] tokens the policy expects each to take next step (auto; else 0)
    caught_up_rows: int  # past rows the drafter took first in this round trip
    request_ids: list[str]  # [sequences] which request each is (to follow a sequence or a workload)

    @classmethod
    def of(cls, batch, split: bool, decode: bool, predicted: float, timer: StepTimer, step, rows: int,
           expected: list[float]):  # fmt: skip
        return cls(
            decode, list(batch.starts), list(batch.q_lens), split, predicted, timer.seconds["forward"],
            timer.seconds["draft"], timer.other(), list(step.num_accepted), list(batch.slots),
            list(step.num_draft_tokens), list(expected), rows, list(step.request_ids),
        )  # fmt: skip


class StepTrace:
    """Appends a ``StepRecord`` per step to a JSON-lines file (line-buffered: readable while serving)."""

    def __init__(self, path: str):
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - open for the engine's life

    def write(self, record: StepRecord) -> None:
        self._file.write(json.dumps(asdict(record)) + "\n")

    def close(self) -> None:
        self._file.close()
