"""Served drafting round trips split by phase, from the two timestamp logs of timestamps.diff.
Usage: python split.py drafter.log target.log"""

import statistics as st
import sys
from collections import defaultdict

D = {}
for line in open(sys.argv[1]):
    p = line.split()
    D[int(p[1])] = list(map(float, p[2:6]))
rows = defaultdict(list)
for line in open(sys.argv[2]):
    p = line.split()
    sid = int(p[1])
    s, tc, td = map(float, p[2:5])
    nseq, nd, nrows = map(int, p[5:8])
    if sid not in D or tc == 0:
        continue
    t0, t1, t2, t3 = D[sid]
    rows[(nseq, nd)].append((t0 - s, t1 - t0, t2 - t1, t3 - t2, tc - t3, td - tc, td - s))
names = ["send->loop", "loop->pool", "compute", "pool->yield", "yield->pump", "pump->main", "total"]
for k in sorted(rows):
    v = rows[k]
    if len(v) < 5:
        continue
    med = [st.median(x[i] for x in v) * 1e3 for i in range(7)]
    mean = [st.mean(x[i] for x in v) * 1e3 for i in range(7)]
    print(f"seqs={k[0]} drafts={k[1]} n={len(v)}")
    print("   median " + " ".join(f"{n}={m:.2f}" for n, m in zip(names, med)))
    print("   mean   " + " ".join(f"{n}={m:.2f}" for n, m in zip(names, mean)))
