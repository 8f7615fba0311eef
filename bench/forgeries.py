"""Malformed public requests and forged draft-service calls, sent as raw gRPC; each answer's status by name.

Used by the chaos run (``bench/chaos.py``) and its test: what an outside client or a local process could
send, not what the SDK would.
"""

from __future__ import annotations

import grpc

from protos.mtp.v1 import draft_service_pb2 as dpb
from protos.mtp.v1 import draft_service_pb2_grpc as dpb_grpc
from protos.mtp.v1 import target_service_pb2 as pb
from tandem_core.draft_link import read_local_token

_CHAT = pb.ChatPrompt(messages=[pb.ChatMessage(role="user", content="hi")])


def _input(**params) -> pb.GenerateStreamRequest:
    return pb.GenerateStreamRequest(input=pb.GenerationInput(chat=_CHAT, params=pb.GenerationParams(**params)))


def _public_requests() -> dict[str, bytes]:
    bad = {
        "max_tokens -1": _input(max_tokens=-1),
        "temperature -1": _input(max_tokens=4, temperature=-1),
        "top_p 2": _input(max_tokens=4, top_p=2),
        "top_k -3": _input(max_tokens=4, top_k=-3),
        "num_draft_tokens 9": _input(max_tokens=4, num_draft_tokens=9),
        "acceptance unknown, 10k chars": _input(max_tokens=4, acceptance="x" * 10_000),
        "relaxed_delta 7": _input(max_tokens=4, acceptance="relaxed", relaxed_delta=7),
        "draft_length sideways": _input(max_tokens=4, draft_length="sideways"),
        "stop_token_ids outside the vocabulary": _input(max_tokens=4, stop_token_ids=[10**9]),
        "no prompt": pb.GenerateStreamRequest(input=pb.GenerationInput(params=pb.GenerationParams(max_tokens=4))),
        "empty chat": pb.GenerateStreamRequest(input=pb.GenerationInput(chat=pb.ChatPrompt())),
        "role of 10k chars": pb.GenerateStreamRequest(
            input=pb.GenerationInput(chat=pb.ChatPrompt(messages=[pb.ChatMessage(role="r" * 10_000, content="x")]))
        ),
        "token ids outside the vocabulary": pb.GenerateStreamRequest(
            input=pb.GenerationInput(token_ids=pb.TokenIdsPrompt(ids=[1, -5, 10**8]))
        ),
        "request_id of 100k chars": pb.GenerateStreamRequest(
            input=pb.GenerationInput(request_id="i" * 100_000, chat=_CHAT)
        ),
    }
    out = {name: request.SerializeToString() for name, request in bad.items()}
    out["undecodable bytes"] = b"\xff\xff\xff\xff"
    return out


def _status(fn) -> str:
    try:
        fn()
        return "OK"
    except grpc.RpcError as err:
        return err.code().name


def malformed_public_calls(channel: grpc.Channel) -> dict[str, str]:
    """Each malformed GenerateStream / Abort request -> the status it got."""
    stream = channel.unary_stream("/mtp.v1.TargetService/GenerateStream")
    abort = channel.unary_unary("/mtp.v1.TargetService/Abort")
    out = {name: _status(lambda raw=raw: list(stream(raw, timeout=30))) for name, raw in _public_requests().items()}
    out["Abort with an empty id"] = _status(lambda: abort(pb.AbortRequest().SerializeToString(), timeout=30))
    return out


def _attach(**buffer) -> dpb.AttachRequest:
    geometry = dict(
        kind="shm", name="tandem-stage-1-x", ring_slots=2, rows_per_slot=8, hidden_size=576, dtype="float32"
    )
    geometry.update(buffer)
    return dpb.AttachRequest(
        fingerprint=dpb.Fingerprint(
            vocab_size=49152, hidden_size=576, dtype="float32", num_draft_tokens=1, mode=dpb.MTP_MODE_EAGLE
        ),
        buffer=dpb.BufferDescriptor(**geometry),
        max_slots=1,
        max_seq_len=16,
    )


def forged_draft_calls(address: str, port: int) -> dict[str, str]:
    """Calls a local process could make to the draft service: without the token, then with it (same account)."""
    token = read_local_token(address)
    auth = (("authorization", f"Bearer {token}"),)
    out = {}
    with grpc.insecure_channel(address) as channel:
        stub = dpb_grpc.DraftServiceStub(channel)
        out["Attach without a token"] = _status(lambda: stub.Attach(_attach(), timeout=30))
        forged = {
            "Attach ring_slots -1": _attach(ring_slots=-1),
            "Attach ring_slots 0": _attach(ring_slots=0),
            "Attach rows_per_slot -4": _attach(rows_per_slot=-4),
            "Attach byte_offset 3 (unaligned)": _attach(byte_offset=3),
            "Attach byte_offset -8": _attach(byte_offset=-8),
            "Attach kind carrier-pigeon": _attach(kind="carrier-pigeon"),
            "Attach name ../etc/passwd": _attach(name="../etc/passwd"),
            "Attach dtype float64": _attach(dtype="float64"),
            "Attach max_slots 10^6": dpb.AttachRequest(
                fingerprint=_attach().fingerprint, buffer=_attach().buffer, max_slots=10**6, max_seq_len=10**6
            ),
        }
        for name, request in forged.items():
            out[name] = _status(lambda request=request: stub.Attach(request, timeout=30, metadata=auth))
        raw_attach = channel.unary_unary("/mtp.v1.DraftService/Attach")
        out["Attach undecodable bytes"] = _status(lambda: raw_attach(b"\xff\xff\xff", timeout=30, metadata=auth))
        stale = dpb.DraftStepRequest(session_id="forged", step_id=1)
        out["Draft on a forged session"] = _status(lambda: list(stub.Draft(iter([stale]), timeout=30, metadata=auth)))
        out["Release on a forged session"] = _status(
            lambda: stub.Release(dpb.ReleaseRequest(session_id="forged", slots=[0]), timeout=30, metadata=auth)
        )
    return out
