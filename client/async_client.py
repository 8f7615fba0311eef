"""asyncio Tandem client (grpc.aio)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from client.channel import channel_options, channel_target
from client.convert import Prompt, StreamAccumulator, build_input, completion_from_pb, model_info_from_pb
from client.errors import UnavailableError, from_rpc_error
from client.types import Chunk, Completion, ModelInfo
from protos.mtp.v1 import target_service_pb2 as pb
from protos.mtp.v1 import target_service_pb2_grpc as pb_grpc


class AsyncGenerationStream:
    """Async iterator over chunks; leaving the loop early or cancelling the task aborts the request."""

    def __init__(self, call):
        self._call = call
        self._acc = StreamAccumulator()

    @property
    def completion(self) -> Completion | None:
        return self._acc.completion

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        try:
            async for msg in self._call:
                chunk = self._acc.add(msg)
                if chunk is not None:
                    yield chunk
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            self._call.cancel()

    def cancel(self) -> None:
        self._call.cancel()


class AsyncTandemClient:
    def __init__(self, address: str = "127.0.0.1:50051", timeout: float | None = None):
        self.address = address
        self.timeout = timeout
        self._channel = grpc.aio.insecure_channel(channel_target(address), options=channel_options())
        self._stub = pb_grpc.TargetServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def generate(self, prompt: Prompt, **kwargs) -> Completion:
        try:
            resp = await self._stub.Generate(
                pb.GenerateRequest(input=build_input(prompt, **kwargs)), timeout=self.timeout
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return completion_from_pb(resp)

    def stream(self, prompt: Prompt, **kwargs) -> AsyncGenerationStream:
        request = pb.GenerateStreamRequest(input=build_input(prompt, **kwargs))
        return AsyncGenerationStream(self._stub.GenerateStream(request, timeout=self.timeout))

    async def abort(self, request_id: str) -> bool:
        try:
            resp = await self._stub.Abort(pb.AbortRequest(request_id=request_id), timeout=self.timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return resp.found

    async def model_info(self) -> ModelInfo:
        try:
            return model_info_from_pb(await self._stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=self.timeout))
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    async def wait_until_serving(self, timeout: float = 120.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                resp = await self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if loop.time() > deadline:
                raise UnavailableError(grpc.StatusCode.UNAVAILABLE, f"{self.address} not serving after {timeout}s")
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncTandemClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
