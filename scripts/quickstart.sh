#!/usr/bin/env bash
# Start the draft service (shipped MTP heads), the target service on the embedded default model and
# the OpenAI-compatible gateway, stream one answer through the CLI with speculative decoding, stop all.
# Usage: bash scripts/quickstart.sh ["your prompt"]   (TANDEM_MTP_MODE=vanilla|eagle, TANDEM_K=1..4,
#        TANDEM_DRAFT_LENGTH=fixed|auto, TANDEM_KEEP=1 keeps the services running until Ctrl-C)
set -euo pipefail
prompt=${1:-"Explain speculative decoding in two sentences."}
port=${TANDEM_PORT:-50051}
draft_port=${TANDEM_DRAFT_PORT:-50061}
mode=${TANDEM_MTP_MODE:-eagle}
k=${TANDEM_K:-4}  # the most drafts a step verifies
# auto: the target picks 0..k per sequence and step; Eagle auto (k up to 4) was the fastest measured
# configuration at batch 1 and ahead of fixed k=3 at 4 and 8 streams (docs/bench/draft-length)
length=${TANDEM_DRAFT_LENGTH:-auto}
http_port=${TANDEM_HTTP_PORT:-8000}
draft_log=$(mktemp -t tandem-draft.XXXX.log)
log=$(mktemp -t tandem-target.XXXX.log)
python -m draft_service --port "$draft_port" --mode "$mode" --num-draft-tokens "$k" >"$draft_log" 2>&1 &
drafter=$!
python -m target_service --port "$port" --drafter grpc --draft-address "127.0.0.1:$draft_port" \
  --draft-mode "$mode" --num-draft-tokens "$k" --draft-length "$length" >"$log" 2>&1 &
server=$!
python -m gateway --port "$http_port" --target "127.0.0.1:$port" >"$log.gateway" 2>&1 &
gateway=$!
trap 'kill $gateway $server $drafter 2>/dev/null; wait $gateway $server $drafter 2>/dev/null || true' EXIT
echo "target (pid $server, log $log) + $mode draft service (pid $drafter, log $draft_log) starting;" \
  "the first start converts the model once" >&2
echo "gRPC API on 127.0.0.1:$port; OpenAI-compatible HTTP API on http://127.0.0.1:$http_port/v1" >&2
if ! python -m client --address "127.0.0.1:$port" --wait 300 generate "$prompt" --max-tokens 128 --stats; then
  cat "$log" "$draft_log" "$log.gateway" >&2
  exit 1
fi
if [ "${TANDEM_KEEP:-0}" = 1 ]; then
  echo "serving until Ctrl-C: try  curl -s http://127.0.0.1:$http_port/v1/models" >&2
  wait $server
fi
