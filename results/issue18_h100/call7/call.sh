#!/usr/bin/env bash
# Issue 18, call 7, one H100 (nvidia-h100-x1): the graph decode loop (rollout.loop=graph) and the fused
# log-prob chunks, before they become defaults. In order:
#   gputest  the CUDA-only tests: graph loop greedy == generate's, captured, seeded samples repeat; deferred stop
#   dec05    decode ms/step, 0.5B shape, batch 16 and 64: generate loop (compiled) vs graph loop
#   dec3b    the same at the 3B shape, graph loop only (the generate loop's compiles at 3B cost ~1 min each)
#   liger3b  pods' fused head + loss (chunks of 1024 positions vs the new default) vs Liger, 3B head, frozen (LoRA)
#   liger05  the same, 0.5B head, trained (full fine-tune)
# Each job has its own timeout, capped by what is left of BUDGET seconds (default 540); after each job its
# output goes to $OUT (tables) and $OUT/perf7.tgz (everything), so a cut job keeps what it measured.
# Sent as `bash scripts/device/perf18_call7.sh` with carry [".whl"].
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
R=/tmp/perf7; O=${OUT:-/tmp/perf7out}; mkdir -p $R $O; END=$((SECONDS+${BUDGET:-540})); date
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
job() { local t=$1 n=$2 l=$((END-SECONDS)); shift 2; [ $t -gt $l ] && t=$l
  [ $t -lt 20 ] && { echo "$n skipped: $t s left" | tee -a $R/status.txt; return; }; echo "$(date +%T) $n, limit $t s"
  timeout -k 10 $t "$@" >$R/$n.log 2>&1; local rc=$?; echo "$(date +%T) $n rc=$rc" | tee -a $R/status.txt
  cp $R/$n/results.md $O/$n.md; cp $R/status.txt $O/; tar czf $O/perf7.tgz -C /tmp perf7; } 2>/dev/null
job 150 gputest python3 -m pytest -q -p no:cacheprovider tests/rollout/test_hf.py -k "graph_loop or deferred"
job 170 dec05 python3 scripts/bench_decode.py --batches 16,64 --modes compiled,graph --new-tokens 256 --out $R/dec05
job 170 dec3b python3 scripts/bench_decode.py $B3 --batches 16,64 --modes graph --new-tokens 256 --out $R/dec3b
job 80 liger3b python3 scripts/bench_liger.py --hidden 2048 --frozen-head --repeats 5 --out $R/liger3b
job 80 liger05 python3 scripts/bench_liger.py --hidden 896 --repeats 5 --out $R/liger05
tail -5 $R/gputest.log; for f in $R/*/results.md; do echo "== $f"; cat $f; done; cat $R/status.txt; date
