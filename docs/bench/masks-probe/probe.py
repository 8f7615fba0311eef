"""Masks once per step against the earlier way, in one process, alternating per forward.

The earlier way is emulated by building the step's masks as before (bool, one query head per key
head) and leaving ``_grouped_sdpa`` to stack them in every layer, where
``scaled_dot_product_attention`` then turns them additive. Run from the repository root:
``PYTHONPATH=. python docs/bench/masks-probe/probe.py`` (default model, 8 sequences, median of 14).
"""

import statistics
import time

import torch

from bench.step_layout import Layout, forward_batch
from tandem_core import kv_cache
from tandem_core.memory import fix_malloc_thresholds, use_huge_pages

use_huge_pages()
fix_malloc_thresholds()

from tandem_core.model_loader import load_model  # noqa: E402
from target_service.model_runner import ModelRunner  # noqa: E402

torch.manual_seed(0)
runner = ModelRunner(load_model("default", "float32").model, 8, 2048, "auto")
now = kv_cache._MaskForm.of


def before(self, mask):  # bool, not stacked: every layer stacks and converts it
    return mask


seqs = list(range(8))
spread, near = [300 + 40 * i for i in range(8)], [300 + 10 * i for i in range(8)]
cases = [
    Layout("300 each, 1 new token", seqs, [300] * 8, [1] * 8),
    Layout("300 each, 2 new tokens", seqs, [300] * 8, [2] * 8),
    Layout("300-580, 1 new token (one call per sequence)", seqs, spread, [1] * 8),
    Layout("300-580, half 2 new tokens (one call per sequence)", seqs, spread, [1 + i % 2 for i in range(8)]),
    Layout("600 each, 3 new tokens", seqs, [600] * 8, [3] * 8),
    Layout("300-370, 1 new token", seqs, near, [1] * 8),
    Layout("300-370, 2 new tokens", seqs, near, [2] * 8),
]
kv_cache.DENSE_PADDED_KEYS_PER_SEQ, kv_cache.DENSE_WASTE = 0, 1.25  # the split rule of the time
times = {(c.name, w): [] for c in cases for w in ("before", "now")}
for rep in range(16):
    for case in cases:
        for way, of in (("before", before), ("now", now)) if rep % 2 else (("now", now), ("before", before)):
            kv_cache._MaskForm.of = of
            batch = forward_batch(case, runner.vocab_size)
            t0 = time.perf_counter()
            runner.forward(batch)
            times[case.name, way].append(time.perf_counter() - t0)
print("| step | before, ms | now, ms | now / before |\n| --- | --- | --- | --- |")
for case in cases:
    b, n = (statistics.median(times[case.name, w][2:]) for w in ("before", "now"))
    print(f"| {case.name} | {1e3 * b:.1f} | {1e3 * n:.1f} | {n / b:.3f} |")
