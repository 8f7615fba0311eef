"""Answers of each configuration that differ from no speculation's on the same prompt at the same
concurrency, from this run's results.json. Usage: python differing.py (output in differing.txt)."""

import json
from pathlib import Path

d = json.loads((Path(__file__).parent / "results.json").read_text())
ref = {}
for r in d["records"]:
    if r["config"] == "no speculation":
        ref.setdefault((r["concurrency"], r["prompt_index"]), r["token_ids"])
count = {}
for r in d["records"]:
    if r["config"] == "no speculation":
        continue
    c = count.setdefault((r["config"], r["concurrency"]), [0, 0])
    c[1] += 1
    c[0] += r["token_ids"] != ref[(r["concurrency"], r["prompt_index"])]
for (cfg, n), (diff, tot) in sorted(count.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"{n} streams, {cfg}: {diff} of {tot} answers differ from no speculation's")
