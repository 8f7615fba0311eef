"""Tails by configuration in this run's step traces: for each concurrency and target configuration,
the workloads' seconds of steps and the seconds after the last step that held every stream's sequence
(``../margin-ab/tail.py``). The Eagle target ran k=1, k=2 and `auto` in this order in even rounds and
reversed in odd ones, category after category (`tandem-bench`'s concurrent levels); the other targets
ran one configuration. Usage: python tails.py (beside the traces)."""

import sys
from pathlib import Path

here = Path(__file__).parent
sys.path.insert(0, str(here.parent / "margin-ab"))
from tail import load, seconds, workloads  # noqa: E402

TOKENS = 8 * 128  # every workload: 8 prompts, 128 tokens each (EOS ignored)


def merged(parts: list[list[dict]]) -> list[list[dict]]:
    """Join consecutive pieces until each holds a whole workload's tokens: at 4 streams a second wave that
    starts as the first ends begins with a prefill-only step, which ``workloads`` takes for a new one."""
    out, cur = [], []
    for part in parts:
        cur += part
        if sum(sum(r["accepted"]) for r in cur) >= TOKENS:
            out.append(cur)
            cur = []
    return out


ROUND = {"eagle": ["eagle k=1", "eagle k=2", "eagle auto"], "vanilla": ["vanilla auto"], "none": ["no speculation"]}
ROUNDS, CATEGORIES = 2, 6

print("| streams | configuration | workloads | seconds of steps | tail seconds | tail share |")
print("| --- | --- | --- | --- | --- | --- |")
for streams in (4, 8):
    for kind, names in ROUND.items():
        found = merged([w for w in workloads(load(str(here / f"trace-{kind}.jsonl.gz")))
                        if max(len(r["q_lens"]) for r in w) == streams])  # fmt: skip
        order = [n for _ in range(CATEGORIES) for r in range(ROUNDS) for n in (names if r % 2 == 0 else names[::-1])]
        if len(found) != len(order):
            print(f"| {streams} | {kind} | found {len(found)} workloads, expected {len(order)} | | | |")
            continue
        for name in names:
            mine = [w for w, n in zip(found, order) if n == name]
            total = sum(seconds(w) for w in mine)
            tail = 0.0
            for w in mine:
                full = max(j for j, r in enumerate(w) if len(r["q_lens"]) == streams)
                tail += seconds(w[full + 1 :])
            print(f"| {streams} | {name} | {len(mine)} | {total:.1f} | {tail:.1f} | {tail / total:.1%} |")
