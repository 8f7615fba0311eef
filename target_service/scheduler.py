"""Continuous batching: admits requests into KV slots and packs each step under a token budget."""

from __future__ import annotations

import collections
import itertools
import threading
from dataclasses import dataclass

from tandem_core.limits import MAX_DRAFT_TOKENS
from target_service.sequence import SeqStatus, Sequence


class QueueFullError(RuntimeError):
    """The waiting queue is at its bound; the caller should retry later."""


@dataclass(frozen=True)
class SchedulerLimits:
    max_slots: int  # sequences running at once (KV slots)
    max_seq_len: int  # tokens per KV slot: prompt + output (+ drafts in flight)
    max_batch_tokens: int  # tokens per forward step (prefill chunks + verification blocks)
    max_queue: int  # requests waiting for a slot; beyond it RESOURCE_EXHAUSTED
    max_draft_tokens: int = MAX_DRAFT_TOKENS  # most drafts one sequence verifies in a step

    def __post_init__(self) -> None:
        # Every running sequence's verification block must fit one step, so drafts are never cut.
        need = self.max_slots * (1 + self.max_draft_tokens)
        if self.max_batch_tokens < need:
            raise ValueError(
                f"max_batch_tokens={self.max_batch_tokens} is below max_slots * (1 + max_draft_tokens) = {need}"
            )
        for name in ("max_slots", "max_seq_len", "max_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True)
class ScheduledSeq:
    seq: Sequence
    start: int  # tokens already cached for this sequence
    input_ids: list[int]  # [q_len] prompt chunk, or [last token] + drafts
    num_drafts: int  # drafts inside input_ids (0 for prefill)
    is_context: bool  # prefill chunk
    samples: bool  # the step emits tokens for this sequence (generation or last prefill chunk)


class Scheduler:
    def __init__(self, limits: SchedulerLimits):
        self.limits = limits
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []
        self.free_slots = list(range(limits.max_slots - 1, -1, -1))
        self._lock = threading.Lock()  # guards `waiting` against submitting threads

    def add(self, seq: Sequence) -> None:
        with self._lock:
            # requests about to take a free slot at the next step are not waiting for one
            if len(self.waiting) >= self.limits.max_queue + len(self.free_slots):
                raise QueueFullError(
                    f"server busy: {len(self.waiting)} requests already wait for a slot "
                    f"(max_queue={self.limits.max_queue}); retry later"
                )
            self.waiting.append(seq)

    def remove_waiting(self, request_id: str) -> Sequence | None:
        with self._lock:
            for seq in self.waiting:
                if seq.request_id == request_id:
                    self.waiting.remove(seq)
                    return seq
        return None

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> list[ScheduledSeq]:
        """Generation blocks first (decode latency), then prefill chunks in the leftover budget.

        Generation blocks go in slot order: consecutive slots let attention read a view of the KV cache.
        """
        self._admit()
        budget = self.limits.max_batch_tokens
        out: list[ScheduledSeq] = []
        for seq in sorted(self.running, key=lambda s: s.slot):
            if seq.in_prefill:
                continue
            drafts = seq.draft_ids[: seq.useful_drafts()]
            out.append(ScheduledSeq(seq, seq.num_cached, [seq.last_token, *drafts], len(drafts), False, True))
            budget -= 1 + len(drafts)
        for seq in self.running:
            if not seq.in_prefill or budget <= 0:
                continue
            prompt = seq.request.prompt_ids
            chunk = list(prompt[seq.num_cached : seq.num_cached + budget])
            last = seq.num_cached + len(chunk) == len(prompt)
            out.append(ScheduledSeq(seq, seq.num_cached, chunk, 0, True, last))
            budget -= len(chunk)
        return out

    def will_prefill(self, generation_tokens: int) -> bool:
        """Whether the next ``schedule()`` takes a prefill chunk if its generation blocks hold
        ``generation_tokens`` (its attention then runs one call per sequence, drafts or not)."""
        if self.limits.max_batch_tokens <= generation_tokens:
            return False
        with self._lock:
            admitted = bool(self.waiting) and bool(self.free_slots)
        return admitted or any(s.in_prefill for s in self.running)

    def joining(self) -> list[int]:
        """The prompt lengths of the sequences the next steps prefill: those running in prefill, then
        those waiting that free slots will take."""
        with self._lock:
            waiting = list(itertools.islice(self.waiting, len(self.free_slots)))
        return [len(s.request.prompt_ids) for s in self.running if s.in_prefill] + [
            len(s.request.prompt_ids) for s in waiting
        ]

    def update_from_output(self, scheduled: list[ScheduledSeq], num_accepted: list[int]) -> None:
        """Advance each sequence's cached length past what the step kept: a whole prefill chunk, or the
        ``num_accepted`` tokens of a generation block (the KV rows of rejected drafts are rewound)."""
        for s, n in zip(scheduled, num_accepted, strict=True):
            s.seq.num_cached = s.start + (len(s.input_ids) if s.is_context else n)
            s.seq.draft_ids = []

    def finish(self, seq: Sequence) -> None:
        seq.status = SeqStatus.FINISHED
        if seq in self.running:
            self.running.remove(seq)
            self.free_slots.append(seq.slot)

    def _admit(self) -> None:
        with self._lock:
            while self.waiting and self.free_slots:
                seq = self.waiting.popleft()
                seq.slot = min(self.free_slots)  # the lowest free slot keeps busy slots consecutive
                self.free_slots.remove(seq.slot)
                seq.status = SeqStatus.RUNNING
                self.running.append(seq)
