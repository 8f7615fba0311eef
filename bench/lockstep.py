"""`python -m bench.lockstep`: two configurations on the same workloads at the same time, their targets'
steps taking turns (``--step-baton``), compared by the seconds their engines spent in steps.

``tandem-bench`` runs configurations one after the other, and on this shared 2-core machine two runs of
the same workload moved by up to 19% (a plain loop's speed drifts between 0.78x and 1.17x of its median
over seconds, `docs/bench/machine-drift`). Here configuration A's target and B's run each category's
prompts as one concurrent workload at once, but only one of them steps at a time: while both have
work their steps alternate, so both see the same machine from one step (about 50-100 ms) to the next.
Each side's speed is its tokens over its engine's step seconds in that workload (forward, drafting and
the rest of each step, from GetModelInfo's profile before and after): the waits for the other side's
steps are not counted, nor the client's time between requests. Prefill, drafting and the workload's
tail (the steps after the first sequence finishes) are steps, so they are counted.

    python -m bench.lockstep --configs none,eagle:auto --concurrency 4,8 --rounds 2 --out /tmp/lockstep
    python -m bench.lockstep --configs eagle:auto,eagle:auto --b-target-args "--draft-margin 0.3"
    python -m bench.lockstep --configs eagle:auto,eagle:auto --b-root ../other-checkout \
        --target-args "--step-trace /tmp/trace-{side}.jsonl"     # {side}: A or B

Prints progress per workload; writes lockstep.json and lockstep.md into --out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from bench import spec_bench
from bench.main import DEFAULT_TARGET_ARGS, parse_config, run_concurrent
from bench.procs import ROOT
from bench.records import Config


@dataclass(frozen=True)
class Workload:
    """One side's run of one category's prompts: its tokens and its engine's seconds in steps."""

    side: str  # "A" or "B"
    streams: int
    category: str
    round: int
    tokens: int
    step_seconds: float
    steps: int
    wall_seconds: float  # includes the waits for the other side's steps
    token_ids: dict  # prompt index -> generated ids


def profile_seconds(address: str) -> tuple[int, float]:
    """(steps, seconds in steps) the target's engine has spent since it started."""
    from client import TandemClient

    with TandemClient(address) as c:
        p = c.model_info().profile
    return p.steps, p.forward_s + p.draft_s + p.other_s


def run_side(side: str, address: str, cfg: Config, part, args, streams: int, rnd: int, out: dict) -> None:
    steps0, s0 = profile_seconds(address)
    records, wall = run_concurrent(address, cfg, part, args.max_tokens, streams)
    steps1, s1 = profile_seconds(address)
    out[side] = Workload(side, streams, part[0].category, rnd, sum(r.tokens for r in records), s1 - s0,
                         steps1 - steps0, wall, {r.prompt_index: r.token_ids for r in records})  # fmt: skip


def run_pair(addresses: dict, configs: dict, part, args, streams: int, rnd: int) -> dict[str, Workload]:
    """A's and B's runs of one workload at the same time (their steps take turns through the baton)."""
    out: dict[str, Workload] = {}
    threads = [
        threading.Thread(target=run_side, args=(s, addresses[s], configs[s], part, args, streams, rnd, out))
        for s in ("A", "B")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if set(out) != {"A", "B"}:
        raise RuntimeError(f"a side's workload failed ({streams} streams, {part[0].category}, round {rnd})")
    return out


def speed(runs: list[Workload]) -> float:
    return sum(w.tokens for w in runs) / sum(w.step_seconds for w in runs)


def summarize(pairs: list[dict[str, Workload]]) -> list[dict]:
    """Per concurrency and category (and overall): A's and B's tok/s of step time, B/A over the summed
    seconds, each round's B/A and how many answers differ."""
    rows = []
    for streams in sorted({p["A"].streams for p in pairs}):
        level = [p for p in pairs if p["A"].streams == streams]
        categories = list(dict.fromkeys(p["A"].category for p in level))
        for category in [*categories, "overall"]:
            mine = [p for p in level if category in ("overall", p["A"].category)]
            a, b = [p["A"] for p in mine], [p["B"] for p in mine]
            per_round = [speed([p["B"]]) / speed([p["A"]]) for p in mine]
            differ = sum(p["B"].token_ids.get(i) != ids for p in mine for i, ids in p["A"].token_ids.items())
            rows.append({"streams": streams, "category": category, "a_tok_s": speed(a), "b_tok_s": speed(b),
                         "b_over_a": speed(b) / speed(a), "rounds_b_over_a": per_round,
                         "lowest_round": min(per_round), "a_steps": sum(w.steps for w in a),
                         "b_steps": sum(w.steps for w in b), "answers": sum(len(p["A"].token_ids) for p in mine),
                         "answers_differing": differ})  # fmt: skip
    return rows


def markdown(rows: list[dict], names: dict[str, str], command: str) -> str:
    lines = [
        "# Lockstep A/B",
        "",
        f"A = {names['A']}, B = {names['B']}. Generated by `{command}`.",
        "",
        "Speeds are tokens over the engine's seconds in steps, both targets taking turns at steps.",
        "",
        "| streams | category | A tok/s | B tok/s | B/A | B/A by round | A steps | B steps | answers differing |",
        "|" + " --- |" * 9,
    ]
    for r in rows:
        rounds = ", ".join(f"{x:.3f}" for x in r["rounds_b_over_a"])
        lines.append(
            f"| {r['streams']} | {r['category']} | {r['a_tok_s']:.1f} | {r['b_tok_s']:.1f} | {r['b_over_a']:.3f} "
            f"| {rounds} | {r['a_steps']} | {r['b_steps']} | {r['answers_differing']} of {r['answers']} |"
        )
    return "\n".join(lines) + "\n"


def launch_pair(configs: dict[str, Config], args, baton_dir: Path):
    """Each side's services (a target, with a draft service for an MTP mode), the targets paired by a baton.
    Launched one after the other: each target times its forwards at start to price drafts."""
    from bench.services import launch

    launched = {}
    try:
        for side in ("A", "B"):
            own = shlex.split(getattr(args, f"{side.lower()}_target_args"))
            extra = [a.replace("{side}", side) for a in [*shlex.split(args.target_args), *own]]
            extra += ["--step-baton", str(baton_dir / side.lower())]
            root = getattr(args, f"{side.lower()}_root") or ROOT
            launched[side] = launch({configs[side].target}, args.slots, args.max_seq_len, [], extra, root)
    except BaseException:  # a failed start, or SIGTERM while starting
        for s in launched.values():
            s.stop()
        raise
    return launched


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.lockstep", description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="none,eagle:auto", help="A,B: two tandem-bench configurations")
    p.add_argument("--concurrency", default="4,8")
    p.add_argument("--rounds", type=int, default=2, help="runs of every category's workload per concurrency")
    p.add_argument("--per-category", type=int, default=0, help="prompts per category (0 = all)")
    p.add_argument("--categories", default="")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--max-seq-len", type=int, default=2048)
    p.add_argument("--target-args", default=DEFAULT_TARGET_ARGS)
    p.add_argument("--a-target-args", default="", help="more flags for A's target only (an A/B of a server flag)")
    p.add_argument("--b-target-args", default="", help="more flags for B's target only")
    p.add_argument("--a-root", type=Path, help="serve A from this checkout (default: this one)")
    p.add_argument("--b-root", type=Path, help="serve B from this checkout: an A/B of two builds")
    p.add_argument("--out", type=Path, default=Path("lockstep-results"))
    args = p.parse_args(argv)
    specs = args.configs.split(",")
    if len(specs) != 2:
        p.error("--configs takes exactly two configurations, A,B")
    configs = dict(zip("AB", [parse_config(s) for s in specs], strict=True))
    if any(c.runner != "tandem" for c in configs.values()):
        p.error("--configs: Tandem configurations only (none, eagle:..., vanilla:...)")
    prompts = spec_bench.per_category(spec_bench.split(spec_bench.load(), "held_out"), args.per_category)
    if args.categories:
        prompts = [x for x in prompts if x.category in set(args.categories.split(","))]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run stops the services it launched
    with tempfile.TemporaryDirectory(prefix="tandem-baton-") as baton_dir:
        services = launch_pair(configs, args, Path(baton_dir))
        try:
            addresses = {s: services[s].targets[configs[s].target] for s in "AB"}
            pairs = run_all(addresses, configs, prompts, args)
        finally:
            for s in services.values():
                s.stop()
    rows = summarize(pairs)
    names, command = {s: c.name for s, c in configs.items()}, " ".join(["python -m bench.lockstep", *sys.argv[1:]])
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"command": command, "configs": names, "rows": rows,
              "workloads": [{**vars(w), "token_ids": None} for p in pairs for w in p.values()]}  # fmt: skip
    (args.out / "lockstep.json").write_text(json.dumps(report, indent=1))
    (args.out / "lockstep.md").write_text(markdown(rows, names, command))
    print(markdown(rows, names, command))


def run_all(addresses: dict, configs: dict, prompts, args) -> list[dict[str, Workload]]:
    pairs = []
    categories = list(dict.fromkeys(x.category for x in prompts))
    for streams in [int(c) for c in args.concurrency.split(",")]:
        for category in categories:
            part = [x for x in prompts if x.category == category]
            for rnd in range(args.rounds):
                pair = run_pair(addresses, configs, part, args, streams, rnd)
                pairs.append(pair)
                a, b = pair["A"], pair["B"]
                print(f"{streams} streams, {category}, round {rnd + 1}/{args.rounds}: A {speed([a]):.1f} tok/s "
                      f"({a.steps} steps), B {speed([b]):.1f} ({b.steps}), B/A {speed([b]) / speed([a]):.3f}, "
                      f"wall {a.wall_seconds:.1f} / {b.wall_seconds:.1f} s", flush=True)  # fmt: skip
    return pairs


if __name__ == "__main__":
    main()
