"""How this machine's speed drifts: a 2-thread float32 matmul (8x576 by 576x1536) in a loop for 40 s,
the products done in each 1-second window printed as a ratio to the median window. Run with nothing
else on the machine: ``python docs/bench/machine-drift/drift.py``."""

import statistics
import time

import torch

torch.set_num_threads(2)
a, w = torch.randn(8, 576), torch.randn(576, 1536)
rates, end = [], time.time() + 40
while time.time() < end:
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 1.0:
        for _ in range(100):
            a @ w
        n += 100
    rates.append(n / (time.perf_counter() - t0))
median = statistics.median(rates)
print(" ".join(f"{r / median:.2f}" for r in rates))
