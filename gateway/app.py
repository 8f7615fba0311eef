"""The OpenAI-compatible HTTP API: /v1/chat/completions, /v1/completions, /v1/models, plus /health and /metrics.

Each request becomes one streamed generation on the target through the asyncio SDK. A client that
disconnects (streaming or not) cancels that call, and the target aborts the request and frees its slot.
Errors are OpenAI error objects: 400 bad request, 401 bad key, 404 unknown model, 429 queue full,
503 target not ready, 504 deadline.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette.sse import ServerSentEvent

from client.async_client import AsyncTandemClient
from client.errors import (
    DeadlineExceededError,
    InvalidRequestError,
    ServerBusyError,
    TandemError,
    UnavailableError,
)
from client.types import Completion
from gateway.config import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.schema import ChatCompletionRequest, CompletionRequest, UnsupportedParameter

_POLL_S = 0.25  # how often a non-streaming request checks that its client is still connected


class ApiError(Exception):
    """An error answered as an OpenAI error object."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def response(self) -> JSONResponse:
        return JSONResponse(status_code=self.status, content=error_body(self.message, self.kind, self.param, self.code))


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def api_error_from_tandem(err: TandemError) -> ApiError:
    """The target's gRPC status, as the HTTP status an OpenAI client expects."""
    if isinstance(err, InvalidRequestError):
        return ApiError(400, err.details)
    if isinstance(err, ServerBusyError):
        return ApiError(429, err.details, "rate_limit_error", code="server_busy")
    if isinstance(err, UnavailableError):
        return ApiError(503, f"target service unavailable: {err.details}", "service_unavailable")
    if isinstance(err, DeadlineExceededError):
        return ApiError(504, "generation timed out", "timeout")
    return ApiError(500, f"target error {err.code.name}: {err.details}", "server_error")


class _ClientGone(Exception):
    """The HTTP client disconnected before the answer was complete."""


def build_app(config: GatewayConfig, metrics: GatewayMetrics | None = None) -> FastAPI:
    metrics = metrics or GatewayMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.client = AsyncTandemClient(config.target, timeout=config.request_timeout_s)
        app.state.model = config.served_model_name
        yield
        await app.state.client.close()

    app = FastAPI(title="Tandem OpenAI-compatible gateway", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.metrics = metrics
    _install_handlers(app, config, metrics)

    @app.get("/health")
    async def health() -> dict:
        await _served_model(app)  # 503 until the target answers
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict:
        name = await _served_model(app)
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tandem"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        await _check_model(app, body.model)
        return await _generate(app, request, body, body.chat(), chat=True)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        await _check_model(app, body.model)
        return await _generate(app, request, body, body.prompt_input(), chat=False)

    return app


class AuthAndMetrics:
    """Pure ASGI middleware: the bearer key on /v1/ paths, and request counts and latency per path and status.

    (Starlette's ``BaseHTTPMiddleware`` runs every response through an extra task and memory stream; this
    costs a function call.)
    """

    def __init__(self, app, config: GatewayConfig, metrics: GatewayMetrics):
        self.app, self.metrics = app, metrics
        self.expected = f"Bearer {config.api_key}".encode() if config.api_key else b""

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, path = time.perf_counter(), scope["path"]
        if self.expected and path.startswith("/v1/") and not self._authorized(scope):
            error = ApiError(401, "missing or wrong API key", "authentication_error", code="invalid_api_key")
            await error.response()(scope, receive, send)
            self.metrics.observe(path, 401, time.perf_counter() - start)
            return None
        started = False

        async def sending(message):  # latency: request to response headers (streams: to first byte)
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.metrics.observe(path, message["status"], time.perf_counter() - start)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if not started:
                self.metrics.observe(path, 500, time.perf_counter() - start)

    def _authorized(self, scope) -> bool:
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        return secrets.compare_digest(given, self.expected)


def _install_handlers(app: FastAPI, config: GatewayConfig, metrics: GatewayMetrics) -> None:
    app.add_middleware(AuthAndMetrics, config=config, metrics=metrics)

    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, exc: ApiError):
        return exc.response()

    @app.exception_handler(TandemError)
    async def on_tandem_error(request: Request, exc: TandemError):
        return api_error_from_tandem(exc).response()

    @app.exception_handler(_ClientGone)
    async def on_gone(request: Request, exc: _ClientGone):
        return Response(status_code=499)  # nobody reads it; the target already aborted the request

    @app.exception_handler(UnsupportedParameter)
    async def on_unsupported(request: Request, exc: UnsupportedParameter):
        return ApiError(400, str(exc), param=exc.param, code="unsupported_parameter").response()

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        message = f"{param}: {first.get('msg', 'invalid request')}" if param else str(first.get("msg", exc))
        return ApiError(400, message, param=param).response()


async def _served_model(app: FastAPI) -> str:
    if not app.state.model:
        try:
            info = await app.state.client.model_info()
        except TandemError as err:
            raise ApiError(503, f"target service not ready: {err.details}", "service_unavailable") from None
        app.state.model = info.model
    return app.state.model


async def _check_model(app: FastAPI, model: str) -> None:
    name = await _served_model(app)
    if model != name:
        raise ApiError(
            404, f"model {model!r} does not exist; this server serves {name!r}", param="model", code="model_not_found"
        )


async def _generate(app: FastAPI, request: Request, body, prompt, chat: bool):
    kwargs = body.generation_kwargs()
    metrics: GatewayMetrics = app.state.metrics
    answer = _Answer(chat, app.state.model, time.perf_counter())
    stream = app.state.client.stream(prompt, **kwargs)
    if body.stream:
        # the first chunk proves the request was accepted: errors before it are plain HTTP errors
        iterator = aiter(stream)
        try:
            first = await anext(iterator)
        except StopAsyncIteration:
            first = None
        metrics.ttft.observe(time.perf_counter() - answer.start)
        return StreamingResponse(
            _encoded(_sse(answer, stream, iterator, first, body.include_usage())),
            media_type="text/event-stream",
            headers=_SSE_HEADERS,
        )
    completion = await _until_disconnect(request, _collect(stream))
    metrics.ttft.observe(time.perf_counter() - answer.start)
    return answer.whole(completion)


async def _collect(stream) -> Completion:
    async for _ in stream:
        pass
    return stream.completion


async def _until_disconnect(request: Request, work) -> Completion:
    """Run ``work``; cancel it (so the target aborts) if the HTTP client goes away first."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=_POLL_S)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise _ClientGone()


# what sse-starlette's EventSourceResponse sends; its keep-alive pings and extra tasks are left out
# (a generation's events are the keep-alive), which takes about a millisecond off each streamed request
_SSE_HEADERS = {"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"}


async def _encoded(events):
    """Each event as server-sent-event bytes (sse-starlette's encoder)."""
    async for data in events:
        yield ServerSentEvent(data, sep="\n").encode()


async def _sse(answer: _Answer, stream, iterator, first, include_usage: bool):
    """Server-sent events: content chunks (the first carries the role), finish chunk, optional usage, [DONE]."""
    try:
        role_sent = not answer.chat  # chat: the role rides on the first chunk that has text
        chunk = first
        while chunk is not None:
            if chunk.text:
                delta = chunk.text if role_sent else {"role": "assistant", "content": chunk.text}
                role_sent = True
                yield json.dumps(answer.chunk(delta, None))
            chunk = await anext(iterator, None)
        completion = stream.completion
        last = "" if not answer.chat else ({} if role_sent else {"role": "assistant", "content": ""})
        yield json.dumps(answer.chunk(last, completion.finish_reason, completion))
        if include_usage:
            yield json.dumps(answer.usage_chunk(completion))
        yield "[DONE]"
    except TandemError as err:
        api = api_error_from_tandem(err)
        yield json.dumps(error_body(api.message, api.kind, api.param, api.code))
    finally:  # also when the client went away (the response closes this generator): the target aborts now
        stream.cancel()


class _Answer:
    """Builds the OpenAI response objects of one request."""

    def __init__(self, chat: bool, model: str, start: float):
        self.chat, self.model, self.start = chat, model, start
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _base(self, stream: bool) -> dict:
        kind = "chat.completion" if self.chat else "text_completion"
        return {
            "id": self.id,
            "object": kind + (".chunk" if stream and self.chat else ""),
            "created": self.created,
            "model": self.model,
        }

    def chunk(self, delta, finish_reason: str | None, completion: Completion | None = None) -> dict:
        if self.chat:
            content = delta if isinstance(delta, dict) else {"content": delta}
            choice = {"index": 0, "delta": content, "finish_reason": finish_reason, "logprobs": None}
        else:
            choice = {"index": 0, "text": delta, "finish_reason": finish_reason, "logprobs": None}
        out = self._base(stream=True) | {"choices": [choice]}
        if completion is not None:
            out["tandem"] = tandem_stats(completion)
        return out

    def usage_chunk(self, completion: Completion) -> dict:
        return self._base(stream=True) | {"choices": [], "usage": usage(completion)}

    def whole(self, completion: Completion) -> dict:
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": completion.text},
                "finish_reason": completion.finish_reason,
                "logprobs": None,
            }
        else:
            choice = {"index": 0, "text": completion.text, "finish_reason": completion.finish_reason, "logprobs": None}
        return self._base(stream=False) | {
            "choices": [choice],
            "usage": usage(completion),
            "tandem": tandem_stats(completion),
        }


def usage(completion: Completion) -> dict:
    prompt, generated = completion.usage.prompt_tokens, completion.usage.completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def tandem_stats(completion: Completion) -> dict:
    """The extension field: speculative decoding statistics of this request."""
    return asdict(completion.stats)
