"""The MTP draft service: MTP heads in their own process, reading the target's hidden states in place."""

from tandem_core.openmp import shorten_spin_wait

shorten_spin_wait()  # before anything loads torch (tandem_core/openmp.py)
