#!/usr/bin/env bash
# Start the draft service (shipped MTP heads) and the target service on the embedded default model,
# stream one answer through the CLI with speculative decoding, stop both.
# Usage: bash scripts/quickstart.sh ["your prompt"]   (TANDEM_MTP_MODE=vanilla|eagle, TANDEM_K=1..4)
set -euo pipefail
prompt=${1:-"Explain speculative decoding in two sentences."}
port=${TANDEM_PORT:-50051}
draft_port=${TANDEM_DRAFT_PORT:-50061}
mode=${TANDEM_MTP_MODE:-eagle}
k=${TANDEM_K:-2}  # k=2 was the fastest Eagle setting in docs/bench/results.md
draft_log=$(mktemp -t tandem-draft.XXXX.log)
log=$(mktemp -t tandem-target.XXXX.log)
python -m draft_service --port "$draft_port" --mode "$mode" --num-draft-tokens "$k" >"$draft_log" 2>&1 &
drafter=$!
python -m target_service --port "$port" --drafter grpc --draft-address "127.0.0.1:$draft_port" \
  --draft-mode "$mode" --num-draft-tokens "$k" >"$log" 2>&1 &
server=$!
trap 'kill $server $drafter 2>/dev/null; wait $server $drafter 2>/dev/null || true' EXIT
echo "target (pid $server, log $log) + $mode draft service (pid $drafter, log $draft_log) starting;" \
  "the first start converts the model once" >&2
if ! python -m client --address "127.0.0.1:$port" --wait 300 generate "$prompt" --max-tokens 128 --stats; then
  cat "$log" "$draft_log" >&2
  exit 1
fi
