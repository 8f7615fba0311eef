"""mtp.v1.DraftService: one attached target session at a time, one MTPWorker per session."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

import grpc
import torch

from draft_service.metrics import DraftMetrics
from draft_service.mtp_module import MTPHeads
from draft_service.mtp_worker import DraftBatch, DraftProtocolError, EmptyMTPWorker, MTPMode, MTPWorker
from protos.mtp.v1 import draft_service_pb2_grpc as pb_grpc
from tandem_core.draft_link import AttachOffer, Fingerprint, StepAnswer, StepRequest, wire
from tandem_core.grpc_server import GrpcServer, HandlerPool
from tandem_core.transport import TRANSPORTS, RowRange, StagingError, open_reader
from tandem_core.transport.base import DTYPE_NAMES

log = logging.getLogger(__name__)
SERVICE_NAME = "mtp.v1.DraftService"
MAX_DRAFT_STREAMS = 4  # open Draft streams at once (one target session needs one; re-attaches overlap briefly)
HANDLER_THREADS = 4  # attach, steps, releases (steps take the session lock one at a time)


class _Session:
    def __init__(self, session_id: str, worker: MTPWorker, reader):
        self.session_id = session_id
        self.worker = worker
        self.reader = reader


class DraftServicer(pb_grpc.DraftServiceServicer):
    def __init__(
        self,
        heads: MTPHeads,
        mode: MTPMode,
        k: int,
        max_slots: int,
        max_seq_len: int,
        empty_mtp: bool = False,
        acceptance_prior: tuple[float, ...] = (),  # [depth] conditional rates on the heads' validation
    ):
        self.heads, self.mode, self.k, self.acceptance_prior = heads, mode, k, acceptance_prior
        self.worker_cls = EmptyMTPWorker if empty_mtp else MTPWorker
        self.limits = (max_slots, max_seq_len)
        self.fingerprint = Fingerprint(
            heads.config.vocab_size, heads.config.hidden_size, DTYPE_NAMES[heads.eh_dtype], k, mode.value
        )
        self._session: _Session | None = None
        self._lock = threading.Lock()  # one step at a time; Attach swaps the session under it
        self._open_streams = 0
        self.pool = HandlerPool(HANDLER_THREADS, "draft")
        self.metrics = DraftMetrics()

    async def _in_pool(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def Attach(self, request, context):
        try:
            session_id = await self._in_pool(self._attach, wire.attach_from_pb(request))
        except _Refused as refusal:
            await context.abort(refusal.code, refusal.message)
        return wire.attach_answer_to_pb(session_id, self.fingerprint, self.acceptance_prior)

    def _attach(self, offer: AttachOffer) -> str:
        problem = self.fingerprint.incompatibility(offer.fingerprint)
        if problem:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION, f"incompatible target: {problem}")
        max_slots, max_seq_len = self.limits
        if not (1 <= offer.max_slots <= max_slots and 1 <= offer.max_seq_len <= max_seq_len):
            raise _Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"max_slots/max_seq_len must be within 1..{max_slots} / 1..{max_seq_len}",
            )
        session = self._open_session(offer)
        with self._lock:
            old, self._session = self._session, session
        if old is not None:
            old.reader.close()
        self.metrics.attaches.inc()
        self.metrics.session.set(1)
        log.info(
            "target attached: session %s, %s buffer, %d slots", session.session_id, offer.buffer.kind, offer.max_slots
        )
        return session.session_id

    def _open_session(self, offer: AttachOffer) -> _Session:
        """Map the target's staging ring and make a worker for it."""
        desc = offer.buffer
        if desc.kind not in TRANSPORTS:
            raise _Refused(
                grpc.StatusCode.INVALID_ARGUMENT, f"buffer kind {desc.kind[:32]!r} is not one of {list(TRANSPORTS)}"
            )
        if desc.hidden_size != self.fingerprint.hidden_size or desc.dtype != self.fingerprint.dtype:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "buffer hidden_size/dtype differ from the fingerprint")
        try:
            desc.check()
        except StagingError as err:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"buffer: {err}") from None
        try:
            reader = open_reader(desc)
        except StagingError as err:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION, f"cannot map the staging buffer: {err}") from None
        worker = self.worker_cls(
            self.heads, self.mode, offer.fingerprint.num_draft_tokens, offer.max_slots, offer.max_seq_len
        )
        return _Session(uuid.uuid4().hex, worker, reader)

    async def Draft(self, request_iterator, context):
        if self._open_streams >= MAX_DRAFT_STREAMS:  # counted on the event loop: no lock needed
            self.metrics.errors.labels("RESOURCE_EXHAUSTED").inc()
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_DRAFT_STREAMS} Draft streams at once"
            )
        self._open_streams += 1
        try:
            async for request in request_iterator:
                try:
                    answer = await self._in_pool(self._answer, request)
                except _Refused as refusal:
                    self.metrics.errors.labels(refusal.code.name).inc()
                    await context.abort(refusal.code, refusal.message)
                yield answer
        finally:
            self._open_streams -= 1

    def _answer(self, request):
        try:
            return wire.step_answer_to_pb(self._step(wire.step_request_from_pb(request)))
        except (DraftProtocolError, StagingError) as err:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
        except _StaleSession as err:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION, str(err)) from None

    def _step(self, request: StepRequest) -> StepAnswer:
        with self._lock:
            session = self._current(request.session_id)
            _reset_slots(session, request.released_slots)
            if not request.sequences:
                return StepAnswer(request.step_id, [])
            with self.metrics.step_seconds.time():
                batch = self._batch(session, request)
                drafts = session.worker.step(batch)
        self.metrics.steps.inc()
        self.metrics.tokens.inc(sum(len(d) for d in drafts))
        return StepAnswer(request.step_id, [(s.slot, d) for s, d in zip(request.sequences, drafts, strict=True)])

    def _batch(self, session: _Session, request: StepRequest) -> DraftBatch:
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

    async def Release(self, request, context):
        slots = list(request.slots)
        await self._under_session(request.session_id, context, lambda session: _reset_slots(session, slots))
        return wire.release_answer()

    async def Reset(self, request, context):
        await self._under_session(
            request.session_id, context, lambda session: _reset_slots(session, range(len(session.worker.kv_len)))
        )
        return wire.reset_answer()

    def _current(self, session_id: str) -> _Session:
        """The attached session if ``session_id`` names it (call with the lock held)."""
        if self._session is None or self._session.session_id != session_id:
            raise _StaleSession("unknown or replaced session: Attach again")
        return self._session

    async def _under_session(self, session_id: str, context, action) -> None:
        def locked():
            with self._lock:
                action(self._current(session_id))

        try:
            await self._in_pool(locked)
        except _StaleSession as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))


def _reset_slots(session: _Session, slots) -> None:
    """Forget these slots; ids outside the session's range are ignored."""
    for slot in slots:
        if 0 <= slot < len(session.worker.kv_len):
            session.worker.reset(slot)


class _StaleSession(Exception):
    pass


class _Refused(Exception):
    """A call to refuse with this status and message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class _TokenAuth(grpc.aio.ServerInterceptor):
    """Every call but health must carry ``authorization: Bearer <token>``."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}"

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    async def intercept_service(self, continuation, handler_call_details):
        metadata = dict(handler_call_details.invocation_metadata or ())
        if metadata.get("authorization") == self._expected or handler_call_details.method.startswith("/grpc.health"):
            return await continuation(handler_call_details)
        return self._deny


def build_draft_server(servicer: DraftServicer, host: str, port: int, max_message_bytes: int, token: str) -> GrpcServer:
    """Create (not start) the server; every call but health needs the bearer token when one is set."""
    register = lambda server: pb_grpc.add_DraftServiceServicer_to_server(servicer, server)  # noqa: E731
    interceptors = (_TokenAuth(token),) if token else ()
    return GrpcServer(SERVICE_NAME, register, host, port, max_message_bytes, interceptors, serving=True)
