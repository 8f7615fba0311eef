"""Target and draft service as two real processes on loopback, sharing hidden states through shm.

Default model with the shipped (trained) vanilla MTP heads: drafts are partly accepted and partly
rejected, which exercises the accept and rewind paths; greedy output must equal non-speculative
output exactly (same engine, same server: speculation is switched off per request for the reference).
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc
import pytest

from bench.procs import ServiceProcess, free_port, start_target
from client import TandemClient
from protos.mtp.v1 import draft_service_pb2 as dpb
from protos.mtp.v1 import draft_service_pb2_grpc as dpb_grpc
from tandem_core.transport.shm import PREFIX, SHM_DIR
from tests.helpers import spec_bench_prompts

K = 3
HIDDEN_ROW_BYTES = 576 * 4  # one float32 hidden row of the default model


def prompts(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": text}] for text in spec_bench_prompts(n)]


def start_drafter(port: int, *extra: str) -> ServiceProcess:
    svc = ServiceProcess("draft_service", ["--num-draft-tokens", str(K), *extra], port)
    svc.wait_serving()
    return svc


def start_spec_target(draft_port: int, deadline_ms: int = 5000) -> ServiceProcess:
    return start_target(
        "--drafter",
        "grpc",
        "--draft-address",
        f"127.0.0.1:{draft_port}",
        "--num-draft-tokens",
        str(K),
        "--max-slots",
        "8",
        "--max-batch-tokens",
        "64",
        "--max-seq-len",
        "1024",
        "--draft-deadline-ms",
        str(deadline_ms),
    )


def wait_attached(client: TandemClient, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not client.model_info().drafter_status.attached:
        assert time.monotonic() < deadline, "target never attached to the drafter"
        time.sleep(0.2)


def run_concurrently(client: TandemClient, jobs: list[dict]) -> list:
    results: list = [None] * len(jobs)

    def run(i):
        results[i] = client.generate(**jobs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.fixture()
def pair(default_model_converted):
    draft_port = free_port()
    drafter = start_drafter(draft_port)
    target = start_spec_target(draft_port)
    yield drafter, target, draft_port
    target.stop()
    drafter.stop()


def test_eight_concurrent_requests_match_non_speculative_and_no_hidden_bytes_cross_grpc(pair):
    drafter, target, _ = pair
    with TandemClient(target.address, timeout=300) as client:
        wait_attached(client)
        # fixed length: every request drafts (under auto, 8 streams may leave some without drafts)
        jobs = [{"prompt": p, "max_tokens": 40, "draft_length": "fixed"} for p in prompts(8)]
        spec = run_concurrently(client, jobs)
        plain = run_concurrently(client, [dict(j, num_draft_tokens=0) for j in jobs])
        assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
        assert all(r.stats.num_drafted > 0 for r in spec if r.usage.completion_tokens > 1)
        assert all(r.stats.num_drafted == 0 for r in plain)
        status = client.model_info().drafter_status
    assert status.attached and status.failures == 0 and status.steps > 0
    # Steps staged up to 64 prefill rows and 8 x 4-token blocks, yet no request ever carried as
    # many bytes as one hidden row: the rows stay in shared memory.
    assert 0 < status.max_request_bytes < HIDDEN_ROW_BYTES
    if _huge_pages_on_request():  # both services asked for huge pages before their first tensor
        assert _huge_mb(target.proc.pid) > 256 and _huge_mb(drafter.proc.pid) > 16


def _huge_pages_on_request() -> bool:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return path.is_file() and ("[madvise]" in path.read_text() or "[always]" in path.read_text())


def _huge_mb(pid: int) -> float:
    lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    return sum(int(line.split()[1]) for line in lines if line.startswith("AnonHugePages:")) / 1024


def test_drafter_sigkill_mid_generation_then_restart(pair):
    drafter, target, draft_port = pair
    with TandemClient(target.address, timeout=300) as client:
        wait_attached(client)
        jobs = [{"prompt": p, "max_tokens": 64, "ignore_eos": True} for p in prompts(4)]
        reference = [r.token_ids for r in run_concurrently(client, [dict(j, num_draft_tokens=0) for j in jobs])]

        results: list = [None] * len(jobs)
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, client.generate(**jobs[i])))
            for i in range(len(jobs))
        ]
        for t in threads:
            t.start()
        time.sleep(2.0)  # mid-generation
        drafter.proc.send_signal(signal.SIGKILL)
        for t in threads:
            t.join()
        assert [r.token_ids for r in results] == reference
        assert client.model_info().drafter_status.failures >= 1  # the kill landed mid-generation

        restarted = start_drafter(draft_port)
        try:
            wait_attached(client)
            again = client.generate(**jobs[0])
            assert again.token_ids == reference[0]
            assert again.stats.num_drafted > 0  # speculation resumed for a new request
        finally:
            restarted.stop()


def _segments_of(pid: int) -> list[Path]:
    return list(SHM_DIR.glob(f"{PREFIX}-{pid}-*"))


def test_killing_the_target_leaves_no_shared_segment(default_model_converted):
    draft_port = free_port()
    drafter = start_drafter(draft_port)
    target = start_spec_target(draft_port)
    try:
        with TandemClient(target.address, timeout=300) as client:
            wait_attached(client)
            client.generate(prompts(1)[0], max_tokens=8)
        target.proc.send_signal(signal.SIGKILL)
        target.proc.wait()
        assert _segments_of(target.proc.pid) == []
    finally:
        target.stop()
        drafter.stop()


def _attach_request(vocab_size: int) -> dpb.AttachRequest:
    return dpb.AttachRequest(
        fingerprint=dpb.Fingerprint(
            vocab_size=vocab_size, hidden_size=576, dtype="float32", num_draft_tokens=K, mode=dpb.MTP_MODE_VANILLA
        ),
        buffer=dpb.BufferDescriptor(kind="inline", ring_slots=2, rows_per_slot=8, hidden_size=576, dtype="float32"),
        max_slots=4,
        max_seq_len=256,
    )


def test_a_drafter_started_without_a_token_makes_one_only_this_account_can_read(default_model_converted):
    from tandem_core.draft_link import local_token_path

    port = free_port()
    drafter = start_drafter(port)
    path = local_token_path(port)
    try:
        assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
        stub = dpb_grpc.DraftServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        with pytest.raises(grpc.RpcError) as err:
            stub.Attach(_attach_request(49152), timeout=10)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
        auth = (("authorization", f"Bearer {path.read_text()}"),)
        assert stub.Attach(_attach_request(49152), timeout=10, metadata=auth).session_id
    finally:
        drafter.stop()
    assert not path.exists()


def test_drafter_refuses_incompatible_targets_and_unauthenticated_calls(default_model_converted):
    port = free_port()
    drafter = start_drafter(port, "--auth-token", "s3cret")
    try:
        stub = dpb_grpc.DraftServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        request = _attach_request(vocab_size=32000)
        with pytest.raises(grpc.RpcError) as err:
            stub.Attach(request, timeout=10)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
        auth = (("authorization", "Bearer s3cret"),)
        with pytest.raises(grpc.RpcError) as err:
            stub.Attach(request, timeout=10, metadata=auth)
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION and "vocab_size" in err.value.details()
        request.fingerprint.vocab_size = 49152
        assert stub.Attach(request, timeout=10, metadata=auth).session_id
    finally:
        drafter.stop()


def test_the_draft_service_will_not_bind_off_loopback_without_a_token():
    from draft_service.config import parse_draft_config

    with pytest.raises(SystemExit):
        parse_draft_config(["--host", "0.0.0.0"], env={})
    assert parse_draft_config(["--host", "0.0.0.0", "--auth-token", "t"], env={}).host == "0.0.0.0"
