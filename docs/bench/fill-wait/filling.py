"""Per workload of a step trace (8 requests each, in order of first appearance, warm-up left out):
milliseconds of drafting and rows caught up in steps that carry prefill chunks (``pre``), then in
decode steps (``dec``). Usage: python docs/bench/fill-wait/filling.py TRACE.jsonl[.gz] [TRACE ...]"""

import gzip
import json
import sys


def load(path: str) -> list[dict]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        return [json.loads(line) for line in f]


def workloads(records: list[dict]) -> dict[str, int]:
    """Request id -> workload index (8 requests a workload, in order of first appearance)."""
    index: dict[str, int] = {}
    for r in records:
        for rid in r["request_ids"]:
            if not rid.startswith("warmup") and rid not in index:
                index[rid] = len(index) // 8
    return index


def main() -> None:
    for path in sys.argv[1:]:
        records = load(path)
        index = workloads(records)
        sums: dict[int, list[float]] = {}  # workload -> [pre ms, pre rows, dec ms, dec rows]
        for r in records:
            ids = [rid for rid in r["request_ids"] if rid in index]
            if not ids:
                continue
            row = sums.setdefault(index[ids[0]], [0.0, 0, 0.0, 0])
            at = 2 if r["decode"] else 0
            row[at] += 1e3 * r["draft_s"]
            row[at + 1] += r["caught_up_rows"]
        parts = [f"w{w} pre {s[0]:.0f} ms/{s[1]} rows, dec {s[2]:.0f} ms/{s[3]} rows" for w, s in sorted(sums.items())]
        print(path.split("/")[-1] + ": " + "; ".join(parts))


if __name__ == "__main__":
    main()
