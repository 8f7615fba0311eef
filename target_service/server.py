"""The public gRPC service: mtp.v1.TargetService plus health and reflection."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

import grpc

from protos.mtp.v1 import target_service_pb2 as pb
from protos.mtp.v1 import target_service_pb2_grpc as pb_grpc
from tandem_core.grpc_server import GrpcServer, HandlerPool
from target_service.engine import DuplicateRequestError, Engine
from target_service.event_post import EventPost, Mailbox
from target_service.frontend import Frontend, InvalidRequestError
from target_service.metrics import RequestClock, TargetMetrics
from target_service.model_info import ModelInfo
from target_service.pb_convert import event_to_pb, model_info_to_pb, params_from_pb, prompt_from_pb, result_to_pb
from target_service.scheduler import QueueFullError
from target_service.sequence import FinishEvent, TokenEvent

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TargetService"].full_name
_ABORT_WAIT_S = 30.0  # longest wait for an aborted request's final event (it comes at the next engine step)


def status_for(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The one place that maps errors to gRPC status codes."""
    if isinstance(exc, InvalidRequestError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, QueueFullError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)
    if isinstance(exc, DuplicateRequestError):
        return grpc.StatusCode.ALREADY_EXISTS, str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"


class TargetServicer(pb_grpc.TargetServiceServicer):
    """Handlers run on the server's event loop and await their request's events there (``EventPost``);
    tokenizing runs on ``pool``.

    A handler whose call ends early (client cancel, deadline, disconnect) is cancelled by gRPC, and its
    request is aborted in the engine.
    """

    def __init__(
        self,
        engine: Engine,
        frontend: Frontend,
        info: ModelInfo,
        metrics: TargetMetrics | None = None,
        workers: int = 4,
    ):
        self.engine = engine
        self.frontend = frontend
        self.info = info
        self.metrics = metrics or TargetMetrics(engine)
        self.pool = HandlerPool(workers, "target-tokenize")
        self._post: EventPost | None = None  # made on the loop by the first call
        self._draining: set[asyncio.Task] = set()
        if engine is not None:  # None in tests of the server alone
            engine.on_events = self._flush

    def _flush(self) -> None:
        if self._post is not None:
            self._post.flush()

    async def _submit(self, inp: pb.GenerationInput, context) -> tuple[str, Mailbox]:
        """Validate and queue (tokenizing off the event loop); a refusal aborts the call with its status."""
        request_id = inp.request_id or uuid.uuid4().hex
        if self._post is None:
            self._post = EventPost(asyncio.get_running_loop())
        box = self._post.mailbox()
        try:
            await self._submitted(request_id, inp, box)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            code, message = status_for(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("submit failed")
            self.metrics.rejected.labels(code.name).inc()
            await context.abort(code, message)
        return request_id, box

    async def _submitted(self, request_id: str, inp: pb.GenerationInput, box: Mailbox) -> None:
        """Tokenize and queue on the pool; a call cancelled meanwhile aborts the request once it is queued."""
        job = self.pool.submit(self._build_and_submit, request_id, inp, box)
        try:
            await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            job.add_done_callback(lambda done: self._abort_queued(request_id, done, box))
            raise

    def _abort_queued(self, request_id: str, done, box: Mailbox) -> None:
        if not done.cancelled() and done.exception() is None:
            self.engine.abort(request_id, "client went away", box)

    def _build_and_submit(self, request_id: str, inp: pb.GenerationInput, box: Mailbox) -> None:
        request = self.frontend.build(request_id, prompt_from_pb(inp), params_from_pb(inp.params))
        self.engine.submit(request, box)

    async def _events(self, box: Mailbox, watch: _Watch):
        """The request's events until its final one."""
        while True:
            event = await box.get()
            self._count(event, watch)
            yield event
            if isinstance(event, FinishEvent):
                return

    def _count(self, event, watch: _Watch) -> None:
        """Counted as soon as taken: a call cancelled at its next yield still counts the final event."""
        if isinstance(event, FinishEvent):
            watch.final = True
            self.metrics.finished(watch.clock, event)
        else:
            watch.clock.token()

    def _end(self, request_id: str, box: Mailbox, watch: _Watch) -> None:
        """The call is over: a request still running (client gone, deadline) is aborted, and counted in the
        metrics once the engine has finished it."""
        if not watch.final:
            self.engine.abort(request_id, "client went away", box)
            task = asyncio.get_running_loop().create_task(self._drain(box, watch))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)

    async def _drain(self, box: Mailbox, watch: _Watch) -> None:
        """Take an aborted request's events (bounded wait) until its final one is counted."""
        try:
            async with asyncio.timeout(_ABORT_WAIT_S):
                while not watch.final:
                    self._count(await box.get(), watch)
        except TimeoutError:
            log.warning("an aborted request's final event did not come in %.0f s", _ABORT_WAIT_S)

    async def GenerateStream(self, request: pb.GenerateStreamRequest, context):
        request_id, box = await self._submit(request.input, context)
        watch = _Watch()
        try:
            async for event in self._events(box, watch):
                yield event_to_pb(request_id, event)
        finally:  # also when gRPC cancels this handler at a yield
            self._end(request_id, box, watch)

    async def Generate(self, request: pb.GenerateRequest, context) -> pb.GenerateResponse:
        request_id, box = await self._submit(request.input, context)
        ids: list[int] = []
        text: list[str] = []
        watch = _Watch()
        try:
            async for event in self._events(box, watch):
                if isinstance(event, TokenEvent):
                    ids.extend(event.token_ids)
                text.append(event.text)
                if isinstance(event, FinishEvent):
                    return pb.GenerateResponse(
                        request_id=request_id, token_ids=ids, text="".join(text), result=result_to_pb(event, False)
                    )
        finally:
            self._end(request_id, box, watch)
        await context.abort(grpc.StatusCode.CANCELLED, "client went away")

    async def Abort(self, request: pb.AbortRequest, context) -> pb.AbortResponse:
        if not request.request_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request_id is empty")
        found = self.engine.is_live(request.request_id)
        self.engine.abort(request.request_id, "aborted by an Abort call")
        return pb.AbortResponse(found=found)

    async def GetModelInfo(self, request: pb.GetModelInfoRequest, context) -> pb.GetModelInfoResponse:
        engine = self.engine
        return model_info_to_pb(self.info, engine.profile, engine.policy.describe(), engine.drafter.status())


@dataclass
class _Watch:
    clock: RequestClock = field(default_factory=RequestClock)
    final: bool = False  # the request's FinishEvent has come


def build_server(
    servicer: TargetServicer, host: str, port: int, max_message_bytes: int, max_request_bytes: int = 0
) -> GrpcServer:
    """Create (not start) the server; health says NOT_SERVING until warm-up is done.

    A request over ``max_request_bytes`` (too big for any prompt that fits) is refused before it is parsed.
    """
    register = lambda server: pb_grpc.add_TargetServiceServicer_to_server(servicer, server)  # noqa: E731
    refused = servicer.metrics.rejected.labels(grpc.StatusCode.INVALID_ARGUMENT.name).inc  # as submit refusals
    return GrpcServer(
        SERVICE_NAME, register, host, port, max_message_bytes, max_request_bytes=max_request_bytes, on_refused=refused
    )
