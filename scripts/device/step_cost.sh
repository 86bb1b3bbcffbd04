#!/usr/bin/env bash
# Issue 38 on a lent machine of 1 to 4 GPUs: where a PODS 64/16 step's extra milliseconds go against a GRPO 16/16
# step (scripts/bench_step_cost.py), in three settings:
#   alone    the headline shape (model=headline, 8 prompts, T=0.9) alone on one GPU, then a sweep of rows per
#            prompt (n = 8, 32, 128 at 8 prompts; 16 and 64 are the pair)
#   packed   the same pair with 6 processes on one GPU (3 GRPO, 3 PODS at once), as headline runs are packed
#   lora3b   a random Qwen2 of Qwen2.5-3B's shape with LoRA r=64 (results/h100_3b/, results/issue18_h100/:
#            --layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008, gradient checkpointing),
#            1 prompt x 512 tokens
# Each at today's defaults ("before") and with this issue's switches on ("after", AFTER= below), in one process.
# With 3 or more GPUs visible the three settings run side by side (alone on the first, packed on the second,
# lora3b on the third); with fewer they run one after another in that order, each under a limit from what is left
# of BUDGET seconds (default 340). Honours CUDA_VISIBLE_DEVICES (CUDA_VISIBLE_DEVICES=0 bash ... uses GPU 0 only).
#   bash scripts/device/step_cost.sh                 # .whl carried (docs/gpu.md); results in $OUT, a table last
# $OUT (at most 8 files): table.md (the short table), alone.md, sweep.md, packed.md, lora3b.md, status.txt,
# step_cost.tgz (every results.json and log).
# SMOKE=1: the script's own test on a CPU, every setting shrunk to seconds (nothing from it is evidence).
set -o pipefail
export OMP_NUM_THREADS=2
O=${OUT:-/tmp/step_cost_out}; R=/tmp/step_cost_run/step_cost; TAG=step_cost; rm -rf "$R"; mkdir -p "$R" "$O"
BUDGET=${BUDGET:-340}
source scripts/device/jobs.sh
if [ "${SMOKE:-0}" = 1 ]; then
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; GPUS=(0); NG=1; EACH=1; ST=3; SW=2; PACKED_S=${PACKED_S:-3}
  B="python3 scripts/bench_step_cost.py --device cpu --threads 1 --prompts-per-step 1 --set rollout.hf.compile=true
    model.max_completion_len=8"
else
  source scripts/device/setup.sh || exit 1
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -r -a GPUS <<< "$CUDA_VISIBLE_DEVICES"
  else mapfile -t GPUS < <(nvidia-smi --query-gpu=index --format=csv,noheader); fi
  NG=${#GPUS[@]}; EACH=3; ST=12; SW=10
  B="python3 scripts/bench_step_cost.py --device cuda"
fi
echo "GPUs: ${GPUS[*]}"
AFTER=${AFTER-rollout.hf.share_prefill=true}  # this issue's switches ("after"); AFTER= runs "before" only
PAIR="grpo16:none:16:16,pods64:max_variance:64:16"
B3="--random-shape --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008
  --gradient-checkpointing --prompts-per-step 1 --completion-len 512"
[ "${SMOKE:-0}" = 1 ] && B3="--random-shape --lora --layers 2 --hidden 64 --vocab 512 --prompts-per-step 1 --completion-len 8"
alone() {  # the pair before and after, then the sweep (after only)
  CUDA_VISIBLE_DEVICES=$1 job 150 alone $B --steps $ST --skip $((ST / 4)) --settings "$PAIR" --pick-micro --out "$R/alone"
  if [ -n "$AFTER" ]; then CUDA_VISIBLE_DEVICES=$1 job 150 alone_after $B --steps $ST --skip $((ST / 4)) --settings "$PAIR" \
    --set $AFTER --label after --out "$R/alone_after"; fi
  CUDA_VISIBLE_DEVICES=$1 job 150 sweep $B --steps $SW --skip $((SW / 3)) --settings "" --sweep 8,32,128 ${AFTER:+--set $AFTER} \
    --out "$R/sweep"
}
packed_one() {  # packed_one <gpu> <name> [overrides]: 3 GRPO and 3 PODS processes at once on one GPU, each
  # for the same 25 s of training clock (so all six run side by side throughout)
  local g=$1 name=$2 pids=() i; shift 2
  for i in $(seq 0 $((EACH - 1))); do
    for s in grpo16:none:16:16 pods64:max_variance:64:16; do
      CUDA_VISIBLE_DEVICES=$g timeout -k 10 "${LIMIT_PACKED:-130}" $B --steps 1000 --skip $((ST / 3)) --settings $s --seed $i \
        --set max_train_time=${PACKED_S:-25} "$@" --out "$R/$name/${s%%:*}_$i" > "$R/$name/${s%%:*}_$i.log" 2>&1 &
      pids+=($!)
    done
  done
  wait "${pids[@]}"
  python3 - "$R/$name" <<'PY' | tee "$R/$name.md"
import glob, json, statistics, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/*/results.json")):
    for run in json.load(open(f))["runs"]:
        rows.setdefault(run["name"], []).append(run["mean"])
parts = ["step", "generation", "prefill", "decode", "tail", "warm-up", "detokenize", "gen. other", "reward", "update"]
print("| 6 per GPU | procs | " + " | ".join(f"{p} ms" for p in parts) + " |")
print("|---|---|" + "---|" * len(parts))
for name, ms in sorted(rows.items()):
    print(f"| {name} | {len(ms)} | " + " | ".join(f"{1e3 * statistics.fmean(m.get(p, 0.0) for m in ms):.1f}" for p in parts) + " |")
if {"grpo16", "pods64"} <= rows.keys():
    g, p = ({k: statistics.fmean(m[k] for m in rows[n]) for k in ("step", "generation")} for n in ("grpo16", "pods64"))
    print(f"\nPODS/GRPO: step {p['step'] / g['step']:.2f}x, generation {p['generation'] / g['generation']:.2f}x")
PY
}
packed() {
  mkdir -p "$R/packed" "$R/packed_after"
  echo "$(date +%T) packed on GPU $1"; packed_one "$1" packed; echo "packed rc=$?" >> "$R/status.txt"
  if [ -n "$AFTER" ]; then packed_one "$1" packed_after --set $AFTER; echo "packed_after rc=$?" >> "$R/status.txt"; fi
}
lora3b() {
  CUDA_VISIBLE_DEVICES=$1 job 200 lora3b $B $B3 --steps 3 --skip 1 --settings "$PAIR" --out "$R/lora3b"
  if [ -n "$AFTER" ]; then CUDA_VISIBLE_DEVICES=$1 job 200 lora3b_after $B $B3 --steps 3 --skip 1 --settings "$PAIR" \
    --set $AFTER --label after --out "$R/lora3b_after"; fi
}
if [ "$NG" -ge 3 ]; then
  alone "${GPUS[0]}" & a=$!; packed "${GPUS[1]}" & b=$!; lora3b "${GPUS[2]}" & c=$!; wait $a $b $c
else
  alone "${GPUS[0]}"; packed "${GPUS[$((NG > 1 ? 1 : 0))]}"; lora3b "${GPUS[$((NG > 1 ? 1 : 0))]}"
fi
for n in alone sweep lora3b; do cat "$R/$n/results.md" "$R/${n}_after/results.md" > "$O/$n.md" 2>/dev/null; done
rm -f "$O/alone_after.md" "$O/lora3b_after.md"  # folded into alone.md and lora3b.md: $OUT keeps <= 8 files
cat "$R"/packed.md "$R"/packed_after.md > "$O/packed.md" 2>/dev/null
cp "$R/status.txt" "$O/" 2>/dev/null
tar czf "$O/$TAG.tgz" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
python3 scripts/step_cost_table.py "$R" | tee "$O/table.md"
