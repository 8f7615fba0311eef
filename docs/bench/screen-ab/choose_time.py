"""Median milliseconds of one ``DraftPolicy.choose`` for 1, 4 and 8 sequences, two variants alternating
call by call in one process. ``screen`` (the default): choosing per sequence (``--draft-choice each``),
with the screen for steps nothing pays in (``_alone_none_pays``) and without it. ``choice``: the common
count (``--draft-choice common``) against the choice per sequence, screen on. Synthetic costs like this
CPU's at 8 streams (a 30 ms step, 1.5 ms a token), drafts that pass 30-40% of the time, contexts near
300. Usage: PYTHONPATH=. python docs/bench/screen-ab/choose_time.py [screen|choice]"""

import statistics
import sys
import time

from target_service.draft_policy import DraftPolicy, StepCost

COST = dict(base=0.03, per_seq=0.001, per_token=0.0015, per_kv=1e-6, per_pair=1e-7, per_verifying=0.001,
            per_split_seq=0.0005, per_split_kv=1e-6, per_split_verifying=0.001, min_rows=4)  # fmt: skip
VARIANTS = {  # name: {label: (common, screen)}
    "screen": {"screen": (False, True), "without": (False, False)},
    "choice": {"common": (True, True), "each": (False, True)},
}


def policy(common: bool, screen: bool) -> DraftPolicy:
    p = DraftPolicy(auto=True, step_cost=StepCost(**COST), prior=[0.4, 0.3, 0.3, 0.3], common=common)
    p.draft_cost.per_row = 0.00005
    p.screen = screen
    return p


variants = VARIANTS[sys.argv[1] if len(sys.argv) > 1 else "screen"]
for n in (1, 4, 8):
    ids = [f"r{i}" for i in range(n)]
    policies = {label: policy(*setting) for label, setting in variants.items()}
    times: dict[str, list[float]] = {label: [] for label in variants}
    zero = dict.fromkeys(variants, 0)
    for step in range(2000):
        for label, p in policies.items():
            t0 = time.perf_counter()
            choice = p.choose(ids, [4] * n, None, [300 + 10 * i + step for i in range(n)], dense_ok=True,
                              remaining=[100] * n)  # fmt: skip
            times[label].append(time.perf_counter() - t0)
            zero[label] += not any(choice.drafts)
            for rid, d in zip(ids, choice.drafts):
                p.observe_verification(rid, d, 0)
    print(f"{n} sequences: " + ", ".join(
        f"{label} {1000 * statistics.median(t):.3f} ms ({zero[label]} of 2000 drafted nothing)"
        for label, t in times.items()))  # fmt: skip
