"""The draft policy alone on a workload that shifts, with modelled costs: ``python -m bench.policy_sim``.

4 streams of 128-token answers, prompts of 40-110 tokens: first 16 sequences whose drafts pass at
``--poor`` (every position), then 16 whose drafts pass at ``--good`` (``--phases`` sets others, rates
by position: ``16:0.85,16:0.15/0.5`` is a good workload, then one whose first draft seldom passes).
Costs like this CPU's at 4 streams (`docs/bench/lockstep`): a 52 ms step, 1.5 ms a verified token, a
5.7 ms round trip for one draft, 0.05 ms a caught-up row. Prints per phase, for no drafts, fixed k=1
and ``auto``: decode steps, steps that verified drafts, and tokens per modelled second (means over
``--seeds`` runs). No tails, no noise in the costs: it shows how the choice follows acceptance, not
what a server gains."""

from __future__ import annotations

import argparse
import random

from target_service.draft_policy import DraftCost, DraftPolicy, StepCost, StepShape

STREAMS, ANSWER = 4, 128
COST = StepCost(base=0.050, per_seq=0.0005, per_token=0.0015)
DRAFT = [0.0, 0.0057, 0.0080, 0.0105, 0.0130]
PER_ROW = 0.00005


def make_policy(k: int | None) -> DraftPolicy:
    p = DraftPolicy(auto=k is None, step_cost=StepCost(COST.base, COST.per_seq, COST.per_token), prior=[0.6] * 4)
    p.draft_cost = DraftCost(list(DRAFT), [True] * 5)
    p.draft_cost.per_row = PER_ROW
    return p


def run(k: int | None, phases: list[tuple[int, list[float]]], seed: int = 0) -> list[dict]:
    """One stream of sequences per phase (``count`` sequences whose draft j passes at ``rates[j]`` once
    the drafts before it passed, the last rate for every deeper draft); per phase its decode steps,
    steps verifying drafts and tokens per modelled second."""
    rng = random.Random(seed)
    p = make_policy(k)
    out = []
    serial = 0
    for count, rates in phases:
        queue = [(f"s{serial + i}", rng.randint(40, 110)) for i in range(count)]
        serial += count
        live: dict[str, list[int]] = {}  # id -> [context, generated, drafts asked]
        steps = verifying = tokens = 0
        seconds = 0.0
        while queue or live:
            while queue and len(live) < STREAMS:
                rid, prompt = queue.pop(0)
                live[rid] = [prompt, 0, 0]
            ids = list(live)
            drafts = [live[r][2] for r in ids]
            shape = StepShape.of([live[r][0] for r in ids], [1 + n for n in drafts])
            seconds += COST.predict(shape) + DRAFT[max(drafts)]
            steps += 1
            verifying += any(drafts)
            for rid, n in zip(ids, drafts):
                accepted = 0
                while accepted < n and rng.random() < rates[min(accepted, len(rates) - 1)]:
                    accepted += 1
                p.observe_verification(rid, n, accepted)
                state = live[rid]
                took = min(1 + accepted, ANSWER - state[1])
                state[0] += took
                state[1] += took
                tokens += took
            for rid in [r for r in ids if live[r][1] >= ANSWER]:
                live.pop(rid)
                p.forget(rid)
            ids = list(live)
            if not ids:
                continue
            caps = [min(4 if k is None else k, ANSWER - live[r][1] - 1) for r in ids]
            choice = p.choose(ids, [max(0, c) for c in caps], contexts=[live[r][0] for r in ids],
                              remaining=[ANSWER - live[r][1] for r in ids])  # fmt: skip
            for rid, n in zip(ids, choice.drafts):
                live[rid][2] = n
        out.append({"steps": steps, "verifying": verifying, "tok_s": tokens / seconds})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--poor", type=float, default=0.15)
    ap.add_argument("--good", type=float, default=0.7)
    ap.add_argument("--phases", default="", help="in place of --poor, --good: e.g. 16:0.85,16:0.15/0.5 (count:rates)")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    spec = args.phases or f"16:{args.poor},16:{args.good}"
    phases = [(int(c), [float(r) for r in rates.split("/")]) for c, rates in (p.split(":") for p in spec.split(","))]
    labels = ["poor", "good"] if not args.phases else [f"phase {i + 1}" for i in range(len(phases))]
    for name, k in [("none", 0), ("k=1", 1), ("auto", None)]:
        runs = [run(k, phases, seed) for seed in range(args.seeds)]
        for i, label in enumerate(labels):
            steps = sum(r[i]["steps"] for r in runs) / len(runs)
            ver = sum(r[i]["verifying"] for r in runs) / len(runs)
            tok_s = sum(r[i]["tok_s"] for r in runs) / len(runs)
            print(f"{name:5s} {label}: steps {steps:6.1f} verifying {ver:6.1f} tok/s {tok_s:6.2f}")


if __name__ == "__main__":
    main()
