"""Engine on tiny random models: greedy equality, oracle drafts, stops inside accepted blocks, admission."""

from __future__ import annotations

import random

import pytest
import torch

from target_service.scheduler import QueueFullError, SchedulerLimits
from target_service.sequence import FinishReason
from tests.helpers import hf_greedy, make_engine, request, run_to_completion, tiny_model
from tests.oracle_drafter import OracleDrafter

NEW = 40


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def setup(request):
    model = tiny_model(request.param)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 17, 33, 8, 61, 3)]
    refs = {str(i): hf_greedy(model, p, NEW) for i, p in enumerate(prompts)}
    return model, prompts, refs


def _requests(prompts, max_tokens=NEW, **params):
    return [request(str(i), p, max_tokens, **params) for i, p in enumerate(prompts)]


def test_plain_greedy_equals_transformers_with_chunked_prefill_and_queueing(setup):
    model, prompts, refs = setup
    # 6 requests, 4 slots, 24-token steps: prompts are chunked, two requests wait for a slot
    engine = make_engine(model, slots=4, batch_tokens=24)
    out = run_to_completion(engine, _requests(prompts))
    for rid, ref in refs.items():
        assert out[rid][0] == ref
        assert out[rid][2].reason is FinishReason.LENGTH
        assert out[rid][2].stats.num_drafted == 0


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_oracle_with_random_corruption_is_identical_and_accepts_exactly_as_implied(setup, k):
    model, prompts, refs = setup
    rng = random.Random(k)
    corrupted = {(rid, pos) for rid in refs for pos in range(NEW) if rng.random() < 0.3}
    oracle = OracleDrafter(refs, lambda rid, pos: (rid, pos) in corrupted, vocab_size=256)
    engine = make_engine(model, slots=4, batch_tokens=4 * (1 + k) + 8, k=k, drafter=oracle)
    out = run_to_completion(engine, _requests(prompts))
    for rid, ref in refs.items():
        assert out[rid][0] == ref
    verified = [r for r in oracle.records if r.observed_num_accepted is not None]
    assert len(verified) == len(oracle.records) > 0
    for r in verified:
        assert r.observed_num_accepted == r.expected_num_accepted, r
    assert any(r.expected_num_accepted == len(r.drafts) + 1 for r in verified)  # all-accepted path taken
    assert any(r.expected_num_accepted == 1 for r in verified)  # accept-none path taken
    for rid in refs:  # the request's statistics agree with the oracle's log
        stats = out[rid][2].stats
        mine = [r for r in verified if r.request_id == rid]
        assert stats.num_accepted == sum(r.observed_num_accepted - 1 for r in mine)
        assert stats.num_drafted == sum(len(r.drafts) for r in mine)


def test_speculation_can_be_disabled_per_request(setup):
    model, prompts, refs = setup
    oracle = OracleDrafter(refs, lambda rid, pos: False, vocab_size=256)
    engine = make_engine(model, slots=4, batch_tokens=40, k=3, drafter=oracle)
    reqs = [request("0", prompts[0], NEW, num_draft_tokens=0), request("1", prompts[1], NEW)]
    out = run_to_completion(engine, reqs)
    assert out["0"][0] == refs["0"] and out["1"][0] == refs["1"]
    assert out["0"][2].stats.num_drafted == 0
    assert out["1"][2].stats.mean_acceptance_length == pytest.approx(4.0, abs=0.5)


def _perfect_oracle(refs):
    return OracleDrafter(refs, lambda rid, pos: False, vocab_size=256)


def test_max_tokens_is_exact_inside_an_accepted_block(setup):
    model, prompts, refs = setup
    for max_tokens in (1, 2, 6, 7):
        engine = make_engine(model, k=4, batch_tokens=40, drafter=_perfect_oracle(refs))
        out = run_to_completion(engine, [request("0", prompts[0], max_tokens)])
        assert out["0"][0] == refs["0"][:max_tokens]
        assert out["0"][2].reason is FinishReason.LENGTH
        assert out["0"][2].completion_tokens == max_tokens


def test_stop_token_inside_an_accepted_block_ends_before_it(setup):
    model, prompts, refs = setup
    ref = refs["1"]
    stop_at = next(i for i in range(6, NEW) if ref[i] not in ref[:i])
    engine = make_engine(model, k=4, batch_tokens=40, drafter=_perfect_oracle(refs))
    out = run_to_completion(engine, [request("1", prompts[1], NEW, stop_token_ids=(ref[stop_at],))])
    assert out["1"][0] == ref[:stop_at]
    assert out["1"][2].reason is FinishReason.STOP


def test_stop_string_inside_an_accepted_block_cuts_the_text(setup):
    model, prompts, refs = setup
    ref = refs["2"]
    full = "".join(f"<{t}>" for t in ref)
    stop = f"<{ref[9]}><{ref[10]}>"
    engine = make_engine(model, k=4, batch_tokens=40, drafter=_perfect_oracle(refs))
    ids, text, finish = run_to_completion(engine, [request("2", prompts[2], NEW, stop=(stop,))])["2"]
    assert text == full[: full.find(stop)]
    assert finish.reason is FinishReason.STOP
    assert ids == ref[: len(ids)] and len(ids) <= 11


def test_abort_frees_the_slot_and_the_queue_is_bounded(setup):
    model, prompts, _ = setup
    engine = make_engine(model, slots=1, batch_tokens=8, queue=1)
    q0 = engine.submit(request("a", prompts[0], NEW))
    engine.step()  # "a" takes the only slot
    engine.submit(request("b", prompts[1], 5))  # waits
    with pytest.raises(QueueFullError):
        engine.submit(request("c", prompts[2], 5))
    engine.abort("a")
    while engine.step():
        pass
    events = []
    while not q0.empty():
        events.append(q0.get_nowait())
    assert events[-1].reason is FinishReason.ABORTED
    assert engine.scheduler.free_slots == [0] and not engine.scheduler.has_work()


def test_limits_reject_a_budget_that_cannot_hold_every_verification_block():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        SchedulerLimits(max_slots=8, max_seq_len=128, max_batch_tokens=16, max_queue=4)


def test_an_idle_server_queues_up_to_its_free_slots_plus_max_queue(setup):
    model, prompts, _ = setup
    engine = make_engine(model, slots=4, batch_tokens=64, queue=1)
    for i in range(5):  # 4 free slots + 1 queue place, all before the engine's next step
        engine.submit(request(str(i), prompts[i], 3))
    with pytest.raises(QueueFullError, match="max_queue=1"):
        engine.submit(request("5", prompts[5], 3))


class _BrokenDrafter:
    """A drafter with a bug: raises on every other step, and answers short on the others."""

    def __init__(self):
        self.calls = 0

    def propose(self, step):
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("drafter bug")
        return [[1]] * (len(step.request_ids) - 1)  # one answer short

    def release(self, request_ids):
        return None

    def status(self):
        return None  # in this process: no link


def test_a_drafter_fault_costs_only_drafts(setup):
    model, prompts, refs = setup
    drafter = _BrokenDrafter()
    engine = make_engine(model, slots=4, batch_tokens=40, k=2, drafter=drafter)
    out = run_to_completion(engine, _requests(prompts))
    assert drafter.calls > 10
    for rid, ref in refs.items():
        assert out[rid][0] == ref and out[rid][2].reason is FinishReason.LENGTH
        assert out[rid][2].stats.num_drafted == 0  # no answer was used: every one was faulty


def test_an_abort_during_submit_cannot_revive_the_request(setup):
    import threading

    model, prompts, _ = setup
    engine = make_engine(model, slots=2, batch_tokens=16)
    in_add, gate = threading.Event(), threading.Event()
    add = engine.scheduler.add

    def slow_add(seq):  # the window between publishing the request and queueing it
        in_add.set()
        gate.wait(5)
        add(seq)

    engine.scheduler.add = slow_add
    holder = {}
    submitter = threading.Thread(target=lambda: holder.update(q=engine.submit(request("a", prompts[0], 5))))
    submitter.start()
    assert in_add.wait(5)
    engine.abort("a")
    aborter = threading.Thread(target=engine._apply_aborts)
    aborter.start()
    aborter.join(0.3)
    assert aborter.is_alive()  # the abort waits for the submit to finish
    gate.set()
    submitter.join(5)
    aborter.join(5)
    assert holder["q"].get_nowait().reason is FinishReason.ABORTED
    assert not engine.step() and not engine.scheduler.has_work()  # nothing revived, nothing raises


def test_an_abort_by_id_never_hits_a_later_request_that_reuses_the_id(setup):
    model, prompts, _ = setup
    engine = make_engine(model, slots=2, batch_tokens=16)
    first = engine.submit(request("x", prompts[0], 3))
    engine.step()  # the first "x" runs
    engine.abort("x")  # queued while the first "x" is in flight
    engine._finish(engine._live["x"], FinishReason.LENGTH)  # the first "x" ends before the abort is applied
    second = engine.submit(request("x", prompts[1], 3))
    while engine.step():
        pass
    assert _drain(first)[-1].reason is FinishReason.LENGTH
    last = _drain(second)[-1]
    assert last.reason is FinishReason.LENGTH and last.completion_tokens == 3
    engine.abort("nobody")  # not in flight: nothing is queued
    assert not engine.step()


def _drain(events) -> list:
    out = []
    while not events.empty():
        out.append(events.get_nowait())
    return out
