from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MTPMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MTP_MODE_UNSPECIFIED: _ClassVar[MTPMode]
    MTP_MODE_VANILLA: _ClassVar[MTPMode]
    MTP_MODE_EAGLE: _ClassVar[MTPMode]
MTP_MODE_UNSPECIFIED: MTPMode
MTP_MODE_VANILLA: MTPMode
MTP_MODE_EAGLE: MTPMode

class Fingerprint(_message.Message):
    __slots__ = ("vocab_size", "hidden_size", "dtype", "num_draft_tokens", "mode")
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    vocab_size: int
    hidden_size: int
    dtype: str
    num_draft_tokens: int
    mode: MTPMode
    def __init__(self, vocab_size: _Optional[int] = ..., hidden_size: _Optional[int] = ..., dtype: _Optional[str] = ..., num_draft_tokens: _Optional[int] = ..., mode: _Optional[_Union[MTPMode, str]] = ...) -> None: ...

class BufferDescriptor(_message.Message):
    __slots__ = ("kind", "name", "ring_slots", "rows_per_slot", "hidden_size", "dtype", "byte_offset", "device_uuid", "epoch", "ipc_handle")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RING_SLOTS_FIELD_NUMBER: _ClassVar[int]
    ROWS_PER_SLOT_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DEVICE_UUID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IPC_HANDLE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    ring_slots: int
    rows_per_slot: int
    hidden_size: int
    dtype: str
    byte_offset: int
    device_uuid: str
    epoch: int
    ipc_handle: bytes
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., ring_slots: _Optional[int] = ..., rows_per_slot: _Optional[int] = ..., hidden_size: _Optional[int] = ..., dtype: _Optional[str] = ..., byte_offset: _Optional[int] = ..., device_uuid: _Optional[str] = ..., epoch: _Optional[int] = ..., ipc_handle: _Optional[bytes] = ...) -> None: ...

class AttachRequest(_message.Message):
    __slots__ = ("fingerprint", "buffer", "max_slots", "max_seq_len")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    fingerprint: Fingerprint
    buffer: BufferDescriptor
    max_slots: int
    max_seq_len: int
    def __init__(self, fingerprint: _Optional[_Union[Fingerprint, _Mapping]] = ..., buffer: _Optional[_Union[BufferDescriptor, _Mapping]] = ..., max_slots: _Optional[int] = ..., max_seq_len: _Optional[int] = ...) -> None: ...

class AttachResponse(_message.Message):
    __slots__ = ("session_id", "fingerprint", "acceptance_prior")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_PRIOR_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    fingerprint: Fingerprint
    acceptance_prior: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, session_id: _Optional[str] = ..., fingerprint: _Optional[_Union[Fingerprint, _Mapping]] = ..., acceptance_prior: _Optional[_Iterable[float]] = ...) -> None: ...

class SequenceStep(_message.Message):
    __slots__ = ("slot", "start", "row_offset", "tokens", "num_drafts")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    ROW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    slot: int
    start: int
    row_offset: int
    tokens: _containers.RepeatedScalarFieldContainer[int]
    num_drafts: int
    def __init__(self, slot: _Optional[int] = ..., start: _Optional[int] = ..., row_offset: _Optional[int] = ..., tokens: _Optional[_Iterable[int]] = ..., num_drafts: _Optional[int] = ...) -> None: ...

class DraftStepRequest(_message.Message):
    __slots__ = ("session_id", "step_id", "ring_slot", "sequences", "released_slots", "inline_rows")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    RING_SLOT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    RELEASED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    INLINE_ROWS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    step_id: int
    ring_slot: int
    sequences: _containers.RepeatedCompositeFieldContainer[SequenceStep]
    released_slots: _containers.RepeatedScalarFieldContainer[int]
    inline_rows: bytes
    def __init__(self, session_id: _Optional[str] = ..., step_id: _Optional[int] = ..., ring_slot: _Optional[int] = ..., sequences: _Optional[_Iterable[_Union[SequenceStep, _Mapping]]] = ..., released_slots: _Optional[_Iterable[int]] = ..., inline_rows: _Optional[bytes] = ...) -> None: ...

class SequenceDrafts(_message.Message):
    __slots__ = ("slot", "tokens")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    slot: int
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, slot: _Optional[int] = ..., tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class DraftStepResponse(_message.Message):
    __slots__ = ("step_id", "drafts")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FIELD_NUMBER: _ClassVar[int]
    step_id: int
    drafts: _containers.RepeatedCompositeFieldContainer[SequenceDrafts]
    def __init__(self, step_id: _Optional[int] = ..., drafts: _Optional[_Iterable[_Union[SequenceDrafts, _Mapping]]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("session_id", "slots")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    slots: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, session_id: _Optional[str] = ..., slots: _Optional[_Iterable[int]] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
