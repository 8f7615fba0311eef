"""The chaos run's faults, bounded for the suite: real processes, raw gRPC clients the project did not write."""

from __future__ import annotations

import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.chaos import questions, scenario_malformed
from bench.procs import start_target
from client import TandemClient


def test_half_open_calls_cost_no_handler_thread(default_model_converted):
    """Calls that open a stream and never send their request: health and a generation still answer."""
    target = start_target("--max-slots", "2", "--max-queue", "2", "--max-seq-len", "512")  # 12 event threads
    release = threading.Event()

    def never():
        release.wait()
        yield b""

    local = [("grpc.use_local_subchannel_pool", 1)]  # connections of their own, as another process would have
    channels = [grpc.insecure_channel(target.address, options=local) for _ in range(3)]
    try:
        calls = [channels[i % 3].stream_stream("/mtp.v1.TargetService/GenerateStream")(never()) for i in range(300)]
        time.sleep(1.0)
        with grpc.insecure_channel(target.address) as channel:
            t0 = time.monotonic()
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
            assert status == health_pb2.HealthCheckResponse.SERVING and time.monotonic() - t0 < 2
        with TandemClient(target.address, timeout=60) as client:
            assert client.generate(questions(1)[0], max_tokens=8, ignore_eos=True).usage.completion_tokens == 8
        for call in calls:
            call.cancel()
    finally:
        release.set()
        for channel in channels:
            channel.close()
        assert target.stop() == 0


def test_malformed_and_forged_calls_get_client_statuses_and_no_traceback(default_model_converted):
    report = scenario_malformed("eagle")
    statuses = {**report["public"], **report["draft"]}
    assert len(statuses) > 25
    assert not {name: code for name, code in statuses.items() if code in ("UNKNOWN", "INTERNAL", "OK")}
    assert report["not_invalid_argument"] == {
        "Attach without a token": "UNAUTHENTICATED",
        "Draft on a forged session": "FAILED_PRECONDITION",  # a state, not a malformed message: Attach again
        "Release on a forged session": "FAILED_PRECONDITION",
    }
    assert report["tracebacks_in_logs"] == 0
    assert report["serving_after"] == "length"
