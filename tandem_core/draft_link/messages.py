"""The draft link's messages as plain dataclasses: what the target and the drafter say per attach and per step.

``wire.py`` converts them to and from ``mtp.v1`` protobuf; nothing else in the services builds or reads
those messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem_core.transport import BufferDescriptor

MTP_MODES = ("vanilla", "eagle")


@dataclass(frozen=True)
class Fingerprint:
    """What must match between a target and a drafter before any step."""

    vocab_size: int
    hidden_size: int
    dtype: str  # "float32" | "bfloat16" | "float16": the hidden rows' dtype
    num_draft_tokens: int  # target: k it asks for; drafter: the most it serves
    mode: str  # "vanilla" | "eagle"

    def incompatibility(self, theirs: Fingerprint) -> str:
        """Why a target with ``theirs`` cannot attach to a drafter with this one ("" if it can)."""
        for name in ("vocab_size", "hidden_size", "dtype", "mode"):
            if getattr(theirs, name) != getattr(self, name):
                return f"{name}: target has {getattr(theirs, name)!r}, drafter has {getattr(self, name)!r}"
        if not 1 <= theirs.num_draft_tokens <= self.num_draft_tokens:
            return (
                f"num_draft_tokens: target wants {theirs.num_draft_tokens}, drafter serves 1..{self.num_draft_tokens}"
            )
        return ""


@dataclass(frozen=True)
class AttachOffer:
    """The target's Attach: who it is, where its hidden rows are staged, how many sequences it runs."""

    fingerprint: Fingerprint
    buffer: BufferDescriptor
    max_slots: int
    max_seq_len: int


@dataclass(frozen=True)
class SequenceStep:
    """One sequence in a step: pairs (hidden row of position p, token p+1) from ``start`` on."""

    slot: int
    start: int  # position of the first pair in the sequence
    row_offset: int  # first hidden row of this sequence in the step's ring slot
    tokens: list[int]  # [n] the token after each staged row
    num_drafts: int  # drafts wanted (0 = only extend the drafter's cache)


@dataclass(frozen=True)
class StepRequest:
    session_id: str
    step_id: int
    ring_slot: int
    sequences: list[SequenceStep]
    released_slots: list[int] = field(default_factory=list)  # slots to forget before this step
    inline_rows: bytes = b""  # the rows themselves, for the inline transport


@dataclass(frozen=True)
class StepAnswer:
    step_id: int
    drafts: list[tuple[int, list[int]]]  # (slot, draft tokens) per requested sequence, in request order
