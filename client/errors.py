"""gRPC errors mapped to exceptions a caller can catch by meaning."""

from __future__ import annotations

import grpc


class TandemError(Exception):
    """Base class; ``code`` is the gRPC status code and ``details`` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class InvalidRequestError(TandemError):
    """The server rejected the request as malformed (INVALID_ARGUMENT, ALREADY_EXISTS)."""


class ServerBusyError(TandemError):
    """The server's queue is full or the message too large (RESOURCE_EXHAUSTED)."""


class UnavailableError(TandemError):
    """The server cannot be reached or is shutting down (UNAVAILABLE)."""


class DeadlineExceededError(TandemError):
    """The call ran past its deadline."""


class CancelledError(TandemError):
    """The call was cancelled."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.ALREADY_EXISTS: InvalidRequestError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ServerBusyError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
}


def from_rpc_error(err: grpc.RpcError) -> TandemError:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return _BY_CODE.get(code, TandemError)(code, details or "")
