#!/usr/bin/env bash
# Start the target service on the embedded default model, stream one answer through the CLI, stop.
# Usage: bash scripts/quickstart.sh ["your prompt"]
set -euo pipefail
prompt=${1:-"Explain speculative decoding in two sentences."}
port=${TANDEM_PORT:-50051}
log=$(mktemp -t tandem-target.XXXX.log)
python -m target_service --port "$port" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
echo "target service starting (pid $server, log $log); the first start converts the model once" >&2
if ! python -m client --address "127.0.0.1:$port" --wait 300 generate "$prompt" --max-tokens 128 --stats; then
  cat "$log" >&2
  exit 1
fi
