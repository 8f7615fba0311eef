"""Median milliseconds of one ``DraftPolicy.choose`` for 1, 4 and 8 sequences, with the screen for
steps nothing pays in (``_alone_none_pays``) and without it, alternating call by call in one process.
Synthetic costs like this CPU's at 8 streams (a 30 ms step, 1.5 ms a token), drafts that pass 30-40%
of the time, contexts near 300. Usage: PYTHONPATH=. python docs/bench/screen-ab/choose_time.py"""

import statistics
import time

from target_service.draft_policy import DraftPolicy, StepCost

COST = dict(base=0.03, per_seq=0.001, per_token=0.0015, per_kv=1e-6, per_pair=1e-7, per_verifying=0.001,
            per_split_seq=0.0005, per_split_kv=1e-6, per_split_verifying=0.001, min_rows=4)  # fmt: skip


def policy() -> DraftPolicy:
    p = DraftPolicy(auto=True, step_cost=StepCost(**COST), prior=[0.4, 0.3, 0.3, 0.3])
    p.draft_cost.per_row = 0.00005
    return p


for n in (1, 4, 8):
    ids = [f"r{i}" for i in range(n)]
    policies = {True: policy(), False: policy()}
    for screen, p in policies.items():
        p.screen = screen
    times: dict[bool, list[float]] = {True: [], False: []}
    zero = 0
    for step in range(2000):
        for screen, p in policies.items():
            t0 = time.perf_counter()
            choice = p.choose(ids, [4] * n, None, [300 + 10 * i + step for i in range(n)], dense_ok=True,
                              remaining=[100] * n)  # fmt: skip
            times[screen].append(time.perf_counter() - t0)
            zero += screen and not any(choice.drafts)
            for rid, d in zip(ids, choice.drafts):
                p.observe_verification(rid, d, 0)
    ms = {s: 1000 * statistics.median(t) for s, t in times.items()}
    print(f"{n} sequences: screen {ms[True]:.3f} ms, without {ms[False]:.3f} ms; {zero} of 2000 drafted nothing")
