"""The chaos run's faults, bounded for the suite: real processes, raw gRPC clients the project did not write."""

from __future__ import annotations

import signal
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


def test_requests_in_flight_speculate_again_after_a_drafter_restart(default_model_converted):
    from bench.chaos import StreamRecord, _resume_after, in_threads, run_stream, start_pair

    pair = start_pair("eagle", "--max-seq-len", "1024")
    try:
        with TandemClient(pair.target.address, timeout=300) as client:
            messages = questions(2, offset=4)
            records = [StreamRecord(), StreamRecord()]
            threads = in_threads(
                # long enough to outlast the restart on a loaded 2-core machine (300 tokens once did not)
                lambda i=i: run_stream(client, messages[i], records[i], max_tokens=600, ignore_eos=True)
                for i in (0, 1)
            )
            time.sleep(2.0)
            pair.drafter.proc.send_signal(signal.SIGKILL)
            pair.drafter.proc.wait()
            ready = pair.restart_drafter()
            for t in threads:
                t.join()
            status = client.model_info().drafter_status
        assert [r.error for r in records] == ["", ""]
        assert all(any(t > ready for t, _ in r.chunks) for r in records), "a request ended before the restart"
        resumed = _resume_after(records, ready)
        assert None not in resumed, resumed  # each request had drafts accepted again after the restart
        assert status.failures >= 1 and status.attaches >= 2
    finally:
        pair.stop()
