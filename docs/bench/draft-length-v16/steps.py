"""Decode steps of N sequences in this run's step traces, grouped by the drafts the step verified:
count, mean forward / drafting / other ms, tokens and tok/s of step time. Eagle `auto`'s steps are
told from fixed k's (same target) by the expected tokens the choice before them recorded; fixed k's
steps are those where every sequence verified k. Usage: python steps.py N (4 or 8) [DIR], beside the
traces or with the folder that holds them."""

import gzip
import json
import statistics
import sys
from pathlib import Path

here = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent
n = int(sys.argv[1])


def load(kind: str) -> list[dict]:
    with gzip.open(here / f"trace-{kind}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def line(name: str, steps: list[dict]) -> None:
    def ms(key: str) -> float:
        return 1000 * statistics.mean(r[key] for r in steps)

    tokens = statistics.mean(sum(r["accepted"]) for r in steps)
    seconds = (ms("forward_s") + ms("draft_s") + ms("other_s")) / 1000
    print(f"| {name} | {len(steps)} | {ms('forward_s'):.1f} | {ms('draft_s'):.2f} | {ms('other_s'):.1f} "
          f"| {tokens:.2f} | {tokens / seconds:.1f} |")  # fmt: skip


print("| steps | count | forward ms | drafting ms | other ms | tokens | tok/s of step time |")
print("| --- | --- | --- | --- | --- | --- | --- |")
line("no speculation", [r for r in load("none") if r["decode"] and len(r["q_lens"]) == n])
rows = load("eagle")
auto, fixed, idle = {}, {}, []
for before, r in zip(rows, rows[1:]):
    if not r["decode"] or len(r["q_lens"]) != n:
        continue
    drafts = sum(q - 1 for q in r["q_lens"])
    if any(before["expected"]):
        auto.setdefault((drafts, r["split"]), []).append(r)
        if drafts == 0 and not any(r["drafts_asked"]):
            idle.append(1000 * r["draft_s"])
    elif len(set(r["q_lens"])) == 1:
        fixed.setdefault(r["q_lens"][0] - 1, []).append(r)
for (drafts, split), steps in sorted(auto.items()):
    if len(steps) >= 20:
        line(f"Eagle auto, {drafts} drafts, {'one call per sequence' if split else 'one attention call'}", steps)
for k, steps in sorted(fixed.items()):
    line(f"fixed k={k}", steps)
drafted = sum(len(v) for (d, _), v in auto.items() if d)
print(f"Eagle auto decode steps of {n} sequences that verified drafts: {drafted} "
      f"of {sum(len(v) for v in auto.values())}; drafting where neither this step nor the next drafts: median "
      f"{statistics.median(idle):.2f} ms, mean {statistics.mean(idle):.2f}")  # fmt: skip
