"""Batch-1 decode steps of the Eagle target's trace, by category and configuration: steps, tokens per
step, ms per step and decode tok/s; for `auto`, the tokens it expected against those it got, by drafts
asked. Requests are told apart by their first prefill step; the first six on the target are not
measured (a 4-token request at launch, then one warm-up per configuration) and the rest come five per
prompt (k=1, k=2, k=3, k=4, auto), eight prompts per category. Usage: python batch1.py [DIR], beside
the traces or with the folder that holds them."""

import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

NAMES = ["k=1", "k=2", "k=3", "k=4", "auto"]
CATEGORIES = ["math", "mt_bench", "qa", "rag", "summarization", "translation"]

here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
with gzip.open(here / "trace-eagle.jsonl.gz", "rt") as f:
    rows = [json.loads(line) for line in f]
requests: list[list[dict]] = []
for r in rows:
    if len(r["starts"]) != 1:
        continue  # a concurrent level's step
    if not r["decode"] and r["starts"][0] == 0:
        requests.append([])
    if requests:
        requests[-1].append(r)
decode = defaultdict(list)
for i, steps in enumerate(requests[6 : 6 + 48 * len(NAMES)]):
    prompt, config = divmod(i, len(NAMES))
    decode[(CATEGORIES[prompt // 8], NAMES[config])] += [r for r in steps if r["decode"]]
for (category, name), steps in sorted(decode.items()):
    tokens = sum(r["accepted"][0] for r in steps)
    seconds = sum(r["forward_s"] + r["draft_s"] + r["other_s"] for r in steps)
    print(f"{category:13s} {name:5s} steps {len(steps):4d}  tokens/step {tokens / len(steps):.2f}  "
          f"ms/step {1000 * seconds / len(steps):5.1f}  decode tok/s {tokens / seconds:5.1f}")  # fmt: skip
    if name == "auto":
        for n in range(5):
            pairs = [(a["expected"][0], b["accepted"][0]) for a, b in zip(steps, steps[1:])
                     if a["drafts_asked"][0] == n and b["q_lens"][0] - 1 == n]  # fmt: skip
            if pairs:
                expected = statistics.mean(e for e, _ in pairs)
                got = statistics.mean(g for _, g in pairs)
                print(f"    {n} drafts: {len(pairs)} steps, expected {expected:.2f}, got {got:.2f}")
