"""Several targets behind one address: gRPC round robin spreads requests, and one target dying loses none."""

from __future__ import annotations

import threading
import time

from bench.procs import start_target
from client import TandemClient
from client.channel import channel_target

ARGS = ("--max-slots", "2", "--max-seq-len", "512", "--max-batch-tokens", "32")


def generate_concurrently(client: TandemClient, n: int, max_tokens: int) -> list:
    results: list = [None] * n

    def run(i):
        try:
            results[i] = client.generate([{"role": "user", "content": f"Count to {i + 3}."}], max_tokens=max_tokens,
                                         ignore_eos=True)  # fmt: skip
        except Exception as err:  # noqa: BLE001 - the test reports what failed
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads, results


def steps(address: str) -> int:
    with TandemClient(address, timeout=30) as c:
        return c.model_info().profile.steps


def test_address_lists_become_static_resolver_targets():
    assert channel_target("127.0.0.1:1,127.0.0.1:2") == "ipv4:127.0.0.1:1,127.0.0.1:2"
    assert channel_target("[::1]:1,[::1]:2") == "ipv6:[::1]:1,[::1]:2"
    assert channel_target("dns:///tandem-targets:50051") == "dns:///tandem-targets:50051"


def test_round_robin_over_two_targets_and_none_lost_when_one_is_killed(default_model_converted):
    a, b = start_target(*ARGS), start_target(*ARGS)
    try:
        before = steps(a.address), steps(b.address)
        with TandemClient(f"{a.address},{b.address}", timeout=300) as client:
            for _ in range(5):  # round robin uses the targets whose connection is ready: a few rounds at most
                threads, results = generate_concurrently(client, 6, 8)
                for t in threads:
                    t.join()
                assert all(r.usage.completion_tokens == 8 for r in results), results
                if steps(a.address) > before[0] and steps(b.address) > before[1]:
                    break
            assert steps(a.address) > before[0] and steps(b.address) > before[1]  # both served requests

            threads, results = generate_concurrently(client, 6, 48)
            time.sleep(1.5)  # requests are running on both
            a.proc.kill()
            for t in threads:
                t.join()
            assert all(not isinstance(r, Exception) and r.usage.completion_tokens == 48 for r in results), results
    finally:
        a.stop()
        assert b.stop() == 0, b.logs()
