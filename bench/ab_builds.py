"""Two builds of Tandem side by side on the same concurrent workloads (an A/B of a change to the server).

    # in each build's checkout (an older one without this file: PYTHONPATH=OLD python NEW/bench/ab_builds.py serve ...)
    python -m bench.ab_builds serve --kinds none,eagle --addresses /tmp/a.json
    python -m bench.ab_builds serve --kinds none,eagle --addresses /tmp/b.json --after /tmp/a.json
    python -m bench.ab_builds run --a /tmp/a.json --b /tmp/b.json --configs none,eagle:auto --concurrency 8

``serve`` launches a checkout's services (as ``tandem-bench`` does) and writes their addresses; ``run``
runs each category's prompts as one concurrent workload under every configuration on build A and on
build B in turn (reversed in odd rounds, as ``tandem-bench``'s concurrent levels), prints progress and
writes ab.json and ab.md: tok/s of A and B, B/A over total wall time and the median of per-round ratios.
Launch the second build ``--after`` the first one's addresses file: each target times its forwards at
start to price drafts, and two builds starting at once on two cores made those timings (and the
prices, and so what ``auto`` chose) differ by more than 10x between targets (`docs/bench/calibration`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import statistics
import sys
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a file from another checkout: import that checkout's bench
    sys.path.pop(0)

from bench import spec_bench  # noqa: E402
from bench.main import BASELINE, DEFAULT_TARGET_ARGS, concurrent_level, parse_config  # noqa: E402


def serve(args) -> None:
    import time

    from bench.services import launch

    while args.after and not args.after.exists():  # the other build still starting: its timings are its own
        time.sleep(1)
    services = launch(
        set(args.kinds.split(",")), args.slots, args.max_seq_len, [], shlex.split(args.target_args)
    )  # fmt: skip
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # after launch: not inherited
        args.addresses.write_text(json.dumps(services.targets))
        print(f"serving {services.targets}; addresses in {args.addresses}", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        services.stop()


def run(args) -> None:
    builds = {"A": json.loads(args.a.read_text()), "B": json.loads(args.b.read_text())}
    targets = {f"{b}:{kind}": addr for b, kinds in builds.items() for kind, addr in kinds.items()}
    configs = []
    for spec in args.configs.split(","):
        cfg = parse_config(spec)
        configs += [replace(cfg, name=f"{b} {cfg.name}", target=f"{b}:{cfg.target}") for b in builds]
    prompts = spec_bench.held_out(args.per_category, args.categories)
    rows, differ = [], {}
    for streams in [int(c) for c in args.concurrency.split(",")]:
        records, walls, rates = concurrent_level(targets, configs, prompts, args, streams)
        rows += _rows(args.configs.split(","), records, walls, rates, streams)
        differ[streams] = _differing(records, [c.name for c in configs if c.greedy])
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"command": " ".join(sys.argv), "rows": rows, "differing_from_a_none": differ}
    (args.out / "ab.json").write_text(json.dumps(report, indent=1))
    (args.out / "ab.md").write_text(_markdown(rows, differ))
    print(_markdown(rows, differ))


def _differing(records, greedy: list[str]) -> dict[str, str]:
    """Per greedy configuration: answers whose tokens differ from build A's no speculation on the same prompt."""
    base = {r.prompt_index: r.token_ids for r in records if r.config == f"A {BASELINE}"}
    out = {}
    for name in greedy:
        mine = [r for r in records if r.config == name and r.prompt_index in base]
        if base and mine:
            out[name] = f"{sum(r.token_ids != base[r.prompt_index] for r in mine)} of {len(mine)}"
    return out


def _rows(specs: list[str], records, walls: dict, rates: dict, streams: int) -> list[dict]:
    """Per configuration and category (and overall): tok/s of A and B, B/A, median per-round B/A."""
    tokens: dict[tuple, int] = {}
    for r in records:
        for key in ((r.config, streams), (r.config, streams, r.category)):
            tokens[key] = tokens.get(key, 0) + r.tokens
    out = []
    for spec in specs:
        name = parse_config(spec).name
        a, b = f"A {name}", f"B {name}"
        for key in [k for k in walls if k[0] == a]:
            rest = key[1:]
            ta, tb = tokens[(a, *rest)] / walls[(a, *rest)], tokens[(b, *rest)] / walls[(b, *rest)]
            paired = [rates[(b, *k[1:])] / v for k, v in rates.items() if k[0] == a and k[1 : 1 + len(rest)] == rest]
            category = rest[1] if len(rest) > 1 else "overall"
            out.append({"config": name, "streams": streams, "category": category, "a_tok_s": ta, "b_tok_s": tb,
                        "b_over_a": tb / ta, "b_over_a_median_round": statistics.median(paired)})  # fmt: skip
    return out


def _markdown(rows: list[dict], differ: dict) -> str:
    lines = ["| configuration | streams | category | A tok/s | B tok/s | B/A | median round B/A |", "|" + " --- |" * 7]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['streams']} | {r['category']} | {r['a_tok_s']:.1f} | {r['b_tok_s']:.1f} "
            f"| {r['b_over_a']:.3f} | {r['b_over_a_median_round']:.3f} |"
        )
    for streams, counts in differ.items():
        lines.append(f"\nGreedy answers differing from A's no speculation at {streams} streams: " + ", ".join(
            f"{name} {n}" for name, n in counts.items()))  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="ab_builds", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="launch this checkout's services and write their addresses")
    s.add_argument("--kinds", default="none,eagle", help="none and/or MTP modes (eagle, vanilla)")
    s.add_argument("--addresses", type=Path, required=True)
    s.add_argument("--slots", type=int, default=8)
    s.add_argument("--max-seq-len", type=int, default=2048)
    s.add_argument("--target-args", default=DEFAULT_TARGET_ARGS)
    s.add_argument("--after", type=Path, help="launch once this file exists (the other build's --addresses)")
    r = sub.add_parser("run", help="the same workloads on build A and build B, interleaved")
    r.add_argument("--a", type=Path, required=True, help="addresses written by serve")
    r.add_argument("--b", type=Path, required=True)
    r.add_argument("--configs", default="none,eagle:auto")
    r.add_argument("--concurrency", default="8")
    r.add_argument("--concurrent-rounds", type=int, default=2)
    r.add_argument("--per-category", type=int, default=0)
    r.add_argument("--categories", default="")
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--out", type=Path, default=Path("ab-results"))
    args = p.parse_args(argv)
    serve(args) if args.command == "serve" else run(args)


if __name__ == "__main__":
    main()
