#!/usr/bin/env bash
# Issue 18, call 10, one H100 (nvidia-h100-x1): where pods' 3B LoRA peak sits (per-phase peaks), with the
# graph decode loop (default) and with transformers' generate loop; call 9 read 11.69 GiB in bench_trl's
# process against TRL's 10.558 (call 3, bench_gpu, before the changes of calls 7-11: 10.72).
# Sent as `bash scripts/device/perf18_call10.sh` with carry [".whl"]; results in $OUT, a table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
R=/tmp/perf10; O=${OUT:-/tmp/perf10out}; mkdir -p $R $O; END=$((SECONDS+${BUDGET:-470})); date
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --gradient-checkpointing"
job() { local t=$1 n=$2 l=$((END-SECONDS)); shift 2; [ $t -gt $l ] && t=$l
  [ $t -lt 20 ] && { echo "$n skipped: $t s left" | tee -a $R/status.txt; return; }; echo "$(date +%T) $n, limit $t s"
  timeout -k 10 $t "$@" >$R/$n.log 2>&1; local rc=$?; echo "$(date +%T) $n rc=$rc" | tee -a $R/status.txt
  cp $R/$n/results.md $O/$n.md; cp $R/status.txt $O/; tar czf $O/perf10.tgz -C /tmp perf10; } 2>/dev/null
job 235 gpu3b python3 scripts/bench_gpu.py --lora $B3 --steps 4 --settings grpo16 --out $R/gpu3b
job 235 gpu3bgen python3 scripts/bench_gpu.py --lora $B3 --steps 4 --settings grpo16 --set rollout.loop=generate --out $R/gpu3bgen
for f in $R/*/results.md; do echo "== $f"; cat $f; done
python3 - $R <<'P'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/*/results.json')):
    v = json.load(open(f))['settings']['grpo16']
    print(f.split('/')[-2], 'per step', v['per_step_s'], 'diag', v.get('per_step_update_diagnostics'))
P
cat $R/status.txt; date
