"""The MTP draft service (its own process). Not built yet: the target runs with NullDrafter
(no speculation) or a test oracle until the draft-service issue lands."""
