"""The concurrent levels' workloads in the step traces, no speculation against Eagle `auto`: tokens per
second of step time, and the median forward of the steps where 4 (or 8) sequences each ran one token
(no drafts; the same shape on either target). Requests are told apart by order of first appearance: the
first 50 on the no-speculation target and 246 on the Eagle one are batch 1's (and the launch request
and warm-ups); then each workload is 8 requests, category by category, 4 streams then 8, two rounds.
The no-speculation target runs one workload per round; the Eagle one runs k=1, k=2, k=3, k=4, `auto`
in the first round and the reverse in the second. Usage: python workloads.py, beside the traces."""

import gzip
import json
import statistics
from pathlib import Path

CATEGORIES = ["math", "mt_bench", "qa", "rag", "summarization", "translation"]
here = Path(__file__).parent


def workloads(kind: str, skip: int) -> dict[int, list[dict]]:
    with gzip.open(here / f"trace-{kind}.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    order: dict[str, int] = {}
    out: dict[int, list[dict]] = {}
    for r in rows:
        for rid in r["request_ids"]:
            order.setdefault(rid, len(order))
        found = {(order[rid] - skip) // 8 for rid in r["request_ids"]}
        if len(found) == 1 and min(found) >= 0:
            out.setdefault(found.pop(), []).append(r)
    return out


def figures(steps: list[dict], seqs: int) -> tuple[float, float]:
    seconds = sum(r["forward_s"] + r["draft_s"] + r["other_s"] for r in steps)
    plain = [r["forward_s"] for r in steps if r["decode"] and r["q_lens"] == [1] * seqs]
    return sum(sum(r["accepted"]) for r in steps) / seconds, 1000 * statistics.median(plain)


none, eagle = workloads("none", 50), workloads("eagle", 246)
print("| streams | category | round | no speculation tok/s | Eagle `auto` tok/s | ratio | "
      "plain forward ms: no speculation | Eagle `auto` |")  # fmt: skip
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for level, seqs in enumerate((4, 8)):
    for c, category in enumerate(CATEGORIES):
        for rnd in range(2):
            a = figures(none[(level * 6 + c) * 2 + rnd], seqs)
            b = figures(eagle[(level * 6 + c) * 10 + 4 + rnd], seqs)
            print(f"| {seqs} | {category} | {rnd + 1} | {a[0]:.1f} | {b[0]:.1f} | {b[0] / a[0]:.3f} "
                  f"| {a[1]:.1f} | {b[1]:.1f} |")  # fmt: skip
