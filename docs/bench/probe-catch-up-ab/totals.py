"""Totals of a step trace: drafts asked, steps and rows caught up, drafting and step seconds.
Usage: python totals.py trace.jsonl[.gz] ..."""

import gzip
import json
import sys

for path in sys.argv[1:]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        rows = [json.loads(line) for line in f]
    print(
        path,
        f"drafts asked {sum(sum(r['drafts_asked']) for r in rows)}",
        f"steps catching up {sum(r['caught_up_rows'] > 0 for r in rows)}",
        f"rows caught up {sum(r['caught_up_rows'] for r in rows)}",
        f"drafting {sum(r['draft_s'] for r in rows):.2f} s",
        f"steps {sum(r['forward_s'] + r['draft_s'] + r['other_s'] for r in rows):.1f} s",
    )
