"""How far apart the draft policy's start-up calibrations price drafts while another process runs in
bursts beside it (as a draft service warming up beside its target does).

Alternates two ways of timing the calibration grid in one process: ``rows`` (each shape's fastest of
three forwards in a row, as before 2026-12-06) and ``rounds`` (the grid run four times, one forward
of each shape a round, each shape's fastest: ``calibration_samples`` now). A child process meanwhile
multiplies matrices on two threads for ``--burst`` seconds out of every ``--period``. Each fit prices
a decode step of 8 sequences at 300 cached tokens without drafts, the same with one draft each
(``all+1``) and with one draft for one of them (``one+1``); at the end, the burst process stopped,
the same steps are timed (median of 7). Usage: PYTHONPATH=. python docs/bench/calibration/spread.py
"""

import argparse
import multiprocessing
import statistics
import time

import torch

from tandem_core.kernels import MIN_ROWS
from tandem_core.kv_cache import runs_dense
from tandem_core.model_loader import load_model
from target_service.draft_policy import StepCost, StepShape, _slot_orders, _timed, calibration_samples
from target_service.model_runner import ForwardBatch, ModelRunner

STEPS = {"none": [1] * 8, "all+1": [2] * 8, "one+1": [2] + [1] * 7}


def burst(seconds: float, period: float) -> None:
    torch.set_num_threads(2)
    a = torch.randn(512, 512)
    while True:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            a = torch.tanh(a @ a)
        time.sleep(period - seconds)


def batch(slots: list[int], context: int, q_lens: list[int]) -> ForwardBatch:
    return ForwardBatch(torch.zeros(sum(q_lens), dtype=torch.long), slots, [context] * len(slots), q_lens,
                        torch.arange(sum(q_lens)))  # fmt: skip


def rows_samples(runner, max_seqs: int = 8, max_q: int = 5) -> list:
    """The calibration as it was: every shape's fastest of three forwards in a row."""
    samples = []
    for context in (128, 1024):
        for seqs in sorted({1, max_seqs // 2, max_seqs}):
            for q in sorted({1, 2, max_q}):
                for slots in _slot_orders(seqs):
                    b = batch(slots, context, [q] * seqs)
                    shape = StepShape.of(b.starts, b.q_lens, not runs_dense(slots, b.starts, b.q_lens))
                    samples.append((shape, min(_timed(runner, b) for _ in range(3))))
    return samples


def priced(cost: StepCost) -> dict[str, float]:
    ms = {k: 1000 * cost.predict(StepShape.of([300] * 8, q)) for k, q in STEPS.items()}
    return {"none": ms["none"], "all+1": ms["all+1"] - ms["none"], "one+1": ms["one+1"] - ms["none"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fits", type=int, default=4, help="calibrations of each way")
    p.add_argument("--burst", type=float, default=3.0)
    p.add_argument("--period", type=float, default=8.0)
    args = p.parse_args()
    runner = ModelRunner(load_model("default", "float32").model, 8, 2048, "auto")
    min_rows = MIN_ROWS if runner.kernels == "onednn" else 1
    rows_samples(runner)  # warm-up
    child = multiprocessing.get_context("spawn").Process(target=burst, args=(args.burst, args.period), daemon=True)
    child.start()
    fits: dict[str, list[dict]] = {"rows": [], "rounds": []}
    for i in range(args.fits):
        for way in fits:
            t0 = time.perf_counter()
            samples = rows_samples(runner) if way == "rows" else calibration_samples(runner, 8, 5)
            cost = StepCost.fit(samples, min_rows)
            fits[way].append(priced(cost) | {"per_token": 1000 * cost.per_token})
            row = " ".join(f"{k} {v:.1f}" for k, v in fits[way][-1].items())
            print(f"fit {i} {way} ({time.perf_counter() - t0:.0f} s): ms {row}", flush=True)
    child.terminate()
    child.join()
    measured = {}
    for name, q in STEPS.items():
        b = batch(list(range(8)), 300, q)
        _timed(runner, b)
        measured[name] = 1000 * statistics.median(_timed(runner, b) for _ in range(7))
    print(f"measured ms: none {measured['none']:.1f} all+1 {measured['all+1'] - measured['none']:.1f} "
          f"one+1 {measured['one+1'] - measured['none']:.1f}")  # fmt: skip
    for way, rows in fits.items():
        for key in ("all+1", "one+1", "per_token"):
            values = [r[key] for r in rows]
            print(f"{way}: {key} min {min(values):.1f} median {statistics.median(values):.1f} max {max(values):.1f}")


if __name__ == "__main__":
    main()
