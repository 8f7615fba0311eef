"""Mean forward / drafting / other ms of the decode steps of N sequences where every sequence verified
no draft and none asked for one, per step trace. Usage:
python docs/bench/workload-shift/idle_steps.py N TRACE.jsonl[.gz] [TRACE ...]"""

import gzip
import json
import statistics as st
import sys

n = int(sys.argv[1])
for path in sys.argv[2:]:
    rows = []
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        for line in f:
            r = json.loads(line)
            idle = not any(r["drafts_asked"]) and all(q == 1 for q in r["q_lens"])
            if r["decode"] and len(r["q_lens"]) == n and idle:
                rows.append((r["forward_s"], r["draft_s"], r["other_s"]))
    fwd, draft, other = (1e3 * st.mean(x[i] for x in rows) for i in range(3))
    total = fwd + draft + other
    print(f"{path}: {len(rows)} steps, forward {fwd:.2f} draft {draft:.2f} other {other:.2f} ms, sum {total:.2f}")
