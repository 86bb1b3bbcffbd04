#!/usr/bin/env bash
# Issue 18 on one H100: the paper's 3B LoRA shape, decode against the bandwidth limit, PODS/GRPO step ratios.
#   bash results/issue18_h100/perf3b.sh 1   # 3B LoRA pods GRPO 16/16 + PODS 64/16; decode 3B and 0.5B
#   bash results/issue18_h100/perf3b.sh 2   # 3B again with the deferred stop check; its token test on the GPU;
#                                     # 0.5B full FT and LoRA GRPO 16/16 vs PODS 64/16
#   bash results/issue18_h100/perf3b.sh 3   # after the merges, at the shipped defaults (one cache size): 3B LoRA
#                                     # again, then 0.5B LoRA and full FT GRPO 16/16 vs PODS 64/16 with room
# Each job runs under its own timeout; results: $OUT/perf<stage>.tgz, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
S=${1:-1}; R=/tmp/perf$S; mkdir -p $R
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
job() { local t=$1 name=$2; shift 2; echo "$(date +%T) start $name"
  timeout $t "$@" > $R/$name.log 2>&1; local rc=$?; echo "$(date +%T) $name rc=$rc" | tee -a $R/status
  cp $R/status ${OUT:-/tmp}/status_$S.txt; cp $R/$name/results.md ${OUT:-/tmp}/${name}_$S.md 2>/dev/null; }  # back even if cut
if [ "$S" = 1 ]; then
  job 230 gpu3b python3 scripts/bench_gpu.py --lora $B3 --gradient-checkpointing --steps 3 --settings grpo16,pods64 --out $R/gpu3b
  job 150 dec3b python3 scripts/bench_decode.py $B3 --batches 16,64 --modes repeat_kv,compiled --new-tokens 256 --out $R/dec3b
  job 110 dec05 python3 scripts/bench_decode.py --batches 16,64 --modes repeat_kv,compiled --new-tokens 256 --out $R/dec05
elif [ "$S" = 3 ]; then
  job 200 gpu3b python3 scripts/bench_gpu.py --lora $B3 --gradient-checkpointing --steps 3 --settings grpo16,pods64 --out $R/gpu3b
  job 120 lora05 python3 scripts/bench_gpu.py --steps 4 --lora --settings grpo16,pods64 --out $R/lora05
  job 120 full05 python3 scripts/bench_gpu.py --steps 4 --settings grpo16,pods64 --out $R/full05
else
  job 235 gpu3b python3 scripts/bench_gpu.py --lora $B3 --gradient-checkpointing --steps 3 --settings grpo16,pods64 --out $R/gpu3b
  job 60 defer python3 -m pytest -q -p no:cacheprovider tests/rollout/test_hf.py -k deferred
  job 100 full05 python3 scripts/bench_gpu.py --steps 4 --settings grpo16,pods64 --out $R/full05
  job 95 lora05 python3 scripts/bench_gpu.py --steps 4 --lora --settings grpo16,pods64 --out $R/lora05
fi
cd /tmp && tar czf ${OUT:-/tmp}/perf$S.tgz perf$S; cd - > /dev/null
cat $R/status; for f in $R/*/results.md $R/*/*.md; do [ -f $f ] && { echo "== $f"; cat $f; }; done 2>/dev/null
grep -h "Error\|error\|passed\|failed" $R/*.log | grep -v "^ *warn" | tail -8
