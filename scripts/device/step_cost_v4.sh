#!/usr/bin/env bash
# Issue 38 at headline v4's frozen shape (results/headline_v4/frozen.env: 16 prompts per step, lr 1e-5, sampled
# eval): the confirm calls measured a PODS 64/16 step at 2.1x a GRPO 16/16 step (4 runs per GPU). Is that ratio
# set by rollout.batch_size=512, which makes PODS's 16 x 64 = 1,024 rows two generate calls (GRPO's 256 rows are
# one)? On a machine of 4 GPUs, side by side (each GPU its own question):
#   GPU 0  the pair alone (scripts/bench_step_cost.py, 16 prompts), rollout batch 512; then the host-work A/B
#   GPU 1  the pair alone, rollout batch 1024
#   GPU 2  the confirm calls' packing: GRPO 16/16 and PODS 64/16, 2 seeds each, 4 runs on one GPU, the frozen
#          setting with its eval every 10 s, WIN seconds of training clock (default 120), rollout batch 512
#   GPU 3  the same packing, rollout batch 1024
# PART=cache asks the next question, with every row in one generate call (the larger batch): does the part that
# still grows with rows shrink when the static KV cache is narrower? The pair alone, side by side:
#   GPU 0  today's defaults, then share_prefill + size_cache_to_prompt + release_cache=false
#   GPU 1  rollout.hf.size_cache_to_prompt=true (the cache as wide as this prompt, not the widest)
#   GPU 2  rollout.hf.share_prefill=true + size_cache_to_prompt
#   GPU 3  the rollout tests marked gpu (greedy tokens against generate(); share_prefill's differing tokens)
# PART=flex times rollout.hf.decode_attention=flex (decode attention over the cache blocks filled so far,
# pods/rollout/attention.py) against today's SDPA over the whole cache, side by side:
#   GPU 0  the pair alone at the larger batch: sdpa, flex, sdpa, flex (alternating: drift hits both arms), then
#          the pair packed 4 to the GPU with flex
#   GPU 1  3B LoRA (scripts/device/step_cost.sh's shape), rollout.hf.share_prefill=true, sdpa
#   GPU 2  3B LoRA, share_prefill + flex
#   GPU 3  the pair packed 4 to the GPU with sdpa, then the rollout tests marked gpu (flex's differing greedy
#          tokens), then the pair alone with flex + share_prefill
# PART=flex2, the follow-up: does share_prefill add to flex, alone and packed, and which block size should flex
# visit the cache in?
#   GPU 0  scripts/device/flex_block_micro.py, then the pair alone: flex, flex + share_prefill, twice, alternating
#   GPU 1  the rollout tests marked gpu in tests/rollout/test_decode_attention.py (Qwen2.5 0.5B/1.5B/7B head shapes)
#   GPU 2  the pair packed 4 to the GPU with flex + share_prefill
#   GPU 3  the pair packed 4 to the GPU with flex (at the same time as GPU 2)
#   On 2 GPUs the second runs the tests and then the two packings one after the other (WIN=90 keeps it in 10 min);
#   on 1 GPU, one after another: the four alone runs, the tests, the packing with flex + share_prefill (no micro).
#   bash scripts/device/step_cost_v4.sh       # .whl carried (docs/gpu.md); $OUT gets 2 files (the device tool
#                                             # returns 8): table.md (printed last) and step_cost_v4.tgz (every
#                                             # run's records and log)
# Seeds: SEED (default 0) for the runs through scripts/bench_step_cost.py, PACK_SEEDS (default 9001,9002) for
# the packed runs; the weights are always the shipped headline policy (and a random 3B of seed 0 for LoRA).
# SMOKE=1: every part shrunk to seconds on the CPU, one after another, the packing at the smaller batch only and,
# of the cache variants, the one with all three overrides (the script's own test; not evidence).
set -o pipefail
O=${OUT:-/tmp/step_cost_v4_out}; R=${STEP_COST_WORK:-/tmp/step_cost_v4}; rm -rf "$R"; mkdir -p "$R" "$O"  # R: scratch
FROZEN=${FROZEN:-results/headline_v4/frozen.env}
LR=""; WARMUP_STEPS=""; SETTING_EXTRA=""; source "$FROZEN"
[ -n "$LR" ] && [ -n "$WARMUP_STEPS" ] || { echo "$FROZEN needs LR= and WARMUP_STEPS="; exit 1; }
PPS=16; for o in $SETTING_EXTRA; do [[ $o == algo.prompts_per_step=* ]] && PPS=${o#*=}; done
PAIR="grpo16:none:16:16,pods64:max_variance:64:16"
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
  GPUS=(0 0 0 0); WIN=${WIN:-3}; B="python3 scripts/bench_step_cost.py --device cpu --threads 1"
  ST=2; PPS=1; BATCHES=(32 64); HW="hardware=cpu"; EVERY=2; PACK_SEEDS=9001  # packed: 1 GRPO + 1 PODS run
  PACKED=(32)  # packed at one batch size: the second runs the same code (2 CPU runs fewer)
  SMALL="model.max_completion_len=8 dataset.eval_size=8 eval.num_samples=1 max_steps=2 algo.prompts_per_step=$PPS"
  BSMALL="--set model.max_completion_len=8"
else
  source scripts/device/setup.sh || exit 1
  export OMP_NUM_THREADS=2
  mapfile -t GPUS < <(nvidia-smi --query-gpu=index --format=csv,noheader)
  NEED=4; [ "${PART:-pair}" = flex2 ] && NEED=1  # flex2 runs on 1 or 2 GPUs too (below)
  [ "${#GPUS[@]}" -ge $NEED ] || { echo "needs $NEED GPUs, found ${#GPUS[@]}"; exit 1; }
  WIN=${WIN:-120}; B="python3 scripts/bench_step_cost.py --device cuda"; ST=12
  BATCHES=(512 1024); HW="hardware=gpu"; EVERY=10; SMALL=""; BSMALL=""; PACK_SEEDS=${PACK_SEEDS:-9001,9002}
  PACKED=(512 1024)
fi
# the device's copy of .git can be older than the tree it carries: a digest of pods/ tells the tree apart
echo "pods/ sources sha1 $(find pods -name '*.py' -type f | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-12)"
B="$B --seed ${SEED:-0}"  # the pair alone, the host A/B and 3B LoRA: SEED=<int> reruns them on other draws
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); frozen: lr $LR, $SETTING_EXTRA; window ${WIN}s"
# the confirm calls' common setting (scripts/device/headline_v4.sh), with the rollout batch left to each GPU
COMMON="model=headline dataset=arithmetic_hard_local dataset.eval_task=data/arithmetic_hard/eval_2k.jsonl
  eval.batch_size=1024 $HW sampling.temperature=0.9 max_steps=100000 max_train_time=$WIN eval.every_steps=0
  eval.every_seconds=$EVERY eval.at_start=true checkpoint.every_seconds=0 checkpoint.every_steps=0
  checkpoint.save_final=false optim.lr=$LR optim.warmup_steps=$WARMUP_STEPS $SETTING_EXTRA $SMALL"
alone() {  # alone <gpu> <rollout batch>
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 200 $B --steps $ST --skip $((ST / 4)) --prompts-per-step $PPS \
    --rollout-batch "$2" --settings "$PAIR" --label "batch$2" $BSMALL --out "$R/alone_b$2" > "$R/alone_b$2.log" 2>&1
  echo "alone batch $2 rc=$? at ${SECONDS}s"
}
host() {
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 150 $B --settings "" --host-ab --prompts-per-step $PPS $BSMALL \
    --out "$R/host_ab" > "$R/host_ab.log" 2>&1
  echo "host A/B rc=$? at ${SECONDS}s"
}
packed() {  # packed <gpu> <rollout batch> [<name> <overrides>]: in packed_b<batch>, or packed_b<batch>_<name>
  local n="packed_b$2${3:+_$3}"
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 $((WIN + 200)) python3 scripts/launch_parallel.py --gpus 1 --per-gpu 4 \
    --out "$R/$n" --sweep seed=$PACK_SEEDS --sweep arm=none-n16-m16,max_variance-n64-m16 \
    -- $(echo $COMMON) rollout.batch_size="$2" ${4:-} > "$R/$n.log" 2>&1
  echo "$n rc=$? at ${SECONDS}s"
}
V_FIT="rollout.hf.size_cache_to_prompt=true"; V_SHARE="rollout.hf.share_prefill=true $V_FIT"
V_ALL="$V_SHARE rollout.hf.release_cache=false"
variant() {  # variant <gpu> <name> <overrides>: the pair alone at the larger rollout batch
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 200 $B --steps $ST --skip $((ST / 4)) --prompts-per-step $PPS \
    --rollout-batch "${BATCHES[1]}" --settings "$PAIR" --label "$2" --set $3 ${BSMALL#--set } \
    --out "$R/cache_$2" > "$R/cache_$2.log" 2>&1
  echo "variant $2 rc=$? at ${SECONDS}s"
}
gpu_tests() {  # gpu_tests <gpu> [more test files]
  [ "${SMOKE:-0}" = 1 ] && return
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 240 python3 -m pytest -q -s -p no:cacheprovider -m gpu \
    tests/rollout/test_share_prefill.py tests/rollout/test_hf.py "${@:2}" > "$R/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? at ${SECONDS}s"
}
V_FLEX="rollout.hf.decode_attention=flex"
B3="--random-shape --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008
  --gradient-checkpointing --prompts-per-step 1 --completion-len 512"
lora3b() {  # lora3b <gpu> <name> <overrides>: the pair at 3B LoRA, 4 steps (the first 2 not averaged: compiles,
  # and the heap freeze after step 1, 0.7-1.5 s in the second step's record)
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 320 $B $B3 --steps 4 --skip 2 --settings "$PAIR" --label "$2" --set $3 \
    --out "$R/lora3b_$2" > "$R/lora3b_$2.log" 2>&1
  echo "lora3b $2 rc=$? at ${SECONDS}s"
}
alone_tables() {  # alone_tables <variant>...: each variant's table of the pair alone at the larger batch
  local v; for v in "$@"; do
    echo "## Alone on one GPU, rollout batch ${BATCHES[1]}, $v"; cat "$R/cache_$v/results.md" 2>/dev/null || echo "(not run)"; echo
  done
}
packed_tables() {  # packed_tables <name>...: each packing's per-run totals at the larger batch
  local a; for a in "$@"; do
    echo "## 4 runs on one GPU (2 GRPO 16/16 + 2 PODS 64/16, eval every ${EVERY}s), rollout batch ${BATCHES[1]}, $a"
    python3 scripts/phase_totals.py "$R/packed_b${BATCHES[1]}_$a" 2>&1 || echo "(not run)"; echo
  done
}
if [ "${PART:-pair}" = flex2 ]; then
  V_FS="$V_FLEX rollout.hf.share_prefill=true"
  if [ "${SMOKE:-0}" = 1 ]; then  # the variant the device runs that PART=flex's smoke does not
    variant 0 flex_share_1 "$V_FS rollout.hf.compile=true"
  else
    alone4() {
      variant "${GPUS[0]}" flex_3 "$V_FLEX"; variant "${GPUS[0]}" flex_share_1 "$V_FS"
      variant "${GPUS[0]}" flex_4 "$V_FLEX"; variant "${GPUS[0]}" flex_share_2 "$V_FS"
    }
    micro() {
      CUDA_VISIBLE_DEVICES=${GPUS[0]} timeout -k 10 240 python3 scripts/device/flex_block_micro.py > "$R/micro.log" 2>&1
      echo "micro rc=$? at ${SECONDS}s"
    }
    if [ "${#GPUS[@]}" -eq 1 ]; then  # 1 GPU: no micro and one packing (flex + share_prefill), within 10 min
      alone4; gpu_tests "${GPUS[0]}" tests/rollout/test_decode_attention.py
      packed "${GPUS[0]}" "${BATCHES[1]}" flex_share "$V_FS"
    else
      { micro; alone4; } &
    fi
    if [ "${#GPUS[@]}" -ge 4 ]; then
      gpu_tests "${GPUS[1]}" tests/rollout/test_decode_attention.py &
      packed "${GPUS[2]}" "${BATCHES[1]}" flex_share "$V_FS" &
      packed "${GPUS[3]}" "${BATCHES[1]}" flex "$V_FLEX" &
    elif [ "${#GPUS[@]}" -ge 2 ]; then  # 2 GPUs: the tests, then the two packings one after the other on the second
      { gpu_tests "${GPUS[1]}" tests/rollout/test_decode_attention.py
        packed "${GPUS[1]}" "${BATCHES[1]}" flex_share "$V_FS"; packed "${GPUS[1]}" "${BATCHES[1]}" flex "$V_FLEX"; } &
    fi
    wait
  fi
  tar czf "$O/step_cost_v4.tgz" -C "$(dirname "$R")" "$(basename "$R")" --exclude='*.pt' --exclude='*.safetensors'
  {
    echo "## flex_attention's decode call by block size (scripts/device/flex_block_micro.py)"
    cat "$R/micro.log" 2>/dev/null || echo "(not run)"; echo
    alone_tables flex_3 flex_share_1 flex_4 flex_share_2
    packed_tables flex_share flex
    echo "## Rollout tests marked gpu"; grep -h "greedy tokens differ\|passed\|failed\|skipped\|Error" "$R/gpu_tests.log" 2>/dev/null
  } > "$O/table.md" 2>&1
  cat "$O/table.md"; echo "call done in ${SECONDS}s"; exit 0
fi
if [ "${PART:-pair}" = flex ]; then
  if [ "${SMOKE:-0}" = 1 ]; then  # the flex pair through the Trainer at (a tiny) LoRA, on the CPU's eager graph loop
    B3="--random-shape --lora --layers 2 --hidden 64 --vocab 512 --prompts-per-step 1 --completion-len 8"
    lora3b 0 share_flex "rollout.hf.share_prefill=true $V_FLEX rollout.hf.compile=true"
  else
    { variant "${GPUS[0]}" sdpa_1 "rollout.hf.decode_attention=sdpa"; variant "${GPUS[0]}" flex_1 "$V_FLEX"
      variant "${GPUS[0]}" sdpa_2 "rollout.hf.decode_attention=sdpa"; variant "${GPUS[0]}" flex_2 "$V_FLEX"
      packed "${GPUS[0]}" "${BATCHES[1]}" flex "$V_FLEX"; } &
    lora3b "${GPUS[1]}" share "rollout.hf.share_prefill=true" &
    lora3b "${GPUS[2]}" share_flex "rollout.hf.share_prefill=true $V_FLEX" &
    { packed "${GPUS[3]}" "${BATCHES[1]}" sdpa "rollout.hf.decode_attention=sdpa"
      gpu_tests "${GPUS[3]}" tests/rollout/test_decode_attention.py
      variant "${GPUS[3]}" flex_share "$V_FLEX rollout.hf.share_prefill=true"; } &
    wait
  fi
  tar czf "$O/step_cost_v4.tgz" -C "$(dirname "$R")" "$(basename "$R")" --exclude='*.pt' --exclude='*.safetensors'
  {
    alone_tables sdpa_1 flex_1 sdpa_2 flex_2 flex_share
    packed_tables sdpa flex
    for v in share share_flex; do
      echo "## 3B LoRA, $v"; cat "$R/lora3b_$v/results.md" 2>/dev/null || echo "(not run)"; echo
    done
    echo "## Rollout tests marked gpu"; grep -h "greedy tokens differ\|passed\|failed\|skipped" "$R/gpu_tests.log" 2>/dev/null
  } > "$O/table.md" 2>&1
  cat "$O/table.md"; echo "call done in ${SECONDS}s"; exit 0
fi
if [ "${PART:-pair}" = cache ]; then
  if [ "${SMOKE:-0}" = 1 ]; then  # the defaults and the variant that carries all three overrides (2 CPU runs fewer)
    alone 0 "${BATCHES[1]}"; variant 0 share_fit_keep "$V_ALL"
  else
    { alone "${GPUS[0]}" "${BATCHES[1]}"; variant "${GPUS[0]}" share_fit_keep "$V_ALL"; } &
    variant "${GPUS[1]}" fit "$V_FIT" &
    variant "${GPUS[2]}" share_fit "$V_SHARE" &
    gpu_tests "${GPUS[3]}" &
    wait
  fi
  tar czf "$O/step_cost_v4.tgz" -C "$(dirname "$R")" "$(basename "$R")"
  {
    echo "## Alone on one GPU, rollout batch ${BATCHES[1]}, today's defaults"; cat "$R/alone_b${BATCHES[1]}/results.md"
    for v in fit share_fit share_fit_keep; do
      echo; echo "## Alone, batch ${BATCHES[1]}, $v"; cat "$R/cache_$v/results.md" 2>/dev/null || echo "(not run)"
    done
    echo; echo "## Rollout tests marked gpu"; grep -h "greedy tokens differ\|passed\|failed\|skipped" "$R/gpu_tests.log" 2>/dev/null
  } > "$O/table.md" 2>&1
  cat "$O/table.md"; echo "call done in ${SECONDS}s"; exit 0
fi
if [ "${SMOKE:-0}" = 1 ]; then
  alone 0 "${BATCHES[0]}"; host 0; alone 0 "${BATCHES[1]}"; packed 0 "${BATCHES[0]}"
else
  { alone "${GPUS[0]}" "${BATCHES[0]}"; host "${GPUS[0]}"; } &
  alone "${GPUS[1]}" "${BATCHES[1]}" &
  packed "${GPUS[2]}" "${BATCHES[0]}" &
  packed "${GPUS[3]}" "${BATCHES[1]}" &
  wait
fi
tar czf "$O/step_cost_v4.tgz" -C "$(dirname "$R")" "$(basename "$R")" --exclude='*.pt' --exclude='*.safetensors'
{
  for b in "${BATCHES[@]}"; do echo "## Alone on one GPU, rollout batch $b"; cat "$R/alone_b$b/results.md" 2>/dev/null; echo; done
  echo "## Host work before/after (detokenize, reward)"; cat "$R/host_ab/results.md" 2>/dev/null; echo
  k=$(echo "$PACK_SEEDS" | tr , ' ' | wc -w)  # seeds packed per arm
  for b in "${PACKED[@]}"; do
    echo "## $((2 * k)) runs on one GPU ($k GRPO 16/16 + $k PODS 64/16, eval every ${EVERY}s), rollout batch $b"
    python3 scripts/phase_totals.py "$R/packed_b$b" 2>&1; echo
  done
} > "$O/table.md"
cat "$O/table.md"
echo "call done in ${SECONDS}s"
