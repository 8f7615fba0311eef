"""The Eagle worker's step (shipped head, 2 new pairs per sequence, one draft) timed as is and after
writing a 100 MB buffer before every step (its weights out of cache, as after a target forward).
Usage, from the repository root: PYTHONPATH=. python docs/bench/draft-round-trip/cold.py"""

import statistics
import sys
import time

import torch

from draft_service.mtp_worker import DraftBatch, MTPMode, MTPWorker

sys.path.insert(0, "docs/bench/bf16-heads")
from probe import heads_for  # noqa: E402

torch.manual_seed(0)
heads = heads_for("eagle", "auto")
print(heads.weights)
hidden = heads.config.hidden_size
junk = torch.randn(100_000_000 // 4)  # 100 MB


def run(seqs, rows, flush, steps=40, context=300):
    worker = MTPWorker(heads, MTPMode.EAGLE, 4, 8, 2048)
    slots = list(range(seqs))
    worker.step(
        DraftBatch(
            slots,
            [0] * seqs,
            [context] * seqs,
            torch.randint(0, 2000, (seqs * context,)),
            torch.randn(seqs * context, hidden),
            [0] * seqs,
        )
    )
    times, pos = [], context
    for _ in range(steps):
        b = DraftBatch(
            slots,
            [pos] * seqs,
            [rows] * seqs,
            torch.randint(0, 2000, (seqs * rows,)),
            torch.randn(seqs * rows, hidden),
            [1] * seqs,
        )
        if flush:
            junk.mul_(1.0001)
        t0 = time.perf_counter()
        worker.step(b)
        times.append(time.perf_counter() - t0)
        pos += rows
    return 1000 * statistics.median(times)


for seqs, rows in [(1, 2), (4, 2), (8, 2)]:
    w = []
    c = []
    for _ in range(3):
        w.append(run(seqs, rows, False))
        c.append(run(seqs, rows, True))
    print(seqs, rows, f"warm {statistics.median(w):.2f} cold {statistics.median(c):.2f}", flush=True)
