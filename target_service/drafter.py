"""How the engine gets draft tokens: one interface, plus the null drafter (no speculation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from target_service.step_output import StepOutput


@dataclass(frozen=True)
class DrafterStatus:
    """The link to a drafter in another process, as GetModelInfo and /metrics report it."""

    attached: bool  # a session is open
    steps: int  # steps answered
    request_bytes: int  # serialized step requests sent
    max_request_bytes: int  # largest single step request
    failures: int  # sessions lost (broken stream, stuck drafter, garbage)
    attaches: int  # sessions opened
    late_steps: int  # steps whose drafts came after the deadline


class Drafter(Protocol):
    """Proposes draft tokens for the next step from this step's output."""

    def propose(self, step: StepOutput) -> list[list[int]]:
        """Per sequence of ``step``: up to ``num_draft_tokens[i]`` draft token ids."""
        ...

    def release(self, request_ids: list[str]) -> None:
        """These requests finished; drop their state."""
        ...

    def status(self) -> DrafterStatus | None:
        """The link's state, or None for a drafter in this process."""
        ...

    def close(self) -> None:
        """Stop background work and free what the drafter holds."""
        ...


class NullDrafter:
    """No speculation: every step verifies zero drafts."""

    def propose(self, step: StepOutput) -> list[list[int]]:
        return [[] for _ in step.request_ids]

    def release(self, request_ids: list[str]) -> None:
        return None

    def status(self) -> DrafterStatus | None:
        return None

    def close(self) -> None:
        return None
