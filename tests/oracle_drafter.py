"""Test oracle drafter: proposes what plain greedy decoding would produce, corrupted on purpose.

Not a real drafter. Tests and benchmarks use it to drive every accept / reject / rewind path of
the engine with a known answer: for each proposal it records the drafts, and when the engine
verifies them it records how many the engine accepted, so a test can compare that with the count
the corruption implies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from target_service.step_output import StepOutput


@dataclass
class OracleRecord:
    request_id: str
    output_position: int  # drafts start at this index of the output
    drafts: list[int]  # what was proposed
    reference: list[int]  # what greedy decoding produces there (drafts without corruption)
    observed_num_accepted: int | None = None  # what the engine accepted (drafts + bonus)

    @property
    def expected_num_accepted(self) -> int:
        """Leading uncorrupted drafts plus the bonus token."""
        n = 0
        while n < len(self.drafts) and self.drafts[n] == self.reference[n]:
            n += 1
        return n + 1


class OracleDrafter:
    def __init__(self, references: dict[str, list[int]], corrupt: Callable[[str, int], bool], vocab_size: int):
        self.references = references
        self.corrupt = corrupt
        self.vocab_size = vocab_size
        self.records: list[OracleRecord] = []
        self._pending: dict[str, OracleRecord] = {}

    def propose(self, step: StepOutput) -> list[list[int]]:
        proposals = []
        for i, rid in enumerate(step.request_ids):
            if int(step.num_accepted[i]) and rid in self._pending:
                self._pending.pop(rid).observed_num_accepted = int(step.num_accepted[i])
            proposals.append(self._propose_one(rid, int(step.num_output_tokens[i]), int(step.num_draft_tokens[i])))
        return proposals

    def _propose_one(self, rid: str, pos: int, want: int) -> list[int]:
        reference = self.references.get(rid, [])[pos : pos + want]
        if not reference:
            return []
        drafts = [(t + 1) % self.vocab_size if self.corrupt(rid, pos + j) else t for j, t in enumerate(reference)]
        record = OracleRecord(rid, pos, drafts, reference)
        self.records.append(record)
        self._pending[rid] = record
        return drafts

    def release(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self._pending.pop(rid, None)

    def status(self) -> None:
        return None

    def close(self) -> None:
        return None
