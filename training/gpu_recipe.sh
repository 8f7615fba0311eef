#!/usr/bin/env bash
# Distil and train MTP heads on one NVIDIA GPU inside a fixed time budget, then pack the best heads.
#
#   training/gpu_recipe.sh MODEL PROMPTS OUTDIR
#
# MODEL: a .gguf file or model directory; PROMPTS: the Spec-Bench jsonl (its training split is used,
# never the held-out prompts); OUTDIR: where logs, the packed heads (heads.tar.*, split in 15 MB parts)
# and the token ids of every distilled sequence (tokens.pt.xz) go. Everything else lives under $WORK.
# Each phase is time-boxed against DEADLINE_S (seconds from the start, when training must begin);
# training runs TRAIN_MINUTES with its learning-rate schedule ending with the budget.
# Run from the repository root with the project on PYTHONPATH.
set -u
MODEL=$1 PROMPTS=$2 OUTDIR=$3
WORK=${WORK:-/root/tandem-gpu}
DEADLINE_S=${DEADLINE_S:-250}
TRAIN_MINUTES=${TRAIN_MINUTES:-4}
MAX_TOKENS=${MAX_TOKENS:-256}
SAMPLES=${SAMPLES:-12}
SELF_SAMPLES=${SELF_SAMPLES:-4}
SELF_SECONDS=${SELF_SECONDS:-60}
LIMIT=${LIMIT:-0}
DEVICE=${DEVICE:-cuda}
VARIANTS=${VARIANTS:-"eagle:1e-3 eagle:2e-3 vanilla:1e-3 vanilla:2e-3"}
D=$WORK/data R=$WORK/runs
mkdir -p "$D" "$R" "$OUTDIR"
start=$(date +%s)
left() { echo $((DEADLINE_S - $(date +%s) + start - ${1:-0})); }
say() { echo "[$(($(date +%s) - start)) s] $*"; }

distil() {  # distil SECONDS ARGS...: one source, stopped after SECONDS (finished shards are kept)
    local seconds=$1
    shift
    if [ "$seconds" -le 5 ]; then say "skipped (no time left): $*"; return; fi
    say "distil ($seconds s at most): $*"
    timeout --signal=INT "$seconds" python3 -u -m training.distill_batched --model "$MODEL" --prompts "$PROMPTS" \
        --device "$DEVICE" --max-tokens "$MAX_TOKENS" --limit "$LIMIT" --batch-tokens "${BATCH_TOKENS:-150000}" "$@" 2>&1 | grep -v "it/s\]" | tail -n 40
}

distil "$(left)" --source greedy --out "$D/greedy"
distil "$(left)" --source second-turn --first-answers "$D/greedy" --out "$D/second"
distil "$(left "$SELF_SECONDS")" --source sampled --samples "$SAMPLES" --temperature 0.8 --seed 1 --out "$D/sampled"
distil "$(left)" --source self-prompts --samples "$SELF_SAMPLES" --temperature 0.7 --seed 3 --out "$D/self"
dirs=$(for d in greedy second sampled self; do ls "$D/$d"/shard-*.pt >/dev/null 2>&1 && echo "$D/$d"; done)
say "data: $(echo $dirs)"

common="--model $MODEL --device $DEVICE --data $dirs --depths 4 --answer-only --frozen-prefix --depth-decay 0.8
  --tokens-per-step 4096 --max-seq-pairs 1024 --warmup-steps 20 --val-sequences 24 --eval-every 50
  --epochs 50 --max-minutes $TRAIN_MINUTES --lr-by-time --save-every 1000"
for v in $VARIANTS; do
    mode=${v%%:*} lr=${v##*:}
    say "train $mode lr $lr"
    # shellcheck disable=SC2086
    python3 -u -m training.train $common --mode "$mode" --lr "$lr" --out "$R/$mode-$lr" \
        >"$R/$mode-$lr.log" 2>&1 &
done
wait
for v in $VARIANTS; do
    say "log of $v:"
    tr '\r' '\n' <"$R/${v%%:*}-${v##*:}.log" | grep -v "^train " | tail -n 12
    tr '\r' '\n' <"$R/${v%%:*}-${v##*:}.log" | grep "^train " | tail -n 1
done

python3 -u -m training.gpu_pack --runs "$R" --data $dirs --out "$OUTDIR"
say "done"
