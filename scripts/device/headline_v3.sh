#!/usr/bin/env bash
# Headline v3 (results/headline_v3/PLAN.md) on a machine of 4 GPUs, one phase per call:
#   bash scripts/device/headline_v3.sh pilot                       # 8 builds, pilot 4, choose one, ship it
#   bash scripts/device/headline_v3.sh confirm --seeds 1001-1012   # primary pair: GRPO 16/16 + PODS 64/16
#   bash scripts/device/headline_v3.sh arms --seeds 1101-1108      # the other four arms + their own GRPO
#   bash scripts/device/headline_v3.sh grid --seeds 1201-1204      # the n/m grid + GRPO 16/16 + PODS 64/16
# confirm/arms/grid read the frozen setting (results/headline_v3/frozen.env) and load the shipped policy
# (model=headline, pods/assets/headline), after checking its sha256 against the frozen one; they never build.
# Results land in $OUT (at most 8 files): <phase>.tgz (every run's metrics.jsonl, run_info.json, config.yaml
# and log), alone.tgz (the step-cost runs, each alone on a GPU), and a short table last.
# SMOKE=1 shrinks everything to a few minutes on a CPU (the script's own test; nothing from it is evidence).
set -o pipefail
PHASE=${1:?give a phase: pilot, confirm, arms or grid}; shift
SEEDS=""
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) SEEDS=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
seq_list() { local a=${1%-*} b=${1#*-}; seq -s, "$a" "$b"; }  # 1001-1004 -> 1001,1002,1003,1004
OUTDIR=${OUT:-/tmp/headline_v3_out}; mkdir -p "$OUTDIR"
WORK=/tmp/hv3; rm -rf "$WORK"; mkdir -p "$WORK"
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
  NGPU=1; HW="hardware=cpu"; WINDOW=8; EVERY=2; ALONE_S=3; NBUILD=2; NPILOT=2; PER=3
  BUILD="--steps 4 --batch-size 16 --d-model 64 --layers 2 --device cpu"
  EVAL="dataset.eval_task=data/arithmetic/eval_2k.jsonl dataset.eval_size=16 rollout.batch_size=64"
else
  source scripts/device/setup.sh || exit 1
  NGPU=$(nvidia-smi -L | wc -l); HW="hardware=gpu"; WINDOW=240; EVERY=10; ALONE_S=20; NBUILD=8; NPILOT=4; PER=6
  BUILD="--steps 550"
  EVAL="dataset.eval_task=data/arithmetic/eval_2k.jsonl eval.batch_size=1024 rollout.batch_size=512"
fi
export OMP_NUM_THREADS=2
[ "$NGPU" -ge 1 ] || { echo "no GPU found"; exit 1; }
source results/headline_v3/frozen.env 2>/dev/null || LR=1e-5  # the pilot runs at v2's frozen lr
GRPO=none-n16-m16; PODS=max_variance-n64-m16
# The common setting (PLAN.md): easy chain sums, 2,035 held-out eval questions (greedy), T=0.9, 8 prompts per
# step, 240 s of training clock, eval at the start and every 10 s (24 checkpoints after 0), no checkpoints.
COMMON="model=headline dataset=arithmetic_local $EVAL $HW sampling.temperature=0.9 algo.prompts_per_step=8
  max_steps=100000 max_train_time=$WINDOW eval.every_steps=0 eval.every_seconds=$EVERY eval.at_start=true
  checkpoint.every_seconds=0 checkpoint.every_steps=0 checkpoint.save_final=false optim.lr=$LR"
COMMON=$(echo $COMMON)
# Step cost, each run alone on a GPU: no eval, ALONE_S seconds of training clock (steps 3+ are read).
ALONE="model=headline dataset=arithmetic_local $EVAL $HW sampling.temperature=0.9 algo.prompts_per_step=8
  max_steps=100000 max_train_time=$ALONE_S eval.every_steps=0 eval.every_seconds=0 eval.at_start=false
  checkpoint.every_seconds=0 checkpoint.every_steps=0 checkpoint.save_final=false optim.lr=$LR seed=399"
ALONE=$(echo $ALONE)
launch() { python3 scripts/launch_parallel.py --gpus "$NGPU" "$@"; }
pack() {  # pack <name> <sweep dir>: the runs' records, configs and logs
  (cd "$(dirname "$2")" && tar czf "$OUTDIR/$1.tgz" "$(basename "$2")"/*/metrics.jsonl \
    "$(basename "$2")"/*/run_info.json "$(basename "$2")"/*/config.yaml "$(basename "$2")"/*.log 2>/dev/null)
}
time_alone() {  # time_alone <policy dir>...: GRPO and PODS of each policy, one run per GPU, side by side
  local cases=()
  for p in "$@"; do cases+=(--case "arm=$GRPO model.path=$p" --case "arm=$PODS model.path=$p"); done
  timeout 200 python3 scripts/launch_parallel.py --gpus "$NGPU" --per-gpu 1 --out "$WORK/alone" "${cases[@]}" \
    -- $ALONE 2>&1 | tee -a "$OUTDIR/launch.log"
  pack alone "$WORK/alone"
}

case $PHASE in
  pilot)
    # 1. Eight builds of v2's recipe (550 SFT steps), seeds 1-8, two per GPU side by side.
    for i in $(seq 1 $NBUILD); do
      CUDA_VISIBLE_DEVICES=$(( (i - 1) % NGPU )) timeout 240 python3 -m scripts.build_headline_model \
        --out "$WORK/cands/b$i" $BUILD --seed "$i" > "$WORK/build_b$i.log" 2>&1 &
    done
    wait
    # 2. Pilot the NPILOT builds whose greedy SFT eval lies nearest 0.32 (pilot 2's build, v2).
    PICK=$(python3 - "$WORK/cands" "$NPILOT" 2> "$OUTDIR/builds.md" <<'EOF'
import json, sys
from pathlib import Path
root, k = Path(sys.argv[1]), int(sys.argv[2])
ev = {d.name: json.loads((d / "sft_eval.json").read_text()) for d in sorted(root.iterdir()) if (d / "sft_eval.json").exists()}
print("| build | seed | greedy SFT eval | sample@T1 | pass@16 | sha256 |", "|---|---|---|---|---|---|", sep="\n", file=sys.stderr)
for n, e in ev.items():
    print(f"| {n} | {e['args']['seed']} | {e['greedy_accuracy']:.3f} | {e['sample_accuracy@T1']:.3f} | {e['pass@16@T1']:.3f} | {e['sha256']} |", file=sys.stderr)
pick = sorted(ev, key=lambda n: (abs(ev[n]["greedy_accuracy"] - 0.32), ev[n]["args"]["seed"]))[:k]
print(",".join(str(root / n) for n in pick))
EOF
    ) || { cat "$OUTDIR/builds.md"; exit 1; }
    cat "$OUTDIR/builds.md"; echo "piloted: $PICK"
    # 3. GRPO 16/16 seeds 301-304 and PODS 64/16 seeds 301-302 on each piloted build; GPU k holds GRPO seed
    #    300+k+1 of every build and two PODS runs.
    NG=$(( PER * 2 / 3 )); NP=$(( PER - NG ))
    timeout 430 bash -c "$(declare -f launch); NGPU=$NGPU
      launch --per-gpu $NG --out $WORK/pilot --sweep seed=$(seq_list 301-$((300 + NGPU))) --sweep model.path=$PICK --sweep arm=$GRPO -- $COMMON &
      launch --per-gpu $NP --out $WORK/pilot --sweep seed=301,302 --sweep model.path=$PICK --sweep arm=$PODS -- $COMMON &
      wait" 2>&1 | tee "$OUTDIR/launch.log"
    pack pilot "$WORK/pilot"
    # 4. Rank the builds passing (i), (ii), (iii), (v) by GRPO's rise; time the top two alone for (iv).
    TOP=$(python3 - "$WORK/pilot" "$WINDOW" "$EVERY" <<'EOF'
import math, sys
from pathlib import Path
from pods.analysis.pilot import Criteria, check_candidate, group_by_config
groups = group_by_config(Path(sys.argv[1]), "model.path")
rows = {k: check_candidate(v, float(sys.argv[3]), float(sys.argv[2]), Criteria(max_step_ratio=math.inf)) for k, v in groups.items()}
ok = sorted((k for k, r in rows.items() if all(r[c] for c in ("i", "ii", "iii", "v"))), key=lambda k: -rows[k]["rise"])
print(" ".join(ok[:2]))
EOF
    )
    echo "timed alone: ${TOP:-none passes (i), (ii), (iii), (v)}"
    [ -n "$TOP" ] && time_alone $TOP
    # 5. The pre-registered checks, (iv) read on the runs timed alone; ship the chosen build.
    ALONE_ARG=""; [ -d "$WORK/alone" ] && ALONE_ARG="--alone $WORK/alone"
    python3 scripts/pilot_checks.py "$WORK/pilot" --key model.path --grid-step $EVERY --x-max $WINDOW \
      --max-step-ratio 1.35 $ALONE_ARG | tee "$OUTDIR/checks.md"
    CHOSEN=$(sed -n 's/^Chosen (largest GRPO rise among passing candidates): //p' "$OUTDIR/checks.md")
    (cd "$WORK" && tar czf "$OUTDIR/builds.tgz" build_b*.log cands/*/sft_eval.json cands/*/model.sha256)
    if [ -d "$CHOSEN" ]; then  # the shipped policy, in parts under the 16 MiB a file limit of $OUT
      tar cf - -C "$CHOSEN" . | split -b 15m - "$OUTDIR/policy.tar.part-"
      echo "shipped: $CHOSEN $(cat "$CHOSEN/model.sha256")"
    fi ;;
  confirm|arms|grid)
    [ -n "$SEEDS" ] || { echo "give --seeds A-B"; exit 2; }
    [ -f results/headline_v3/frozen.env ] || { echo "no frozen setting: commit results/headline_v3/frozen.env first"; exit 1; }
    SHIPPED=$(python3 -c "import pods; print(pods.ASSETS / 'headline')")
    GOT=$(sha256sum "$SHIPPED/model.safetensors" | cut -d' ' -f1)
    [ "$GOT" = "$POLICY_SHA256" ] || { echo "shipped policy sha256 $GOT != frozen $POLICY_SHA256"; exit 1; }
    S=$(seq_list "$SEEDS"); NS=$(echo "$S" | tr ',' ' ' | wc -w)
    per() { echo $(( ($1 * NS + NGPU - 1) / NGPU )); }  # runs per GPU for <arms> arms x NS seeds, GPU by GPU
    if [ "$PHASE" = confirm ]; then  # GPU k: its share of the seeds, both arms of each
      time_alone "$SHIPPED"
      timeout 450 bash -c "$(declare -f launch); NGPU=$NGPU
        launch --per-gpu $(per 2) --out $WORK/$PHASE --sweep seed=$S --sweep arm=$GRPO,$PODS -- $COMMON" \
        2>&1 | tee -a "$OUTDIR/launch.log"
    elif [ "$PHASE" = arms ]; then  # GRPO 16/16 of the call's own seeds + the four other arms
      timeout 560 bash -c "$(declare -f launch); NGPU=$NGPU
        launch --per-gpu $(per 5) --out $WORK/$PHASE --sweep seed=$S \
          --sweep arm=$GRPO,random-n64-m16,max_reward-n64-m16,none-n64-m64,greso+dynamic_sampling+max_variance-n64-m16 -- $COMMON" \
        2>&1 | tee -a "$OUTDIR/launch.log"
    else  # GRPO 16/16, PODS 64/16, n in {32,128,256} at m=16, m in {2,4,8} at n=64
      timeout 560 bash -c "$(declare -f launch); NGPU=$NGPU
        launch --per-gpu $(per 8) --out $WORK/$PHASE --sweep seed=$S --case arm=$GRPO --case arm=$PODS \
          --case 'arm=$PODS selector.n=32' --case 'arm=$PODS selector.n=128' --case 'arm=$PODS selector.n=256' \
          --case 'arm=$PODS selector.m=2' --case 'arm=$PODS selector.m=4' --case 'arm=$PODS selector.m=8' -- $COMMON" \
        2>&1 | tee -a "$OUTDIR/launch.log"
    fi
    pack "$PHASE" "$WORK/$PHASE"
    {  # the short table: the call's own paper-rule read, and its step costs shared and alone
      python3 -m pods.compare "$WORK/$PHASE" --rule paper --baseline $GRPO --x-min 0 --grid-step $EVERY \
        --x-max $WINDOW --out "$WORK/cmp" > /dev/null && cat "$WORK/cmp/summary.md"
      python3 scripts/phase_totals.py "$WORK/$PHASE"
      [ -d "$WORK/alone" ] && echo && echo "Alone on a GPU:" && python3 scripts/phase_totals.py "$WORK/alone"
    } 2>&1 | tee "$OUTDIR/table.md" ;;
  *) echo "unknown phase $PHASE"; exit 2 ;;
esac
exit 0
