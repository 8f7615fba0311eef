"""OpenAI-compatible HTTP gateway in front of one Tandem target service (gRPC, through the SDK)."""
