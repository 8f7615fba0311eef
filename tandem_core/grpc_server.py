"""The gRPC server skeleton both services use: grpc.aio on a loop of its own, health, reflection, graceful stop.

Calls live on an asyncio event loop (one thread): a call costs no thread until its request has
arrived, so clients that open calls and never send anything cannot starve the service. The services'
handlers are coroutines that hand blocking work (tokenizing, drafting) to a bounded ``HandlerPool``;
a cancelled call cancels its handler.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import signal
import socket
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

_HEALTH = health_pb2.HealthCheckResponse
MAX_STREAMS_PER_CONNECTION = 256  # one client connection cannot hold more calls open than this


class GrpcServer:
    """One service on ``host:port`` with health (under "" and its own name) and server reflection.

    ``serving`` is the health status until ``set_serving``. Health answers on the event loop itself, so it
    answers even when every handler thread is busy. ``sync_workers`` run handlers written as plain
    functions (an interceptor's refusal).
    """

    def __init__(
        self,
        service_name: str,
        register: Callable[[grpc.aio.Server], None],  # adds the service's servicer to the server
        host: str,
        port: int,
        max_message_bytes: int,
        interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (),
        serving: bool = False,
        sync_workers: int = 4,
        max_request_bytes: int = 0,  # larger requests: INVALID_ARGUMENT before parsing (0: only gRPC's limit)
        on_refused: Callable[[], None] | None = None,  # called for each request refused unparsed or undecodable
    ):
        self.service_name = service_name
        self._refuser = _RefuseUndecodable(max_request_bytes, on_refused)
        self._loop = asyncio.new_event_loop()
        name = service_name.rsplit(".", 1)[-1]
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"{name}-io")
        self._thread.start()
        pool = HandlerPool(sync_workers, name)
        self.server, self.health = self._run(self._build(register, host, port, max_message_bytes, pool, interceptors))
        self.set_serving(serving)

    async def _build(self, register, host, port, max_message_bytes, pool, interceptors):
        server = grpc.aio.server(
            migration_thread_pool=pool,
            interceptors=(*interceptors, self._refuser),
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
                ("grpc.so_reuseport", 0),  # a second server on a taken port fails instead of sharing it
            ],
        )
        register(server)
        checker = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        reflection.enable_server_reflection((self.service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        self.port = server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise RuntimeError(f"cannot bind {host}:{port}")
        return server, checker

    def _run(self, coroutine):
        """Run ``coroutine`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def set_serving(self, serving: bool) -> None:
        status = _HEALTH.SERVING if serving else _HEALTH.NOT_SERVING
        for name in ("", self.service_name):
            self._run(self.health.set(name, status))

    def start(self) -> None:
        self._run(self.server.start())

    def stop(self, grace_s: float) -> None:
        """NOT_SERVING first (balancers stop sending), then let calls in flight finish for ``grace_s``."""
        self.set_serving(False)
        self._run(self.server.stop(grace_s))


@dataclass(frozen=True)
class _Refusal:
    """What a request decodes to when it is refused before parsing or cannot be parsed."""

    message: str


_UNDECODABLE = _Refusal("the request is not a valid message for this method")


class _RefuseUndecodable(grpc.aio.ServerInterceptor):
    """A request that does not parse as the method's message gets INVALID_ARGUMENT from the handler's own
    context (gRPC would answer UNKNOWN and log a traceback). One larger than ``max_request_bytes`` (0: no
    limit but gRPC's) gets INVALID_ARGUMENT without being parsed: parsing and sizing a multi-megabyte
    message costs more CPU than receiving it."""

    def __init__(self, max_request_bytes: int = 0, on_refused: Callable[[], None] | None = None):
        self.max_request_bytes = max_request_bytes
        self.on_refused = on_refused

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        decode, limit, counted = handler.request_deserializer, self.max_request_bytes, self.on_refused or _nothing

        def tolerant(raw: bytes):
            if limit and len(raw) > limit:
                counted()
                return _Refusal(f"a {len(raw)}-byte request is larger than the {limit} bytes this server accepts")
            try:
                return decode(raw)
            except Exception:  # noqa: BLE001 - any parse failure is the client's
                counted()
                return _UNDECODABLE

        for kind, guard in (
            ("unary_unary", _guard_unary),
            ("unary_stream", _guard_unary_stream),
            ("stream_stream", _guard_stream_stream),
        ):
            behavior = getattr(handler, kind)
            if behavior is not None and (inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)):
                return handler._replace(request_deserializer=tolerant, **{kind: guard(behavior)})
        return handler


def _nothing() -> None:
    pass


async def _refuse(context, refusal: _Refusal) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal.message)


def _guard_unary(behavior):
    async def guarded(request, context):
        if isinstance(request, _Refusal):
            await _refuse(context, request)
        return await behavior(request, context)

    return guarded


def _guard_unary_stream(behavior):
    async def guarded(request, context):
        if isinstance(request, _Refusal):
            await _refuse(context, request)
        async for answer in behavior(request, context):
            yield answer

    return guarded


def _guard_stream_stream(behavior):
    async def guarded(requests, context):
        async def checked():
            async for request in requests:
                if isinstance(request, _Refusal):
                    await _refuse(context, request)
                yield request

        async for answer in behavior(checked(), context):
            yield answer

    return guarded


class HandlerPool(futures.Executor):
    """A fixed pool of daemon threads for blocking work of the handlers.

    Daemon threads: a blocking call still running when the service stops must not keep the process
    alive (``ThreadPoolExecutor`` joins its threads at interpreter exit).
    """

    def __init__(self, workers: int, name: str):
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(workers):
            threading.Thread(target=self._serve, daemon=True, name=f"{name}_{i}").start()

    def submit(self, fn, /, *args, **kwargs) -> futures.Future:
        future: futures.Future = futures.Future()
        self._work.put((future, fn, args, kwargs))
        return future

    def _serve(self) -> None:
        while True:
            future, fn, args, kwargs = self._work.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (for a service asked to pick its own)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
