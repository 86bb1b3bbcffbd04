#!/usr/bin/env bash
# SUPERSEDED: the script of the earlier headline attempts (results/headline/superseded/), kept so they can be
# re-run (spelled for the current config layout: arm= for the old +variant=); scale=gpu has since moved to the
# pre-registered setting. The current headline: scripts/device/headline.sh.
# The GPU headline in one call on one GPU: build the policy, then run every variant x seed concurrently
# (equal training-clock budgets), then archive the metrics. Run on a lent GPU machine from the repo root:
#   bash scripts/headline.sh            # writes $OUT (or outputs/headline): build.log, sft_eval.json, sweep.tgz
# Then here: tar xzf sweep.tgz && python -m pods.compare sweep --rule paper --out results/headline/paper
set -eo pipefail
source scripts/device/setup.sh
OUTDIR=${OUT:-outputs/headline}
mkdir -p "$OUTDIR"
ARMS=${ARMS:-none-n16-m16,max_variance-n64-m16,random-n64-m16,max_reward-n64-m16,greso+dynamic_sampling+max_variance-n64-m16,none-n64-m64}
SEEDS=${SEEDS:-1,2,3}
python3 scripts/build_headline_model.py --out /tmp/headline_model --steps "${SFT_STEPS:-1000}" 2>&1 \
  | grep -v "Writing\|Loading" | tee "$OUTDIR/build.log"
cp /tmp/headline_model/sft_eval.json "$OUTDIR/"
export OMP_NUM_THREADS=1
python3 scripts/launch_parallel.py --out /tmp/sweep --gpus 1 --per-gpu "${PER_GPU:-18}" \
  --sweep arm="$ARMS" --sweep seed="$SEEDS" -- experiment=gsm8k_main scale=gpu model.path=/tmp/headline_model ${EXTRA:-} \
  2>&1 | tee "$OUTDIR/launch.log"
tar czf "$OUTDIR/sweep.tgz" --exclude='checkpoints' --exclude='.hydra' -C /tmp sweep
python3 -m pods.compare /tmp/sweep --rule paper --baseline none-n16-m16 --out /tmp/cmp 2>&1 | tail -25
