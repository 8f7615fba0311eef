"""mtp.v1.DraftService: one attached target session at a time, one MTPWorker per session."""

from __future__ import annotations

import logging
import threading
import uuid

import grpc
import torch

from draft_service.metrics import DraftMetrics
from draft_service.mtp_module import MTPHeads
from draft_service.mtp_worker import DraftBatch, DraftProtocolError, EmptyMTPWorker, MTPMode, MTPWorker
from protos.mtp.v1 import draft_service_pb2 as pb
from protos.mtp.v1 import draft_service_pb2_grpc as pb_grpc
from tandem_core.draft_link import MTP_MODES
from tandem_core.grpc_server import GrpcServer
from tandem_core.transport import BufferDescriptor, RowRange, StagingError, open_reader
from tandem_core.transport.base import DTYPE_NAMES

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["DraftService"].full_name


class _Session:
    def __init__(self, session_id: str, worker: MTPWorker, reader):
        self.session_id = session_id
        self.worker = worker
        self.reader = reader


class DraftServicer(pb_grpc.DraftServiceServicer):
    def __init__(
        self, heads: MTPHeads, mode: MTPMode, k: int, max_slots: int, max_seq_len: int, empty_mtp: bool = False
    ):
        self.heads, self.mode, self.k = heads, mode, k
        self.worker_cls = EmptyMTPWorker if empty_mtp else MTPWorker
        self.limits = (max_slots, max_seq_len)
        self.fingerprint = pb.Fingerprint(
            vocab_size=heads.config.vocab_size,
            hidden_size=heads.config.hidden_size,
            dtype=DTYPE_NAMES[heads.eh_dtype],
            num_draft_tokens=k,
            mode=MTP_MODES[mode.value],
        )
        self._session: _Session | None = None
        self._lock = threading.Lock()  # one step at a time; Attach swaps the session under it
        self.metrics = DraftMetrics()

    def _incompatibility(self, theirs: pb.Fingerprint) -> str:
        ours = self.fingerprint
        for field in ("vocab_size", "hidden_size", "dtype", "mode"):
            if getattr(theirs, field) != getattr(ours, field):
                return f"{field}: target has {getattr(theirs, field)!r}, drafter has {getattr(ours, field)!r}"
        if not 1 <= theirs.num_draft_tokens <= ours.num_draft_tokens:
            return (
                f"num_draft_tokens: target wants {theirs.num_draft_tokens}, drafter serves 1..{ours.num_draft_tokens}"
            )
        return ""

    def Attach(self, request: pb.AttachRequest, context) -> pb.AttachResponse:
        problem = self._incompatibility(request.fingerprint)
        if problem:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"incompatible target: {problem}")
        max_slots, max_seq_len = self.limits
        if not (1 <= request.max_slots <= max_slots and 1 <= request.max_seq_len <= max_seq_len):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"max_slots/max_seq_len must be within 1..{max_slots} / 1..{max_seq_len}",
            )
        b = request.buffer
        desc = BufferDescriptor(
            b.kind,
            b.name,
            b.ring_slots,
            b.rows_per_slot,
            b.hidden_size,
            b.dtype,
            b.byte_offset,
            b.device_uuid,
            b.epoch,
            b.ipc_handle,
        )
        if desc.hidden_size != self.fingerprint.hidden_size or desc.dtype != self.fingerprint.dtype:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "buffer hidden_size/dtype differ from the fingerprint")
        try:
            desc.check()
        except StagingError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"buffer: {err}")
        try:
            reader = open_reader(desc)
        except StagingError as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cannot map the staging buffer: {err}")
        worker = self.worker_cls(
            self.heads, self.mode, request.fingerprint.num_draft_tokens, request.max_slots, request.max_seq_len
        )
        session = _Session(uuid.uuid4().hex, worker, reader)
        with self._lock:
            old, self._session = self._session, session
        if old is not None:
            old.reader.close()
        self.metrics.attaches.inc()
        self.metrics.session.set(1)
        log.info("target attached: session %s, %s buffer, %d slots", session.session_id, desc.kind, request.max_slots)
        return pb.AttachResponse(session_id=session.session_id, fingerprint=self.fingerprint)

    def Draft(self, request_iterator, context):
        for request in request_iterator:
            try:
                yield self._step(request)
            except (DraftProtocolError, StagingError) as err:
                self.metrics.errors.labels("INVALID_ARGUMENT").inc()
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            except _StaleSession as err:
                self.metrics.errors.labels("FAILED_PRECONDITION").inc()
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))

    def _step(self, request: pb.DraftStepRequest) -> pb.DraftStepResponse:
        with self._lock:
            session = self._current(request.session_id)
            _reset_slots(session, request.released_slots)
            if not request.sequences:
                return pb.DraftStepResponse(step_id=request.step_id)
            with self.metrics.step_seconds.time():
                batch = self._batch(session, request)
                drafts = session.worker.step(batch)
        self.metrics.steps.inc()
        self.metrics.tokens.inc(sum(len(d) for d in drafts))
        return pb.DraftStepResponse(
            step_id=request.step_id,
            drafts=[pb.SequenceDrafts(slot=s.slot, tokens=d) for s, d in zip(request.sequences, drafts)],
        )

    def _batch(self, session: _Session, request: pb.DraftStepRequest) -> DraftBatch:
        rows, tokens = [], []
        vocab = self.fingerprint.vocab_size
        for s in request.sequences:
            if not s.tokens or any(not 0 <= t < vocab for t in s.tokens):
                raise DraftProtocolError(f"slot {s.slot}: tokens empty or outside the vocabulary")
            rows.append(
                session.reader.read(RowRange(request.ring_slot, s.row_offset, len(s.tokens)), request.inline_rows)
            )
            tokens.extend(s.tokens)
        return DraftBatch(
            slots=[s.slot for s in request.sequences],
            starts=[s.start for s in request.sequences],
            num_pairs=[len(s.tokens) for s in request.sequences],
            tokens=torch.tensor(tokens, dtype=torch.long),
            hidden=torch.cat(rows),
            num_drafts=[s.num_drafts for s in request.sequences],
        )

    def Release(self, request: pb.ReleaseRequest, context) -> pb.ReleaseResponse:
        self._under_session(request.session_id, context, lambda session: _reset_slots(session, request.slots))
        return pb.ReleaseResponse()

    def Reset(self, request: pb.ResetRequest, context) -> pb.ResetResponse:
        self._under_session(
            request.session_id, context, lambda session: _reset_slots(session, range(len(session.worker.kv_len)))
        )
        return pb.ResetResponse()

    def _current(self, session_id: str) -> _Session:
        """The attached session if ``session_id`` names it (call with the lock held)."""
        if self._session is None or self._session.session_id != session_id:
            raise _StaleSession("unknown or replaced session: Attach again")
        return self._session

    def _under_session(self, session_id: str, context, action) -> None:
        with self._lock:
            try:
                action(self._current(session_id))
            except _StaleSession as err:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))


def _reset_slots(session: _Session, slots) -> None:
    """Forget these slots; ids outside the session's range are ignored."""
    for slot in slots:
        if 0 <= slot < len(session.worker.kv_len):
            session.worker.reset(slot)


class _StaleSession(Exception):
    pass


class _TokenAuth(grpc.ServerInterceptor):
    """Every call must carry ``authorization: Bearer <token>``."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}"

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        metadata = dict(handler_call_details.invocation_metadata or ())
        if metadata.get("authorization") == self._expected or handler_call_details.method.startswith("/grpc.health"):
            return continuation(handler_call_details)
        return self._deny


def build_draft_server(servicer: DraftServicer, host: str, port: int, max_message_bytes: int, token: str) -> GrpcServer:
    """Create (not start) the server; every call but health needs the bearer token when one is set."""
    register = lambda server: pb_grpc.add_DraftServiceServicer_to_server(servicer, server)  # noqa: E731
    interceptors = (_TokenAuth(token),) if token else ()
    return GrpcServer(SERVICE_NAME, register, host, port, max_message_bytes, 8, interceptors, serving=True)
