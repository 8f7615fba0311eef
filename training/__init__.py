"""Self-distillation of MTP heads: collect the target's own generations (distill.py), train (train.py)."""
