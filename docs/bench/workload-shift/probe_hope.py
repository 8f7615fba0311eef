"""What the probe gate (``DraftPolicy._hope``) and the probes' spacing come to with a real target's
costs. Launches a target of ``--kind`` (with its draft service), runs held-out math, mt_bench and qa at 4
streams, and keeps the model info after each (or reads such output back with ``--model-info``); then
puts the last one's costs into a policy whose shared estimate is well below the heads' figures and
prints ``hope`` for 4 and 8 sequences at 150 and 400 cached tokens (without and with that many rows to
catch up), and how many steps apart probes of 4 such sequences come once backed off.
Usage: PYTHONPATH=. python docs/bench/workload-shift/probe_hope.py [--kind vanilla] [--model-info FILE]"""

import argparse
import ast
import re
from dataclasses import replace

from target_service.draft_policy import PROBE_BACKOFF, PROBE_SHARE, DraftCost, DraftPolicy, StepCost, _catch_up

VALIDATION = {"vanilla": [0.523, 0.629, 0.757, 0.807], "eagle": [0.527, 0.675, 0.786, 0.826]}  # mtp.json


def model_infos(kind: str) -> str:
    from bench import spec_bench
    from bench.main import parse_config, run_concurrent
    from bench.services import launch
    from client import TandemClient

    think = ["--think-begin-token", "<|im_start|>", "--think-end-token", "<|im_end|>"]
    services, lines = launch({kind}, 8, 2048, [], think), []
    try:
        address = services.targets[kind]
        prompts = spec_bench.held_out(0, "")
        for category in ("math_reasoning", "mt_bench", "qa"):
            run_concurrent(
                address, parse_config(f"{kind}:auto"), [x for x in prompts if x.category == category], 128, 4
            )
            with TandemClient(address) as c:
                lines.append(f"{category} {c.model_info()}")
            print(lines[-1], flush=True)
    finally:
        services.stop()
    return "\n".join(lines)


def policy(d: dict, prior: list[float]) -> DraftPolicy:
    keys = ("base_s", "per_seq_s", "per_token_s", "per_kv_token_s", "per_pair_s", "per_verifying_seq_s",
            "per_split_seq_s", "per_split_kv_token_s", "per_split_verifying_seq_s")  # fmt: skip
    p = DraftPolicy(auto=True, step_cost=StepCost(*(d[f"step_{k}"] for k in keys), min_rows=4), prior=prior)
    p.draft_cost = DraftCost(list(d["draft_s_by_depth"]), [True] * 5, per_row=d["draft_s_per_caught_up_row"])
    p.other = d["step_other_s"]
    for _ in range(200):  # drafts failing: the shared estimate well below the prior
        p.observe_verification("past", 1, 0)
    p.forget("past")
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="vanilla", choices=sorted(VALIDATION))
    ap.add_argument("--model-info", help="saved output of an earlier run (its last line is used)")
    args = ap.parse_args()
    text = open(args.model_info).read() if args.model_info else model_infos(args.kind)
    d = ast.literal_eval(re.search(r"draft_policy=(\{.*\})\)", text.strip().splitlines()[-1]).group(1))
    for n in (4, 8):
        for ctx in (150, 400):
            for backlog in (0, ctx):
                p = policy(d, VALIDATION[args.kind])
                prices = p.prices([4] * n, [ctx] * n, None, True)
                if backlog:
                    table = [p.overall.expected_tokens_upto(4)] * n
                    prices = replace(prices, catch_up=_catch_up(table, [backlog] * n, [64] * n, p.draft_cost.per_row))
                plain = p._seconds([0] * n, prices)
                prices = replace(prices, plain=plain, margin=p.margin + p.margin_per_seq * (n - 1))
                hope = p._hope([0] * n, [True] * n, prices)
                print(f"{n} sequences, {ctx} cached, {backlog} rows behind: hope {hope:.3f}, step {plain * 1e3:.1f} ms")
    for ctx in (150, 400):  # a probe of 4 sequences ctx rows behind, priced as _probing prices it
        p, n = policy(d, VALIDATION[args.kind]), 4
        prices = p.prices([4] * n, [ctx] * n, None, True)
        plain = p._seconds([0] * n, prices)
        prices = replace(prices, plain=plain, margin=p.margin + p.margin_per_seq * (n - 1))
        catch_up = p.draft_cost.per_row * ctx * n
        price = (p._seconds([1] * n, prices) - plain + catch_up) * (1 + prices.margin)
        credit = PROBE_SHARE * PROBE_BACKOFF * plain
        print(f"probe of 4 sequences {ctx} rows behind: {price * 1e3:.1f} ms (catch-up {catch_up * 1e3:.1f}); "
              f"backed off, {credit * 1e3:.2f} ms of credit a step: one every {price / credit:.0f} steps")  # fmt: skip


if __name__ == "__main__":
    main()
