"""Medians of the decode steps of 8 sequences, one new token each, that asked for no drafts and caught
up on nothing: drafting phase, other work and forward (ms). Usage: python nodraft.py trace.jsonl[.gz] ..."""

import gzip
import json
import statistics
import sys

for path in sys.argv[1:]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        rows = [json.loads(line) for line in f]
    steps = [
        r
        for r in rows
        if r["decode"] and len(r["q_lens"]) == 8 and max(r["q_lens"]) == 1
        and not any(r["drafts_asked"]) and r["caught_up_rows"] == 0
    ]  # fmt: skip
    keys = ("draft_s", "other_s", "forward_s")
    ms = {k: 1000 * statistics.median(r[k] for r in steps) for k in keys} if steps else {}
    print(path, len(steps), "steps:", "  ".join(f"{k} {v:.3f}" for k, v in ms.items()))
