#!/usr/bin/env bash
# Headline v4 (results/headline_v4/PLAN.md): the shipped policy on the hard chain sums, one phase per call on a
# machine of 3 or 4 GPUs (all of them, or those CUDA_VISIBLE_DEVICES lists: `CUDA_VISIBLE_DEVICES=1,2,3`):
#   bash scripts/device/headline_v4.sh pilot                       # one setting per GPU, per-seed checks
#   bash scripts/device/headline_v4.sh confirm --seeds 4101-4108   # primary pair: GRPO 16/16 + PODS 64/16
#   bash scripts/device/headline_v4.sh arms --seeds 4201-4204      # the other four arms + their own GRPO
#   bash scripts/device/headline_v4.sh grid --seeds 4301-4304      # the n/m grid + GRPO 16/16 + PODS 64/16
# Every phase checks the shipped policy's sha256 (model=headline, pods/assets/headline) and never builds one.
# confirm/arms/grid read the frozen setting ($FROZEN, default results/headline_v4/frozen.env).
# Results land in $OUT: <phase>.tgz (every run's metrics.jsonl, run_info.json, config.yaml and log), alone.tgz
# (the step-cost runs, each alone on a GPU), launch.log, and the call's own table (checks.md or table.md).
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
case $PHASE in pilot|confirm|arms|grid) ;; *) echo "unknown phase $PHASE (pilot, confirm, arms or grid)"; exit 2 ;; esac
[[ -z "$SEEDS" || "$SEEDS" =~ ^[0-9]+-[0-9]+$ ]] || { echo "--seeds takes A-B, e.g. 4101-4108; got $SEEDS"; exit 2; }
if [ "$PHASE" != pilot ]; then  # refused here, before the wheels' install or any run
  [ -n "$SEEDS" ] || { echo "give --seeds A-B"; exit 2; }
  [ -f "${FROZEN:-results/headline_v4/frozen.env}" ] || {
    echo "no frozen setting: commit ${FROZEN:-results/headline_v4/frozen.env} after the pilot first"; exit 1; }
fi
seq_list() { local a=${1%-*} b=${1#*-}; seq -s, "$a" "$b"; }  # 4101-4104 -> 4101,4102,4103,4104
OUTDIR=${OUT:-/tmp/headline_v4_out}; mkdir -p "$OUTDIR"
WORK=${HV4_WORK:-/tmp/hv4}; rm -rf "$WORK"; mkdir -p "$WORK"  # scratch, emptied first
FROZEN=${FROZEN:-results/headline_v4/frozen.env}
POLICY_SHA256=43a22e9fca075a1fbc0895f117a77af9bf764433e7835b462a46e11860dd53ba  # v3's shipped policy
# The pilot's settings (PLAN.md): name, lr, warm-up steps; setting k runs on GPU k, the 4th only on 4 GPUs.
SETTINGS=("s1 1e-5 0" "s2 2e-5 100" "s3 4e-5 100" "s4 4e-5 300")
# PILOT=2 (PLAN.md, amendment 1): pilot 2's settings, "name lr warm-up [extra overrides]", and its fresh seeds.
SAMPLED="eval.temperature=0.9 eval.num_samples=2"  # amendment 1's eval: the training temperature, 2 samples
if [ "${PILOT:-1}" = 2 ]; then SETTINGS=("t1 1e-5 0 $SAMPLED"); PILOT_SEED0=4010
# PILOT=3 (amendment 3): prompts per step x lr, the sampled eval, a 360-s window, no step-cost pair in the call
elif [ "${PILOT:-1}" = 3 ]; then
  # in the order they run on fewer GPUs: on 2, u1 and u4 (the batch lever at the lr that does not harm)
  SETTINGS=("u1 1e-5 0 $SAMPLED algo.prompts_per_step=16" "u4 1e-5 0 $SAMPLED algo.prompts_per_step=32"
    "u3 1.5e-5 0 $SAMPLED algo.prompts_per_step=16" "u2 1.5e-5 0 $SAMPLED")
  PILOT_SEED0=4020; WINDOW_S=360; ALONE_PAIR=0
else PILOT_SEED0=4000; fi
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
  # Runs bounded by steps, read per step: a loaded CPU's steps may outlast any clock window.
  IDS=(0); HW="hardware=cpu"; WINDOW=8; EVERY=2; ALONE_S=3; PER=3; LIMIT=${LIMIT:-900}
  SMOKE_OVR="max_steps=4 max_train_time=0 eval.every_steps=1 eval.every_seconds=0"; READ="--x step --grid-step 1 --x-max 4"
  SETTINGS=("${SETTINGS[@]:0:2}"); PILOT_GRPO=$((PILOT_SEED0 + 1))-$((PILOT_SEED0 + 2))
  # 64 training rows (not the file's 20,000), one prompt a step, 12 new tokens: the same runs and reads at a
  # fraction of the CPU time (the per-seed checks need 5 evals), and the PODS run alone reaches step 3 in ALONE_S
  # (v4's rollout.batch_size=64 here; headline v5's HV_BATCHES="" leaves the sizes to the defaults, as on a GPU)
  EVAL="dataset.train_size=64 dataset.eval_size=16 model.max_completion_len=12 ${HV_BATCHES-rollout.batch_size=64}"; PPS=1
else
  source scripts/device/setup.sh || exit 1
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -r -a IDS <<< "$CUDA_VISIBLE_DEVICES"
  else mapfile -t IDS < <(nvidia-smi --query-gpu=index --format=csv,noheader); fi
  HW="hardware=gpu"; WINDOW=300; EVERY=10; ALONE_S=20; PER=4; LIMIT=${LIMIT:-585}
  SMOKE_OVR=""; READ="--grid-step $EVERY --x-max $WINDOW"
  PILOT_GRPO=$((PILOT_SEED0 + 1))-$((PILOT_SEED0 + 3))
  # v4's generate-call sizes; headline v5 (scripts/device/headline_v5.sh) sets HV_BATCHES="" : the defaults
  EVAL=${HV_BATCHES-"eval.batch_size=1024 rollout.batch_size=512"}; PPS=8
fi
NGPU=${#IDS[@]}
[ "$NGPU" -ge 1 ] || { echo "no GPU found"; exit 1; }
export OMP_NUM_THREADS=2 CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${IDS[*]}")
echo "devices: ${IDS[*]} ($NGPU); phase $PHASE; window ${WINDOW}s; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# EXTRA: overrides for every run of the call beyond PLAN.md's (e.g. rollout.hf.share_prefill=true, issue 38),
# given to the pilot as an environment variable and frozen with the chosen setting; recorded in every config.yaml.
if [ "$PHASE" = pilot ]; then
  LR=1e-5; WARMUP_STEPS=0  # the alone timing's setting (lr does not change a step's cost)
  EXTRA=${EXTRA:-}
else
  LR=""; WARMUP_STEPS=""; POLICY_SHA256=""; EXTRA=""; SETTING_EXTRA=""  # only frozen.env sets them
  WINDOW_S=""; ALONE_PAIR=""  # frozen.env may set them (amendment 3); unset: 300 s and the alone pair
  source "$FROZEN"
  [ -n "$LR" ] && [ -n "$WARMUP_STEPS" ] && [ -n "$POLICY_SHA256" ] || {
    echo "$FROZEN needs LR=, WARMUP_STEPS= and POLICY_SHA256="; exit 1; }
fi
# the window (seconds of training clock) of the pilot's settings or the frozen one; SMOKE keeps its own
if [ "${SMOKE:-0}" != 1 ] && [ -n "${WINDOW_S:-}" ]; then
  [[ "$WINDOW_S" =~ ^[0-9]+$ ]] || { echo "WINDOW_S=$WINDOW_S: not a whole number of seconds"; exit 1; }
  WINDOW=$WINDOW_S; READ="--grid-step $EVERY --x-max $WINDOW"
fi
ALONE_PAIR=${ALONE_PAIR:-1}
echo "window ${WINDOW}s of training clock; step-cost pair alone: $([ "$ALONE_PAIR" = 1 ] && echo yes || echo no)"
GOT=$(sha256sum "$(python3 -c "import pods; print(pods.ASSETS / 'headline')")/model.safetensors" | cut -d' ' -f1)
[ "$GOT" = "$POLICY_SHA256" ] || { echo "shipped policy sha256 $GOT != frozen $POLICY_SHA256"; exit 1; }
GRPO=none-n16-m16; PODS=max_variance-n64-m16
# The common setting (PLAN.md): hard chain sums, the 2,000 held-out questions of data/arithmetic_hard/eval_2k.jsonl
# (greedy), T=0.9, 8 prompts per step, WINDOW s of training clock, eval at the start and every EVERY s.
common() {  # common <lr> <warm-up steps>
  echo "model=headline dataset=arithmetic_hard_local dataset.eval_task=data/arithmetic_hard/eval_2k.jsonl $EVAL $HW
    sampling.temperature=0.9 algo.prompts_per_step=$PPS max_steps=100000 max_train_time=$WINDOW eval.every_steps=0
    eval.every_seconds=$EVERY eval.at_start=true checkpoint.every_seconds=0 checkpoint.every_steps=0
    checkpoint.save_final=false optim.lr=$1 optim.warmup_steps=$2 $EXTRA ${SETTING_EXTRA:-} $SMOKE_OVR"
}
COMMON=$(echo $(common "$LR" "$WARMUP_STEPS"))
echo "lr $LR, warm-up $WARMUP_STEPS steps (in the pilot: the step-cost runs; each setting has its own); extra overrides: ${EXTRA:-none}; the setting's: ${SETTING_EXTRA:-none}"
# Step cost, each run alone on a GPU: no eval, ALONE_S seconds of training clock, seed 4099 (steps 3+ are read).
ALONE="$(echo $(common "$LR" "$WARMUP_STEPS")) max_train_time=$ALONE_S eval.every_seconds=0 eval.every_steps=0
  eval.at_start=false eval.at_end=false seed=4099"
ALONE=$(echo $ALONE)
left() {  # seconds left before the call's limit, keeping $1 for what follows (at least 1: timeout 0 never ends)
  local n=$(( LIMIT - SECONDS - $1 )); echo $(( n > 1 ? n : 1 ))
}
pack() {  # pack <name> <dir>: the runs' records, configs and logs
  (cd "$(dirname "$2")" && tar czf "$OUTDIR/$1.tgz" --exclude='*.pt' --exclude='*.safetensors' "$(basename "$2")")
}
time_alone() {  # GRPO and PODS of the call's setting, each alone on a GPU (side by side on two GPUs)
  [ "$ALONE_PAIR" = 1 ] || { echo "no step-cost pair alone in this call (ALONE_PAIR=0)"; return 0; }
  timeout "$(left 440)" python3 scripts/launch_parallel.py --gpus "$(( NGPU < 2 ? NGPU : 2 ))" --per-gpu 1 \
    --out "$WORK/alone" --case "arm=$GRPO" --case "arm=$PODS" -- $ALONE 2>&1 | tee -a "$OUTDIR/launch.log"
  pack alone "$WORK/alone"
}

# confirm/arms/grid: the call's runs, placed seed first so that GPU k holds its seeds' runs of every arm; the
# runs per GPU are fixed by PLAN.md (confirm 4, arms 5, grid 8), so the seeds per call follow from the GPUs.
if [ "$PHASE" != pilot ]; then
  S=$(seq_list "$SEEDS"); NS=$(echo "$S" | tr ',' ' ' | wc -w)
  if [ "$PHASE" = confirm ]; then  # GRPO 16/16 and PODS 64/16 of each seed
    ARGS=(--sweep "seed=$S" --sweep "arm=$GRPO,$PODS"); K=2; R=4
  elif [ "$PHASE" = arms ]; then  # GRPO 16/16 of the call's own seeds + the four other arms
    ARGS=(--sweep "seed=$S" --sweep "arm=$GRPO,random-n64-m16,max_reward-n64-m16,none-n64-m64,greso+dynamic_sampling+max_variance-n64-m16")
    K=5; R=5
  else  # GRPO 16/16, PODS 64/16, n in {32,128,256} at m=16, m in {2,4,8} at n=64
    ARGS=(--sweep "seed=$S" --case "arm=$GRPO" --case "arm=$PODS" --case "arm=$PODS selector.n=32"
      --case "arm=$PODS selector.n=128" --case "arm=$PODS selector.n=256" --case "arm=$PODS selector.m=2"
      --case "arm=$PODS selector.m=4" --case "arm=$PODS selector.m=8"); K=8; R=8
  fi
  if [ "${SMOKE:-0}" = 1 ]; then R=$(( K * NS ))
  elif [ $(( K * NS )) != $(( R * NGPU )) ]; then
    echo "$PHASE runs $R runs per GPU (PLAN.md): give $(( R * NGPU / K )) seeds per call on $NGPU GPUs, not $NS"; exit 2
  fi
fi

time_alone
case $PHASE in
  pilot)
    # Setting k on GPU k: GRPO 16/16 seeds 4001-4003 and PODS 64/16 seed 4001 (4 runs per GPU).
    # (SMOKE: both settings side by side on the CPU.)
    N=$(( NGPU < ${#SETTINGS[@]} ? NGPU : ${#SETTINGS[@]} )); [ "${SMOKE:-0}" = 1 ] && N=${#SETTINGS[@]}
    CASES=(); for s in $(seq_list $PILOT_GRPO | tr , ' '); do CASES+=(--case "arm=$GRPO seed=$s"); done
    CASES+=(--case "arm=$PODS seed=$((PILOT_SEED0 + 1))")
    for k in $(seq 0 $(( N - 1 ))); do
      read -r name lr warm extra <<< "${SETTINGS[$k]}"
      C=$(echo $(common "$lr" "$warm") $extra)
      mkdir -p "$WORK/pilot/$name-lr$lr-w$warm"  # the setting's own overrides, for chosen.env
      echo "$extra" > "$WORK/pilot/$name-lr$lr-w$warm/setting_extra.txt"
      CUDA_VISIBLE_DEVICES=${IDS[$(( k % NGPU ))]} timeout "$(left 25)" python3 scripts/launch_parallel.py \
        --gpus 1 --per-gpu "$PER" --out "$WORK/pilot/$name-lr$lr-w$warm" "${CASES[@]}" -- $C \
        > "$WORK/launch_$name.log" 2>&1 &
    done
    wait
    cat "$WORK"/launch_*.log | tee -a "$OUTDIR/launch.log"
    pack pilot "$WORK/pilot"
    python3 scripts/pilot_seed_checks.py "$WORK/pilot" $READ --alone "$WORK/alone" \
      --chosen-env "$OUTDIR/chosen.env" 2>&1 | tee "$OUTDIR/checks.md"
    if [ -f "$OUTDIR/chosen.env" ]; then  # frozen.env as PLAN.md has it, to be committed before any confirm
      echo "POLICY_SHA256=$POLICY_SHA256" >> "$OUTDIR/chosen.env"
      # the chosen setting's own overrides (SETTING_EXTRA=, written by the checks), window and alone pair
      [ "$WINDOW" != 300 ] && [ "${SMOKE:-0}" != 1 ] && echo "WINDOW_S=$WINDOW" >> "$OUTDIR/chosen.env"
      [ "$ALONE_PAIR" = 1 ] || echo "ALONE_PAIR=0" >> "$OUTDIR/chosen.env"
      [ -n "$EXTRA" ] && echo "EXTRA=\"$EXTRA\"" >> "$OUTDIR/chosen.env"
      echo "chosen setting (commit as results/headline_v4/frozen.env):"; cat "$OUTDIR/chosen.env"
    fi ;;
  *)
    timeout "$(left 40)" python3 scripts/launch_parallel.py --gpus "$NGPU" --per-gpu "$R" \
      --out "$WORK/$PHASE" "${ARGS[@]}" -- $COMMON 2>&1 | tee -a "$OUTDIR/launch.log"
    pack "$PHASE" "$WORK/$PHASE"
    {  # the call's own table: paper-rule read, per-seed checks of every arm, step costs shared and alone
      python3 -m pods.compare "$WORK/$PHASE" --rule paper --baseline $GRPO --x-min 0 $READ --out "$WORK/cmp" \
        > /dev/null && cat "$WORK/cmp/summary.md"
      echo; python3 scripts/pilot_seed_checks.py "$WORK/$PHASE" $READ --alone "$WORK/alone"
      echo; python3 scripts/phase_totals.py "$WORK/$PHASE"
      [ "$ALONE_PAIR" = 1 ] && { echo; echo "Alone on a GPU:"; python3 scripts/phase_totals.py "$WORK/alone"; }
    } 2>&1 | tee "$OUTDIR/table.md" ;;
esac
echo "call done in ${SECONDS}s"
exit 0
