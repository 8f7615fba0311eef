"""Target-side pairs and the drafter's bookkeeping across real gRPC and a real shm segment.

The reference's example (prompt ABCD, k=3) is replayed as target StepOutputs: context, then
accepted FGX, then accept-none (K). The draft service runs in this process on a loopback port so
its worker's trace can be read; the rows go through /dev/shm and the tokens through the stream.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch

from bench.procs import free_port
from draft_service.checkpoint import validation_prior
from draft_service.mtp_module import MTPHeads
from draft_service.mtp_worker import MTPMode, Trace
from draft_service.server import DraftServicer, build_draft_server
from target_service.draft_history import DraftHistory
from target_service.draft_pairs import SequencePairs, draft_pairs
from target_service.draft_policy import DraftPolicy
from target_service.grpc_drafter import GrpcDrafter, GrpcDrafterConfig
from target_service.step_output import StepOutput
from tests.helpers import tiny_model

A, B, C, D, E, F, G, H, X, N, O, P, K = 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22  # noqa: E741
HIDDEN = 64


def rows(*names: str) -> torch.Tensor:
    """H_x rows: row value = letter code, so a row read back names its source."""
    return torch.stack([torch.full((HIDDEN,), float(ord(n))) for n in names])


def step(context: bool, inputs, positions, hidden, accepted, num_accepted, wanted, next_prompt=-1) -> StepOutput:
    return StepOutput(
        request_ids=["r"],
        slots=[1],
        is_context=[context],
        q_lens=[len(inputs)],
        input_ids=torch.tensor(inputs),
        positions=torch.tensor(positions),
        hidden_states=hidden,
        accepted_tokens=torch.tensor([accepted]),
        num_accepted=[num_accepted],
        num_output_tokens=[0],
        num_draft_tokens=[wanted],
        next_prompt_token=[next_prompt],
        finished=[False],
    )


CONTEXT = step(True, [A, B, C, D], [0, 1, 2, 3], rows("A", "B", "C", "D"), [E, 0, 0, 0], 1, 3)
GEN1 = step(False, [E, F, G, H], [4, 5, 6, 7], rows("E", "F", "G", "H"), [F, G, X, 0], 3, 3)
GEN2 = step(False, [X, N, O, P], [7, 8, 9, 10], rows("X", "N", "O", "P"), [K, 0, 0, 0], 1, 3)


def test_pairs_follow_the_reference_example():
    (ctx,) = draft_pairs(CONTEXT)
    assert (ctx.start, list(ctx.rows), ctx.tokens) == (0, [0, 1, 2, 3], [B, C, D, E])
    (g1,) = draft_pairs(GEN1)
    assert (g1.start, list(g1.rows), g1.tokens) == (4, [0, 1, 2], [F, G, X])  # H_H (rejected) never sent
    (g2,) = draft_pairs(GEN2)
    assert (g2.start, list(g2.rows), g2.tokens) == (7, [0], [K])


def test_a_chunked_prefill_pairs_its_last_row_with_the_next_prompt_token():
    chunk = step(True, [A, B], [0, 1], rows("A", "B"), [0, 0, 0, 0], 0, 0, next_prompt=C)
    (p,) = draft_pairs(chunk)
    assert (p.start, p.tokens) == (0, [B, C])


def test_the_history_keeps_each_sequences_pairs_in_its_slot_in_one_copy():
    """Two sequences of one step land in their own slots; a rewind overwrites the tail; a gap disowns."""
    history = DraftHistory(max_slots=3, max_seq_len=8, hidden_size=HIDDEN, dtype=torch.float32)
    first = SequencePairs(0, 0, range(0, 3), [B, C, D], 0)
    second = SequencePairs(1, 0, range(3, 5), [N, O], 0)
    history.record([2, 0], ["r", "s"], [first, second], rows("A", "B", "C", "X", "N"))
    tokens, span = history.span(2, 0, 3)
    assert tokens == [B, C, D] and torch.equal(span, rows("A", "B", "C"))
    tokens, span = history.span(0, 0, 2)
    assert tokens == [N, O] and torch.equal(span, rows("X", "N"))
    history.record([2], ["r"], [SequencePairs(0, 2, range(1, 3), [E, F], 0)], rows("Z", "G", "H"))  # rewind to 2
    tokens, span = history.span(2, 0, 4)
    assert tokens == [B, C, E, F] and torch.equal(span, rows("A", "B", "G", "H"))
    history.record([0], ["s"], [SequencePairs(0, 5, range(0, 1), [P], 0)], rows("P"))  # positions 2-4 never came
    assert not history.holds(0, "s") and history.holds(2, "r")
    with pytest.raises(ValueError, match="position 9"):
        history.record([1], ["t"], [SequencePairs(0, 0, range(0, 9), [A] * 9, 0)], rows(*"ABCDEFGHI"))


@pytest.fixture(params=[MTPMode.VANILLA, MTPMode.EAGLE], ids=["vanilla", "eagle"])
def link(request):
    torch.manual_seed(0)
    model = tiny_model("llama")
    heads = MTPHeads(model, 3 if request.param is MTPMode.VANILLA else 1).eval()
    servicer = DraftServicer(heads, request.param, 3, max_slots=4, max_seq_len=64)
    port = free_port()
    server = build_draft_server(servicer, "127.0.0.1", port, 1 << 24, token="")
    server.start()
    config = GrpcDrafterConfig(f"127.0.0.1:{port}", 3, mode=request.param.value, transport="shm", deadline_s=10)
    config = dataclasses.replace(config, min_deadline_s=10)  # a loaded test machine must not make steps late
    drafter = GrpcDrafter(
        config, vocab_size=256, hidden_size=HIDDEN, dtype=torch.float32, max_slots=4, max_seq_len=64, rows_per_step=16
    )
    deadline = time.monotonic() + 10
    while not drafter.attached:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield servicer, drafter, request.param
    drafter.close()
    server.stop(0)


def test_reference_example_through_grpc_and_shm(link):
    servicer, drafter, mode = link
    worker = servicer._session.worker
    expected = [  # (start, tokens, hidden rows, kv length after) of the real pairs at each step
        (CONTEXT, [0, 1, 2, 3], [B, C, D, E], "ABCD", 4),
        (GEN1, [4, 5, 6], [F, G, X], "EFG", 7),
        (GEN2, [7], [K], "X", 8),
    ]
    for out, positions, tokens, names, kv_len in expected:
        worker.trace = Trace()
        (drafts,) = drafter.propose(out)
        assert len(drafts) == 3 and all(0 <= t < 256 for t in drafts)
        real = [c for c in worker.trace.calls if c.positions[0] == positions[0]]
        assert len(real) == (3 if mode is MTPMode.VANILLA else 1)  # every vanilla module sees the pairs
        for call in real:
            assert call.tokens[: len(tokens)] == tokens and call.positions[: len(tokens)] == positions
            assert torch.equal(call.hidden[: len(tokens)], rows(*names))
        assert worker.kv_len[1] == kv_len
    assert drafter.stats.steps == 3 and drafter.stats.failures == 0
    assert drafter.stats.max_request_bytes < HIDDEN * 4  # not even one row's worth of bytes on the wire


def test_garbage_answers_are_refused_and_the_drafter_is_reattached(link):
    servicer, drafter, _ = link
    real_step = servicer._step

    def wrong_slot(request):
        response = real_step(request)
        return dataclasses.replace(response, drafts=[(slot + 1, tokens) for slot, tokens in response.drafts])

    servicer._step = wrong_slot
    assert drafter.propose(CONTEXT) == [[]]
    assert drafter.stats.failures == 1 and "wrong slot" in drafter.stats.last_failure
    servicer._step = real_step
    deadline = time.monotonic() + 10
    while not drafter.attached:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    drafts = drafter.propose(CONTEXT)
    assert len(drafts[0]) == 3, drafter.stats  # a fresh session sees the request from its start


def test_release_and_reset_forget_slots_and_refuse_stale_sessions(link):
    import grpc

    from protos.mtp.v1 import draft_service_pb2 as dpb

    servicer, drafter, _ = link
    drafter.propose(CONTEXT)
    worker, session_id = servicer._session.worker, servicer._session.session_id
    assert worker.kv_len[1] == 4
    stub = drafter._stub
    stub.Release(dpb.ReleaseRequest(session_id=session_id, slots=[1, 99]), timeout=10)
    assert worker.kv_len[1] == 0
    worker.kv_len[2] = 5
    stub.Reset(dpb.ResetRequest(session_id=session_id), timeout=10)
    assert worker.kv_len == [0, 0, 0, 0]
    with pytest.raises(grpc.RpcError) as err:
        stub.Reset(dpb.ResetRequest(session_id="stale"), timeout=10)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_an_abort_whose_slot_is_reused_in_the_same_step_keeps_everyone_speculating(link):
    from target_service.sequence import FinishReason
    from tests.helpers import make_engine, request

    _, drafter, _ = link
    engine = make_engine(tiny_model("llama"), slots=2, max_seq_len=64, batch_tokens=32, k=3, drafter=drafter)
    queues = {rid: engine.submit(request(rid, [1, 2, 3, 4, 5], 40)) for rid in ("a", "b", "c")}  # c waits
    for _ in range(4):
        engine.step()
    engine.abort("a")  # next step: a's slot goes to c, whose first chunk the drafter sees in that same step
    while engine.step():
        pass
    finals = {}
    for rid, q in queues.items():
        while not q.empty():
            finals[rid] = q.get_nowait()
    assert finals["a"].reason is FinishReason.ABORTED
    assert drafter.stats.failures == 0, drafter.stats.last_failure
    for rid in ("b", "c"):  # drafts came on every step that asked for them
        stats = finals[rid].stats
        assert stats.skipped_no_drafts == 0 and stats.num_drafted > 0, (rid, stats)


def test_a_late_step_skips_its_drafts_only_and_the_session_lives_on(link):
    servicer, drafter, _ = link
    drafter.config = dataclasses.replace(drafter.config, min_deadline_s=0.3)
    real_step = servicer._step
    drafter.propose(CONTEXT)  # measured round trip: milliseconds, so the deadline shrinks to its floor
    assert drafter.deadline_s() < 0.5

    def slow(request):
        time.sleep(1.0)
        return real_step(request)

    servicer._step = slow
    assert drafter.propose(GEN1) == [[]]  # late: no drafts for this step
    servicer._step = real_step
    assert drafter.stats.late_steps == 1 and drafter.stats.failures == 0 and drafter.attached
    (drafts,) = drafter.propose(GEN2)  # the late answer is skipped, this step's drafts arrive
    assert len(drafts) == 3 and drafter.stats.failures == 0


def test_a_new_session_replays_a_running_sequence_in_chunks_and_drafts_for_it_again(link):
    """After a drafter fault the next session meets the sequence mid-way: its past goes over from the
    target's history, as many rows per step as the ring has left, and drafts resume once all of it is held."""
    servicer, drafter, _ = link
    drafter.propose(CONTEXT)
    drafter.propose(GEN1)
    drafter._fail(drafter._session, "test: drop the session")
    deadline = time.monotonic() + 10
    while not drafter.attached:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    drafter.rows_per_step = 5  # the 8 pairs held so far cannot go over in one step
    worker = servicer._session.worker
    assert worker.kv_len[1] == 0
    assert drafter.propose(GEN2) == [[]]  # positions 0..4 replayed, no drafts yet
    assert worker.kv_len[1] == 5
    gen3 = step(False, [K, N, O, P], [8, 9, 10, 11], rows("K", "N", "O", "P"), [X, 0, 0, 0], 1, 3)
    worker.trace = Trace()
    (drafts,) = drafter.propose(gen3)
    assert len(drafts) == 3  # caught up: positions 5..8 went over and the drafter drafts again
    assert worker.kv_len[1] == 9
    replayed = [c for c in worker.trace.calls if c.module == 0 and 5 in c.positions][0]  # vanilla: from 0
    at = replayed.positions.index(5)
    assert replayed.tokens[at : at + 4] == [G, X, K, X] and replayed.positions[at : at + 4] == [5, 6, 7, 8]
    assert torch.equal(replayed.hidden[at : at + 4], rows("F", "G", "X", "K"))  # the rows the target produced then
    assert drafter.stats.replayed_rows == 9


def test_a_step_that_asks_no_drafts_costs_no_round_trip_and_its_pairs_go_over_later(link):
    """Pairs of a sequence that asks for 0 drafts wait in the target's history; the next step that asks
    sends them first, so the drafter's cache ends exactly as if every step had gone over."""
    servicer, drafter, mode = link
    worker = servicer._session.worker
    drafter.propose(CONTEXT)
    steps_before = drafter.stats.steps
    quiet = dataclasses.replace(GEN1, num_draft_tokens=[0])
    assert drafter.propose(quiet) == [[]]
    assert drafter.stats.steps == steps_before and drafter.stats.deferred_rows == 3  # nothing crossed the link
    assert worker.kv_len[1] == 4
    worker.trace = Trace()
    (drafts,) = drafter.propose(GEN2)
    assert len(drafts) == 3 and worker.kv_len[1] == 8
    real = [c for c in worker.trace.calls if c.positions[0] == 4]
    assert len(real) == (3 if mode is MTPMode.VANILLA else 1)
    for call in real:  # GEN1's deferred pairs, then GEN2's, in one call
        assert call.tokens[:4] == [F, G, X, K] and call.positions[:4] == [4, 5, 6, 7]
        assert torch.equal(call.hidden[:4], rows("E", "F", "G", "X"))


def test_the_heads_validation_figures_reach_the_target_policy_at_attach(tmp_path):
    """mtp.json's accept_prefix -> conditional rates -> AttachResponse -> the target's policy prior."""
    (tmp_path / "mtp.json").write_text(json.dumps({"mode": "eagle", "validation": {"accept_prefix": [0.5, 0.3, 0.15]}}))
    prior = validation_prior(tmp_path, "eagle")
    assert prior == pytest.approx((0.5, 0.6, 0.5)) and validation_prior(tmp_path, "vanilla") == ()
    heads = MTPHeads(tiny_model("llama"), 1).eval()
    servicer = DraftServicer(heads, MTPMode.EAGLE, 3, max_slots=4, max_seq_len=64, acceptance_prior=prior)
    port = free_port()
    server = build_draft_server(servicer, "127.0.0.1", port, 1 << 24, token="")
    server.start()
    policy = DraftPolicy(auto=True)
    config = GrpcDrafterConfig(f"127.0.0.1:{port}", 3, mode="eagle", transport="shm", deadline_s=10)
    drafter = GrpcDrafter(config, 256, HIDDEN, torch.float32, 4, 64, 16, on_prior=policy.use_prior)
    try:
        deadline = time.monotonic() + 10
        while policy.overall.prior == [0.5] * 4:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert policy.overall.prior == pytest.approx([0.5, 0.6, 0.5, 0.5])  # the last rate fills deeper positions
    finally:
        drafter.close()
        server.stop(0)
