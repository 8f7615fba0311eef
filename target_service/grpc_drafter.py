"""The target's side of the draft service: a Drafter that talks mtp.v1.DraftService.

Per step it stages the needed hidden rows in the shared ring, sends slot ids, positions and tokens
on a long-lived bidirectional stream, and waits for the drafts up to a deadline. Whenever the
drafter is absent, slow, or answers garbage, that step runs without drafts and a background
thread keeps re-attaching. Every pair the target produces is also kept per slot (draft_history.py):
a session that meets a sequence it has not seen from its start (after a drafter restart or a
failed step) is sent the sequence's past in chunks that fit the ring, and drafts for it again once
the drafter holds all of it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import grpc
import torch

from protos.mtp.v1 import draft_service_pb2_grpc as pb_grpc
from tandem_core.draft_link import (
    AttachOffer,
    Fingerprint,
    SequenceStep,
    StepAnswer,
    StepRequest,
    read_local_token,
    wire,
)
from tandem_core.transport import make_writer
from target_service.draft_history import DraftHistory
from target_service.draft_pairs import SequencePairs, draft_pairs
from target_service.drafter import DrafterStatus
from target_service.step_output import StepOutput

log = logging.getLogger(__name__)
_DEADLINE_ROUND_TRIPS = 4  # wait this many measured round trips
RING_SLOTS = 2
# a restarted drafter is found within a fraction of a second (gRPC's default backoff grows to minutes)
_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclass(frozen=True)
class GrpcDrafterConfig:
    address: str
    num_draft_tokens: int  # k
    mode: str = "vanilla"
    transport: str = "shm"  # shm | inline | auto
    deadline_s: float = 1.0  # longest wait for one step's drafts (the wait follows the measured round trip below it)
    min_deadline_s: float = 0.05  # never wait less than this for a step's drafts
    reattach_interval_s: float = 0.25
    auth_token: str = ""


@dataclass
class DraftStats:
    steps: int = 0  # steps answered by the drafter
    request_bytes: int = 0  # serialized step requests sent
    failures: int = 0  # sessions lost to a broken stream, a stuck drafter or garbage
    late_steps: int = 0  # steps whose drafts came after the deadline (skipped; the session lives on)
    attaches: int = 0
    last_failure: str = ""
    max_request_bytes: int = 0  # largest single step request
    replayed_rows: int = 0  # pairs sent to catch up (a session that met a sequence mid-way, or deferred pairs)
    deferred_rows: int = 0  # pairs held back because their sequence asked for no drafts that step


class _Stream:
    """One Draft() call: requests go in through a queue, responses come out through another."""

    def __init__(self, stub, metadata):
        self._requests: queue.Queue = queue.Queue()
        self.responses: queue.Queue = queue.Queue()
        self.call = stub.Draft(iter(self._requests.get, None), metadata=metadata)
        threading.Thread(target=self._pump, daemon=True, name="draft-responses").start()

    def _pump(self) -> None:
        try:
            for response in self.call:
                self.responses.put(wire.step_answer_from_pb(response))
        except grpc.RpcError as err:
            self.responses.put(err)
        self.responses.put(None)

    def send(self, request: StepRequest) -> int:
        """Queue one step; returns its size on the wire in bytes."""
        message = wire.step_request_to_pb(request)
        self._requests.put(message)
        return message.ByteSize()

    def close(self) -> None:
        self._requests.put(None)
        self.call.cancel()


@dataclass(frozen=True)
class _Send:
    """Positions start..end-1 of one sequence, sent in this step."""

    request_id: str
    slot: int
    start: int
    end: int
    num_drafts: int
    index: int | None  # the sequence's index in the step, when this send asks for its drafts


class _Session:
    def __init__(self, session_id: str, writer, stream: _Stream):
        self.session_id = session_id
        self.writer = writer
        self.stream = stream
        self.held: dict[str, tuple[int, int]] = {}  # request id -> (slot, pairs the drafter holds)
        self.released: list[int] = []
        self.step_id = 0
        self.pending = 0  # a late step whose answer has not arrived yet (0: none)


class GrpcDrafter:
    def __init__(
        self,
        config: GrpcDrafterConfig,
        vocab_size: int,
        hidden_size: int,
        dtype,
        max_slots: int,
        max_seq_len: int,
        rows_per_step: int,
        device="cpu",
        on_prior=None,  # called with the drafter's acceptance prior ([depth] rates) at each attach
    ):
        self.config = config
        self._on_prior = on_prior
        self.vocab_size = vocab_size
        self._writer_args = (RING_SLOTS, rows_per_step, hidden_size, dtype, device)
        self.rows_per_step = rows_per_step
        self.history = DraftHistory(max_slots, max_seq_len, hidden_size, dtype, device)
        self._fingerprint = Fingerprint(
            vocab_size, hidden_size, str(dtype).removeprefix("torch."), config.num_draft_tokens, config.mode
        )
        self._limits = (max_slots, max_seq_len)
        self._channel = grpc.insecure_channel(config.address, options=_RECONNECT)
        self._stub = pb_grpc.DraftServiceStub(self._channel)
        self._session: _Session | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self.stats = DraftStats()
        # rows of earlier steps sent in the latest propose (sequences drafting again after a pause catch
        # up first): the step's round trip then says more about the pause than about drafting
        self.caught_up_rows = 0
        self._round_trip_s = 0.0  # running mean of answered steps (0: none yet)
        self._attacher = threading.Thread(target=self._attach_loop, daemon=True, name="draft-attach")
        self._attacher.start()

    # ---- Drafter interface ------------------------------------------------------------------------
    def propose(self, step: StepOutput) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in step.request_ids]
        self.caught_up_rows = 0
        pairs = draft_pairs(step)
        self._record(step, pairs)
        with self._lock:
            session = self._session
        if session is None:
            return drafts
        replayed = self.stats.replayed_rows
        sends = self._plan(session, step, pairs)
        self.caught_up_rows = self.stats.replayed_rows - replayed
        if not sends and not session.released:
            return drafts
        try:
            answer = self._exchange(session, sends)
        except _LateStep:
            self.stats.late_steps += 1  # this step only goes without drafts
            return drafts
        except _DraftFailure as err:
            self._fail(session, str(err))
            return drafts
        except Exception as err:  # a fault on this side of the link: drop the session, keep serving
            log.exception("drafter step raised")
            self._fail(session, f"{type(err).__name__}: {err}")
            return drafts
        for send, tokens in zip(sends, answer, strict=True):
            if send.index is not None:
                drafts[send.index] = tokens
        return drafts

    def release(self, request_ids: list[str]) -> None:
        with self._lock:
            session = self._session
        if session is None:
            return
        for rid in request_ids:
            held = session.held.pop(rid, None)
            if held is not None:
                session.released.append(held[0])

    def status(self) -> DrafterStatus:
        st = self.stats
        return DrafterStatus(
            self.attached, st.steps, st.request_bytes, st.max_request_bytes, st.failures, st.attaches, st.late_steps
        )

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.stream.close()
            session.writer.close()
        self._channel.close()

    @property
    def attached(self) -> bool:
        return self._session is not None

    # ---- one step ----------------------------------------------------------------------------------
    def _record(self, step: StepOutput, pairs: list[SequencePairs]) -> None:
        """Keep this step's pairs of every sequence, attached or not, for a later session to replay."""
        if pairs:
            slots = [int(step.slots[p.index]) for p in pairs]
            self.history.record(slots, [step.request_ids[p.index] for p in pairs], pairs, step.hidden_states)

    def _plan(self, session: _Session, step: StepOutput, pairs: list[SequencePairs]) -> list[_Send]:
        """This step's sends: new pairs of the sequences the drafter holds, then past pairs of the others
        in the rows left (a sequence asks for drafts once the drafter holds all of it).

        A sequence that asks for no drafts this step sends nothing: its pairs wait in the history and go
        over when it next asks (the draft policy's probes), so a step where no sequence wants drafts
        costs no round trip and no drafter compute."""
        sends, behind = [], []
        for p in pairs:
            rid, slot, end = step.request_ids[p.index], int(step.slots[p.index]), p.start + len(p.tokens)
            if p.start == 0:
                session.held[rid] = (slot, 0)  # a new sequence (its slot was released before this step)
            elif rid not in session.held:
                if not self.history.holds(slot, rid):
                    continue
                session.held[rid] = (slot, 0)  # met mid-way: replay its past
            if p.num_drafts == 0:
                self.stats.deferred_rows += len(p.tokens)
                continue
            held = session.held[rid][1]
            if held >= p.start:
                sends.append(_Send(rid, slot, p.start, end, p.num_drafts, p.index))
            else:
                behind.append(_Send(rid, slot, held, end, p.num_drafts, p.index))
        budget = self.rows_per_step - sum(s.end - s.start for s in sends)
        for s in behind:
            n = min(s.end - s.start, budget)
            if n <= 0:
                break
            caught_up = s.start + n == s.end
            sends.append(
                _Send(
                    s.request_id,
                    s.slot,
                    s.start,
                    s.start + n,
                    s.num_drafts if caught_up else 0,
                    s.index if caught_up else None,
                )
            )
            budget -= n
            self.stats.replayed_rows += n
        for s in sends:
            session.held[s.request_id] = (s.slot, s.end)
        return sends

    def deadline_s(self) -> float:
        """How long a step waits for its drafts: a few measured round trips, at most the configured deadline."""
        if self._round_trip_s == 0.0:
            return self.config.deadline_s
        return min(self.config.deadline_s, max(self.config.min_deadline_s, _DEADLINE_ROUND_TRIPS * self._round_trip_s))

    def _answer(self, session: _Session, step_id: int, timeout: float):
        """The response to ``step_id``, skipping the late answer of an earlier step; None on timeout."""
        end = time.monotonic() + timeout
        while True:
            try:
                response = session.stream.responses.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                return None
            if isinstance(response, StepAnswer) and response.step_id < step_id:
                continue
            if not isinstance(response, StepAnswer):
                raise _DraftFailure(f"draft stream ended: {response}")
            return response

    def _exchange(self, session: _Session, sends: list[_Send]) -> list[list[int]]:
        if session.pending:  # the ring slot of a late step is reused now: its answer must be in first
            if self._answer(session, session.pending, self.config.deadline_s) is None:
                raise _DraftFailure(f"drafter stuck: step {session.pending} unanswered")
            session.pending = 0
        session.step_id += 1
        ring_slot = session.step_id % RING_SLOTS
        sequences, rows, offset = [], [], 0
        for s in sends:
            tokens, span = self.history.span(s.slot, s.start, s.end)
            sequences.append(SequenceStep(s.slot, s.start, offset, tokens, s.num_drafts))
            rows.append(span)
            offset += s.end - s.start
        inline = session.writer.write(ring_slot, torch.cat(rows)) if rows else b""
        request = StepRequest(session.session_id, session.step_id, ring_slot, sequences, session.released, inline)
        session.released = []
        started = time.monotonic()
        size = session.stream.send(request)
        response = self._answer(session, request.step_id, self.deadline_s())
        if response is None:
            session.pending = request.step_id
            raise _LateStep()
        elapsed = time.monotonic() - started
        self._round_trip_s = elapsed if self._round_trip_s == 0.0 else 0.9 * self._round_trip_s + 0.1 * elapsed
        answer = self._validate(request, response)
        self.stats.steps += 1
        self.stats.request_bytes += size
        self.stats.max_request_bytes = max(self.stats.max_request_bytes, size)
        return answer

    def _validate(self, request: StepRequest, response: StepAnswer) -> list[list[int]]:
        if response.step_id != request.step_id:
            raise _DraftFailure(f"answer for step {response.step_id}, expected {request.step_id}")
        if len(response.drafts) != len(request.sequences):
            raise _DraftFailure(f"{len(response.drafts)} answers for {len(request.sequences)} sequences")
        out = []
        for asked, (slot, tokens) in zip(request.sequences, response.drafts, strict=True):
            if slot != asked.slot or len(tokens) > asked.num_drafts:
                raise _DraftFailure(f"slot {slot}: wrong slot or {len(tokens)} drafts for {asked.num_drafts}")
            if any(not 0 <= t < self.vocab_size for t in tokens):
                raise _DraftFailure(f"slot {slot}: draft ids outside the vocabulary")
            out.append(tokens)
        return out

    # ---- session lifetime --------------------------------------------------------------------------
    def _fail(self, session: _Session, reason: str) -> None:
        self.stats.failures += 1
        self.stats.last_failure = reason
        log.warning("drafter step failed (%s); continuing without drafts and re-attaching", reason)
        with self._lock:
            if self._session is session:
                self._session = None
        session.stream.close()
        session.writer.close()
        self._wake.set()

    def _attach_loop(self) -> None:
        last_refusal = ""
        while not self._closed.is_set():
            if self._session is None:
                try:
                    self._attach()
                    last_refusal = ""
                except grpc.RpcError as err:  # drafter absent or refusing: keep trying
                    if err.code() != grpc.StatusCode.UNAVAILABLE and err.details() != last_refusal:
                        last_refusal = err.details() or ""  # a refusal (e.g. mode mismatch): say it once
                        log.warning("drafter at %s refuses to attach: %s", self.config.address, last_refusal)
                    log.debug("attach failed: %s", err)
                except Exception:  # e.g. the staging buffer cannot be created: say so, keep trying
                    log.exception("attach failed")
            self._wake.wait(timeout=self.config.reattach_interval_s)
            self._wake.clear()

    def _attach(self) -> None:
        writer = make_writer(self.config.transport, *self._writer_args, epoch=self.stats.attaches + 1)
        request = wire.attach_to_pb(AttachOffer(self._fingerprint, writer.descriptor, *self._limits))
        metadata = self._auth_metadata()
        try:
            response = self._stub.Attach(request, timeout=10, metadata=metadata)
        except grpc.RpcError:
            writer.close()
            raise
        finally:
            if hasattr(writer, "unlink"):
                writer.unlink()  # mapped by the drafter (or never will be): no name left to leak
        session = _Session(response.session_id, writer, _Stream(self._stub, metadata))
        with self._lock:
            self._session = session
            self._round_trip_s = 0.0  # a new stream's first step may be slow: measure this session afresh
        self.stats.attaches += 1
        log.info("attached to drafter at %s (session %s)", self.config.address, response.session_id)
        if response.acceptance_prior and self._on_prior is not None:
            self._on_prior(list(response.acceptance_prior))

    def _auth_metadata(self) -> tuple[tuple[str, str], ...]:
        """The configured token, else the one a local draft service wrote for its port (read at each attach)."""
        token = self.config.auth_token or read_local_token(self.config.address)
        return (("authorization", f"Bearer {token}"),) if token else ()


class _DraftFailure(Exception):
    pass


class _LateStep(Exception):
    """This step's drafts did not come in time; the session stays."""
