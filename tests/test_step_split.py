"""bench.step_split: step classes, the excess identity and cutting traces at a lockstep run's workloads,
on synthetic traces (what a target's ``--step-trace`` writes, the fields the split reads)."""

import json

import pytest

from bench.step_split import CLASSES, main, slices, split_pair, step_class


def step(q_lens, seconds, accepted=None, asked=None, decode=True, ids=("r0",)):
    return {
        "decode": decode, "q_lens": list(q_lens), "forward_s": seconds, "draft_s": 0.0, "other_s": 0.0,
        "accepted": list(accepted or [1] * len(q_lens)), "drafts_asked": list(asked or [0] * len(q_lens)),
        "request_ids": list(ids),
    }  # fmt: skip


def test_step_classes():
    assert step_class(step([5, 1], 0.1, decode=False), 2) == "prefill"
    assert step_class(step([1, 1], 0.1), 2) == "plain"
    assert step_class(step([1], 0.1), 2) == "plain thin"
    assert step_class(step([1, 1], 0.1, asked=[1, 0]), 2) == "ask"
    assert step_class(step([2, 1], 0.1), 2) == "verify"
    assert step_class(step([3], 0.1), 2) == "verify thin"


def test_excess_by_class_sums_to_the_difference_in_seconds():
    # A: 4 full plain steps of 2 tokens at 0.1 s (price 0.05 s a token) and a prefill
    a = [step([9, 9], 0.3, decode=False)] + [step([1, 1], 0.1) for _ in range(4)]
    # B: the same 10 tokens: a verify step that took 4 for 0.12 s, a full plain one, then a thin tail
    b = [
        step([9, 9], 0.35, decode=False),
        step([1, 1], 0.12, asked=[1, 1]),
        step([2, 2], 0.12, accepted=[2, 2]),
        step([1], 0.09),
        step([1], 0.09),
    ]
    sa, sb, price, excess = split_pair(a, b)
    assert (sa, sb, price) == pytest.approx((0.7, 0.77, 0.05))
    assert sum(excess.values()) == pytest.approx(100 * (sb - sa) / sa)
    assert excess["prefill"] == pytest.approx(100 * 0.05 / 0.7)
    assert excess["verify"] == pytest.approx(100 * (0.12 - 4 * 0.05) / 0.7)  # a gain: negative
    assert excess["plain thin"] == pytest.approx(100 * (0.18 - 2 * 0.05) / 0.7)
    assert excess["plain"] == pytest.approx(100 * (0 - (0.4 - 8 * 0.05)) / 0.7)
    assert excess["tokens"] == 0.0
    assert set(excess) == {*CLASSES, "tokens"}


def test_an_a_that_always_drafts_prices_tokens_by_its_full_decode_steps():
    a = [step([2, 2], 0.1, accepted=[2, 2]), step([3], 0.1, accepted=[2])]  # 4 tokens in 0.1 s: 0.025 s each
    sa, sb, price, excess = split_pair(a, [step([1, 1], 0.1), step([1, 1], 0.1), step([1], 0.05)])
    assert price == pytest.approx(0.025)
    assert excess["plain"] == pytest.approx(100 * (0.2 - 4 * 0.025) / 0.2)
    assert sum(excess.values()) == pytest.approx(100 * (sb - sa) / sa)
    with pytest.raises(ValueError, match="no full decode step"):
        split_pair([step([1], 0.1, decode=False)], [step([1, 1], 0.1)])


def test_slices_skip_warm_up_and_join_runs_to_the_counts():
    warm = step([1], 0.2, ids=("warmup",))
    w1 = [step([1], 0.1, ids=("a",)), step([1], 0.1, ids=("a",))]
    w2 = [step([1], 0.1, ids=("b",))]
    w3 = [step([1], 0.1, ids=(x,)) for x in "cdefgh"]  # two waves that never overlap: one workload of 6
    w4 = [step([1], 0.1, ids=(x,)) for x in "ijklmn"]
    assert slices([warm, *w1, *w2], [2, 1]) == [w1, w2]
    assert slices([*w1, *w2], [1, 1]) == [w1, w2]  # a run may miss a workload's last step
    assert slices([*w3, *w4], [6, 6]) == [w3, w4]
    with pytest.raises(ValueError, match="3 steps where it counted 6"):
        slices([*w1, *w2], [6])
    with pytest.raises(ValueError, match="1 more workloads"):
        slices([warm, *w1, *w2], [2])


def test_main_pairs_each_b_trace_with_its_a_runs(tmp_path):
    def workload(side_steps, streams=2, category="qa", rnd=0):
        return {"streams": streams, "category": category, "round": rnd, "steps": side_steps}

    a1 = [step([1, 1], 0.1, ids=("a1",)) for _ in range(2)]
    a2 = [step([1, 1], 0.2, ids=("a2",)) for _ in range(2)]
    b1 = [step([2, 2], 0.1, accepted=[2, 2], ids=("b1",))]
    b2 = [step([1, 1], 0.2, ids=("b2",)) for _ in range(2)]
    traces = {"A": a1 + a2, "B-x": b1, "B-y": b2}
    for side, steps in traces.items():
        (tmp_path / f"t-{side}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    report = {
        "command": "python -m bench.lockstep --configs none,x,y",
        "sides": {"x": "B-x", "y": "B-y"},
        "workloads": [
            {"config": "x", "A": workload(2), "B": workload(1)},
            {"config": "y", "A": workload(2), "B": workload(2)},
        ],
    }
    (tmp_path / "lockstep.json").write_text(json.dumps(report))
    main([str(tmp_path), "--traces", str(tmp_path / "t-{side}.jsonl")])
    out = json.loads((tmp_path / "step_split.json").read_text())
    x, y = out["pairs"]
    assert (x["config"], x["a_seconds"], x["b_seconds"]) == ("x", pytest.approx(0.2), pytest.approx(0.1))
    assert x["excess"]["verify"] == pytest.approx(-50.0)
    assert (y["config"], y["price"]) == ("y", pytest.approx(0.1))
    assert "| x | 2 | overall |" in (tmp_path / "step_split.md").read_text()


def test_an_older_report_without_sides_names_them_from_its_command():
    from bench.step_split import b_sides

    old = {"command": "python -m bench.lockstep --configs none,eagle:1,eagle:auto --own-targets --target-args --x y"}
    assert b_sides(old) == {"eagle k=1": "B-eagle-k1", "eagle auto": "B-eagle-auto"}
    assert b_sides({"command": "python -m bench.lockstep --rounds 1"}) == {"eagle auto": "B-eagle"}  # the default
