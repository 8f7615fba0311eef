"""Tandem client SDK: sync and asyncio clients for mtp.v1.TargetService."""

from client.async_client import AsyncGenerationStream, AsyncTandemClient
from client.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidRequestError,
    ServerBusyError,
    TandemError,
    UnavailableError,
)
from client.sync_client import GenerationStream, TandemClient
from client.types import Chunk, Completion, ModelInfo, SpeculativeStats, Usage

__all__ = [
    "AsyncGenerationStream",
    "AsyncTandemClient",
    "CancelledError",
    "Chunk",
    "Completion",
    "DeadlineExceededError",
    "GenerationStream",
    "InvalidRequestError",
    "ModelInfo",
    "ServerBusyError",
    "SpeculativeStats",
    "TandemClient",
    "TandemError",
    "UnavailableError",
    "Usage",
]
