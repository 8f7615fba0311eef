"""What the first draft of every sequence adds to a served forward.

A lockstep pair of no speculation (A) and fixed k=1 (B) runs the same workloads, steps taking turns: at
a given number of sequences, B's decode steps each verify one draft per sequence and A's verify none.
Per workload: the mean forward of A's and of B's decode steps of ``N`` sequences, and the difference
(what one draft each added, served; the contexts differ a little, B's sequences being shorter on
average as they finish in fewer steps).

Usage: python docs/bench/workload-shift/served_increment.py N A_TRACE B_TRACE A_FIRST A_STRIDE B_FIRST NAMES

A's workloads for B's pairs are A_FIRST, A_FIRST + A_STRIDE, ... (A runs once beside each B, in the
order of the run's log); B's are B_FIRST, B_FIRST + 1, ..., one per name in NAMES.
"""

import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workloads import load, split  # noqa: E402


def decode_steps(workload: list[dict], n: int) -> list[dict]:
    return [r for r in workload if r["decode"] and len(r["q_lens"]) == n]


def main() -> None:
    n, a_path, b_path, first, stride, b_first, names = sys.argv[1:8]
    n, first, stride, b_first = int(n), int(first), int(stride), int(b_first)
    a_loads, b_loads = split(load(a_path), 8), split(load(b_path), 8)
    print(f"{'workload':12} {'A steps':>7} {'A fwd ms':>8} {'B steps':>7} {'B fwd ms':>8} {'added ms':>8}")
    for i, name in enumerate(names.split(",")):
        a, b = decode_steps(a_loads[first + i * stride], n), decode_steps(b_loads[b_first + i], n)
        if not a or not b:
            continue
        a_ms = 1e3 * st.mean(r["forward_s"] for r in a)
        b_ms = 1e3 * st.mean(r["forward_s"] for r in b)
        print(f"{name:12} {len(a):7d} {a_ms:8.1f} {len(b):7d} {b_ms:8.1f} {b_ms - a_ms:8.1f}")


if __name__ == "__main__":
    main()
