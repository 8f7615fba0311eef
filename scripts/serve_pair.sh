#!/usr/bin/env bash
# Target + draft service in ONE container (GPU nodes: both must see the GPU the container was given).
# The draft service listens on the container's loopback only; the target's API on 0.0.0.0:50051.
# Settings come from TANDEM_* / TANDEM_DRAFT_* variables (e.g. TANDEM_DEVICE=cuda, TANDEM_DRAFT_DEVICE=cuda).
set -euo pipefail
mode=${TANDEM_PAIR_MODE:-eagle}
k=${TANDEM_PAIR_K:-3}
tandem-draft --host 127.0.0.1 --port 50061 --mode "$mode" --num-draft-tokens "$k" &
drafter=$!
tandem-target --host 0.0.0.0 --port 50051 --drafter grpc --draft-address 127.0.0.1:50061 \
  --draft-mode "$mode" --num-draft-tokens "$k" "$@" &
target=$!
trap 'kill -TERM $target $drafter 2>/dev/null || true' TERM INT
wait -n $target $drafter  # either one ending ends the pair: the orchestrator restarts the container
status=$?
kill -TERM $target $drafter 2>/dev/null || true
wait || true
exit $status
