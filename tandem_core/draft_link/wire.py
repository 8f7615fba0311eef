"""Draft-link messages to and from ``mtp.v1`` protobuf: the only module that touches ``draft_service_pb2``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields

from protos.mtp.v1 import draft_service_pb2 as pb
from tandem_core.draft_link.messages import AttachOffer, Fingerprint, SequenceStep, StepAnswer, StepRequest
from tandem_core.transport import BufferDescriptor

_MODE_TO_PB = {"vanilla": pb.MTP_MODE_VANILLA, "eagle": pb.MTP_MODE_EAGLE}
_MODE_FROM_PB = {v: k for k, v in _MODE_TO_PB.items()}


def fingerprint_to_pb(f: Fingerprint) -> pb.Fingerprint:
    return pb.Fingerprint(
        vocab_size=f.vocab_size,
        hidden_size=f.hidden_size,
        dtype=f.dtype,
        num_draft_tokens=f.num_draft_tokens,
        mode=_MODE_TO_PB[f.mode],
    )


def fingerprint_from_pb(f: pb.Fingerprint) -> Fingerprint:
    mode = _MODE_FROM_PB.get(f.mode, f"unknown mode {f.mode}")
    return Fingerprint(f.vocab_size, f.hidden_size, f.dtype[:32], f.num_draft_tokens, mode)


def descriptor_to_pb(d: BufferDescriptor) -> pb.BufferDescriptor:
    return pb.BufferDescriptor(**asdict(d))


def descriptor_from_pb(b: pb.BufferDescriptor) -> BufferDescriptor:
    return BufferDescriptor(**{f.name: getattr(b, f.name) for f in fields(BufferDescriptor)})


def attach_to_pb(offer: AttachOffer) -> pb.AttachRequest:
    return pb.AttachRequest(
        fingerprint=fingerprint_to_pb(offer.fingerprint),
        buffer=descriptor_to_pb(offer.buffer),
        max_slots=offer.max_slots,
        max_seq_len=offer.max_seq_len,
    )


def attach_from_pb(request: pb.AttachRequest) -> AttachOffer:
    return AttachOffer(
        fingerprint_from_pb(request.fingerprint),
        descriptor_from_pb(request.buffer),
        request.max_slots,
        request.max_seq_len,
    )


def attach_answer_to_pb(
    session_id: str, fingerprint: Fingerprint, acceptance_prior: Sequence[float] = ()
) -> pb.AttachResponse:
    return pb.AttachResponse(
        session_id=session_id, fingerprint=fingerprint_to_pb(fingerprint), acceptance_prior=list(acceptance_prior)
    )


def step_request_to_pb(r: StepRequest) -> pb.DraftStepRequest:
    return pb.DraftStepRequest(
        session_id=r.session_id,
        step_id=r.step_id,
        ring_slot=r.ring_slot,
        sequences=[
            pb.SequenceStep(
                slot=s.slot, start=s.start, row_offset=s.row_offset, tokens=s.tokens, num_drafts=s.num_drafts
            )
            for s in r.sequences
        ],
        released_slots=r.released_slots,
        inline_rows=r.inline_rows,
    )


def step_request_from_pb(r: pb.DraftStepRequest) -> StepRequest:
    return StepRequest(
        session_id=r.session_id,
        step_id=r.step_id,
        ring_slot=r.ring_slot,
        sequences=[SequenceStep(s.slot, s.start, s.row_offset, list(s.tokens), s.num_drafts) for s in r.sequences],
        released_slots=list(r.released_slots),
        inline_rows=r.inline_rows,
    )


def step_answer_to_pb(a: StepAnswer) -> pb.DraftStepResponse:
    return pb.DraftStepResponse(
        step_id=a.step_id, drafts=[pb.SequenceDrafts(slot=slot, tokens=tokens) for slot, tokens in a.drafts]
    )


def step_answer_from_pb(a: pb.DraftStepResponse) -> StepAnswer:
    return StepAnswer(a.step_id, [(d.slot, list(d.tokens)) for d in a.drafts])


def release_answer() -> pb.ReleaseResponse:
    return pb.ReleaseResponse()


def reset_answer() -> pb.ResetResponse:
    return pb.ResetResponse()
