"""Milliseconds of ``GrpcDrafter.propose`` on an 8-sequence decode step that asks no drafts (no session:
it only records the step's pairs for a later catch-up), median of 1,500 steps in one process.
Usage, from the repository root: PYTHONPATH=. python docs/bench/workload-shift/propose_idle.py"""

import statistics
import time

import torch

from target_service.grpc_drafter import GrpcDrafter, GrpcDrafterConfig
from target_service.step_output import StepOutput

torch.set_num_threads(2)
HIDDEN, SEQS = 576, 8
drafter = GrpcDrafter(GrpcDrafterConfig("127.0.0.1:1", 3, mode="eagle"), 49152, HIDDEN, torch.float32, 16, 2048, 256)
for slot in range(SEQS):  # every slot holds a sequence 100 tokens in
    drafter.history.owner[slot], drafter.history.tokens[slot] = f"r{slot}", [0] * 100


def step(position: int) -> StepOutput:
    ones = [1] * SEQS
    return StepOutput(
        [f"r{i}" for i in range(SEQS)], list(range(SEQS)), [False] * SEQS, ones, torch.zeros(SEQS, dtype=torch.long),
        torch.full((SEQS,), position, dtype=torch.long), torch.randn(SEQS, HIDDEN),
        torch.zeros(SEQS, 4, dtype=torch.long), ones, [position] * SEQS, [0] * SEQS, [-1] * SEQS, [False] * SEQS,
    )  # fmt: skip


times = []
for position in range(100, 1600):
    s = step(position)
    t0 = time.perf_counter()
    drafter.propose(s)
    times.append(time.perf_counter() - t0)
print(f"propose, {SEQS} sequences, no drafts asked: median {1e3 * statistics.median(times):.3f} ms")
drafter.close()
