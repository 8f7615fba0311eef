"""Limits both services and the public API agree on."""

MAX_DRAFT_TOKENS = 4  # most drafts one sequence verifies in a step (k); MTP checkpoints ship at most this depth
