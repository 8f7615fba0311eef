"""How the engine gets draft tokens: one interface, plus the null drafter (no speculation)."""

from __future__ import annotations

from typing import Protocol

from target_service.step_output import StepOutput


class Drafter(Protocol):
    """Proposes draft tokens for the next step from this step's output."""

    def propose(self, step: StepOutput) -> list[list[int]]:
        """Per sequence of ``step``: up to ``num_draft_tokens[i]`` draft token ids."""
        ...

    def release(self, request_ids: list[str]) -> None:
        """These requests finished; drop their state."""
        ...


class NullDrafter:
    """No speculation: every step verifies zero drafts."""

    def propose(self, step: StepOutput) -> list[list[int]]:
        return [[] for _ in step.request_ids]

    def release(self, request_ids: list[str]) -> None:
        return None
