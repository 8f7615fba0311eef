"""GPU checks: run only where CUDA and cupy work (scripts/gpu_check.sh runs them on an NVIDIA machine)."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA")


def test_cuda_ipc_rows_cross_a_process_boundary():
    from tandem_core.transport import make_writer
    from tests.helpers import spawn_reader

    writer = make_writer("cuda_ipc", 2, 8, 4, torch.float32, device="cuda:0")
    try:
        proc = spawn_reader(writer.descriptor)
        rows = torch.arange(20, dtype=torch.float32, device="cuda:0").view(5, 4)
        writer.write(1, rows)  # recorded on the event; the reader's stream waits on it
        out, _ = proc.communicate("go\n", timeout=120)
        assert torch.equal(torch.tensor(json.loads(out)), rows[2:5].cpu())
    finally:
        writer.close()


def test_gpu_generation_with_the_drafter_on_cuda_ipc(default_model_converted):
    from bench.procs import ServiceProcess, free_port, start_target
    from client import TandemClient

    draft_port = free_port()
    drafter = ServiceProcess("draft_service", ["--num-draft-tokens", "3", "--device", "cuda"], draft_port)
    drafter.wait_serving()
    target = start_target(
        "--device",
        "cuda",
        "--drafter",
        "grpc",
        "--draft-address",
        f"127.0.0.1:{draft_port}",
        "--num-draft-tokens",
        "3",
        "--draft-transport",
        "auto",
        "--draft-deadline-ms",
        "5000",
    )
    try:
        with TandemClient(target.address, timeout=300) as client:
            while not client.model_info().drafter_status.attached:
                pass
            prompt = [{"role": "user", "content": "Explain why the sky is blue."}]
            spec = client.generate(prompt, max_tokens=64)
            plain = client.generate(prompt, max_tokens=64, num_draft_tokens=0)
            status = client.model_info().drafter_status
        assert spec.token_ids == plain.token_ids and spec.stats.num_drafted > 0
        assert status.failures == 0 and status.max_request_bytes < 576 * 4
        print(
            f"GPU e2e: {len(spec.token_ids)} tokens, drafted {spec.stats.num_drafted}, "
            f"accepted {spec.stats.num_accepted}, max step request {status.max_request_bytes} bytes"
        )
    finally:
        target.stop()
        drafter.stop()
