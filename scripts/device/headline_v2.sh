#!/usr/bin/env bash
# The v2 GPU headline (results/headline_v2/PLAN.md) on a 4-GPU machine, one phase per call:
#   bash scripts/device/headline_v2.sh pilot      # pilot 1: 4 lr candidates: GRPO 16/16 x 4 seeds, PODS 64/16 x 2 seeds each
#   bash scripts/device/headline_v2.sh pilot2     # pilot 2 (PLAN.md, amendment 1): the same at higher lr, new seeds
#   bash scripts/device/headline_v2.sh confirm1   # 6 variants x seeds 11-14 (GPU k: seed 10+k of every variant)
#   bash scripts/device/headline_v2.sh confirm2   # 6 variants x seeds 15-18
#   bash scripts/device/headline_v2.sh grid       # GRPO 16/16, n in {32,128,256} at m=16, m in {2,4,8} at n=64; seeds 11-14
# The confirmatory phases run this script as it is at the pinned commit 6035803 (+variant=grpo,pods,...; PLAN.md,
# amendment 3); this copy is spelled for today's config (arm=<variant>) and computes the same runs.
# confirm*/grid read the frozen setting (LR) from results/headline_v2/frozen.env, committed after the pilot.
# Results: $OUT/<phase>.tgz (metrics.jsonl, run_info.json, config.yaml and log of every run), $OUT/<phase>_launch.log.
set -o pipefail
PHASE=${1:?give a phase: pilot, confirm1, confirm2 or grid}
source scripts/device/setup.sh || exit 1
OUTDIR=${OUT:-/tmp/headline_v2_out}; mkdir -p "$OUTDIR"
SWEEP=/tmp/$PHASE
python3 -m scripts.build_headline_model --out /tmp/headline_model --steps 550 > "$OUTDIR/build.log" 2>&1
tail -3 "$OUTDIR/build.log"; cp /tmp/headline_model/sft_eval.json "$OUTDIR/" 2>/dev/null
export OMP_NUM_THREADS=2
# The common setting (PLAN.md): 10.7M policy, easy chain sums, 2,035 held-out eval questions (greedy),
# T=0.9, 8 prompts per step, 240 s of training clock, eval at the start and every 16 s (15 checkpoints T > 0).
COMMON="model=headline model.path=/tmp/headline_model dataset=arithmetic_local dataset.eval_task=data/arithmetic/eval_2k.jsonl
  hardware=gpu sampling.temperature=0.9 rollout.batch_size=512 algo.prompts_per_step=8 max_steps=100000
  max_train_time=240 eval.every_steps=0 eval.every_seconds=16 eval.at_start=true eval.batch_size=1024
  checkpoint.every_seconds=0 checkpoint.every_steps=0 checkpoint.save_final=false"
COMMON=$(echo $COMMON)  # one line: it is pasted into the bash -c commands below
launch() {  # launch <per-gpu> <sweep args...> -- <extra overrides>
  local per=$1; shift
  python3 scripts/launch_parallel.py --out "$SWEEP" --gpus 4 --per-gpu "$per" "$@"
}
case $PHASE in
  pilot|pilot2)
    LRS=5e-7,1e-6,2e-6,4e-6; S=10  # pilot 1: seeds 101-104
    [ "$PHASE" = pilot2 ] && LRS=1e-5,2e-5,4e-5,8e-5 && S=20  # pilot 2: seeds 201-204
    # GPU k: GRPO seed S0+k at every lr (4 runs) + 2 PODS runs (seeds S01-S02 x 4 lrs spread over the GPUs)
    timeout 480 bash -c "$(declare -f launch); SWEEP=$SWEEP
      launch 4 --sweep seed=${S}1,${S}2,${S}3,${S}4 --sweep optim.lr=$LRS --sweep arm=none-n16-m16 -- $COMMON &
      launch 2 --sweep seed=${S}1,${S}2 --sweep optim.lr=$LRS --sweep arm=max_variance-n64-m16 -- $COMMON &
      wait" 2>&1 | tee "$OUTDIR/${PHASE}_launch.log" ;;
  confirm1|confirm2|grid)
    source results/headline_v2/frozen.env || { echo "no frozen setting: commit results/headline_v2/frozen.env first"; exit 1; }
    SEEDS=11,12,13,14; [ "$PHASE" = confirm2 ] && SEEDS=15,16,17,18
    if [ "$PHASE" = grid ]; then  # 7 runs per GPU, GPU k: seed 10+k of GRPO 16/16 (the grid's baseline) and 6 n/m points
      timeout 560 bash -c "$(declare -f launch); SWEEP=$SWEEP
        launch 7 --sweep seed=$SEEDS --case arm=none-n16-m16 --case 'arm=max_variance-n64-m16 selector.n=32' \
          --case 'arm=max_variance-n64-m16 selector.n=128' --case 'arm=max_variance-n64-m16 selector.n=256' \
          --case 'arm=max_variance-n64-m16 selector.m=2' --case 'arm=max_variance-n64-m16 selector.m=4' \
          --case 'arm=max_variance-n64-m16 selector.m=8' \
          -- $COMMON optim.lr=$LR" 2>&1 | tee "$OUTDIR/${PHASE}_launch.log"
    else
      timeout 560 bash -c "$(declare -f launch); SWEEP=$SWEEP
        launch 6 --sweep seed=$SEEDS --sweep arm=none-n16-m16,max_variance-n64-m16,random-n64-m16,max_reward-n64-m16,none-n64-m64,greso+dynamic_sampling+max_variance-n64-m16 -- $COMMON optim.lr=$LR" \
        2>&1 | tee "$OUTDIR/${PHASE}_launch.log"
    fi ;;
  *) echo "unknown phase $PHASE"; exit 2 ;;
esac
cd /tmp && tar czf "$OUTDIR/$PHASE.tgz" $PHASE/*/metrics.jsonl $PHASE/*/run_info.json $PHASE/*/config.yaml \
  $PHASE/*/.hydra/config.yaml $PHASE/*.log 2>/dev/null; cd - >/dev/null
[[ "$PHASE" == pilot* ]] && python3 scripts/pilot_checks.py "$SWEEP" --grid-step 16 --x-max 240
exit 0
