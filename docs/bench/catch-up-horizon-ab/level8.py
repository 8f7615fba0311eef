"""The 8-stream workloads of an ab_builds step trace (its first 12: six categories, two rounds):
seconds of prefill steps, of decode steps without drafts and with them (forward, drafting, other),
the decode steps that asked for drafts (index:sequences asking/sequences:rows caught up) and the mean
decode forward per workload in ms. Usage: python level8.py trace.jsonl[.gz] ..."""

import gzip
import json
import statistics
import sys

for path in sys.argv[1:]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        rows = [json.loads(line) for line in f]
    workload, groups, asked, forwards = -1, {}, [], {}
    for i, r in enumerate(rows):
        if not r["decode"] and 0 in r["starts"] and (i == 0 or rows[i - 1]["decode"]):
            workload += 1  # a prefill from position 0 after decode steps starts a workload
        if workload >= 12:
            break
        drafting = r["decode"] and any(r["drafts_asked"])
        key = "prefill" if not r["decode"] else "decode with drafts" if drafting else "decode without drafts"
        g = groups.setdefault(key, [0, 0.0, 0.0, 0.0])
        g[0] += 1
        g[1] += r["forward_s"]
        g[2] += r["draft_s"]
        g[3] += r["other_s"]
        if drafting:
            asking = sum(1 for n in r["drafts_asked"] if n)
            asked.append(f"{i}:{asking}/{len(r['drafts_asked'])}:{r['caught_up_rows']}")
        if r["decode"]:
            forwards.setdefault(workload, []).append(1000 * r["forward_s"])
    total = sum(g[1] + g[2] + g[3] for g in groups.values())
    print(f"{path}: {total:.1f} s of steps")
    for key, g in groups.items():
        print(f"  {key}: {g[0]} steps, forward {g[1]:.1f} s, drafting {g[2]:.1f} s, other {g[3]:.1f} s")
    print("  asked:", " ".join(asked))
    means = [f"{statistics.mean(v):.0f}" for _, v in sorted(forwards.items())]
    print("  mean decode forward by workload:", " ".join(means))
