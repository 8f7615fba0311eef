"""`python -m bench.step_split LOCKSTEP_DIR --traces PATTERN`: where B's step seconds went against A's, pair by
pair, in a ``bench.lockstep`` run whose targets wrote step traces (``--target-args "--step-trace
/tmp/ls/x-{side}.jsonl"``; ``--traces /tmp/ls/x-{side}.jsonl`` here, ``.gz`` too).

Lockstep says by how much B's speed differs from A's on the same workload; this says in which steps.
Each side's steps are classed: ``prefill`` (carries a prompt chunk), ``plain`` (no sequence verifies
drafts, none asks for any), ``ask`` (none verifies, some ask: the drafter catches up and drafts, as in a
probe or the step before drafting resumes) and ``verify`` (some sequence verifies drafts); and a decode
step is ``thin`` where it has fewer sequences than the workload's widest decode step (a batch filling, or
draining at the end as sequences finish apart). A's full plain steps set the price of a token (their
seconds over their tokens; where A drafted in every full step, as an A of ``auto`` may, its full decode
steps do); a class's excess is its seconds less its tokens at that price. B's excess
minus A's, class by class, plus the price of the tokens one side took more (``tokens``: 0 where both
generated the same), sums to B's seconds minus A's. Figures are in % of A's seconds: a positive one is
where B lost.

Each side's trace holds its workloads in the order the run made them (``lockstep.json``): runs of steps
whose requests overlap, matched to each workload's ``steps``; warm-up steps are skipped.

Writes step_split.json and step_split.md into LOCKSTEP_DIR (or --out) and prints the table.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.trace_summary import load

CLASSES = ("prefill", "plain", "plain thin", "ask", "ask thin", "verify", "verify thin")


@dataclass(frozen=True)
class Split:
    """One pair's (or a total's) seconds, and B's excess over A's by step class in % of A's seconds."""

    config: str
    streams: int
    category: str
    round: int
    a_seconds: float
    b_seconds: float
    price: float  # seconds per token of A's full plain steps (or full decode steps; 0 in totals)
    excess: dict  # class (or "tokens") -> (B's excess - A's) / A's seconds * 100


def step_class(step: dict, widest: int) -> str:
    if not step["decode"]:
        return "prefill"
    if any(q > 1 for q in step["q_lens"]):
        kind = "verify"
    elif any(step["drafts_asked"]):
        kind = "ask"
    else:
        kind = "plain"
    return kind if len(step["q_lens"]) >= widest else f"{kind} thin"


def by_class(steps: list[dict]) -> dict[str, tuple[float, int]]:
    """{class: (seconds, tokens)} over one workload's steps."""
    widest = max((len(s["q_lens"]) for s in steps if s["decode"]), default=0)
    out: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for s in steps:
        cell = out[step_class(s, widest)]
        cell[0] += s["forward_s"] + s["draft_s"] + s["other_s"]
        cell[1] += sum(s["accepted"])
    return {k: (v[0], v[1]) for k, v in out.items()}


def split_pair(a: list[dict], b: list[dict]) -> tuple[float, float, float, dict]:
    """(A's seconds, B's seconds, price, {class: excess difference in % of A's seconds}) for one pair."""
    ca, cb = by_class(a), by_class(b)
    seconds_a, seconds_b = (sum(v[0] for v in c.values()) for c in (ca, cb))
    basis = ["plain"] if ca.get("plain", (0.0, 0))[1] else ["plain", "ask", "verify"]  # A drafted in every step
    basis_s, basis_t = (sum(ca.get(k, (0.0, 0))[i] for k in basis) for i in (0, 1))
    if not basis_t:
        raise ValueError("A's workload has no full decode step to price a token by")
    price = basis_s / basis_t

    def excess(c: dict, k: str) -> float:
        s, t = c.get(k, (0.0, 0))
        return s - t * price

    tokens = [sum(v[1] for v in c.values()) for c in (ca, cb)]
    diff = {k: excess(cb, k) - excess(ca, k) for k in CLASSES}
    diff["tokens"] = (tokens[1] - tokens[0]) * price
    return seconds_a, seconds_b, price, {k: 100.0 * v / seconds_a for k, v in diff.items()}


def slices(trace: list[dict], steps: list[int], slack: int = 2) -> list[list[dict]]:
    """The trace cut into its workloads, one per count in ``steps`` (the run's, which may miss a
    workload's last step: a client can read the profile while that step still drafts), warm-up skipped.
    A workload is a run of steps whose requests overlap, or several (a batch that all finished at once):
    runs are joined while that brings them closer to its count."""
    runs: list[list[dict]] = []
    seen: set[str] = set()
    for s in trace:
        ids = {r for r in s["request_ids"] if r != "warmup"}
        if not ids:
            continue
        if not runs or not ids & seen:
            runs.append([])
            seen = set()
        runs[-1].append(s)
        seen |= ids
    out = []
    for want in steps:
        got: list[dict] = []
        while runs and (not got or abs(len(got) + len(runs[0]) - want) < abs(len(got) - want)):
            got += runs.pop(0)
        if abs(len(got) - want) > slack:
            raise ValueError(f"the trace does not cut at the run's workloads: {len(got)} steps where it counted {want}")
        out.append(got)
    if runs:
        raise ValueError(f"the trace holds {len(runs)} more workloads than the run made")
    return out


def b_sides(report: dict) -> dict[str, str]:
    """{B configuration: its trace's side} from ``lockstep.json`` (``sides``; else from its command)."""
    if "sides" in report:
        return report["sides"]
    from bench.lockstep import b_side, parser
    from bench.main import parse_config

    words = report["command"].split()  # older runs joined their arguments unquoted: read only these two
    configs = words[words.index("--configs") + 1] if "--configs" in words else parser().get_default("configs")
    own = "--own-targets" in words
    return {c.name: b_side(c, own) for c in map(parse_config, configs.split(",")[1:])}


def split_run(report: dict, pattern: str) -> list[Split]:
    runs = report["workloads"]
    sides = b_sides(report)
    cut = {"A": iter(slices(load(Path(pattern.replace("{side}", "A"))), [w["A"]["steps"] for w in runs]))}
    for side in dict.fromkeys(sides.values()):
        mine = [w["B"]["steps"] for w in runs if sides[w["config"]] == side]
        cut[side] = iter(slices(load(Path(pattern.replace("{side}", side))), mine))
    out = []
    for w in runs:
        a, b = next(cut["A"]), next(cut[sides[w["config"]]])
        sa, sb, price, excess = split_pair(a, b)
        out.append(Split(w["config"], w["A"]["streams"], w["A"]["category"], w["A"]["round"], sa, sb, price, excess))
    return out


def totals(splits: list[Split]) -> list[Split]:
    """Per configuration and concurrency: every category's rounds summed, and overall (weights: A's seconds)."""
    rows = []
    for key in dict.fromkeys((s.config, s.streams) for s in splits):
        level = [s for s in splits if (s.config, s.streams) == key]
        for category in [*dict.fromkeys(s.category for s in level), "overall"]:
            mine = [s for s in level if category in ("overall", s.category)]
            a = sum(s.a_seconds for s in mine)
            excess = {k: sum(s.excess[k] * s.a_seconds for s in mine) / a for k in mine[0].excess}
            rows.append(Split(key[0], key[1], category, -1, a, sum(s.b_seconds for s in mine), 0.0, excess))
    return rows


def markdown(rows: list[Split]) -> str:
    keys = [*CLASSES, "tokens"]
    lines = [
        "| B | streams | category | A s | B s | B/A speed | " + " | ".join(keys) + " |",
        "|" + " --- |" * (6 + len(keys)),
    ]
    for r in rows:
        cells = " | ".join(f"{r.excess[k]:+.1f}" for k in keys)
        lines.append(
            f"| {r.config} | {r.streams} | {r.category} | {r.a_seconds:.2f} | {r.b_seconds:.2f} "
            f"| {r.a_seconds / r.b_seconds:.3f} | {cells} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.step_split", description=__doc__.splitlines()[0])
    p.add_argument("lockstep_dir", type=Path, help="a bench.lockstep --out folder (its lockstep.json)")
    p.add_argument("--traces", required=True, help="the step traces' path with {side} (A, B-eagle, ...)")
    p.add_argument("--out", type=Path, help="where to write step_split.json/.md (default: lockstep_dir)")
    args = p.parse_args(argv)
    report = json.loads((args.lockstep_dir / "lockstep.json").read_text())
    splits = split_run(report, args.traces)
    rows = totals(splits)
    text = (
        "# Where B's step seconds went against A's\n\n"
        f"`python -m bench.step_split` on `{report['command']}`. Excess by step class, in % of A's seconds "
        "(positive: B lost there); the classes and `tokens` sum to B's seconds less A's.\n\n" + markdown(rows)
    )
    out = args.out or args.lockstep_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_split.json").write_text(json.dumps({"pairs": [asdict(s) for s in splits],
                                                      "totals": [asdict(s) for s in rows]}, indent=1))  # fmt: skip
    (out / "step_split.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
