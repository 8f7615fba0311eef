"""The MTP draft service: MTP heads in their own process, reading the target's hidden states in place."""
