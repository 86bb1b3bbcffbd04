#!/usr/bin/env bash
# The model-size ladder (issue 52): GRPO 16/16 against PODS 64/16, each alone on one GPU, pods's defaults only
# (rollout.batch_size=auto, decode_attention=auto, share_prefill=auto: no rollout flags), 16 prompts per step,
# through scripts/bench_step_cost.py, at the shipped headline policy (its own completion length) and at random
# Qwen2.5 0.5B, 1.5B (full fine-tune, bf16) and 3B LoRA shapes with completions of 48 and of 512 tokens. First the
# card's peaks (scripts/ladder_table.py --measure), then the shapes in the order of the targets, each under a time
# limit, the rollout tests marked gpu (the defaults' greedy tokens against SDPA without sharing) after the 48-token
# shapes and 3B LoRA at 512; a shape that no longer fits the call's 10 minutes is skipped and says so. Prints the
# table last.
#   bash scripts/device/ladder.sh           # on the GPU machine, .whl carried (docs/gpu.md); $OUT: table.md, ladder.tgz
#   ONLY="1.5B_48 3B_lora_48" bash scripts/device/ladder.sh   # those shapes only (no tests), e.g. a second call
#   SMOKE=1 bash scripts/device/ladder.sh   # the CPU: every shape shrunk to seconds (the script's own test, not evidence)
set -o pipefail
O=${OUT:-/tmp/ladder_out}; R=${LADDER_WORK:-/tmp/ladder}; rm -rf "$R"; mkdir -p "$R" "$O"
BUDGET=${BUDGET:-560}; TMUL=1  # seconds of this call for the whole script; TMUL scales the time limits
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1; TMUL=10; BUDGET=100000
  B="python3 scripts/bench_step_cost.py --device cpu --threads 1 --prompts-per-step 2"
  SHORT=4; LONG=8; S48="--steps 2 --skip 1"; S512="--steps 2 --skip 1"; S3=$S512; HEAD="--steps 2 --skip 1 --set model.max_completion_len=8"
  SIZES=("--layers 2 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 --vocab 512")
  NAMES=(tiny); LORA=("--layers 2 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 --vocab 512 --lora")
else
  source scripts/device/setup.sh || exit 1
  export OMP_NUM_THREADS=2
  B="python3 scripts/bench_step_cost.py --device cuda --prompts-per-step 16"
  SHORT=48; LONG=512; S48="--steps 8 --skip 3"; S512="--steps 3 --skip 1"; HEAD="--steps 12 --skip 4"
  S3="--steps 4 --skip 2"  # 3B LoRA: 30-40 s of compile and capture a setting, a second or more a step
  SIZES=("--layers 24 --hidden 896 --heads 14 --kv-heads 2 --intermediate 4864"
         "--layers 28 --hidden 1536 --heads 12 --kv-heads 2 --intermediate 8960")
  NAMES=(0.5B 1.5B)
  LORA=("--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --lora --gradient-checkpointing")
fi
echo "pods/ sources sha1 $(find pods -name '*.py' -type f | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-12)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
shape() {  # shape <name> <seconds needed> <flags...>: the pair alone, unless the call's budget is spent
  local name=$1 need=$2; shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi  # ONLY="1.5B_48 3B_lora_48": these
  if [ $((SECONDS + need)) -gt "$BUDGET" ]; then echo "$name: skipped, ${SECONDS}s of ${BUDGET}s used"; return; fi
  timeout -k 10 $((need * TMUL + 60)) $B "$@" --label "$name" --out "$R/$name" > "$R/$name.log" 2>&1
  echo "$name rc=$? at ${SECONDS}s"
}
if [ "${SMOKE:-0}" != 1 ]; then
  python3 scripts/ladder_table.py --measure "$R/peaks.json" || exit 1
else
  echo '{"flops": 1e12, "bytes": 1e11, "device": "CPU (smoke)"}' > "$R/peaks.json"
fi
gpu_tests() {  # the rollout tests marked gpu, in what is left of the budget (at least 90 s)
  local left=$((BUDGET - SECONDS))
  [ "${SMOKE:-0}" = 1 ] && return
  if [ -n "${ONLY:-}" ]; then return; fi  # a partial ladder: the tests ran with the whole one
  if [ "$left" -lt 90 ]; then echo "gpu tests: skipped, ${SECONDS}s of ${BUDGET}s used"; return; fi
  timeout -k 10 $((left > 200 ? 200 : left)) python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/rollout/test_sizing.py \
    tests/rollout/test_decode_attention.py tests/rollout/test_share_prefill.py tests/rollout/test_hf.py > "$R/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? at ${SECONDS}s"
}
shape headline 60 $HEAD
DIRS=("$R/headline")
for i in "${!SIZES[@]}"; do shape "${NAMES[$i]}_$SHORT" 70 --random-shape ${SIZES[$i]} --completion-len $SHORT $S48; DIRS+=("$R/${NAMES[$i]}_$SHORT"); done
shape "3B_lora_$SHORT" 150 --random-shape ${LORA[0]} --completion-len $SHORT $S3; DIRS+=("$R/3B_lora_$SHORT")
shape "3B_lora_$LONG" 180 --random-shape ${LORA[0]} --completion-len $LONG $S3; DIRS+=("$R/3B_lora_$LONG")
gpu_tests
for i in "${!SIZES[@]}"; do shape "${NAMES[$i]}_$LONG" 90 --random-shape ${SIZES[$i]} --completion-len $LONG $S512; DIRS+=("$R/${NAMES[$i]}_$LONG"); done
tar czf "$O/ladder.tgz" --exclude='*.pt' --exclude='*.safetensors' -C "$(dirname "$R")" "$(basename "$R")"
{
  echo "# The ladder: GRPO 16/16 vs PODS 64/16 alone, defaults only ($(date -u +%F))"; echo
  python3 scripts/ladder_table.py --peaks "$R/peaks.json" "${DIRS[@]}"
  echo "## Rollout tests marked gpu"; grep -h "greedy tokens differ\|rollout.batch_size=auto\|passed\|failed\|skipped\|Error" "$R/gpu_tests.log" 2>/dev/null
} > "$O/table.md" 2>&1
cat "$O/table.md"; echo "call done in ${SECONDS}s"
