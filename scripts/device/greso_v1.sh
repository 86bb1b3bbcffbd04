#!/usr/bin/env bash
# GRESO v1 (results/greso_v1/PLAN.md): GRESO + dynamic sampling against dynamic sampling, the shipped headline
# policy on the first N hard chain sums, headline v4's frozen setting otherwise, 4 runs per GPU, any number of GPUs:
#   bash scripts/device/greso_v1.sh pilot                      # DS at N = 3,000 / 6,000 / 12,000 + GRESO at 6,000
#   bash scripts/device/greso_v1.sh confirm --seeds 6105-6106  # the primary pair, 2 seeds a GPU
#   bash scripts/device/greso_v1.sh arms --seeds 6101-6101     # all four arms, 1 seed a GPU
# confirm and arms read N from results/greso_v1/frozen.env (TRAIN_SIZE=, committed after the pilot). $OUT gets
# <phase>.tgz (every run's records, config and log) and table.md (the call's table, printed last).
# SMOKE=1: every phase shrunk to minutes on a CPU (the script's own test; not evidence).
set -o pipefail
PHASE=${1:?give a phase: pilot, confirm or arms}; shift; SEEDS=""
while [ $# -gt 0 ]; do case $1 in --seeds) SEEDS=$2; shift 2 ;; *) echo "unknown argument $1"; exit 2 ;; esac; done
case $PHASE in pilot|confirm|arms) ;; *) echo "unknown phase $PHASE (pilot, confirm or arms)"; exit 2 ;; esac
[[ -z "$SEEDS" || "$SEEDS" =~ ^[0-9]+-[0-9]+$ ]] || { echo "--seeds takes A-B, e.g. 6105-6106; got $SEEDS"; exit 2; }
FROZEN=${FROZEN:-results/greso_v1/frozen.env}
if [ "$PHASE" != pilot ]; then
  [ -n "$SEEDS" ] || { echo "give --seeds A-B"; exit 2; }
  [ -f "$FROZEN" ] || { echo "no frozen setting: commit $FROZEN after the pilot first (PLAN.md)"; exit 1; }
fi
O=${OUT:-/tmp/greso_v1_out}; W=${GV1_WORK:-/tmp/gv1}; rm -rf "$W"; mkdir -p "$W" "$O"
LR=""; WARMUP_STEPS=""; SETTING_EXTRA=""; WINDOW_S=""; POLICY_SHA256=""; TRAIN_SIZE=""
source results/headline_v4/frozen.env  # the material (PLAN.md): lr, warm-up, eval, 16 prompts a step, 360 s
[ "$PHASE" = pilot ] || source "$FROZEN"
DS=dynamic_sampling+none-n16-m16; GR=greso+dynamic_sampling+none-n16-m16
GP=greso+dynamic_sampling+max_variance-n64-m16; GRPO=none-n16-m16
SIZES=(3000 6000 12000); PILOT_SEED0=6000
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; IDS=(0); HW="hardware=cpu"; WIN=0; EVERY=1; LIMIT=900
  SIZES=(16 32 64); SETTING_EXTRA="eval.temperature=0.9 algo.prompts_per_step=2"
  SMALL="max_steps=5 eval.every_steps=1 eval.every_seconds=0 dataset.eval_size=8 model.max_completion_len=12 dynamic_sampling.max_rounds=1"
  READ="--x step --grid-step 1 --x-max 5"
else
  source scripts/device/setup.sh || exit 1
  export OMP_NUM_THREADS=2
  mapfile -t IDS < <(nvidia-smi --query-gpu=index --format=csv,noheader)
  HW="hardware=gpu"; WIN=${WINDOW_S:-360}; EVERY=10; LIMIT=585
  SMALL="max_steps=100000 eval.every_steps=0 eval.every_seconds=$EVERY"; READ="--grid-step $EVERY --x-max $WIN"
  GOT=$(sha256sum pods/assets/headline/model.safetensors | cut -d' ' -f1)
  [ "$GOT" = "$POLICY_SHA256" ] || { echo "shipped policy sha256 $GOT != frozen $POLICY_SHA256"; exit 1; }
fi
NGPU=${#IDS[@]}
echo "pods/ sources sha1 $(find pods -name '*.py' -type f | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-12)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); phase $PHASE; $NGPU GPUs; window ${WIN}s; N=${TRAIN_SIZE:-pilot}"
C="model=headline dataset=arithmetic_hard_local dataset.eval_task=data/arithmetic_hard/eval_2k.jsonl $HW
  sampling.temperature=0.9 max_train_time=$WIN eval.at_start=true checkpoint.every_seconds=0
  checkpoint.every_steps=0 checkpoint.save_final=false optim.lr=$LR optim.warmup_steps=$WARMUP_STEPS $SETTING_EXTRA $SMALL"
C=$(echo $C)
seq_list() { local a=${1%-*} b=${1#*-}; seq -s, "$a" "$b"; }
if [ "$PHASE" = pilot ]; then
  S=$(seq -s, $((PILOT_SEED0 + 1)) $((PILOT_SEED0 + NGPU)))
  ARGS=(--sweep "seed=$S" --case "arm=$DS dataset.train_size=${SIZES[0]}" --case "arm=$DS dataset.train_size=${SIZES[1]}"
    --case "arm=$DS dataset.train_size=${SIZES[2]}" --case "arm=$GR dataset.train_size=${SIZES[1]}"); PER=4
else
  S=$(seq_list "$SEEDS"); NS=$(echo "$S" | tr ',' ' ' | wc -w); C="$C dataset.train_size=$TRAIN_SIZE"
  if [ "$PHASE" = confirm ]; then ARGS=(--sweep "seed=$S" --sweep "arm=$DS,$GR"); K=2
  else ARGS=(--sweep "seed=$S" --sweep "arm=$DS,$GR,$GP,$GRPO"); K=4; fi
  PER=4; [ "${SMOKE:-0}" = 1 ] && PER=$(( K * NS ))
  [ "${SMOKE:-0}" = 1 ] || [ $(( K * NS )) = $(( PER * NGPU )) ] || {
    echo "$PHASE runs 4 runs per GPU (PLAN.md): give $(( PER * NGPU / K )) seeds per call on $NGPU GPUs, not $NS"; exit 2; }
fi
export CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${IDS[*]}")
timeout $(( LIMIT - SECONDS - 30 )) python3 scripts/launch_parallel.py --gpus "$NGPU" --per-gpu "$PER" --out "$W/$PHASE" \
  "${ARGS[@]}" -- $C 2>&1 | tee "$O/launch.log"
(cd "$W" && tar czf "$O/$PHASE.tgz" --exclude='*.pt' --exclude='*.safetensors' "$PHASE")
{
  if [ "$PHASE" = pilot ]; then
    python3 scripts/greso_pilot_checks.py "$W/pilot" $READ --chosen-env "$O/chosen.env"
  else
    python3 -m pods.compare "$W/$PHASE" --rule paper --baseline $DS --x-min 0 $READ --out "$W/cmp" > /dev/null \
      && cat "$W/cmp/summary.md"
    echo; python3 scripts/greso_reads.py "$W/$PHASE" --baseline $DS $READ
  fi
  echo; python3 scripts/phase_totals.py "$W/$PHASE"
} > "$O/table.md" 2>&1
cat "$O/table.md"; echo "call done in ${SECONDS}s"
