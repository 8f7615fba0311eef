"""`tandem-bench`: Spec-Bench-format end-to-end benchmark of the running services (see bench/main.py)."""
