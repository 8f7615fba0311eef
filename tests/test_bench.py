"""The benchmark's arithmetic and report on synthetic records, its config parser, and one real run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench import spec_bench
from bench.main import BASELINE, DEFAULT_TARGET_ARGS, parse_config
from bench.metrics import OVERALL, greedy_mismatches, percentile, summaries
from bench.records import RequestRecord
from bench.report import markdown, plots
from tests.helpers import SHARED_DATA


def rec(config, prompt, e2e, chunks, steps=0, drafted=(), accepted=(), cat="qa", conc=1, ids=None):
    times = [t for t, _ in chunks]
    sizes = [n for _, n in chunks]
    ids = ids if ids is not None else list(range(sum(sizes)))
    return RequestRecord(config, conc, cat, prompt, ids, times, sizes, e2e, steps, list(drafted), list(accepted))


def test_itl_counts_a_chunk_of_n_tokens_as_n_gaps():
    r = rec("x", 0, 1.0, [(0.2, 1), (0.5, 3), (0.6, 1)])
    assert r.ttft_s == 0.2 and r.tokens == 5
    assert r.itl_per_token() == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert r.tpot_s == pytest.approx((1.0 - 0.2) / 4)


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert math.isnan(percentile([], 50))


def test_summaries_acceptance_and_speedup():
    records = [
        rec(BASELINE, 0, 4.0, [(0.5, 1)] + [(0.5 + i, 1) for i in range(1, 8)]),
        rec(BASELINE, 1, 4.0, [(0.5, 1)] + [(0.5 + i, 1) for i in range(1, 8)], cat="rag"),
        # 8 tokens in 3 steps: drafts per position [3, 3] accepted [3, 2] -> (5 + 3) / 3 tokens per step
        rec("eagle k=2", 0, 2.0, [(0.5, 1), (1.0, 3), (1.5, 3), (2.0, 1)], 3, (3, 3), (3, 2)),
        rec("eagle k=2", 1, 1.0, [(0.5, 1), (1.0, 7)], 1, (1, 1), (1, 1), cat="rag"),
    ]
    rows = {(s.config, s.category): s for s in summaries(records, {}, BASELINE)}
    overall = rows[("eagle k=2", OVERALL)]
    assert overall.mean_acceptance_length == pytest.approx((3 + 2 + 1 + 1 + 3 + 1) / 4)
    assert overall.acceptance_per_position == pytest.approx([1.0, 0.75])
    assert overall.speedup == pytest.approx((16 / 3.0) / (16 / 8.0))
    assert overall.speedup_median == pytest.approx(3.0)  # per-prompt ratios 2 and 4
    assert rows[("eagle k=2", "rag")].speedup == pytest.approx(4.0)
    assert rows[(BASELINE, OVERALL)].mean_acceptance_length == 0.0  # no steps reported


def test_greedy_mismatches_compare_token_ids_per_prompt():
    records = [
        rec(BASELINE, 0, 1, [(0.1, 2)], ids=[1, 2]),
        rec("a", 0, 1, [(0.1, 2)], ids=[1, 2]),
        rec("b", 0, 1, [(0.1, 2)], ids=[1, 3]),
    ]
    assert greedy_mismatches(records, BASELINE, {"a", "b"}) == {"a": 0, "b": 1}


def test_parse_config():
    assert parse_config("none").name == BASELINE
    c = parse_config("eagle:3:t0.7")
    assert (c.target, c.k, c.temperature, c.greedy) == ("eagle", 3, 0.7, False)
    assert parse_config("vanilla:2:relaxed").acceptance == "relaxed"
    assert parse_config("pld").runner == "hf_prompt_lookup"
    assert (parse_config("eagle:0").k, parse_config("eagle:0").draft_length) == (0, "fixed")  # attached, unused
    for bad in ("eagle:5", "eagle:-1", "medusa:2", "eagle:2:x"):
        with pytest.raises(ValueError):
            parse_config(bad)


def test_split_is_disjoint_and_by_category():
    prompts = spec_bench.load(SHARED_DATA)
    train, held = spec_bench.split(prompts, "train"), spec_bench.split(prompts, "held_out")
    assert not {p.index for p in train} & {p.index for p in held}
    assert len(train) + len(held) == len(prompts)
    two = spec_bench.per_category(held, 2)
    assert len(two) == 2 * len({p.category for p in held})


def test_markdown_and_plots(tmp_path):
    records = [
        rec(BASELINE, 0, 4.0, [(0.5, 1), (1.0, 1)]),
        rec("eagle k=2", 0, 2.0, [(0.5, 1), (1.0, 1)], 1, (1, 1), (1, 0)),
    ]
    rows = summaries(records, {}, BASELINE)
    meta = dict(prompts="p.jsonl", split="held_out", per_category=1, num_prompts=1, max_tokens=2, model="m")
    meta.update(dtype="float32", device="cpu", baseline=BASELINE, command="tandem-bench", date="today")
    results = {"meta": meta, "summaries": [s.as_dict() for s in rows], "greedy_mismatches": {"eagle k=2": 0}}
    results["plots"] = [str(p) for p in plots(records, rows, tmp_path)]
    text = markdown(results)
    assert "| eagle k=2 | 2.00 | 1.00 / 0.00 |" in text
    assert "0 of 1" in text and "(reference)" in text
    for p in results["plots"]:
        assert (tmp_path / p.split("/")[-1]).stat().st_size > 1000


@pytest.mark.slow
def test_bench_runs_end_to_end_against_launched_services(tmp_path, default_model_converted):
    """Real services (no-spec target, Eagle draft service + target), one prompt of two categories, 2 configs;
    each target writes its own step trace."""
    out = tmp_path / "bench"
    targets = f"{DEFAULT_TARGET_ARGS} --step-trace {tmp_path}/trace-{{kind}}.jsonl"
    cmd = [sys.executable, "-m", "bench", "--configs", "none,eagle:2", "--per-category", "1", "--max-tokens", "12",
           "--categories", "qa,rag", "--concurrency", "1,2", "--concurrent-configs", "eagle:2", "--out", str(out),
           "--target-args", targets]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["greedy_mismatches"] == {"eagle k=2": 0}
    assert {r["category"] for r in results["records"]} == {"qa", "rag"} and results["meta"]["num_prompts"] == 2
    assert results["meta"]["draft_policies"]["eagle"]["mode"] == "auto"  # the server's default; requests ask fixed
    assert results["meta"]["draft_policies"]["eagle"]["choice"] == "common"  # GetModelInfo says how auto chooses
    assert (tmp_path / "trace-none.jsonl").read_text() and (tmp_path / "trace-eagle.jsonl").read_text()
    overall = {(s["config"], s["concurrency"]): s for s in results["summaries"] if s["category"] == OVERALL}
    assert overall[("eagle k=2", 1)]["mean_acceptance_length"] > 1.0
    assert overall[("eagle k=2", 2)]["requests"] == results["meta"]["num_prompts"]
    assert "## Concurrency" in (out / "results.md").read_text()


def test_a_failed_request_fails_the_run_instead_of_vanishing_from_the_figures():
    from bench.pool import RequestsFailed, run_streams

    def run(client, job):
        if job == 2:
            raise ValueError("boom")
        return job

    with pytest.raises(RequestsFailed, match=r"1 of 4 requests failed; first: 2: ValueError: boom") as info:
        run_streams("127.0.0.1:1", [0, 1, 2, 3], 2, run)
    assert len(info.value.failures) == 1


def test_concurrent_levels_run_category_by_category_every_configuration_in_turn(monkeypatch):
    """Stand-in for the services (``run_concurrent`` records its calls): the order of the runs and the sums."""
    import types

    import bench.main as bm

    calls = []

    def fake_run(address, cfg, prompts, max_tokens, streams):
        calls.append((cfg.name, [p.i for p in prompts]))
        recs = [types.SimpleNamespace(tokens=max_tokens) for _ in prompts]
        return recs, 0.5 * len(prompts)

    monkeypatch.setattr(bm, "run_concurrent", fake_run)
    configs = [bm.parse_config("none"), bm.parse_config("eagle:auto")]
    args = types.SimpleNamespace(max_tokens=10, concurrent_rounds=1)
    prompts = [types.SimpleNamespace(i=i, category="ab"[i % 3 == 0]) for i in range(6)]
    records, walls, rates = bm.concurrent_level({"none": "a", "eagle": "b"}, configs, prompts, args, streams=4)
    assert [name for name, _ in calls] == ["no speculation", "eagle auto"] * 2
    assert calls[0][1] == calls[1][1] == [0, 3] and calls[2][1] == calls[3][1] == [1, 2, 4, 5]
    assert len(records) == 12
    assert walls[("eagle auto", 4)] == 3.0 and walls[("eagle auto", 4, "b")] == 1.0
    assert walls[("no speculation", 4, "a")] == 2.0

    calls.clear()  # two rounds: every configuration once per round (the second reversed), each category's
    args.concurrent_rounds = 2  # rounds back to back
    records, walls, rates = bm.concurrent_level({"none": "a", "eagle": "b"}, configs, prompts, args, streams=4)
    assert [name for name, _ in calls] == ["no speculation", "eagle auto", "eagle auto", "no speculation"] * 2
    assert [ids for _, ids in calls] == [[0, 3]] * 4 + [[1, 2, 4, 5]] * 4
    assert len(records) == 24 and walls[("eagle auto", 4, "b")] == 2.0
    assert sorted(k[3] for k in rates if k[:3] == ("eagle auto", 4, "b")) == [0, 1]
    assert rates[("eagle auto", 4, "b", 1)] == 4 * 10 / 2.0  # tokens / wall of that round


def test_concurrent_paired_speedup_is_the_median_of_round_ratios():
    """A machine that slows down between rounds moves both configurations of a round alike: the paired
    ratios see through it where summed wall times do not."""
    from bench.metrics import summaries
    from bench.records import RequestRecord

    records = [RequestRecord(c, 4, cat, 0, list(range(100)), [0.1], [100], 10.0) for c in ("none", "x") for cat in "ab"]
    rates = {("none", 4, "a", 0): 50.0, ("x", 4, "a", 0): 55.0, ("none", 4, "a", 1): 20.0, ("x", 4, "a", 1): 19.0}
    rates |= {("none", 4, "b", 0): 40.0, ("x", 4, "b", 0): 44.0, ("none", 4, "b", 1): 40.0, ("x", 4, "b", 1): 48.0}
    rows = {(s.config, s.category): s for s in summaries(records, {}, "none", rates)}
    assert rows[("x", "a")].speedup_median == pytest.approx((1.1 + 0.95) / 2)
    assert rows[("x", "a")].speedup_min == pytest.approx(0.95)
    assert rows[("x", "overall")].speedup_median == pytest.approx(1.1)  # median of 1.1, 0.95, 1.1, 1.2
    assert rows[("x", "overall")].speedup_min == pytest.approx(0.95)
    assert rows[("none", "b")].speedup_median == 1.0


def test_concurrent_category_figures_use_their_own_wall_time():
    from bench.metrics import summaries
    from bench.records import RequestRecord

    def rec(config, category, e2e):
        return RequestRecord(config, 4, category, 0, list(range(100)), [0.1], [100], e2e)

    records = [rec("none", "a", 10.0), rec("fast", "a", 10.0)]
    walls = {("none", 4): 4.0, ("fast", 4): 2.0, ("none", 4, "a"): 4.0, ("fast", 4, "a"): 2.0}
    rows = {(s.config, s.category): s for s in summaries(records, walls, "none")}
    assert rows[("fast", "a")].tok_s == 50.0 and rows[("fast", "a")].speedup == 2.0
    assert rows[("fast", "overall")].speedup == 2.0


def test_ab_builds_compares_each_configuration_across_builds_and_counts_differing_answers():
    from bench.ab_builds import _differing, _markdown, _rows

    records = [
        rec("A no speculation", 0, 1.0, [(0.1, 4)], cat="qa", conc=8, ids=[1, 2, 3, 4]),
        rec("B no speculation", 0, 1.0, [(0.1, 4)], cat="qa", conc=8, ids=[1, 2, 3, 4]),
        rec("A eagle auto", 0, 1.0, [(0.1, 4)], cat="qa", conc=8, ids=[1, 2, 3, 4]),
        rec("B eagle auto", 0, 1.0, [(0.1, 4)], cat="qa", conc=8, ids=[1, 2, 9, 4]),
    ]
    walls = {("A eagle auto", 8): 2.0, ("A eagle auto", 8, "qa"): 2.0}
    walls |= {("B eagle auto", 8): 1.0, ("B eagle auto", 8, "qa"): 1.0}
    rates = {("A eagle auto", 8, "qa", 0): 2.0, ("B eagle auto", 8, "qa", 0): 5.0}
    rows = _rows(["eagle:auto"], records, walls, rates, 8)
    assert [(r["category"], r["a_tok_s"], r["b_tok_s"]) for r in rows] == [("overall", 2.0, 4.0), ("qa", 2.0, 4.0)]
    assert rows[0]["b_over_a"] == 2.0 and rows[1]["b_over_a_median_round"] == 2.5
    differ = _differing(records, ["B no speculation", "A eagle auto", "B eagle auto"])
    assert differ == {"B no speculation": "0 of 1", "A eagle auto": "0 of 1", "B eagle auto": "1 of 1"}
    assert "| eagle auto | 8 | qa | 2.0 | 4.0 | 2.000 | 2.500 |" in _markdown(rows, {8: differ})


def test_lockstep_compares_tokens_per_step_second_by_category_and_counts_differing_answers():
    from bench.lockstep import Workload, markdown, summarize

    def pair(config, cat, rnd, a_s, b_s, b_ids):
        a = Workload("A", 8, cat, rnd, 100, a_s, 10, 9.0, {0: [1, 2], 1: [3]})
        return {"config": config, "A": a, "B": Workload("B", 8, cat, rnd, 100, b_s, 7, 9.0, b_ids)}

    same = {0: [1, 2], 1: [3]}
    auto, k1 = "eagle auto", "eagle k=1"
    pairs = [pair(auto, "qa", 0, 2.0, 1.0, same), pair(k1, "qa", 0, 1.0, 1.0, same),
             pair(auto, "qa", 1, 2.0, 4.0, {0: [1, 2], 1: [4]}), pair(auto, "rag", 0, 1.0, 1.0, same)]  # fmt: skip
    rows = {(r["config"], r["category"]): r for r in summarize(pairs)}
    qa = rows["eagle auto", "qa"]
    assert qa["a_tok_s"] == 50.0 and qa["b_tok_s"] == 40.0 and qa["b_over_a"] == 0.8
    assert qa["rounds_b_over_a"] == [2.0, 0.5] and qa["lowest_round"] == 0.5
    assert qa["answers_differing"] == 1 and qa["answers"] == 4
    assert (
        rows["eagle auto", "overall"]["b_over_a"] == 300 / 6 / (300 / 5)
        and rows["eagle auto", "overall"]["b_steps"] == 21
    )
    assert rows[k1, "overall"]["b_over_a"] == 1.0
    assert set(rows) == {(auto, "qa"), (auto, "rag"), (auto, "overall"), (k1, "qa"), (k1, "overall")}
    assert "| eagle auto | 8 | qa | 50.0 | 40.0 | 0.800 | 2.000, 0.500 | 20 | 14 | 1 of 4 |" in markdown(
        list(rows.values()), "no speculation", "cmd"
    )


def test_lockstep_shares_a_target_per_kind_unless_each_b_configuration_gets_its_own(monkeypatch, tmp_path):
    """B configurations of one kind share a target by default; ``--own-targets`` launches one for each
    (which targets launch is checked with ``bench.services.launch`` replaced by a recorder: nothing starts)."""
    from argparse import Namespace

    import bench.services
    from bench.lockstep import b_side, launch_all
    from bench.main import parse_config
    from target_service.step_baton import StepBaton

    launched = []
    monkeypatch.setattr(bench.services, "launch", lambda kinds, *rest: launched.append((kinds, rest[3][-1])))
    a, *bs = [parse_config(x) for x in ("none", "eagle:1", "eagle:auto", "vanilla:auto")]
    for own in (False, True):
        args = Namespace(own_targets=own, target_args="", a_target_args="", b_target_args="", a_root=None,
                         b_root=None, slots=8, max_seq_len=2048)  # fmt: skip
        launched.clear()
        sides = launch_all(a, bs, args, tmp_path)
        assert [b_side(c, own) for c in bs] == (
            ["B-eagle-k1", "B-eagle-auto", "B-vanilla-auto"] if own else ["B-eagle", "B-eagle", "B-vanilla"]
        )
        expected = {"A": "none", **{b_side(c, own): c.target for c in bs}}  # side -> the kind it serves
        assert list(sides) == list(expected) and len(sides) == (4 if own else 3)
        assert [kinds for kinds, _ in launched] == [{kind} for kind in expected.values()]
        assert [baton for _, baton in launched] == [str(tmp_path / side) for side in sides]
        for side in sides:  # each a name the target's baton takes
            StepBaton(tmp_path / ("own" if own else "shared") / side)


@pytest.mark.slow
def test_lockstep_runs_two_launched_targets_paired_by_a_baton(tmp_path, default_model_converted):
    """Two real no-speculation targets paired by a step baton, one tiny workload: both sides step, their
    answers agree, and the report has the category and overall rows."""
    out = tmp_path / "lockstep"
    traces = str(tmp_path / "trace-{side}.jsonl")
    cmd = [sys.executable, "-m", "bench.lockstep", "--configs", "none,none", "--concurrency", "2", "--rounds", "1",
           "--per-category", "2", "--categories", "qa", "--max-tokens", "8", "--out", str(out),
           "--target-args", f"--step-trace {traces}"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "lockstep.json").read_text())
    rows = {r["category"]: r for r in report["rows"]}
    # the step traces hold, after warm-up, exactly the steps each side's profile counted; step_split reads them
    for side, key in (("A", "a_steps"), ("B-none", "b_steps")):
        steps = [json.loads(x) for x in Path(traces.replace("{side}", side)).read_text().splitlines()]
        assert sum(s["request_ids"] != ["warmup"] for s in steps) == rows["qa"][key]
    from bench.step_split import main as step_split

    step_split([str(out), "--traces", traces])
    pair = json.loads((out / "step_split.json").read_text())["pairs"][0]
    assert pair["excess"]["tokens"] == 0.0
    assert sum(pair["excess"].values()) == pytest.approx(100 * (pair["b_seconds"] / pair["a_seconds"] - 1))
    assert set(rows) == {"qa", "overall"}
    assert rows["qa"]["a_steps"] > 0 and rows["qa"]["b_steps"] > 0 and rows["qa"]["answers"] == 2
    assert rows["qa"]["answers_differing"] == 0 and rows["qa"]["a_tok_s"] > 0 and rows["qa"]["b_tok_s"] > 0
    assert "| 2 | qa |" in (out / "lockstep.md").read_text()
