"""The public gRPC service: mtp.v1.TargetService plus health and reflection."""

from __future__ import annotations

import asyncio
import logging
import queue
import time
import uuid
from dataclasses import dataclass, field

import grpc

from protos.mtp.v1 import target_service_pb2 as pb
from protos.mtp.v1 import target_service_pb2_grpc as pb_grpc
from tandem_core.grpc_server import GrpcServer, HandlerPool
from target_service.engine import DuplicateRequestError, Engine
from target_service.frontend import Frontend, InvalidRequestError
from target_service.metrics import RequestClock, TargetMetrics
from target_service.model_info import ModelInfo
from target_service.pb_convert import event_to_pb, model_info_to_pb, params_from_pb, prompt_from_pb, result_to_pb
from target_service.scheduler import QueueFullError
from target_service.sequence import FinishEvent, TokenEvent

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TargetService"].full_name
_POLL_S = 0.25  # longest a pool thread waits for one event (a cancelled call frees its thread by then)
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
    """Handlers run on the server's event loop; tokenizing and waiting for engine events run on ``pool``.

    A handler whose call ends early (client cancel, deadline, disconnect) is cancelled by gRPC, and its
    request is aborted in the engine.
    """

    def __init__(
        self,
        engine: Engine,
        frontend: Frontend,
        info: ModelInfo,
        metrics: TargetMetrics | None = None,
        workers: int = 16,
    ):
        self.engine = engine
        self.frontend = frontend
        self.info = info
        self.metrics = metrics or TargetMetrics(engine)
        self.pool = HandlerPool(workers, "target-events")

    async def _in_pool(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def _submit(self, inp: pb.GenerationInput, context) -> tuple[str, queue.Queue]:
        """Validate and queue (tokenizing off the event loop); a refusal aborts the call with its status."""
        request_id = inp.request_id or uuid.uuid4().hex
        try:
            events = await self._submitted(request_id, inp)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            code, message = status_for(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("submit failed")
            self.metrics.rejected.labels(code.name).inc()
            await context.abort(code, message)
        return request_id, events

    async def _submitted(self, request_id: str, inp: pb.GenerationInput) -> queue.Queue:
        """Tokenize and queue on the pool; a call cancelled meanwhile aborts the request once it is queued."""
        job = self.pool.submit(self._build_and_submit, request_id, inp)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            job.add_done_callback(lambda done: self._abort_queued(request_id, done))
            raise

    def _abort_queued(self, request_id: str, done) -> None:
        if not done.cancelled() and done.exception() is None:
            self.engine.abort(request_id, "client went away", done.result())

    def _build_and_submit(self, request_id: str, inp: pb.GenerationInput) -> queue.Queue:
        return self.engine.submit(self.frontend.build(request_id, prompt_from_pb(inp), params_from_pb(inp.params)))

    async def _events(self, events: queue.Queue, watch: _Watch):
        """The request's events until its final one."""
        while True:
            event = await self._in_pool(self._pop, events, watch)
            if event is not None:
                yield event
                if isinstance(event, FinishEvent):
                    return

    def _pop(self, events: queue.Queue, watch: _Watch):
        """The next event, or None after a short wait. Counted here, by whichever thread takes it: a wait
        whose call was cancelled meanwhile still counts the final event it took."""
        try:
            event = events.get(timeout=_POLL_S)
        except queue.Empty:
            return None
        if isinstance(event, FinishEvent):
            watch.final = True
            self.metrics.finished(watch.clock, event)
        else:
            watch.clock.token()
        return event

    def _end(self, request_id: str, events: queue.Queue, watch: _Watch) -> None:
        """The call is over: a request still running (client gone, deadline) is aborted, and counted in the
        metrics once the engine has finished it."""
        if not watch.final:
            self.engine.abort(request_id, "client went away", events)
            self.pool.submit(self._drain, events, watch)

    def _drain(self, events: queue.Queue, watch: _Watch) -> None:
        """Take an aborted request's events (bounded wait) until its final one is counted."""
        deadline = time.monotonic() + _ABORT_WAIT_S
        while not watch.final and time.monotonic() < deadline:
            self._pop(events, watch)

    async def GenerateStream(self, request: pb.GenerateStreamRequest, context):
        request_id, events = await self._submit(request.input, context)
        watch = _Watch()
        try:
            async for event in self._events(events, watch):
                yield event_to_pb(request_id, event)
        finally:  # also when gRPC cancels this handler at a yield
            self._end(request_id, events, watch)

    async def Generate(self, request: pb.GenerateRequest, context) -> pb.GenerateResponse:
        request_id, events = await self._submit(request.input, context)
        ids: list[int] = []
        text: list[str] = []
        watch = _Watch()
        try:
            async for event in self._events(events, watch):
                if isinstance(event, TokenEvent):
                    ids.extend(event.token_ids)
                text.append(event.text)
                if isinstance(event, FinishEvent):
                    return pb.GenerateResponse(
                        request_id=request_id, token_ids=ids, text="".join(text), result=result_to_pb(event, False)
                    )
        finally:
            self._end(request_id, events, watch)
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
