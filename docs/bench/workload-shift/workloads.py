"""Workload by workload, what one target's step trace says: steps, decode steps, steps that verified
drafts, plain steps that asked for drafts (probes, mostly), tokens, seconds by phase, rows the drafter
caught up on, tokens per second of step time. A workload is 8 requests in order of first appearance
(``--per``), which needs a trace that records request ids. Usage:
python docs/bench/workload-shift/workloads.py TRACE.jsonl[.gz] [--per 8] [--names a,b,...]"""

import argparse
import gzip
import json


def load(path: str) -> list[dict]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        return [json.loads(line) for line in f]


def split(records: list[dict], per: int) -> list[list[dict]]:
    """Records grouped by the workload of their requests (steps mixing two workloads are left out)."""
    order: dict[str, int] = {}
    out: dict[int, list[dict]] = {}
    for r in records:
        for rid in r["request_ids"]:
            if rid != "warmup" and rid not in order:
                order[rid] = len(order)
        found = {order[rid] // per for rid in r["request_ids"] if rid in order}
        if len(found) == 1:
            out.setdefault(found.pop(), []).append(r)
    return [out[k] for k in sorted(out)]


def row(w: list[dict]) -> str:
    decode = [r for r in w if r["decode"]]
    plain = [r for r in decode if all(q == 1 for q in r["q_lens"])]
    asks = sum(1 for r in plain if any(r["drafts_asked"]))
    verifying = sum(1 for r in decode if any(q > 1 for q in r["q_lens"]))
    tokens = sum(sum(r["accepted"]) for r in w)
    phase = {k: sum(r[k] for r in w) for k in ("forward_s", "draft_s", "other_s")}
    seconds = sum(phase.values())
    caught = sum(r["caught_up_rows"] for r in w)
    return (
        f"steps {len(w):4d} decode {len(decode):4d} verifying {verifying:4d} plain-asking {asks:3d} "
        f"tokens {tokens:5d} s {seconds:6.2f} (forward {phase['forward_s']:6.2f} draft {phase['draft_s']:5.2f} "
        f"other {phase['other_s']:4.2f}) caught-up rows {caught:5d} tok/s {tokens / seconds:6.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--per", type=int, default=8)
    ap.add_argument("--names", default="")
    args = ap.parse_args()
    names = args.names.split(",") if args.names else []
    for i, w in enumerate(split(load(args.trace), args.per)):
        print(f"{i:2d} {names[i] if i < len(names) else '':18s} {row(w)}")


if __name__ == "__main__":
    main()
