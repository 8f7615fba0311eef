"""The step baton (``--step-baton``): two processes' steps never overlap and alternate while both have
work; a side alone or idle holds nobody up."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from target_service.step_baton import StepBaton


def _stepper(path: str, steps: int, step_s: float, out, start) -> None:
    baton = StepBaton(path)
    start.wait(timeout=30)  # every side has joined: forks in a process with gRPC threads start ~60 ms apart
    for _ in range(steps):
        baton.take()
        t0 = time.monotonic()
        time.sleep(step_s)
        out.put((path[-1], t0, time.monotonic()))
        baton.give()
    baton.close()


def _run(paths_steps: list[tuple[str, int]], step_s: float) -> list[tuple[str, float, float]]:
    ctx = mp.get_context("fork")
    out, start = ctx.Queue(), ctx.Barrier(len(paths_steps))
    procs = [ctx.Process(target=_stepper, args=(p, n, step_s, out, start)) for p, n in paths_steps]
    for p in procs:
        p.start()
    spans = [out.get(timeout=30) for _ in range(sum(n for _, n in paths_steps))]
    for p in procs:
        p.join(timeout=10)
    return sorted(spans, key=lambda s: s[1])


def test_steps_of_two_sides_never_overlap_and_alternate(tmp_path):
    spans = _run([(str(tmp_path / "a"), 12), (str(tmp_path / "b"), 12)], step_s=0.01)
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert start >= end  # one step at a time
    sides = [s for s, _, _ in spans]
    first_other = next(i for i, s in enumerate(sides) if s != sides[0])
    both = sides[first_other - 1 :]  # from when both had work: the side that started first ran alone before
    n = 2 * min(both.count("a"), both.count("b"))
    assert all(x != y for x, y in zip(both[:n], both[1:n])), sides  # strict turns while both have work


def test_a_side_alone_is_not_held_up(tmp_path):
    t0 = time.monotonic()
    spans = _run([(str(tmp_path / "a"), 20)], step_s=0.002)
    assert len(spans) == 20 and time.monotonic() - t0 < 5


def test_an_idle_partner_does_not_hold_the_other_up(tmp_path):
    idle = StepBaton(tmp_path / "b")
    idle.take()
    idle.give()  # then does nothing more
    t0 = time.monotonic()
    spans = _run([(str(tmp_path / "a"), 20)], step_s=0.002)
    assert len(spans) == 20 and time.monotonic() - t0 < 5
    idle.close()


def test_three_sides_take_turns_in_joining_order(tmp_path):
    spans = _run([(str(tmp_path / side), 8) for side in "abc"], step_s=0.01)
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert start >= end
    sides = [s for s, _, _ in spans]
    settled = sides[next(i for i in range(len(sides)) if len(set(sides[i : i + 3])) == 3) :]  # all three waiting
    n = 3 * min(settled.count(s) for s in "abc")
    assert all(len(set(settled[i : i + 3])) == 3 for i in range(0, n - 2)), sides  # every side once per three


def test_a_side_is_named_by_a_plain_word(tmp_path):
    for bad in ("state", "sides", "a b"):
        with pytest.raises(ValueError, match="names this target's side"):
            StepBaton(tmp_path / bad)


def test_two_engines_with_batons_never_run_forwards_at_once(tmp_path):
    import threading

    from target_service.sequence import FinishEvent
    from tests.helpers import make_engine, request, tiny_model

    model, spans, lock = tiny_model(), [], threading.Lock()
    engines = {side: make_engine(model, slots=2) for side in ("a", "b")}
    for side, engine in engines.items():
        engine.baton = StepBaton(tmp_path / side)
        forward = engine.runner.forward

        def timed(batch, side=side, forward=forward):
            t0 = time.monotonic()
            out = forward(batch)
            with lock:
                spans.append((side, t0, time.monotonic()))
            return out

        engine.runner.forward = timed
        engine.start()
    try:
        queues = [e.submit(request(f"{s}{i}", [1, 2, 3, i], 24)) for s, e in engines.items() for i in range(3)]
        for q in queues:
            while not isinstance(q.get(timeout=60), FinishEvent):
                pass
    finally:
        for engine in engines.values():
            engine.shutdown()
            engine.baton.close()
    spans.sort(key=lambda s: s[1])
    assert {s for s, _, _ in spans} == {"a", "b"}
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert start >= end  # one engine's forward at a time (without the batons they overlap)
    assert sum(x[0] != y[0] for x, y in zip(spans, spans[1:])) >= len(spans) // 3  # they took turns
