"""Blocking Tandem client."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from client.channel import channel_options, channel_target
from client.convert import Prompt, StreamAccumulator, build_input, completion_from_pb, model_info_from_pb
from client.errors import UnavailableError, from_rpc_error
from client.types import Chunk, Completion, ModelInfo
from protos.mtp.v1 import target_service_pb2 as pb
from protos.mtp.v1 import target_service_pb2_grpc as pb_grpc


class GenerationStream:
    """Iterates the chunks of one generation; stopping early (break, close, GC) aborts it server-side.

    After the iteration ends, ``completion`` holds the full result.
    """

    def __init__(self, call):
        self._call = call
        self._acc = StreamAccumulator()

    @property
    def completion(self) -> Completion | None:
        return self._acc.completion

    def __iter__(self) -> Iterator[Chunk]:
        try:
            for msg in self._call:
                chunk = self._acc.add(msg)
                if chunk is not None:
                    yield chunk
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            self._call.cancel()  # no-op once the stream is complete

    def close(self) -> None:
        self._call.cancel()

    def __enter__(self) -> GenerationStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TandemClient:
    def __init__(self, address: str = "127.0.0.1:50051", timeout: float | None = None):
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(channel_target(address), options=channel_options())
        self._stub = pb_grpc.TargetServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def generate(self, prompt: Prompt, **kwargs) -> Completion:
        """Generate and wait for the whole answer. kwargs: see client.convert.build_input."""
        try:
            resp = self._stub.Generate(pb.GenerateRequest(input=build_input(prompt, **kwargs)), timeout=self.timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return completion_from_pb(resp)

    def stream(self, prompt: Prompt, **kwargs) -> GenerationStream:
        """Start a generation and stream its chunks."""
        request = pb.GenerateStreamRequest(input=build_input(prompt, **kwargs))
        return GenerationStream(self._stub.GenerateStream(request, timeout=self.timeout))

    def abort(self, request_id: str) -> bool:
        try:
            return self._stub.Abort(pb.AbortRequest(request_id=request_id), timeout=self.timeout).found
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def model_info(self) -> ModelInfo:
        try:
            return model_info_from_pb(self._stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=self.timeout))
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def is_serving(self) -> bool:
        try:
            resp = self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
        except grpc.RpcError:
            return False
        return resp.status == health_pb2.HealthCheckResponse.SERVING

    def wait_until_serving(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_serving():
            if time.monotonic() > deadline:
                raise UnavailableError(grpc.StatusCode.UNAVAILABLE, f"{self.address} not serving after {timeout}s")
            time.sleep(0.2)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> TandemClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
