"""Drafting round trips in the two builds' Eagle step traces (beside this file): fixed k=3's drafting
for the next step at batch 1 and at 8 streams, batch-1 `auto`'s by the depth it asked, and k=3's
tokens per step (acceptance). Steps that caught up on deferred rows are left out. Then the target
forward against new tokens in both builds (the GEMM wrapper changed on the target's path too):
median decode forward by sequences and new tokens each, from the no-speculation and k=3 steps.
Usage: python drafttime.py"""

import gzip
import json
import statistics
from pathlib import Path

here = Path(__file__).parent
for build in ("a", "b"):
    with gzip.open(here / f"trace-{build}-eagle.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    one = [r for r in rows if r["decode"] and len(r["q_lens"]) == 1]
    eight = [
        1000 * r["draft_s"]
        for r in rows
        if r["decode"] and len(r["q_lens"]) == 8 and not any(r["expected"]) and not r["caught_up_rows"]
        and all(n == 3 for n in r["drafts_asked"])
    ]  # fmt: skip
    fixed = [r for r in one if not any(r["expected"])]  # fixed k: the choice records no expected tokens
    drafting = [1000 * r["draft_s"] for r in fixed if r["drafts_asked"][0] == 3 and not r["caught_up_rows"]]
    forward = [1000 * r["forward_s"] for r in fixed if r["q_lens"][0] == 4]
    tokens = [r["accepted"][0] for r in fixed if r["q_lens"][0] == 4]
    print(f"{build.upper()}: k=3 drafting median {statistics.median(drafting):.2f} ms (n={len(drafting)}), "
          f"forward of 4 tokens median {statistics.median(forward):.2f} ms, "
          f"tokens per step {statistics.mean(tokens):.3f} (n={len(tokens)})")  # fmt: skip
    print(f"   8 streams, k=3 drafting median {statistics.median(eight):.2f} ms (n={len(eight)})")
    auto = [r for r in one if any(r["expected"]) and not r["caught_up_rows"]]
    for depth in range(1, 5):
        times = [1000 * r["draft_s"] for r in auto if r["drafts_asked"][0] == depth]
        if times:
            print(f"   auto, depth {depth}: median {statistics.median(times):.2f} ms (n={len(times)})")

for build in ("a", "b"):
    forwards: dict[tuple[int, int], list[float]] = {}
    for kind in ("none", "eagle"):
        with gzip.open(here / f"trace-{build}-{kind}.jsonl.gz", "rt") as f:
            for r in map(json.loads, f):
                q = set(r["q_lens"])
                if r["decode"] and not any(r["expected"]) and len(q) == 1 and len(r["q_lens"]) in (1, 8):
                    forwards.setdefault((len(r["q_lens"]), q.pop()), []).append(1000 * r["forward_s"])
    shapes = "  ".join(
        f"{seqs}x{q}: {statistics.median(v):.2f} ms (n={len(v)})" for (seqs, q), v in sorted(forwards.items())
    )
    print(f"{build.upper()} forward, sequences x new tokens: {shapes}")
