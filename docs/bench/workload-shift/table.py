"""B/A by category of lockstep runs, one Markdown row per run, configuration and streams.
Usage: python docs/bench/workload-shift/table.py RUN_DIR [RUN_DIR ...] (each with a lockstep.json)"""

import json
import sys
from pathlib import Path

CATEGORIES = ["math_reasoning", "mt_bench", "qa", "rag", "summarization", "translation", "overall"]

print("| run | B | streams | math | mt_bench | qa | rag | summarization | translation | overall |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for run in sys.argv[1:]:
    rows = json.loads((Path(run) / "lockstep.json").read_text())["rows"]
    by = {(r["config"], r["streams"], r["category"]): r["b_over_a"] for r in rows}
    for config, streams in sorted({(c, s) for c, s, _ in by}):
        cells = []
        for cat in CATEGORIES:
            v = by.get((config, streams, cat))
            cells.append("" if v is None else (f"**{v:.3f}**" if v < 0.98 else f"{v:.3f}"))
        print(f"| {Path(run).name} | {config} | {streams} | " + " | ".join(cells) + " |")
