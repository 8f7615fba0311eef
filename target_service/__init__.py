"""The target service: the target model, scheduler, KV cache, verification and the public gRPC API."""

from tandem_core.openmp import shorten_spin_wait

shorten_spin_wait()  # before anything loads torch (tandem_core/openmp.py)
