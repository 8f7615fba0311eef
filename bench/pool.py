"""Closed-loop load: ``streams`` client threads, each taking the next job until none are left."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def run_streams(address: str, jobs: list, streams: int, run: Callable, timeout: float = 1800) -> tuple[list, float]:
    """``run(client, job)`` for every job over ``streams`` concurrent clients; returns (results, wall seconds).

    Jobs are taken in list order; results come in completion order. A job that raises does not stop its
    stream; once all are done, ``RequestsFailed`` reports every failure (no figure is computed from part).
    """
    from client import TandemClient

    pending, lock, results, failures = list(reversed(jobs)), threading.Lock(), [], []

    def worker():
        with TandemClient(address, timeout=timeout) as client:
            while True:
                with lock:
                    if not pending:
                        return
                    job = pending.pop()
                try:
                    out = run(client, job)
                except Exception as err:  # noqa: BLE001 - reported below, with the job
                    with lock:
                        failures.append((job, err))
                    continue
                with lock:
                    results.append(out)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RequestsFailed(failures, len(jobs))
    return results, time.perf_counter() - t0


class RequestsFailed(RuntimeError):
    """Some jobs of a run raised; ``failures`` holds (job, exception) pairs."""

    def __init__(self, failures: list, total: int):
        job, err = failures[0]
        super().__init__(f"{len(failures)} of {total} requests failed; first: {job!r}: {type(err).__name__}: {err}")
        self.failures = failures
