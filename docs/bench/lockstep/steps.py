"""Decode steps of N sequences in a step trace, grouped by the drafts each verified: count, mean forward /
drafting / other ms, tokens, tok/s of step time, steps with attention split per sequence.
Usage: python steps.py TRACE.jsonl[.gz] N"""

import gzip
import json
import statistics as st
import sys
from collections import defaultdict

path, n = sys.argv[1], int(sys.argv[2])
groups = defaultdict(list)
for line in gzip.open(path, "rt") if path.endswith(".gz") else open(path):
    r = json.loads(line)
    if r["decode"] and len(r["q_lens"]) == n:
        key = tuple(sorted(q - 1 for q in r["q_lens"]))
        groups[key].append((r["forward_s"], r["draft_s"], r["other_s"], sum(r["accepted"]), r["split"]))
all_s = all_tokens = 0.0
for key, steps in sorted(groups.items(), key=lambda kv: -len(kv[1])):
    fwd, draft, other = (1e3 * st.mean(x[i] for x in steps) for i in range(3))
    seconds, tokens = sum(x[0] + x[1] + x[2] for x in steps), sum(x[3] for x in steps)
    all_s, all_tokens = all_s + seconds, all_tokens + tokens
    if len(steps) >= 10:
        split = sum(x[4] for x in steps)
        print(f"{str(key):22s} {len(steps):5d} fwd {fwd:6.1f} draft {draft:5.1f} other {other:4.1f} "
              f"tok {tokens / len(steps):5.2f} tok/s {tokens / seconds:6.1f} split {split}")  # fmt: skip
print(f"all {n}-seq decode steps: tok/s {all_tokens / all_s:.1f}")
