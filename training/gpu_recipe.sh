#!/usr/bin/env bash
# Distil and train MTP heads on one NVIDIA GPU inside a fixed time budget; each run's heads are packed
# into OUTDIR as soon as it ends, so a later timeout cannot lose them.
#
#   training/gpu_recipe.sh MODEL PROMPTS OUTDIR
#
# MODEL: a .gguf file or model directory; PROMPTS: the Spec-Bench jsonl (its training split only, never
# the held-out prompts); OUTDIR: log lines and RUN.tar.NN (a run's heads, curve and log, in parts of at
# most 15 MB: `cat RUN.tar.* | tar -x`). Data and runs live under $WORK. Run from the repository root
# with the project on PYTHONPATH. One python start costs about 25 s there (imports), so the distillation
# is one process (every source, one model load) and training one process per variant, all at once.
set -u
MODEL=$1 PROMPTS=$2 OUTDIR=$3
WORK=${WORK:-/root/tandem-gpu}
DISTIL_MINUTES=${DISTIL_MINUTES:-3}  # no new shard after this; a shard of 128 answers takes seconds
TRAIN_MINUTES=${TRAIN_MINUTES:-4}    # each run's budget (model and data loading included)
MAX_TOKENS=${MAX_TOKENS:-256}
SAMPLES=${SAMPLES:-12}
SELF_SAMPLES=${SELF_SAMPLES:-4}
LIMIT=${LIMIT:-0}
DEVICE=${DEVICE:-cuda}
VARIANTS=${VARIANTS:-"eagle:1e-3 eagle:2e-3 vanilla:1e-3"}  # 1 + 1 + 3 parts: the trip back takes 8 files
D=$WORK/data R=$WORK/runs
mkdir -p "$D" "$R" "$OUTDIR"
start=$(date +%s)
say() { echo "[$(($(date +%s) - start)) s] $*"; }

say "distil for $DISTIL_MINUTES min"
python3 -u -m training.distill_batched --model "$MODEL" --prompts "$PROMPTS" --device "$DEVICE" \
    --sources greedy,second-turn,sampled,self-prompts --samples "$SAMPLES" --temperature 0.8 \
    --self-samples "$SELF_SAMPLES" --self-temperature 0.7 --seed 1 --max-tokens "$MAX_TOKENS" --limit "$LIMIT" \
    --minutes "$DISTIL_MINUTES" --out "$D" 2>&1 | grep -v "it/s\]"
dirs=$(for d in greedy second-turn sampled self-prompts; do ls "$D/$d"/shard-*.pt >/dev/null 2>&1 && echo "$D/$d"; done)
say "data: $(echo $dirs)"

common="--model $MODEL --device $DEVICE --data $dirs --depths 4 --answer-only --frozen-prefix --depth-decay 0.8
  --tokens-per-step 4096 --max-seq-pairs 1024 --warmup-steps 20 --val-sequences 24 --eval-every 50
  --epochs 50 --max-minutes $TRAIN_MINUTES --lr-by-time --save-every 1000"
for v in $VARIANTS; do
    mode=${v%%:*} lr=${v##*:} name=${v%%:*}-${v##*:}
    say "train $name"
    (
        # shellcheck disable=SC2086
        python3 -u -m training.train $common --mode "$mode" --lr "$lr" --out "$R/$name" >"$R/$name.log" 2>&1
        cp "$R/$name.log" "$R/$name/train.log"
        tar -cf - -C "$R" --exclude trainer_state.pt "$name" | split -b 15000000 -d - "$OUTDIR/$name.tar."
        echo "[$(($(date +%s) - start)) s] packed $name: $(tr '\r' '\n' <"$R/$name.log" | grep '^train ' | tail -n 1)"
    ) &
done
wait
for v in $VARIANTS; do
    name=${v%%:*}-${v##*:}
    say "validation of $name:"
    tr '\r' '\n' <"$R/$name.log" | grep -v "^train " | tail -n 24
done
say "done"
