"""The draft link's contract, shared by both ends: its messages (``messages.py``), their protobuf form
(``wire.py``, the only module that touches ``draft_service_pb2``) and the local drafter's secret
(``local_token.py``)."""

from tandem_core.draft_link.local_token import local_token_path, read_local_token, write_local_token
from tandem_core.draft_link.messages import (
    MTP_MODES,
    AttachOffer,
    Fingerprint,
    SequenceStep,
    StepAnswer,
    StepRequest,
)

__all__ = [
    "MTP_MODES",
    "AttachOffer",
    "Fingerprint",
    "SequenceStep",
    "StepAnswer",
    "StepRequest",
    "local_token_path",
    "read_local_token",
    "write_local_token",
]
