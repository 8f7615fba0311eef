"""The target service as a real process on loopback, driven through the SDK, bad inputs included."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from bench.procs import ROOT, start_target
from client import AsyncTandemClient, InvalidRequestError, ServerBusyError, TandemClient

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
MAX_SEQ_LEN = 512


@pytest.fixture(scope="module")
def server(default_model_converted):
    svc = start_target("--max-slots", "4", "--max-seq-len", str(MAX_SEQ_LEN), "--max-batch-tokens", "64")
    yield svc
    assert svc.stop() == 0, svc.logs()


@pytest.fixture()
def client(server):
    with TandemClient(server.address, timeout=120) as c:
        yield c


def test_health_reflection_and_model_info(server, client):
    channel = grpc.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="mtp.v1.TargetService"))
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for r in responses for s in r.list_services_response.service}
    assert {"mtp.v1.TargetService", "grpc.health.v1.Health"} <= names
    info = client.model_info()
    assert (info.model, info.model_type, info.vocab_size, info.max_seq_len) == ("default", "llama", 49152, MAX_SEQ_LEN)
    assert info.eos_token_ids == (2,)


def test_sampling_through_the_api_is_seeded_and_reports_its_mode(client):
    a = client.generate(QUESTION, max_tokens=12, temperature=0.9, top_p=0.95, seed=11)
    b = client.generate(QUESTION, max_tokens=12, temperature=0.9, top_p=0.95, seed=11)
    assert a.token_ids == b.token_ids
    assert a.stats.acceptance_mode == "sampling"
    assert client.generate(QUESTION, max_tokens=4).stats.acceptance_mode == "greedy"


def test_stream_and_unary_agree_and_report_usage(client):
    stream = client.stream(QUESTION, max_tokens=24)
    chunks = list(stream)
    unary = client.generate(QUESTION, max_tokens=24)
    c = stream.completion
    assert "Paris" in c.text
    assert c.text == "".join(ch.text for ch in chunks) == unary.text
    assert c.token_ids == unary.token_ids and len(c.token_ids) == c.usage.completion_tokens <= 24
    assert c.finish_reason in ("stop", "length") and c.usage.prompt_tokens > 10
    assert c.stats.num_steps >= 1 and c.stats.mean_acceptance_length == 1.0  # no drafter in this build


def test_prompt_forms_and_stop_conditions(client):
    by_ids = client.generate([1, 2, 3, 4, 5], max_tokens=5, ignore_eos=True)
    assert by_ids.usage.prompt_tokens == 5 and by_ids.usage.completion_tokens == 5 and by_ids.finish_reason == "length"
    full = client.generate(QUESTION, max_tokens=24)
    cut_word = full.text.split()[2]
    stopped = client.generate(QUESTION, max_tokens=24, stop=[cut_word])
    assert stopped.finish_reason == "stop" and cut_word not in stopped.text
    assert full.text.startswith(stopped.text)
    first = full.token_ids[3]
    by_token = client.generate(QUESTION, max_tokens=24, stop_token_ids=[first])
    assert by_token.token_ids == full.token_ids[: full.token_ids.index(first)]


@pytest.mark.parametrize(
    "prompt, params, fragment",
    [
        ("", {}, "empty"),
        ([], {}, "empty"),
        ("word " * 600, {}, "limit"),
        ("hello", {"max_tokens": -1}, "max_tokens"),
        ("hello", {"max_tokens": 100000}, "max_tokens"),
        ([5, 49152], {}, "vocabulary"),
        ([-1], {}, "vocabulary"),
        ([{"role": "wizard", "content": "hi"}], {}, "role"),
        ([{"role": "user", "content": ""}], {}, "content"),
        ("hello", {"stop_token_ids": [10**6]}, "stop_token_ids"),
        ("hello", {"stop": [""]}, "stop"),
        ("hello", {"num_draft_tokens": 9}, "num_draft_tokens"),
        ("hello", {"temperature": -0.5}, "temperature"),
        ("hello", {"temperature": 1e-30}, "temperature"),
        ("hello", {"temperature": 1.0, "top_p": 1.5}, "top_p"),
        ("hello", {"top_k": -2}, "top_k"),
        ("hello", {"acceptance": "lenient"}, "acceptance"),
        ("hello", {"acceptance": "relaxed"}, "think"),  # this server has no thinking-span tokens
        ("hello", {"force_accept": 7}, "force_accept"),
        ("hello", {"relaxed_delta": 2.0}, "relaxed_delta"),
    ],
)
def test_bad_input_gets_invalid_argument_with_a_message(client, prompt, params, fragment):
    with pytest.raises(InvalidRequestError) as err:
        client.generate(prompt, **params)
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in err.value.details


def test_oversized_message_is_refused_and_the_server_keeps_serving(client):
    with pytest.raises(ServerBusyError) as err:
        client.generate("x" * (5 * 1024 * 1024))
    assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Paris" in client.generate(QUESTION, max_tokens=24).text


def test_a_request_too_big_for_any_prompt_is_refused_before_it_is_parsed(client):
    """1 MB of text fits gRPC's 4 MB limit but no prompt of max_seq_len tokens: refused unparsed, both calls."""
    for call in (client.generate, lambda p: list(client.stream(p))):
        with pytest.raises(InvalidRequestError) as err:
            call("lorem ipsum " * 90_000)
        assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert "-byte request is larger than the" in err.value.details
    assert "Paris" in client.generate(QUESTION, max_tokens=24).text


def test_stopping_iteration_aborts_the_request_on_the_server(client):
    stream = client.stream(QUESTION, max_tokens=400, ignore_eos=True, request_id="walk-away")
    for _ in zip(range(2), stream):
        pass
    stream.close()
    deadline = time.monotonic() + 10
    while client.abort("walk-away") and time.monotonic() < deadline:  # found=True while still in flight
        time.sleep(0.1)
    assert not client.abort("walk-away")


def test_abort_rpc_ends_the_stream(client):
    stream = client.stream(QUESTION, max_tokens=400, ignore_eos=True, request_id="to-abort")
    it = iter(stream)
    next(it)
    assert client.abort("to-abort")
    rest = list(it)
    assert stream.completion.finish_reason == "aborted" and len(rest) < 399


def test_concurrent_streams_get_their_own_answers(client):
    prompts = [[{"role": "user", "content": q}] for q in ("Name a color.", "Name a fruit.", "Count to five.")]
    expected = [client.generate(p, max_tokens=16).text for p in prompts]
    results: list[str | None] = [None] * 3

    def run(i):
        results[i] = client.generate(prompts[i], max_tokens=16).text

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expected


def test_async_client(server):
    async def main():
        async with AsyncTandemClient(server.address, timeout=120) as c:
            await c.wait_until_serving(30)
            unary = await c.generate(QUESTION, max_tokens=16)
            stream = c.stream(QUESTION, max_tokens=16)
            text = "".join([chunk.text async for chunk in stream])
            with pytest.raises(InvalidRequestError):
                await c.generate("")
            return unary, text, stream.completion

    unary, text, completion = asyncio.run(main())
    assert text == unary.text == completion.text and completion.finish_reason in ("stop", "length")


def test_cli_streams_an_answer(server):
    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "client", "--address", server.address, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)

    out = cli("generate", "What is 2+2?", "--max-tokens", "16")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    bad = cli("generate", "hi", "--max-tokens", "-3")
    assert bad.returncode == 2 and "max_tokens" in bad.stderr


def test_full_queue_answers_resource_exhausted_and_loses_nothing(default_model_converted):
    svc = start_target("--max-slots", "1", "--max-queue", "1", "--max-seq-len", "256", "--max-batch-tokens", "16")
    try:
        outcomes: list[object] = []

        def run():
            with TandemClient(svc.address, timeout=120) as c:
                try:
                    outcomes.append(c.generate([1, 2, 3], max_tokens=48, ignore_eos=True))
                except ServerBusyError as err:
                    outcomes.append(err)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        busy = [o for o in outcomes if isinstance(o, ServerBusyError)]
        done = [o for o in outcomes if not isinstance(o, ServerBusyError)]
        assert busy and "max_queue" in busy[0].details
        assert len(done) >= 2 and all(d.usage.completion_tokens == 48 for d in done)
    finally:
        assert svc.stop() == 0, svc.logs()


def test_a_reused_request_id_is_refused_while_in_flight(client):
    stream = client.stream(QUESTION, max_tokens=200, ignore_eos=True, request_id="same-id")
    it = iter(stream)
    next(it)
    with pytest.raises(InvalidRequestError) as err:
        client.generate(QUESTION, max_tokens=4, request_id="same-id")
    assert err.value.code is grpc.StatusCode.ALREADY_EXISTS
    stream.close()


def test_health_says_not_serving_until_warm_up_is_done():
    from bench.procs import free_port
    from target_service.server import TargetServicer, build_server

    server = build_server(TargetServicer(None, None, None), "127.0.0.1", free_port(), 1 << 20)
    server.start()
    port = server.port
    try:
        stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        check = health_pb2.HealthCheckRequest(service="mtp.v1.TargetService")
        assert stub.Check(check).status == health_pb2.HealthCheckResponse.NOT_SERVING
        server.set_serving(True)
        assert stub.Check(check).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop(0)
