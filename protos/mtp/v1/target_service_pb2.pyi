from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORTED: _ClassVar[FinishReason]
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORTED: FinishReason

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ChatPrompt(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class TokenIdsPrompt(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerationParams(_message.Message):
    __slots__ = ("max_tokens", "stop", "stop_token_ids", "ignore_eos", "num_draft_tokens", "temperature", "top_p", "top_k", "seed", "acceptance", "relaxed_top_k", "relaxed_delta", "force_accept", "draft_length")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_FIELD_NUMBER: _ClassVar[int]
    RELAXED_TOP_K_FIELD_NUMBER: _ClassVar[int]
    RELAXED_DELTA_FIELD_NUMBER: _ClassVar[int]
    FORCE_ACCEPT_FIELD_NUMBER: _ClassVar[int]
    DRAFT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    num_draft_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    acceptance: str
    relaxed_top_k: int
    relaxed_delta: float
    force_accept: int
    draft_length: str
    def __init__(self, max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., num_draft_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., acceptance: _Optional[str] = ..., relaxed_top_k: _Optional[int] = ..., relaxed_delta: _Optional[float] = ..., force_accept: _Optional[int] = ..., draft_length: _Optional[str] = ...) -> None: ...

class GenerationInput(_message.Message):
    __slots__ = ("request_id", "text", "chat", "token_ids", "params")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    chat: ChatPrompt
    token_ids: TokenIdsPrompt
    params: GenerationParams
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatPrompt, _Mapping]] = ..., token_ids: _Optional[_Union[TokenIdsPrompt, _Mapping]] = ..., params: _Optional[_Union[GenerationParams, _Mapping]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class SpeculativeStats(_message.Message):
    __slots__ = ("num_steps", "num_drafted", "num_accepted", "mean_acceptance_length", "acceptance_rate_per_position", "drafted_per_position", "accepted_per_position", "acceptance_mode", "steps_skipped_by_policy", "steps_without_drafts")
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFTED_FIELD_NUMBER: _ClassVar[int]
    NUM_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MEAN_ACCEPTANCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_RATE_PER_POSITION_FIELD_NUMBER: _ClassVar[int]
    DRAFTED_PER_POSITION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_PER_POSITION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_MODE_FIELD_NUMBER: _ClassVar[int]
    STEPS_SKIPPED_BY_POLICY_FIELD_NUMBER: _ClassVar[int]
    STEPS_WITHOUT_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    num_steps: int
    num_drafted: int
    num_accepted: int
    mean_acceptance_length: float
    acceptance_rate_per_position: _containers.RepeatedScalarFieldContainer[float]
    drafted_per_position: _containers.RepeatedScalarFieldContainer[int]
    accepted_per_position: _containers.RepeatedScalarFieldContainer[int]
    acceptance_mode: str
    steps_skipped_by_policy: int
    steps_without_drafts: int
    def __init__(self, num_steps: _Optional[int] = ..., num_drafted: _Optional[int] = ..., num_accepted: _Optional[int] = ..., mean_acceptance_length: _Optional[float] = ..., acceptance_rate_per_position: _Optional[_Iterable[float]] = ..., drafted_per_position: _Optional[_Iterable[int]] = ..., accepted_per_position: _Optional[_Iterable[int]] = ..., acceptance_mode: _Optional[str] = ..., steps_skipped_by_policy: _Optional[int] = ..., steps_without_drafts: _Optional[int] = ...) -> None: ...

class GenerateStreamRequest(_message.Message):
    __slots__ = ("input",)
    INPUT_FIELD_NUMBER: _ClassVar[int]
    input: GenerationInput
    def __init__(self, input: _Optional[_Union[GenerationInput, _Mapping]] = ...) -> None: ...

class TokenChunk(_message.Message):
    __slots__ = ("token_ids", "text")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ...) -> None: ...

class GenerationResult(_message.Message):
    __slots__ = ("finish_reason", "usage", "stats", "text", "message")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    finish_reason: FinishReason
    usage: Usage
    stats: SpeculativeStats
    text: str
    message: str
    def __init__(self, finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., stats: _Optional[_Union[SpeculativeStats, _Mapping]] = ..., text: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class GenerateStreamResponse(_message.Message):
    __slots__ = ("request_id", "chunk", "final")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    chunk: TokenChunk
    final: GenerationResult
    def __init__(self, request_id: _Optional[str] = ..., chunk: _Optional[_Union[TokenChunk, _Mapping]] = ..., final: _Optional[_Union[GenerationResult, _Mapping]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("input",)
    INPUT_FIELD_NUMBER: _ClassVar[int]
    input: GenerationInput
    def __init__(self, input: _Optional[_Union[GenerationInput, _Mapping]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "token_ids", "text", "result")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    result: GenerationResult
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., result: _Optional[_Union[GenerationResult, _Mapping]] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("model", "model_type", "vocab_size", "hidden_size", "dtype", "max_seq_len", "max_tokens_limit", "num_draft_tokens", "drafter", "eos_token_ids", "drafter_status", "profile", "kernels", "draft_policy")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAFTER_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    DRAFTER_STATUS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_POLICY_FIELD_NUMBER: _ClassVar[int]
    model: str
    model_type: str
    vocab_size: int
    hidden_size: int
    dtype: str
    max_seq_len: int
    max_tokens_limit: int
    num_draft_tokens: int
    drafter: str
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    drafter_status: DrafterStatus
    profile: EngineProfile
    kernels: str
    draft_policy: DraftPolicyInfo
    def __init__(self, model: _Optional[str] = ..., model_type: _Optional[str] = ..., vocab_size: _Optional[int] = ..., hidden_size: _Optional[int] = ..., dtype: _Optional[str] = ..., max_seq_len: _Optional[int] = ..., max_tokens_limit: _Optional[int] = ..., num_draft_tokens: _Optional[int] = ..., drafter: _Optional[str] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., drafter_status: _Optional[_Union[DrafterStatus, _Mapping]] = ..., profile: _Optional[_Union[EngineProfile, _Mapping]] = ..., kernels: _Optional[str] = ..., draft_policy: _Optional[_Union[DraftPolicyInfo, _Mapping]] = ...) -> None: ...

class DraftPolicyInfo(_message.Message):
    __slots__ = ("mode", "step_base_s", "step_per_seq_s", "step_per_token_s", "draft_s_by_depth", "acceptance_overall", "step_per_kv_token_s", "step_per_pair_s", "step_per_verifying_seq_s", "step_per_split_seq_s", "step_per_split_kv_token_s", "draft_s_per_caught_up_row", "step_per_split_verifying_seq_s", "step_other_s", "draft_margin", "draft_margin_per_seq", "choice")
    MODE_FIELD_NUMBER: _ClassVar[int]
    STEP_BASE_S_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_SEQ_S_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_TOKEN_S_FIELD_NUMBER: _ClassVar[int]
    DRAFT_S_BY_DEPTH_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_OVERALL_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_KV_TOKEN_S_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_PAIR_S_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_VERIFYING_SEQ_S_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_SPLIT_SEQ_S_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_SPLIT_KV_TOKEN_S_FIELD_NUMBER: _ClassVar[int]
    DRAFT_S_PER_CAUGHT_UP_ROW_FIELD_NUMBER: _ClassVar[int]
    STEP_PER_SPLIT_VERIFYING_SEQ_S_FIELD_NUMBER: _ClassVar[int]
    STEP_OTHER_S_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MARGIN_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MARGIN_PER_SEQ_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    mode: str
    step_base_s: float
    step_per_seq_s: float
    step_per_token_s: float
    draft_s_by_depth: _containers.RepeatedScalarFieldContainer[float]
    acceptance_overall: _containers.RepeatedScalarFieldContainer[float]
    step_per_kv_token_s: float
    step_per_pair_s: float
    step_per_verifying_seq_s: float
    step_per_split_seq_s: float
    step_per_split_kv_token_s: float
    draft_s_per_caught_up_row: float
    step_per_split_verifying_seq_s: float
    step_other_s: float
    draft_margin: float
    draft_margin_per_seq: float
    choice: str
    def __init__(self, mode: _Optional[str] = ..., step_base_s: _Optional[float] = ..., step_per_seq_s: _Optional[float] = ..., step_per_token_s: _Optional[float] = ..., draft_s_by_depth: _Optional[_Iterable[float]] = ..., acceptance_overall: _Optional[_Iterable[float]] = ..., step_per_kv_token_s: _Optional[float] = ..., step_per_pair_s: _Optional[float] = ..., step_per_verifying_seq_s: _Optional[float] = ..., step_per_split_seq_s: _Optional[float] = ..., step_per_split_kv_token_s: _Optional[float] = ..., draft_s_per_caught_up_row: _Optional[float] = ..., step_per_split_verifying_seq_s: _Optional[float] = ..., step_other_s: _Optional[float] = ..., draft_margin: _Optional[float] = ..., draft_margin_per_seq: _Optional[float] = ..., choice: _Optional[str] = ...) -> None: ...

class EngineProfile(_message.Message):
    __slots__ = ("steps", "forward_s", "draft_s", "other_s")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_S_FIELD_NUMBER: _ClassVar[int]
    DRAFT_S_FIELD_NUMBER: _ClassVar[int]
    OTHER_S_FIELD_NUMBER: _ClassVar[int]
    steps: int
    forward_s: float
    draft_s: float
    other_s: float
    def __init__(self, steps: _Optional[int] = ..., forward_s: _Optional[float] = ..., draft_s: _Optional[float] = ..., other_s: _Optional[float] = ...) -> None: ...

class DrafterStatus(_message.Message):
    __slots__ = ("attached", "steps", "request_bytes", "max_request_bytes", "failures", "attaches")
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    ATTACHES_FIELD_NUMBER: _ClassVar[int]
    attached: bool
    steps: int
    request_bytes: int
    max_request_bytes: int
    failures: int
    attaches: int
    def __init__(self, attached: _Optional[bool] = ..., steps: _Optional[int] = ..., request_bytes: _Optional[int] = ..., max_request_bytes: _Optional[int] = ..., failures: _Optional[int] = ..., attaches: _Optional[int] = ...) -> None: ...
