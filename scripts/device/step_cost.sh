#!/usr/bin/env bash
# Issue 38 on a lent machine of 1 to 4 GPUs: where a PODS 64/16 step's extra milliseconds go against a GRPO 16/16
# step (scripts/bench_step_cost.py), in three settings:
#   alone    the headline shape (model=headline, hard sums, 8 prompts, T=0.9) alone on one GPU, and a sweep of
#            rows per prompt at today's defaults (n = 8, 32, 128 at 8 prompts; 16 and 64 are the pair)
#   packed   the same pair with 6 processes on one GPU (3 GRPO, 3 PODS, side by side for 25 s of training clock
#            each), as headline runs are packed
#   lora3b   a random Qwen2 of Qwen2.5-3B's shape with LoRA r=64 (as results/h100_3b/, results/issue18_h100/:
#            --layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008, gradient checkpointing),
#            1 prompt, 512 new tokens
# each under every variant of VARIANTS ("name=overrides;..."; default: today's defaults, then one switch at a time
# on top of the last: rollout.hf.share_prefill, rollout.hf.size_cache_to_prompt (a static cache of this prompt
# width, not the widest), rollout.hf.release_cache=false (no re-capture per call)), one process per setting and
# variant; a variant past the budget is skipped and named in status.txt.
# The first GPU runs the first two variants, the sweep, then the rest. Then the rollout tests marked gpu (tests/rollout/test_share_prefill.py prints how many greedy tokens differ with
# rollout.hf.share_prefill). With 3 or more GPUs the settings run side by side (alone on the first GPU, packed on the
# second, lora3b on the third, the tests on a fourth or after lora3b); with fewer, one after another (alone,
# lora3b and packed in the first two variants, the tests, then the rest), each job under a limit from what is
# left of BUDGET seconds (default 330): on one GPU the later ones are skipped.
# Honours CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES=0 uses GPU 0 only.
#   bash scripts/device/step_cost.sh            # .whl carried (docs/gpu.md); results in $OUT, a short table last
# Then (after the first two variants alone) detokenize and reward before and after issue 38's host-work changes on
# the same rollouts, call by call (--host-ab: bench/host_work.py; the host's CPU, where that work runs).
# $OUT (8 files): table.md (the short table), alone.md, sweep.md, packed.md, lora3b.md (each variant's full table),
# host_ab.md, status.txt, step_cost.tgz (every results.json and log).
# SMOKE=1: the script's own test on a CPU, every setting shrunk to seconds (nothing from it is evidence).
set -o pipefail
export OMP_NUM_THREADS=2
O=${OUT:-/tmp/step_cost_out}; R=/tmp/step_cost_run/step_cost; rm -rf "$R"; mkdir -p "$R" "$O"
END=$((SECONDS + ${BUDGET:-330}))
V2="rollout.hf.share_prefill=true"; V3="$V2 rollout.hf.size_cache_to_prompt=true"; V4="$V3 rollout.hf.release_cache=false"
VARIANTS=${VARIANTS:-"before=;share_prefill=$V2;share_prefill+fit_cache=$V3;share_prefill+fit_cache+keep_cache=$V4"}
IFS=';' read -r -a VLIST <<< "$VARIANTS"
B3="--random-shape --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008
  --gradient-checkpointing --prompts-per-step 1 --completion-len 512"
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; EACH=1; ST=3; SW=2; PACKED_S=${PACKED_S:-3}
  IFS=, read -r -a GPUS <<< "${SMOKE_GPUS:-0}"  # SMOKE_GPUS=0,0,0: the side-by-side path
  B="python3 scripts/bench_step_cost.py --device cpu --threads 1 --prompts-per-step 1"
  SMALL="rollout.hf.compile=true model.max_completion_len=8"
  B3="--random-shape --lora --layers 2 --hidden 64 --vocab 512 --prompts-per-step 1 --completion-len 8"
else
  source scripts/device/setup.sh || exit 1
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -r -a GPUS <<< "$CUDA_VISIBLE_DEVICES"
  else mapfile -t GPUS < <(nvidia-smi --query-gpu=index --format=csv,noheader); fi
  EACH=3; ST=12; SW=10; SMALL=""
  B="python3 scripts/bench_step_cost.py --device cuda"
fi
NG=${#GPUS[@]}; echo "GPUs: ${GPUS[*]}; variants: ${VLIST[*]}"
PAIR="grpo16:none:16:16,pods64:max_variance:64:16"
job() {  # job <gpu> <limit s> <name> <command>...: one benchmark under a limit capped by what is left
  local g=$1 t=$2 n=$3 left=$((END - SECONDS)); shift 3
  [ "$t" -gt "$left" ] && t=$left
  if [ "$t" -lt 30 ]; then echo "$n skipped: $t s left" | tee -a "$R/status.txt"; return; fi
  echo "$(date +%T) $n on GPU $g, limit $t s"
  CUDA_VISIBLE_DEVICES=$g timeout -k 10 "$t" "$@" > "$R/$n.log" 2>&1
  local rc=$?  # 124: cut by its limit
  echo "$(date +%T) $n rc=$rc ($SECONDS s into the call)" | tee -a "$R/status.txt"
  tar czf "$O/step_cost.tgz" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null; cp "$R/status.txt" "$O/"
}
sets() { local s="${1#*=} $SMALL"; [ -n "${s// /}" ] && echo "--set $s"; }  # a variant's overrides as --set
alone() {  # alone <gpu> <variant>...
  local g=$1 v; shift
  for v in "$@"; do
    job "$g" 200 "alone_${v%%=*}" $B --steps $ST --skip $((ST / 4)) --settings "$PAIR" $(sets "$v") \
      --label "${v%%=*}" --pick-micro $([ "$v" = "${VLIST[0]}" ] && echo --prefill-ab) --out "$R/alone_${v%%=*}"
  done
}
sweep() {  # today's code (the first variant): which parts grow with rows
  local v=${VLIST[0]}
  job "$1" 170 sweep $B --steps $SW --skip $((SW / 3)) --settings "" --sweep 8,32,128 $(sets "$v") \
    --label "${v%%=*}" --out "$R/sweep"
}
host() {  # detokenize and reward before and after issue 38's host-work changes, alternating (bench/host_work.py)
  job "$1" 150 host_ab $B --settings "" --host-ab $(sets "${VLIST[0]}") --out "$R/host_ab"
}
packed() {  # packed <gpu> <variant>...: 3 GRPO and 3 PODS processes at once on one GPU, each for the same
  # seconds of training clock
  local g=$1 v i s pids; shift
  for v in "$@"; do
    local n="packed_${v%%=*}" left=$((END - SECONDS))
    [ "$left" -lt 60 ] && { echo "$n skipped: $left s left" | tee -a "$R/status.txt"; continue; }
    mkdir -p "$R/$n"; pids=(); echo "$(date +%T) $n on GPU $g"
    for i in $(seq 0 $((EACH - 1))); do
      for s in grpo16:none:16:16 pods64:max_variance:64:16; do
        CUDA_VISIBLE_DEVICES=$g timeout -k 10 $((left < 150 ? left : 150)) $B --steps 1000 --skip $((ST / 3)) \
          --settings $s --seed $i $(sets "$v max_train_time=${PACKED_S:-25}") --label "${v%%=*}" \
          --out "$R/$n/${s%%:*}_$i" > "$R/$n/${s%%:*}_$i.log" 2>&1 &
        pids+=($!)
      done
    done
    local rcs=""; for i in "${pids[@]}"; do wait "$i"; rcs="$rcs $?"; done  # 124: cut by its limit
    echo "$(date +%T) $n rc=$rcs ($SECONDS s into the call)" | tee -a "$R/status.txt"
  done
}
lora3b() {  # lora3b <gpu> <variant>...
  local g=$1 v; shift
  for v in "$@"; do
    job "$g" 200 "lora3b_${v%%=*}" $B $B3 --steps 3 --skip 1 --settings "$PAIR" $(sets "$v") --label "${v%%=*}" \
      --out "$R/lora3b_${v%%=*}"
  done
}
gpu_tests() {  # the rollout tests marked gpu: share_prefill's greedy token count, the graph loop against generate()
  [ "${SMOKE:-0}" = 1 ] && return
  job "$1" 200 gpu_tests python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/rollout/test_share_prefill.py \
    tests/rollout/test_hf.py
  grep -h "greedy tokens differ\|passed\|failed" "$R/gpu_tests.log" | tee -a "$R/status.txt"
}
if [ "$NG" -ge 3 ]; then
  (alone "${GPUS[0]}" "${VLIST[@]:0:2}"; host "${GPUS[0]}"; sweep "${GPUS[0]}"; alone "${GPUS[0]}" "${VLIST[@]:2}") & a=$!
  packed "${GPUS[1]}" "${VLIST[@]}" & b=$!
  (lora3b "${GPUS[2]}" "${VLIST[@]}"; [ "$NG" -lt 4 ] && gpu_tests "${GPUS[2]}") & c=$!
  [ "$NG" -ge 4 ] && gpu_tests "${GPUS[3]}"
  wait $a $b $c
else  # one after another, the first two variants of every setting first
  FIRST=("${VLIST[@]:0:2}"); REST=("${VLIST[@]:2}")
  alone "${GPUS[0]}" "${FIRST[@]}"; host "${GPUS[0]}"; lora3b "${GPUS[-1]}" "${FIRST[@]}"; packed "${GPUS[-1]}" "${FIRST[@]}"
  gpu_tests "${GPUS[0]}"; alone "${GPUS[0]}" "${REST[@]}"; sweep "${GPUS[0]}"
  lora3b "${GPUS[-1]}" "${REST[@]}"; packed "${GPUS[-1]}" "${REST[@]}"
fi
for n in alone sweep lora3b host_ab; do cat "$R"/${n}*/results.md > "$O/$n.md" 2>/dev/null; done
python3 scripts/step_cost_table.py "$R" --packed > "$O/packed.md" 2>/dev/null
cp "$R/status.txt" "$O/" 2>/dev/null
tar czf "$O/step_cost.tgz" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
python3 scripts/step_cost_table.py "$R" | tee "$O/table.md"
