"""`tandem-bench`: Spec-Bench-format prompts against the running services, configurations side by side.

Batch 1: prompt by prompt, every configuration in turn (so machine noise hits all alike): no
speculation, vanilla and Eagle MTP at each k, transformers ``generate`` and transformers prompt lookup
in this process. Then the Tandem configurations chosen by --concurrent-configs at each concurrency
above 1 (interleaved too: each category's prompts as one concurrent workload under every configuration
in turn), and, when the services were launched here, a sweep of the draft sub-vocabulary size.
Writes results.json, results.md and PNG plots into --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import sys
from pathlib import Path

from bench import spec_bench
from bench.metrics import greedy_mismatches, summaries
from bench.pool import run_streams
from bench.records import Config, RequestRecord
from bench.report import markdown, plots
from bench.services import MAX_K
from bench.tandem_runner import run_tandem

BASELINE = "no speculation"
DEFAULT_CONFIGS = (
    "none,vanilla:1,vanilla:2,vanilla:3,vanilla:4,vanilla:auto,eagle:1,eagle:2,eagle:3,eagle:4,eagle:auto,"
    "eagle:3:t0.7,eagle:3:relaxed,hf,pld"
)
# The default model has no thinking tokens: launched targets treat the assistant turn as the span.
DEFAULT_TARGET_ARGS = "--think-begin-token <|im_start|> --think-end-token <|im_end|>"


def parse_config(spec: str) -> Config:
    """``none`` | ``hf`` | ``pld`` | ``MODE:K[:tTEMP][:relaxed]`` with MODE eagle or vanilla; K 0..4 or ``auto``
    (0..4 drafts chosen per sequence and step), or 0: the drafter attached and never asked for drafts (what
    attaching one costs)."""
    if spec == "none":
        return Config(BASELINE, "tandem", "none", 0)
    if spec == "hf":
        return Config("transformers generate", "hf_generate")
    if spec == "pld":
        return Config("transformers prompt lookup", "hf_prompt_lookup")
    mode, k, *rest = spec.split(":")
    length = "auto" if k == "auto" else "fixed"
    k = str(MAX_K) if k == "auto" else k
    if mode not in ("eagle", "vanilla") or not k.isdigit() or not 0 <= int(k) <= 4:
        raise ValueError(
            f"bad configuration {spec!r}: none, hf, pld or eagle|vanilla:K[:tTEMP][:relaxed], K 0..4 or auto"
        )
    temperature, acceptance, name = 0.0, "", f"{mode} k={k}" if length == "fixed" else f"{mode} auto"
    for part in rest:
        if part.startswith("t"):
            temperature = float(part[1:])
            name += f" T={temperature:g}"
        elif part == "relaxed":
            acceptance = "relaxed"
            name += " relaxed"
        else:
            raise ValueError(f"bad configuration suffix {part!r} in {spec!r}")
    return Config(name, "tandem", mode, int(k), temperature, acceptance, length)


def run_concurrent(address: str, cfg: Config, prompts, max_tokens: int, streams: int) -> tuple[list, float]:
    return run_streams(address, prompts, streams, lambda c, p: run_tandem(c, cfg, p, max_tokens, streams, False))


def concurrent_level(targets, configs: list[Config], prompts, args, streams: int) -> tuple[list, dict]:
    """Every configuration at ``streams`` concurrent streams, category by category: each category's prompts
    are one concurrent workload, run under every configuration in turn (interleaved, so a drifting machine
    moves all of them alike, and each category's figure is its own workload's wall time, not request
    latencies in a mixed batch), ``--concurrent-rounds`` times (a round runs every configuration once; odd
    rounds run them in reverse order, so over two rounds every configuration sits as early as late and a
    drift that is linear in time moves all of them alike).
    Returns the records and the summed wall times, keyed (config, streams) overall and (config, streams,
    category) per category, and each round's tok/s keyed (config, streams, category, round): the runs of
    one round are neighbours in time, so their ratios are the paired comparison (a single workload's wall
    time moved by up to 19% between two rounds on this shared 2-core machine)."""
    categories = list(dict.fromkeys(p.category for p in prompts))
    records, walls, tokens, rates = [], {}, {}, {}
    for i, cat in enumerate(categories):
        part = [p for p in prompts if p.category == cat]
        for r, cfg in [(rnd, c) for rnd in range(args.concurrent_rounds) for c in round_order(configs, rnd)]:
            recs, wall = run_concurrent(targets[cfg.target], cfg, part, args.max_tokens, streams)
            records += recs
            n = sum(x.tokens for x in recs)
            rates[(cfg.name, streams, cat, r)] = n / wall
            for key in ((cfg.name, streams), (cfg.name, streams, cat)):
                walls[key] = walls.get(key, 0.0) + wall
                tokens[key] = tokens.get(key, 0) + n
        line = "  ".join(f"{k[0]}: {tokens[k] / walls[k]:.1f}" for k in walls if k[2:] == (cat,))
        print(f"{streams} streams, {cat} ({i + 1}/{len(categories)}): tok/s  {line}", flush=True)
    return records, walls, rates


def round_order(configs: list, r: int) -> list:
    """The configurations of round ``r``: as given in even rounds, reversed in odd ones."""
    return list(configs) if r % 2 == 0 else list(reversed(configs))


class Bench:
    def __init__(self, args, prompts, configs: list[Config], targets: dict[str, str]):
        from client import TandemClient

        self.args, self.prompts, self.configs = args, prompts, configs
        self.clients = {kind: TandemClient(addr, timeout=1800) for kind, addr in targets.items()}
        self.hf = None
        if any(c.runner != "tandem" for c in configs):
            from tandem_core.model_loader import load_model

            self.hf = load_model(args.model, "float32")

    def one(self, cfg: Config, prompt, max_tokens: int) -> RequestRecord:
        if cfg.runner == "tandem":
            client = self.clients.get(cfg.target)
            if client is None:
                raise SystemExit(f"{cfg.name} needs a {cfg.target!r} target (--target {cfg.target}=ADDRESS)")
            return run_tandem(client, cfg, prompt, max_tokens, 1, profile=True)
        from bench.peers import run_hf

        return run_hf(self.hf.model, self.hf.tokenizer, cfg, prompt, max_tokens)

    def batch1(self, configs: list[Config], prompts, progress: str) -> list[RequestRecord]:
        for cfg in configs:  # warm-up, not recorded
            self.one(cfg, prompts[0], 4)
        records = []
        for i, p in enumerate(prompts):
            for cfg in configs:
                records.append(self.one(cfg, p, self.args.max_tokens))
            line = "  ".join(f"{r.config}: {r.tokens / r.e2e_s:.1f}" for r in records[-len(configs) :])
            print(f"{progress} prompt {i + 1}/{len(prompts)} ({p.category}) tok/s  {line}", flush=True)
        return records


def profile_table(records: list[RequestRecord]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in records:
        if r.concurrency == 1 and r.profile:
            p = out.setdefault(r.config, {"steps": 0, "tokens": 0, "forward_s": 0.0, "draft_s": 0.0, "other_s": 0.0})
            p["tokens"] += r.tokens
            for key in ("steps", "forward_s", "draft_s", "other_s"):
                p[key] += r.profile[key]
    return out


def vocab_sweep(bench: Bench, services, sizes: list[int], spec: str, prompts) -> list[dict]:
    """Restart the draft service with each sub-vocabulary size; batch 1 over ``prompts``."""
    cfg = parse_config(spec)
    rows = []
    for n in sizes:
        services.restart_drafter(cfg.target, ["--draft-vocab", str(n)])
        recs = bench.batch1([cfg], prompts, f"draft vocab {n or 'whole'}:")
        steps = sum(r.profile["steps"] for r in recs)
        drafted = sum(r.steps for r in recs)
        accepted = sum(sum(r.accepted_per_position) for r in recs)
        rows.append(
            {
                "config": cfg.name,
                "vocab": n,
                "mean_acceptance_length": (accepted + drafted) / max(1, drafted),
                "tok_s": sum(r.tokens for r in recs) / sum(r.e2e_s for r in recs),
                "draft_ms": 1000 * sum(r.profile["draft_s"] for r in recs) / max(1, steps),
                "forward_ms": 1000 * sum(r.profile["forward_s"] for r in recs) / max(1, steps),
            }
        )
    services.restart_drafter(cfg.target, [])
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="tandem-bench", description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=Path, default=spec_bench.DEFAULT_PROMPTS, help="Spec-Bench format jsonl")
    p.add_argument("--split", default="held_out", help="held_out (default: never trained on), train or all")
    p.add_argument("--per-category", type=int, default=2, help="prompts per category (0 = all)")
    p.add_argument("--categories", default="", help="comma list of categories to run (default: every one)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comma list (default {DEFAULT_CONFIGS})")
    p.add_argument("--concurrency", default="1,4,8")
    p.add_argument(
        "--concurrent-configs", default="none,eagle:3,eagle:auto,vanilla:auto", help="configs run at concurrency > 1"
    )
    p.add_argument("--concurrent-rounds", type=int, default=1,
                   help="times each category's workload runs under every concurrent config (interleaved)")  # fmt: skip
    p.add_argument("--target", action="append", default=[], help="KIND=ADDRESS of a running target (none, eagle, "
                   "vanilla); without any, the services are launched here")  # fmt: skip
    p.add_argument("--slots", type=int, default=8, help="launched targets: --max-slots")
    p.add_argument("--max-seq-len", type=int, default=2048, help="launched targets: --max-seq-len")
    p.add_argument("--draft-args", default="", help="extra flags for launched draft services")
    p.add_argument("--target-args", default=DEFAULT_TARGET_ARGS, help="extra flags for launched targets")
    p.add_argument("--vocab-sweep", default="", help="launched only: draft vocab sizes to sweep, e.g. 1024,4096,0")
    p.add_argument("--vocab-sweep-config", default="eagle:3")
    p.add_argument("--vocab-sweep-prompts", type=int, default=1, help="per category")
    p.add_argument("--model", default="default", help="for the in-process transformers peers")
    p.add_argument("--out", type=Path, default=Path("bench-results"))
    args = p.parse_args(argv)

    from bench.services import launch

    configs = [parse_config(s) for s in args.configs.split(",") if s]
    levels = [int(c) for c in args.concurrency.split(",") if c]
    conc_configs = [parse_config(s) for s in args.concurrent_configs.split(",") if s and max(levels) > 1]
    prompts = spec_bench.per_category(spec_bench.split(spec_bench.load(args.prompts), args.split), args.per_category)
    if args.categories:
        wanted = set(args.categories.split(","))
        if unknown := wanted - {q.category for q in prompts}:
            p.error(f"--categories: no prompts in {', '.join(sorted(unknown))}")
        prompts = [q for q in prompts if q.category in wanted]
    args.out.mkdir(parents=True, exist_ok=True)
    services = None
    targets = dict(t.split("=", 1) for t in args.target)
    try:
        if not targets:
            kinds = {c.target for c in configs + conc_configs if c.runner == "tandem"}
            sweep = args.vocab_sweep and parse_config(args.vocab_sweep_config).target
            services = launch(kinds | ({sweep} if sweep else set()), args.slots, args.max_seq_len,
                              shlex.split(args.draft_args), shlex.split(args.target_args))  # fmt: skip
            targets = services.targets
        bench = Bench(args, prompts, configs, targets)
        records = bench.batch1(configs, prompts, "batch 1:") if 1 in levels else []
        walls: dict[tuple, float] = {}
        rates: dict[tuple, float] = {}
        for streams in [c for c in levels if c > 1]:
            recs, level_walls, level_rates = concurrent_level(targets, conc_configs, prompts, args, streams)
            records += recs
            walls |= level_walls
            rates |= level_rates
        sweep_rows = []
        if args.vocab_sweep:
            if services is None:
                print("--vocab-sweep needs launched services; skipped", file=sys.stderr)
            else:
                sizes = [int(n) for n in args.vocab_sweep.split(",")]
                few = spec_bench.per_category(prompts, args.vocab_sweep_prompts)
                sweep_rows = vocab_sweep(bench, services, sizes, args.vocab_sweep_config, few)
        info = next(iter(bench.clients.values())).model_info() if bench.clients else None
        policies = {kind: c.model_info().draft_policy for kind, c in bench.clients.items()}  # state at the end
    finally:
        if services is not None:
            services.stop()

    rows = summaries(records, walls, BASELINE, rates)
    greedy = {c.name for c in configs + conc_configs if c.greedy}
    results = {
        "meta": {
            "prompts": str(args.prompts.name),
            "split": args.split,
            "per_category": args.per_category,
            "num_prompts": len(prompts),
            "max_tokens": args.max_tokens,
            "model": info.model if info else args.model,
            "dtype": info.dtype if info else "float32",
            "vocab_size": info.vocab_size if info else 0,
            "device": f"{platform.machine()} CPU",
            "baseline": BASELINE,
            "command": "tandem-bench " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
            "date": datetime.date.today().isoformat(),
            "draft_policies": policies,
        },
        "summaries": [s.as_dict() for s in rows],
        "greedy_mismatches": greedy_mismatches(records, BASELINE, greedy),
        "sampled_configs": sorted({c.name for c in configs + conc_configs} - greedy),
        "profile": profile_table(records),
        "vocab_sweep": sweep_rows,
        "records": [vars(r) for r in records],
    }
    results["plots"] = [str(p) for p in plots(records, rows, args.out)] if records else []
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "results.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
