"""Workload by workload, how the target priced its decode forwards: for steps that verified drafts and
steps that did not, the mean predicted and measured forward and the median of measured / predicted
(the trace's ``predicted_s``, the price before the step's own timing moved it). Usage:
python docs/bench/workload-shift/predicted.py TRACE.jsonl[.gz] [--names a,b,...]"""

import argparse
import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workloads import load, split  # noqa: E402


def describe(steps: list[dict], label: str) -> str:
    if not steps:
        return ""
    pred = 1e3 * st.mean(r["predicted_s"] for r in steps)
    fwd = 1e3 * st.mean(r["forward_s"] for r in steps)
    ratio = st.median(r["forward_s"] / r["predicted_s"] for r in steps)
    return f"{label} {len(steps):4d} predicted {pred:6.1f} ms measured {fwd:6.1f} ms median ratio {ratio:.3f}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--names", default="")
    args = p.parse_args()
    names = args.names.split(",") if args.names else []
    for i, workload in enumerate(split(load(args.trace), 8)):
        steps = [r for r in workload if r["decode"] and r["predicted_s"] > 0]
        verifying = [r for r in steps if any(q > 1 for q in r["q_lens"])]
        plain = [r for r in steps if all(q == 1 for q in r["q_lens"])]
        name = names[i] if i < len(names) else ""
        print(f"{i:2d} {name:8}", describe(plain, "plain"), "|", describe(verifying, "verifying"))


if __name__ == "__main__":
    main()
