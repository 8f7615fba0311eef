"""The public gRPC service: mtp.v1.TargetService plus health and reflection."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid

import grpc

from protos.mtp.v1 import target_service_pb2 as pb
from protos.mtp.v1 import target_service_pb2_grpc as pb_grpc
from tandem_core.grpc_server import GrpcServer
from target_service.engine import DuplicateRequestError, Engine
from target_service.frontend import Frontend, InvalidRequestError
from target_service.metrics import RequestClock, TargetMetrics
from target_service.model_info import ModelInfo
from target_service.pb_convert import event_to_pb, model_info_to_pb, params_from_pb, prompt_from_pb, result_to_pb
from target_service.scheduler import QueueFullError
from target_service.sequence import FinishEvent, TokenEvent

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TargetService"].full_name
_POLL_S = 0.5  # how often a waiting handler checks that its client is still there
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
    def __init__(self, engine: Engine, frontend: Frontend, info: ModelInfo, metrics: TargetMetrics | None = None):
        self.engine = engine
        self.frontend = frontend
        self.info = info
        self.metrics = metrics or TargetMetrics(engine)

    def _submit(self, inp: pb.GenerationInput, context) -> tuple[str, queue.Queue, threading.Event]:
        """Validate and queue; the request is aborted if the RPC ends before its final event."""
        request_id = inp.request_id or uuid.uuid4().hex
        try:
            request = self.frontend.build(request_id, prompt_from_pb(inp), params_from_pb(inp.params))
            events = self.engine.submit(request)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            code, message = status_for(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("submit failed")
            self.metrics.rejected.labels(code.name).inc()
            context.abort(code, message)
        ended = threading.Event()
        context.add_callback(lambda: self._rpc_ended(request_id, events, ended))
        return request_id, events, ended

    def _rpc_ended(self, request_id: str, events: queue.Queue, ended: threading.Event) -> None:
        """RPC ended (done, client cancel, deadline, disconnect): stop that request, not a later one with its id."""
        ended.set()
        self.engine.abort(request_id, "client cancelled", events)

    def _events(self, request_id: str, events: queue.Queue, ended: threading.Event):
        """The request's events until its final one; a request whose RPC ends first is aborted and still
        counted in the metrics once the engine has finished it."""
        clock, final = RequestClock(), False
        try:
            while True:
                try:
                    event = events.get(timeout=_POLL_S)
                except queue.Empty:
                    if ended.is_set():
                        return
                    continue
                if isinstance(event, FinishEvent):
                    final = True
                    self.metrics.finished(clock, event)
                    yield event
                    return
                clock.token()
                yield event
        finally:
            if not final:
                self.engine.abort(request_id, "client went away", events)
                self._count_when_finished(clock, events)

    def _count_when_finished(self, clock: RequestClock, events: queue.Queue) -> None:
        """Wait (bounded) for the aborted request's final event and count it."""
        deadline = time.monotonic() + _ABORT_WAIT_S
        while time.monotonic() < deadline:
            try:
                event = events.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if isinstance(event, FinishEvent):
                self.metrics.finished(clock, event)
                return

    def GenerateStream(self, request: pb.GenerateStreamRequest, context):
        request_id, events, ended = self._submit(request.input, context)
        for event in self._events(request_id, events, ended):
            yield event_to_pb(request_id, event)

    def Generate(self, request: pb.GenerateRequest, context) -> pb.GenerateResponse:
        request_id, events, ended = self._submit(request.input, context)
        ids: list[int] = []
        text: list[str] = []
        for event in self._events(request_id, events, ended):
            if isinstance(event, TokenEvent):
                ids.extend(event.token_ids)
                text.append(event.text)
            else:
                text.append(event.text)
                return pb.GenerateResponse(
                    request_id=request_id, token_ids=ids, text="".join(text), result=result_to_pb(event, False)
                )
        context.abort(grpc.StatusCode.CANCELLED, "client went away")

    def Abort(self, request: pb.AbortRequest, context) -> pb.AbortResponse:
        if not request.request_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request_id is empty")
        found = self.engine.is_live(request.request_id)
        self.engine.abort(request.request_id, "aborted by an Abort call")
        return pb.AbortResponse(found=found)

    def GetModelInfo(self, request: pb.GetModelInfoRequest, context) -> pb.GetModelInfoResponse:
        engine = self.engine
        return model_info_to_pb(self.info, engine.profile, engine.policy.describe(), engine.drafter.status())


def build_server(servicer: TargetServicer, host: str, port: int, max_message_bytes: int, workers: int) -> GrpcServer:
    """Create (not start) the server; health says NOT_SERVING until warm-up is done."""
    register = lambda server: pb_grpc.add_TargetServiceServicer_to_server(servicer, server)  # noqa: E731
    return GrpcServer(SERVICE_NAME, register, host, port, max_message_bytes, workers)
