"""Each concurrent workload in a step trace: its steps, how many verified drafts, and its tail (the steps
after its first sequence finished, the batch thinner than the workload's widest): count, seconds,
tokens. Usage: python tail.py TRACE.jsonl[.gz] [STREAMS] (workloads whose widest step has STREAMS
sequences; default 8)."""

import gzip
import json
import sys


def load(path: str) -> list[dict]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        return [json.loads(line) for line in f]


def workloads(rows: list[dict]) -> list[list[dict]]:
    """Split where a prefill-only step of fresh sequences follows a decode step (a new workload)."""
    out, cur, prev = [], [], None
    for r in rows:
        fresh = not r["decode"] and all(s == 0 for s in r["starts"]) and (prev is None or prev["decode"])
        if fresh and cur:
            out.append(cur)
            cur = []
        cur.append(r)
        prev = r
    return out + [cur]


def seconds(steps: list[dict]) -> float:
    return sum(r["forward_s"] + r["draft_s"] + r["other_s"] for r in steps)


def main() -> None:
    path, streams = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
    print("| workload | steps | verified drafts | seconds | tail steps | tail seconds | tail tokens |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for i, w in enumerate(x for x in workloads(load(path)) if max(len(r["q_lens"]) for r in x) == streams):
        full = max(j for j, r in enumerate(w) if len(r["q_lens"]) == streams)  # last step with every sequence
        tail = w[full + 1 :]
        drafted = sum(any(q > 1 for q in r["q_lens"]) for r in w if r["decode"])
        tokens = sum(sum(r["accepted"]) for r in tail)
        print(f"| {i} | {len(w)} | {drafted} | {seconds(w):.2f} | {len(tail)} | {seconds(tail):.2f} | {tokens} |")


if __name__ == "__main__":
    main()
