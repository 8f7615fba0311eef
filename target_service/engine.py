"""The target engine: one ``step()`` = schedule, forward, accept, update, draft."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from tandem_core.kv_cache import runs_dense
from tandem_core.limits import MAX_DRAFT_TOKENS
from target_service.acceptance import AcceptanceDefaults, AcceptanceResult, VerifyBlock, accept_batch, acceptor_for
from target_service.detokenizer import IncrementalDetokenizer
from target_service.draft_policy import DraftPolicy, StepShape
from target_service.drafter import Drafter, NullDrafter
from target_service.model_runner import ForwardBatch, ForwardOutput, ModelRunner
from target_service.profile import StepProfile, StepRecord, StepTrace
from target_service.scheduler import ScheduledSeq, Scheduler, SchedulerLimits
from target_service.sequence import (
    EngineRequest,
    FinishEvent,
    FinishReason,
    SeqStatus,
    Sequence,
    TokenEvent,
)
from target_service.step_baton import StepBaton
from target_service.step_output import StepOutput

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineLimits:
    scheduler: SchedulerLimits
    num_draft_tokens: int  # server k (0..MAX_DRAFT_TOKENS): the default and the most a request may use

    def __post_init__(self) -> None:
        if not 0 <= self.num_draft_tokens <= min(MAX_DRAFT_TOKENS, self.scheduler.max_draft_tokens):
            raise ValueError(
                f"num_draft_tokens={self.num_draft_tokens} must be in 0..{self.scheduler.max_draft_tokens}"
            )


def _nothing() -> None:
    pass


class DuplicateRequestError(ValueError):
    """A request with this id is already in flight."""


class EventSink(Protocol):
    """Where a request's events go: a ``queue.Queue``, or a sink that holds them until ``Engine.on_events``."""

    def put(self, event: TokenEvent | FinishEvent) -> None: ...


class _Live:
    """Engine-thread bookkeeping of one accepted request."""

    def __init__(self, seq: Sequence, events: EventSink, detok: IncrementalDetokenizer):
        self.seq = seq
        self.events = events
        self.detok = detok


class Engine:
    """Thread-safe front (submit/abort) over a single-threaded step loop."""

    def __init__(
        self,
        runner: ModelRunner,
        tokenizer,
        limits: EngineLimits,
        drafter: Drafter | None = None,
        acceptance: AcceptanceDefaults | None = None,
        policy: DraftPolicy | None = None,
        trace: StepTrace | None = None,
    ):
        self.runner = runner
        self.policy = policy or DraftPolicy(auto=False)  # fixed k unless told otherwise
        self.acceptance = acceptance or AcceptanceDefaults()
        self.tokenizer = tokenizer
        self.limits = limits
        self.drafter = drafter or NullDrafter()
        self.scheduler = Scheduler(limits.scheduler)
        self.eos_ids = _eos_ids(runner.model, tokenizer)
        self._live: dict[str, _Live] = {}
        self._submit_lock = threading.Lock()
        self.profile = StepProfile()
        self.trace = trace  # every step's shape, timings and choice, one JSON line each (--step-trace)
        self._released: list[str] = []  # finished since the drafter last heard
        self._aborts: queue.SimpleQueue[tuple[str, EventSink, str]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_draft: Callable[[float], None] | None = None  # gets each drafting round trip, in seconds
        self.on_events: Callable[[], None] = _nothing  # called once events were put (a step's, aborts'): flush
        self._expected: list[float] = []  # [scheduled] the policy's expected tokens of each next step (traced)
        self.baton: StepBaton | None = None  # benchmarking only: steps take turns with other targets' (--step-baton)

    # ---- thread-safe API -------------------------------------------------------------------
    def submit(self, request: EngineRequest, events: EventSink | None = None) -> EventSink:
        """Queue a validated request; its TokenEvents and one FinishEvent go to ``events`` (a new
        ``queue.Queue`` if None), which is returned.

        Raises QueueFullError when the waiting queue is full, DuplicateRequestError on a reused id.
        """
        with self._submit_lock:  # check and insert as one step: two submits of one id cannot both pass
            return self._submit(request, queue.Queue() if events is None else events)

    def _submit(self, request: EngineRequest, events: EventSink) -> EventSink:
        if request.request_id in self._live:
            raise DuplicateRequestError(f"request_id {request.request_id!r} is already in flight")
        k = self.limits.num_draft_tokens  # the server's k is also the most a request may ask for
        if request.params.num_draft_tokens is not None:
            k = min(k, request.params.num_draft_tokens)
        acceptor = acceptor_for(request.params, self.acceptance, request.prompt_ids)
        seq = Sequence(request=request, num_draft_tokens=k, acceptor=acceptor)
        seq.stats.mode = acceptor.label
        live = _Live(seq, events, IncrementalDetokenizer(self.tokenizer, request.params.stop))
        self._live[request.request_id] = live
        try:
            self.scheduler.add(seq)
        except Exception:
            self._live.pop(request.request_id, None)
            raise
        self._wake.set()
        return live.events

    def is_live(self, request_id: str) -> bool:
        return request_id in self._live

    def abort(self, request_id: str, message: str = "aborted by the client", events: EventSink | None = None) -> None:
        """Abort the request in flight under this id now (or the one delivering to ``events``), never a later
        request that reuses the id before the engine thread gets to it."""
        if events is None:
            live = self._live.get(request_id)
            if live is None:
                return
            events = live.events
        self._aborts.put((request_id, events, message))
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=30)
        for live in list(self._live.values()):
            self._finish(live, FinishReason.ABORTED, "server shutting down")
        self.on_events()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self._take_turn()
            except Exception:  # a bug must not hang clients: fail everything in flight, keep serving
                log.exception("engine step failed; aborting in-flight requests")
                for live in list(self._live.values()):
                    self._finish(live, FinishReason.ABORTED, "internal engine error")
                self.on_events()
                worked = False
            if not worked:
                self._wake.wait(timeout=0.5)
                self._wake.clear()

    def _take_turn(self) -> bool:
        """One step, holding the baton when paired with another target (``--step-baton``)."""
        if self.baton is None:
            return self.step()
        self.baton.take()
        try:
            return self.step()
        finally:
            self.baton.give()

    # ---- the step ------------------------------------------------------------------------------
    def step(self) -> bool:
        """Run one engine step; False when there was nothing to do."""
        try:
            return self._step()
        finally:  # aborts' final events, and any held when a step fails
            self.on_events()

    def _step(self) -> bool:
        with self.profile.step() as timer:
            self._apply_aborts()
            self._release_finished()  # before schedule(): a slot freed now may be reused by it
            scheduled = self.scheduler.schedule()
            if not scheduled:
                timer.cancel()
                return False
            with timer.phase("forward"):
                batch = _forward_batch(scheduled)
                out = self.runner.forward(batch)
            decode = not any(s.is_context for s in scheduled)
            predicted = 0.0
            if decode:  # decode steps price drafts; prefill chunks do not
                shape = StepShape.of(batch.starts, batch.q_lens, out.split_attention)
                if self.trace is not None:  # the price before this step's timing moves it
                    predicted = self.policy.step_cost.predict(shape)
                self.policy.observe_step(shape, timer.seconds["forward"])
            result = self._accept(scheduled, out)
            self.scheduler.update_from_output(scheduled, result.num_accepted.tolist())
            self._emit_and_record(scheduled, result)
            self.on_events()  # tokens leave before drafting, not after
            step = self._step_output(scheduled, batch, out, result)
            with timer.phase("draft"):
                self._draft(scheduled, step)
            self._observe_draft(step, timer.seconds["draft"])
            if decode:
                self.policy.observe_other(timer.other())
            if self.trace is not None:
                self._trace(batch, out, decode, predicted, timer, step)
        return True

    def _trace(self, batch: ForwardBatch, out: ForwardOutput, decode: bool, predicted: float, timer, step) -> None:
        rows = getattr(self.drafter, "caught_up_rows", 0)
        record = StepRecord.of(batch, out.split_attention, decode, predicted, timer, step, rows, self._expected)
        self.trace.write(record)

    def _accept(self, scheduled: list[ScheduledSeq], out: ForwardOutput) -> AcceptanceResult:
        """Verify every sequence's block; prefill chunks that sample nothing get num_accepted 0."""
        blocks = [
            VerifyBlock(s.seq.acceptor, list(s.input_ids[1 : s.num_drafts + 1])) if s.samples else None
            for s in scheduled
        ]
        return accept_batch(out.logits, blocks)

    def _emit_and_record(self, scheduled: list[ScheduledSeq], result: AcceptanceResult) -> None:
        """Record each verification and hand the accepted tokens to their requests (stops apply here)."""
        for i, s in enumerate(scheduled):
            n = int(result.num_accepted[i])
            if not s.is_context:
                self._record_verification(s.seq, s.num_drafts, n - 1)
            if n and s.seq.status is SeqStatus.RUNNING:
                self._emit(self._live[s.seq.request_id], result.accepted_tokens[i, :n].tolist())

    def _step_output(
        self, scheduled: list[ScheduledSeq], batch: ForwardBatch, out: ForwardOutput, result: AcceptanceResult
    ) -> StepOutput:
        return StepOutput(
            request_ids=[s.seq.request_id for s in scheduled],
            slots=list(batch.slots),
            is_context=[s.is_context for s in scheduled],
            q_lens=list(batch.q_lens),
            input_ids=batch.input_ids,
            positions=torch.cat([torch.arange(st, st + q) for st, q in zip(batch.starts, batch.q_lens, strict=True)]),
            hidden_states=out.hidden_states,
            accepted_tokens=result.accepted_tokens,
            num_accepted=result.num_accepted.tolist(),
            num_output_tokens=[len(s.seq.output_ids) for s in scheduled],
            num_draft_tokens=self._choose_drafts(scheduled),
            next_prompt_token=[_next_prompt_token(s) for s in scheduled],
            finished=[s.seq.status is SeqStatus.FINISHED for s in scheduled],
        )

    def _record_verification(self, seq: Sequence, drafted: int, accepted: int) -> None:
        seq.stats.record(drafted, accepted)
        self.policy.observe_verification(seq.request_id, drafted, accepted)
        if drafted == 0 and seq.drafts_cap > 0:
            if seq.drafts_asked == 0:
                seq.stats.skipped_by_policy += 1
            else:
                seq.stats.skipped_no_drafts += 1

    def _choose_drafts(self, scheduled: list[ScheduledSeq]) -> list[int]:
        """Drafts each scheduled sequence asks for its next step (0 for prefill and finished ones)."""
        drafting = [i for i, s in enumerate(scheduled) if s.seq.status is SeqStatus.RUNNING and not s.seq.in_prefill]
        caps = [scheduled[i].seq.useful_drafts() for i in drafting]
        modes = [scheduled[i].seq.request.params.draft_length for i in drafting]
        auto = [m == "auto" or (m == "" and self.policy.auto) for m in modes]
        contexts = [scheduled[i].start + len(scheduled[i].input_ids) for i in drafting]  # about, next step
        slots = [scheduled[i].seq.slot for i in drafting]
        # one batched attention call if all verify as many drafts; never beside a prefill chunk. The chunk's
        # own cost is not the drafts' to pay for, being work done anyway: priced into the step (tried), it
        # made tokens look dear and drafts cheap, and at 8 streams spent 1.5-3.4x the drafting time in
        # prefill steps on tokens worth only a sequence's share of a later step
        dense_ok = bool(drafting) and runs_dense(slots, contexts, [1] * len(slots))
        dense_ok = dense_ok and not self.scheduler.will_prefill(len(drafting))
        ids = [scheduled[i].seq.request_id for i in drafting]
        remaining = [scheduled[i].seq.request.params.max_tokens - len(scheduled[i].seq.output_ids) for i in drafting]
        joining = self.scheduler.joining() if any(auto) else []
        choice = self.policy.choose(ids, caps, auto, contexts, dense_ok=dense_ok, remaining=remaining, joining=joining)
        wanted, self._expected = [0] * len(scheduled), [0.0] * len(scheduled)
        for j, (i, cap, n) in enumerate(zip(drafting, caps, choice.drafts)):
            scheduled[i].seq.drafts_cap, scheduled[i].seq.drafts_asked = cap, n
            wanted[i] = n
            self._expected[i] = choice.expected[j] if choice.expected else 0.0
        return wanted

    def _emit(self, live: _Live, tokens: list[int]) -> None:
        """Append an accepted block token by token, stopping exactly where a stop condition hits."""
        seq, params = live.seq, live.seq.request.params
        emitted: list[int] = []
        reason = None
        for t in tokens:
            if t in params.stop_token_ids or (t in self.eos_ids and not params.ignore_eos):
                reason = FinishReason.STOP
                break
            seq.output_ids.append(t)
            emitted.append(t)
            if live.detok.add(t):
                reason = FinishReason.STOP
                break
            if len(seq.output_ids) >= params.max_tokens:
                reason = FinishReason.LENGTH
                break
        if emitted:
            live.events.put(TokenEvent(tuple(emitted), live.detok.take(final=reason is not None)))
        if reason is not None:
            self._finish(live, reason)

    def _draft(self, scheduled: list[ScheduledSeq], step: StepOutput) -> None:
        try:
            proposals = self.drafter.propose(step)
            checked = list(zip(scheduled, step.num_draft_tokens, proposals, strict=True))
        except Exception:  # a drafter fault costs this step's drafts, never the requests
            log.exception("drafter failed; this step goes without drafts")
            return
        vocab = self.runner.vocab_size
        for s, want, drafts in checked:
            if s.seq.status is not SeqStatus.RUNNING or want == 0:
                continue
            drafts = list(drafts[:want])
            if not drafts:
                self.policy.unanswered(s.seq.request_id)
            elif all(0 <= t < vocab for t in drafts):
                s.seq.draft_ids = drafts
            else:
                log.warning("drafter proposed ids outside the vocabulary for %s; ignored", s.seq.request_id)

    def _observe_draft(self, step: StepOutput, seconds: float) -> None:
        if not isinstance(self.drafter, NullDrafter):
            # the price of drafting and of catching up after a pause, not of recording a prefill chunk
            if not any(step.is_context):
                rows, depth = getattr(self.drafter, "caught_up_rows", 0), max(step.num_draft_tokens)
                self.policy.observe_draft(depth, seconds, rows, self._drafter_session() if depth else 0)
            if self.on_draft is not None:
                self.on_draft(seconds)

    def _drafter_session(self) -> int:
        """Which session of the drafter link answered (its first round trips are cold); 0 in process."""
        status = self.drafter.status()
        return status.attaches if status is not None else 0

    def _release_finished(self) -> None:
        """Tell the drafter which requests ended (it saw their last step: they ended in an earlier step)."""
        if self._released:
            self.drafter.release(self._released)
            self._released = []

    # ---- finishing -----------------------------------------------------------------------------
    def _apply_aborts(self) -> None:
        while True:
            try:
                request_id, events, message = self._aborts.get_nowait()
            except queue.Empty:
                return
            with self._submit_lock:  # a submit in progress completes first (else its add would revive it)
                live = self._live.get(request_id)
                if live is not None and live.events is events:
                    self.scheduler.remove_waiting(request_id)
                    self._finish(live, FinishReason.ABORTED, message)

    def _finish(self, live: _Live, reason: FinishReason, message: str = "") -> None:
        seq = live.seq
        if self._live.pop(seq.request_id, None) is None:
            return
        self.scheduler.finish(seq)
        self.policy.forget(seq.request_id)
        self._released.append(seq.request_id)
        live.events.put(
            FinishEvent(
                reason=reason,
                prompt_tokens=len(seq.request.prompt_ids),
                completion_tokens=len(seq.output_ids),
                stats=seq.stats,
                text=live.detok.take(final=True),
                message=message,
            )
        )


def _forward_batch(scheduled: list[ScheduledSeq]) -> ForwardBatch:
    ids: list[int] = []
    rows: list[int] = []
    for s in scheduled:
        if s.samples:
            first = len(ids) + (len(s.input_ids) - 1 if s.is_context else 0)
            rows.extend(range(first, len(ids) + len(s.input_ids)))
        ids.extend(s.input_ids)
    return ForwardBatch(
        input_ids=torch.tensor(ids, dtype=torch.long),
        slots=[s.seq.slot for s in scheduled],
        starts=[s.start for s in scheduled],
        q_lens=[len(s.input_ids) for s in scheduled],
        logit_rows=torch.tensor(rows, dtype=torch.long),
    )


def _next_prompt_token(s: ScheduledSeq) -> int:
    """For a prefill chunk that is not the last: the prompt token right after it (else -1)."""
    if not s.is_context or s.samples:
        return -1
    return s.seq.request.prompt_ids[s.start + len(s.input_ids)]


def _eos_ids(model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)
