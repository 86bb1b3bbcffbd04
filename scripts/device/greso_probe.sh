#!/usr/bin/env bash
# Exploratory (not in results/headline_v4/PLAN.md): does GRESO's pre-rollout filter skip prompts, and save time,
# once runs see several epochs? Headline v4's arms ran 360 s over 19,465 training prompts, less than one epoch,
# and GRESO skipped nothing there. Here the setting is headline v4's frozen one (frozen.env: the shipped policy,
# the hard sums, 16 prompts a step, lr 1e-5, the sampled eval every 10 s) on the first TRAIN_SIZE (1,000)
# training prompts, and the comparison is the GRESO paper's: dynamic sampling alone against GRESO + dynamic
# sampling, at GRPO 16/16, plus plain GRPO 16/16; seed k's runs on GPU k (3 runs a GPU).
#   bash scripts/device/greso_probe.sh        # a machine of 1-4 GPUs; .whl carried (docs/gpu.md)
# $OUT: probe.tgz (every run's records, config and log), table.md (printed last). SMOKE=1: seconds on the CPU.
set -o pipefail
O=${OUT:-/tmp/greso_probe_out}; W=${PROBE_WORK:-/tmp/greso_probe}; rm -rf "$W"; mkdir -p "$W" "$O"
source results/headline_v4/frozen.env
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; NG=1; SEEDS=1; WIN=0; TRAIN_SIZE=${TRAIN_SIZE:-16}; EVERY=1
  HW="hardware=cpu"; SMALL="max_steps=3 eval.every_steps=1 dataset.eval_size=8 model.max_completion_len=12
    dynamic_sampling.max_rounds=1"
  READ="--x step --grid-step 1 --x-max 3"; SETTING_EXTRA="eval.temperature=0.9 algo.prompts_per_step=2"
else
  source scripts/device/setup.sh || exit 1
  export OMP_NUM_THREADS=2
  NG=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l); SEEDS=$(seq -s, 4401 $((4400 + NG)))
  WIN=${WIN:-240}; TRAIN_SIZE=${TRAIN_SIZE:-1000}; EVERY=10; HW="hardware=gpu eval.batch_size=1024 rollout.batch_size=512"
  SMALL="max_steps=100000 eval.every_steps=0"; READ="--grid-step 10 --x-max $WIN"
fi
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $NG GPUs; seeds $SEEDS; ${WIN}s; $TRAIN_SIZE prompts"
C="model=headline dataset=arithmetic_hard_local dataset.eval_task=data/arithmetic_hard/eval_2k.jsonl $HW
  dataset.train_size=$TRAIN_SIZE sampling.temperature=0.9 max_train_time=$WIN eval.every_seconds=$EVERY
  eval.at_start=true checkpoint.every_seconds=0 checkpoint.every_steps=0 checkpoint.save_final=false
  optim.lr=$LR optim.warmup_steps=$WARMUP_STEPS $SETTING_EXTRA $SMALL"
timeout 480 python3 scripts/launch_parallel.py --gpus "$NG" --per-gpu 3 --out "$W/probe" --sweep "seed=$SEEDS" \
  --sweep arm=none-n16-m16,dynamic_sampling+none-n16-m16,greso+dynamic_sampling+none-n16-m16 -- $C
(cd "$W" && tar czf "$O/probe.tgz" --exclude='*.pt' --exclude='*.safetensors' probe)
{
  python3 -m pods.compare "$W/probe" --rule paper --baseline dynamic_sampling+none-n16-m16 --x-min 0 $READ \
    --out "$W/cmp" > /dev/null && cat "$W/cmp/summary.md"
  echo; python3 scripts/phase_totals.py "$W/probe"
} > "$O/table.md" 2>&1
cat "$O/table.md"
