#!/usr/bin/env bash
# The pre-registered GPU headline (results/headline/PLAN.md) in one call on a 4-GPU machine: build the
# 10.7M policy, then 6 variants x 4 seeds, GPU k holding seed k's run of every variant, equal budgets.
# (It ran at the commit in results/headline/PLAN.md as +variant=grpo,pods,...; spelled here for today's config.)
# Run from the repo root on the lent machine:  bash scripts/device/headline.sh   (results: $OUT/sweep.tgz)
set -o pipefail
source scripts/device/setup.sh || exit 1
OUTDIR=${OUT:-/tmp/headline_out}; mkdir -p "$OUTDIR"
python3 -m scripts.build_headline_model --out /tmp/headline_model --steps 550 2>&1 | grep -v "Writing\|Loading" \
  | tail -12 | tee "$OUTDIR/build.log"
export OMP_NUM_THREADS=2
timeout ${SWEEP_TIMEOUT:-470} python3 scripts/launch_parallel.py --out /tmp/sweep --gpus 4 --per-gpu 6 \
  --sweep seed=1,2,3,4 --sweep arm=none-n16-m16,max_variance-n64-m16,random-n64-m16,max_reward-n64-m16,none-n64-m64,greso+dynamic_sampling+max_variance-n64-m16 -- \
  model=headline model.path=/tmp/headline_model dataset=arithmetic_local hardware=gpu \
  sampling.temperature=0.9 rollout.batch_size=512 optim.lr=1e-5 algo.prompts_per_step=8 max_steps=100000 \
  max_train_time=200 eval.every_steps=0 eval.every_seconds=20 eval.at_start=true eval.batch_size=1024 \
  checkpoint.every_seconds=0 checkpoint.every_steps=0 checkpoint.save_final=false 2>&1 | tee "$OUTDIR/launch.log"
cd /tmp && tar czf "$OUTDIR/sweep.tgz" sweep/*/metrics.jsonl sweep/*/run_info.json sweep/*/config.yaml \
  sweep/*/.hydra/config.yaml sweep/*.log 2>/dev/null; cd - >/dev/null
python3 -m pods.compare /tmp/sweep --rule paper --baseline none-n16-m16 --grid-step 20 --x-max 200 \
  --out /tmp/cmp 2>&1 | tail -30
