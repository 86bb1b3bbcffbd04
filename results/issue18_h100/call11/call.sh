#!/usr/bin/env bash
# Issue 18, call 11, one H100 (nvidia-h100-x1): the 3B LoRA update in micro-batches of 8 rows (pods and TRL
# alike: bench_trl.py's --micro-batch-size sets TRL's per-device batch to the same 8, 2 accumulation steps).
# Calls 9-10: with one 16-row micro-batch pods peaked at 1.107x TRL, the peak inside the update.
#   trl3b8  TRL GRPO 16/16 then pods GRPO 16/16, 2 steps each, one process, 8-row micro-batches
#   gpu3b8  pods GRPO 16/16 and PODS 64/16, 4 steps each, 8-row micro-batches (step time, PODS ratio)
# Sent as `bash scripts/device/perf18_call11.sh` with carry [".whl"]; results in $OUT, a table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
R=/tmp/perf11; O=${OUT:-/tmp/perf11out}; mkdir -p $R $O; END=$((SECONDS+${BUDGET:-570})); date
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --gradient-checkpointing"
job() { local t=$1 n=$2 l=$((END-SECONDS)); shift 2; [ $t -gt $l ] && t=$l
  [ $t -lt 20 ] && { echo "$n skipped: $t s left" | tee -a $R/status.txt; return; }; echo "$(date +%T) $n, limit $t s"
  timeout -k 10 $t "$@" >$R/$n.log 2>&1; local rc=$?; echo "$(date +%T) $n rc=$rc" | tee -a $R/status.txt
  cp $R/$n/results.md $O/$n.md; cp $R/$n.md $O/ ; cp $R/status.txt $O/; tar czf $O/perf11.tgz -C /tmp perf11; } 2>/dev/null
job 330 trl3b8 python3 scripts/bench_trl.py --lora $B3 --steps 2 --no-pods-extra --micro-batch-size 8 --out $R/trl3b8
job 240 gpu3b8 python3 scripts/bench_gpu.py --lora $B3 --steps 4 --settings grpo16,pods64 --micro-batch-size 8 --out $R/gpu3b8
for f in $R/*.md $R/*/results.md; do [ -f $f ] && { echo "== $f"; cat $f; }; done
python3 - $R <<'P'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/gpu3b8/results.json')):
    for k, v in json.load(open(f))['settings'].items():
        print(k, 'per step', v['per_step_s'], 'micro-batches', v['per_step_update_diagnostics']['micro_batches'])
P
cat $R/status.txt; date
