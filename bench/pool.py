"""Closed-loop load: ``streams`` client threads, each taking the next job until none are left."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def run_streams(address: str, jobs: list, streams: int, run: Callable, timeout: float = 1800) -> tuple[list, float]:
    """``run(client, job)`` for every job over ``streams`` concurrent clients; returns (results, wall seconds).

    Jobs are taken in list order; results come in completion order.
    """
    from client import TandemClient

    pending, lock, results = list(reversed(jobs)), threading.Lock(), []

    def worker():
        with TandemClient(address, timeout=timeout) as client:
            while True:
                with lock:
                    if not pending:
                        return
                    job = pending.pop()
                out = run(client, job)
                with lock:
                    results.append(out)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - t0
