"""One Eagle draft step of the shipped head (bfloat16 weights where the CPU runs them natively) over
``rows`` new pairs per sequence and one draft, in two passes (keys and values alone for the rows before
each sequence's last, then the block over the last rows) against one pass of the whole block over every
row: what ``mtp_worker.WHOLE_BLOCK_ROWS`` chooses between. Caches hold 300 pairs per sequence first.
Interleaved, three rounds of 30 steps each way; prints the median of the rounds' medians.
Usage, from the repository root: ``PYTHONPATH=. python docs/bench/whole-block/probe.py``"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from draft_service import mtp_worker
from draft_service.mtp_worker import DraftBatch, MTPMode, MTPWorker

sys.path.insert(0, str(Path(__file__).parent.parent / "bf16-heads"))
from probe import heads_for  # noqa: E402


def step_ms(heads, seqs: int, rows: int, steps: int = 30, context: int = 300) -> float:
    """Median ms of ``steps`` worker steps, each ``rows`` new pairs per sequence and one draft."""
    hidden = heads.config.hidden_size
    worker = MTPWorker(heads, MTPMode.EAGLE, 4, 8, 2048)
    slots = list(range(seqs))
    worker.step(DraftBatch(slots, [0] * seqs, [context] * seqs, torch.randint(0, 2000, (seqs * context,)),
                           torch.randn(seqs * context, hidden), [0] * seqs))  # fmt: skip
    times, position = [], context
    for _ in range(steps):
        batch = DraftBatch(slots, [position] * seqs, [rows] * seqs, torch.randint(0, 2000, (seqs * rows,)),
                           torch.randn(seqs * rows, hidden), [1] * seqs)  # fmt: skip
        t0 = time.perf_counter()
        worker.step(batch)
        times.append(time.perf_counter() - t0)
        position += rows
    return 1000 * statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    heads = heads_for("eagle", "auto")
    print(f"head weights: {heads.weights}")
    for seqs in (1, 4, 8):
        for rows in (2, 3, 5, 9, 17, 33):
            two, whole = [], []
            for _ in range(3):
                mtp_worker.WHOLE_BLOCK_ROWS = 0
                two.append(step_ms(heads, seqs, rows))
                mtp_worker.WHOLE_BLOCK_ROWS = 1 << 30
                whole.append(step_ms(heads, seqs, rows))
            two_ms, whole_ms = statistics.median(two), statistics.median(whole)
            print(f"{seqs} sequences x {rows} rows ({seqs * rows} in the call): two passes {two_ms:.2f} ms, "
                  f"whole block {whole_ms:.2f} ms", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
