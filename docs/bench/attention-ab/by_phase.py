"""Where a step trace's time went: prefill steps, and decode steps with and without drafts, split at
5 sequences (8-stream workloads against 4-stream ones); steps, seconds of forward, drafting and other
work, tokens taken and rows the drafter caught up on. Usage: python by_phase.py trace.jsonl[.gz] ..."""

import gzip
import json
import sys

for path in sys.argv[1:]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        rows = [json.loads(line) for line in f]
    groups: dict[str, list[float]] = {}
    for r in rows:
        if r["decode"]:
            drafts = "drafts" if any(r["drafts_asked"]) else "no drafts"
            key = f"decode, {drafts}, {'5-8' if len(r['q_lens']) >= 5 else '1-4'} seqs"
        else:
            key = "prefill"
        g = groups.setdefault(key, [0, 0.0, 0.0, 0.0, 0, 0])
        g[0] += 1
        g[1] += r["forward_s"]
        g[2] += r["draft_s"]
        g[3] += r["other_s"]
        g[4] += sum(r["accepted"])
        g[5] += r.get("caught_up_rows", 0)
    print(f"{path}: {sum(g[1] + g[2] + g[3] for g in groups.values()):.1f} s of steps")
    for key, g in sorted(groups.items()):
        print(f"  {key}: {g[0]} steps, forward {g[1]:.1f} s, drafting {g[2]:.1f} s, other {g[3]:.1f} s, "
              f"{g[4]} tokens, {g[5]} rows caught up")  # fmt: skip
