"""`python -m bench.lockstep`: configurations on the same workloads at the same time, their targets' steps
taking turns (``--step-baton``), compared by the seconds their engines spent in steps.

``tandem-bench`` runs configurations one after the other, and on this shared 2-core machine two runs of
the same workload moved by up to 19% (a plain loop's speed drifts between 0.78x and 1.17x of its median
over seconds, `docs/bench/machine-drift`). Here configuration A's target and a B configuration's target
run each category's prompts as one concurrent workload at once, but only one of them steps at a time:
while both have work their steps alternate, so both see the same machine from one step (about 50-200 ms)
to the next. Each side's speed is its tokens over its engine's step seconds in that workload (forward,
drafting and the rest of each step, from GetModelInfo's profile before and after): the waits for the
other side's steps are not counted, nor the client's time between requests. Prefill, drafting and the
workload's tail (the steps after the first sequence finishes) are steps, so they are counted. With
several B configurations, each runs beside its own run of A (in reverse order in odd rounds); B
configurations of one kind share a target, as in ``tandem-bench``, unless ``--own-targets`` gives each
its own (fixed-k sequences on a shared target feed the acceptance estimate ``auto`` chooses from).

    python -m bench.lockstep --configs none,eagle:auto,vanilla:auto,eagle:1 --concurrency 4,8 --rounds 2
    python -m bench.lockstep --configs none,eagle:1,eagle:2,eagle:3,eagle:4,eagle:auto --own-targets
    python -m bench.lockstep --configs eagle:auto,eagle:auto --b-target-args "--draft-margin 0.3"
    python -m bench.lockstep --configs eagle:auto,eagle:auto --b-root ../other-checkout \
        --target-args "--step-trace /tmp/trace-{side}.jsonl"     # {side}: A, B-eagle, B-vanilla or B-none

Prints progress per workload; writes lockstep.json and lockstep.md into --out. With step traces,
``python -m bench.step_split OUT --traces /tmp/trace-{side}.jsonl`` says in which steps B gained or lost.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import spec_bench
from bench.main import DEFAULT_TARGET_ARGS, parse_config, round_order, run_concurrent
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


def settled_profile(address: str, pause: float = 0.3, tries: int = 20) -> tuple[int, float]:
    """``profile_seconds`` once the engine stopped stepping: a client has its last token before that
    step's drafting ends, so a profile read at once could leave the step to the next workload (Eagle
    `auto`'s trace held one step more than its profile counted in 2 of 12 workloads,
    `docs/bench/step-split`). Reads ``pause`` seconds apart until two agree (what is left of a step once its
    tokens have left, drafting and bookkeeping, takes well under that)."""
    last = profile_seconds(address)
    for _ in range(tries):
        time.sleep(pause)
        now = profile_seconds(address)
        if now[0] == last[0]:
            return now
        last = now
    return last


def run_side(side: str, address: str, cfg: Config, part, args, streams: int, rnd: int, out: dict) -> None:
    steps0, s0 = settled_profile(address)
    records, wall = run_concurrent(address, cfg, part, args.max_tokens, streams)
    steps1, s1 = settled_profile(address)
    out[side] = Workload(side, streams, part[0].category, rnd, sum(r.tokens for r in records), s1 - s0,
                         steps1 - steps0, wall, {r.prompt_index: r.token_ids for r in records})  # fmt: skip


def run_pair(a: tuple[str, Config], b: tuple[str, Config], part, args, streams: int, rnd: int) -> dict:
    """A's and B's runs of one workload at the same time (their steps take turns through the baton):
    {"config": B's name, "A": Workload, "B": Workload}. ``a``, ``b``: (target address, configuration)."""
    out: dict = {}
    threads = [
        threading.Thread(target=run_side, args=(s, address, cfg, part, args, streams, rnd, out))
        for s, (address, cfg) in (("A", a), ("B", b))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if set(out) != {"A", "B"}:
        raise RuntimeError(f"a side's workload failed ({streams} streams, {part[0].category}, round {rnd})")
    return {"config": b[1].name, **out}


def speed(runs: list[Workload]) -> float:
    return sum(w.tokens for w in runs) / sum(w.step_seconds for w in runs)


def summarize(pairs: list[dict]) -> list[dict]:
    """Per B configuration, concurrency and category (and overall): A's and B's tok/s of step time, B/A
    over the summed seconds, each round's B/A and how many answers differ."""
    rows = []
    for config in dict.fromkeys(p["config"] for p in pairs):
        for streams in sorted({p["A"].streams for p in pairs if p["config"] == config}):
            level = [p for p in pairs if p["config"] == config and p["A"].streams == streams]
            for category in [*dict.fromkeys(p["A"].category for p in level), "overall"]:
                rows.append(
                    _row(config, streams, category, [p for p in level if category in ("overall", p["A"].category)])
                )
    return rows


def _row(config: str, streams: int, category: str, mine: list[dict]) -> dict:
    a, b = [p["A"] for p in mine], [p["B"] for p in mine]
    per_round = [speed([p["B"]]) / speed([p["A"]]) for p in mine]
    differ = sum(p["B"].token_ids.get(i) != ids for p in mine for i, ids in p["A"].token_ids.items())
    return {"config": config, "streams": streams, "category": category, "a_tok_s": speed(a), "b_tok_s": speed(b),
            "b_over_a": speed(b) / speed(a), "rounds_b_over_a": per_round, "lowest_round": min(per_round),
            "a_steps": sum(w.steps for w in a), "b_steps": sum(w.steps for w in b),
            "answers": sum(len(p["A"].token_ids) for p in mine), "answers_differing": differ}  # fmt: skip


def markdown(rows: list[dict], a_name: str, command: str) -> str:
    lines = [
        "# Lockstep A/B",
        "",
        f"A = {a_name}; B = each configuration below, run beside its own run of A. Generated by `{command}`.",
        "",
        "Speeds are tokens over the engine's seconds in steps, the two targets of a pair taking turns at steps.",
        "",
        "| B | streams | category | A tok/s | B tok/s | B/A | B/A by round | A steps | B steps | answers differing |",
        "|" + " --- |" * 10,
    ]
    for r in rows:
        rounds = ", ".join(f"{x:.3f}" for x in r["rounds_b_over_a"])
        lines.append(
            f"| {r['config']} | {r['streams']} | {r['category']} | {r['a_tok_s']:.1f} | {r['b_tok_s']:.1f} "
            f"| {r['b_over_a']:.3f} | {rounds} | {r['a_steps']} | {r['b_steps']} "
            f"| {r['answers_differing']} of {r['answers']} |"
        )
    return "\n".join(lines) + "\n"


def b_side(c: Config, own_targets: bool) -> str:
    """The side that serves B configuration ``c``: ``B-<kind>`` (shared by its kind), or with
    ``own_targets`` ``B-<name>`` (``B-eagle-k1``, ``B-eagle-auto``: a baton side takes letters, digits,
    - and _)."""
    return "B-" + re.sub(r"[^A-Za-z0-9_]+", "-", c.name.replace("=", "")) if own_targets else f"B-{c.target}"


def launch_all(a: Config, bs: list[Config], args, baton_dir: Path) -> dict:
    """A's services (a target, with a draft service for an MTP mode) and the B configurations' targets
    (``b_side``), all sharing a baton; {side name: Services}. Launched one after the other: each target
    times its forwards at start to price drafts."""
    from bench.services import launch

    sides = {"A": a.target, **{b_side(c, args.own_targets): c.target for c in bs}}
    launched = {}
    try:
        for side, kind in sides.items():
            letter = side[0].lower()
            own = shlex.split(getattr(args, f"{letter}_target_args"))
            extra = [x.replace("{side}", side) for x in [*shlex.split(args.target_args), *own]]
            extra += ["--step-baton", str(baton_dir / side)]
            root = getattr(args, f"{letter}_root") or ROOT
            launched[side] = launch({kind}, args.slots, args.max_seq_len, [], extra, root)
    except BaseException:  # a failed start, or SIGTERM while starting
        for s in launched.values():
            s.stop()
        raise
    return launched


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.lockstep", description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="none,eagle:auto",
                   help="A,B[,B...]: tandem-bench configurations; each B runs beside its own run of A")  # fmt: skip
    p.add_argument("--concurrency", default="4,8")
    p.add_argument("--rounds", type=int, default=2, help="runs of every category's workload per concurrency")
    p.add_argument("--per-category", type=int, default=0, help="prompts per category (0 = all)")
    p.add_argument("--categories", default="")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--max-seq-len", type=int, default=2048)
    p.add_argument("--target-args", default=DEFAULT_TARGET_ARGS)
    p.add_argument("--a-target-args", default="", help="more flags for A's target only (an A/B of a server flag)")
    p.add_argument("--b-target-args", default="", help="more flags for the B targets only")
    p.add_argument("--a-root", type=Path, help="serve A from this checkout (default: this one)")
    p.add_argument("--b-root", type=Path, help="serve the B configurations from this checkout: an A/B of two builds")
    p.add_argument("--own-targets", action="store_true", help="a target for each B configuration, none shared")
    p.add_argument("--out", type=Path, default=Path("lockstep-results"))
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    specs = args.configs.split(",")
    if len(specs) < 2:
        p.error("--configs takes A and at least one B")
    a, *bs = [parse_config(x) for x in specs]
    if any(c.runner != "tandem" for c in (a, *bs)):
        p.error("--configs: Tandem configurations only (none, eagle:..., vanilla:...)")
    prompts = spec_bench.held_out(args.per_category, args.categories)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run stops the services it launched
    with tempfile.TemporaryDirectory(prefix="tandem-baton-") as baton_dir:
        services = launch_all(a, bs, args, Path(baton_dir))
        try:
            address = {"A": services["A"].targets[a.target]}
            address |= {c.name: services[b_side(c, args.own_targets)].targets[c.target] for c in bs}
            pairs = run_all(address, a, bs, prompts, args)
        finally:
            for s in services.values():
                s.stop()
    rows = summarize(pairs)
    command = "python -m bench.lockstep " + shlex.join(sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"command": command, "a": a.name, "b": [c.name for c in bs], "rows": rows,
              "sides": {c.name: b_side(c, args.own_targets) for c in bs},  # whose trace {side} is which
              "workloads": [{"config": p["config"], **{s: {**vars(p[s]), "token_ids": None} for s in "AB"}}
                            for p in pairs]}  # fmt: skip
    (args.out / "lockstep.json").write_text(json.dumps(report, indent=1))
    (args.out / "lockstep.md").write_text(markdown(rows, a.name, command))
    print(markdown(rows, a.name, command))


def run_all(address: dict, a: Config, bs: list[Config], prompts, args) -> list[dict]:
    """Every category's workload, each round, under every B configuration (in reverse order in odd rounds),
    each beside its own run of A."""
    pairs = []
    categories = list(dict.fromkeys(x.category for x in prompts))
    for streams in [int(c) for c in args.concurrency.split(",")]:
        for category in categories:
            part = [x for x in prompts if x.category == category]
            for rnd in range(args.rounds):
                for b in round_order(bs, rnd):
                    pair = run_pair((address["A"], a), (address[b.name], b), part, args, streams, rnd)
                    pairs.append(pair)
                    wa, wb = pair["A"], pair["B"]
                    print(f"{streams} streams, {category}, round {rnd + 1}/{args.rounds}, {b.name}: "
                          f"A {speed([wa]):.1f} tok/s ({wa.steps} steps), B {speed([wb]):.1f} ({wb.steps}), "
                          f"B/A {speed([wb]) / speed([wa]):.3f}, wall {wa.wall_seconds:.1f} / {wb.wall_seconds:.1f} s",
                          flush=True)  # fmt: skip
    return pairs


if __name__ == "__main__":
    main()
