#!/usr/bin/env bash
# Issue 18, call 8, one H100 (nvidia-h100-x1), at the shipped defaults after call 7 (graph decode loop,
# fused log-prob chunks by elements, update widths on a 64-column grid, row buckets of 8 in `gpu`):
#   lora05g  0.5B LoRA r=64, GRPO 16/16, 51 steps: steady update (max / median over the 50 after warm-up)
#            and the GRPO side of the LoRA ratio; per-step update diagnostics (shapes, cudaMallocs, gc)
#   lora05p  0.5B LoRA r=64, PODS 64/16, 6 steps
#   full05   0.5B full fine-tune, GRPO 16/16 then PODS 64/16, 6 steps each, one process
#   trl3b    3B LoRA shape: TRL GRPO 16/16 then pods GRPO 16/16, 2 steps each, one process (peak memory)
# Each job has its own timeout, capped by what is left of BUDGET seconds (default 570); after each job the
# tables go to $OUT and everything to $OUT/perf8.tgz. A short table is printed last.
# Sent as `bash scripts/device/perf18_call8.sh` with carry [".whl"].
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
R=/tmp/perf8; O=${OUT:-/tmp/perf8out}; mkdir -p $R $O; END=$((SECONDS+${BUDGET:-570})); date
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --gradient-checkpointing"
G="python3 scripts/bench_gpu.py"
job() { local t=$1 n=$2 l=$((END-SECONDS)); shift 2; [ $t -gt $l ] && t=$l
  [ $t -lt 20 ] && { echo "$n skipped: $t s left" | tee -a $R/status.txt; return; }; echo "$(date +%T) $n, limit $t s"
  timeout -k 10 $t "$@" >$R/$n.log 2>&1; local rc=$?; echo "$(date +%T) $n rc=$rc" | tee -a $R/status.txt
  for f in /tmp/pods-bench*/*/metrics.jsonl; do [ -f $f ] && cp $f $R/$n-$(basename $(dirname $f)).jsonl; done
  rm -rf /tmp/pods-bench*; cp $R/$n/results.md $O/$n.md; cp $R/status.txt $O/; tar czf $O/perf8.tgz -C /tmp perf8; } 2>/dev/null
job 150 lora05g $G --lora --settings grpo16 --steps 51 --out $R/lora05g
job 85 lora05p $G --lora --settings pods64 --steps 6 --out $R/lora05p
job 140 full05 $G --settings grpo16,pods64 --steps 6 --out $R/full05
job 400 trl3b python3 scripts/bench_trl.py --lora $B3 --steps 2 --no-pods-extra --out $R/trl3b
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
T = {}
for f in sorted(glob.glob(sys.argv[1] + '/*/results.json')):
    j = f.split('/')[-2]
    for k, v in json.load(open(f)).get('settings', {}).items():
        T[j[:6] + k] = v['step_s']; p = v['per_step_s']; u = p['update']; m = s.median(u)
        print(j, k, len(u), 'steps: step %.2f s, generation %.2f, update median %.3f max %.3f (%.2fx), peak %.2f GiB'
              % (v['step_s'], s.mean(p['generation']), m, max(u), max(u) / m, v['peak_mem_gib']))
        print('   phase peaks GiB', {a: round(b, 2) for a, b in v.get('phase_peak_gib', {}).items()})
        d = v.get('per_step_update_diagnostics', {})
        slow = [i for i, x in enumerate(u) if x > 1.5 * m]
        print('   steps over 1.5x median:', [(i, round(u[i], 3), {a: b[i] for a, b in d.items()}) for i in slow])
for a in 'full05', 'lora05':
    if a + 'pods64' in T and a + 'grpo16' in T:
        print(a, 'PODS/GRPO %.2f' % (T[a + 'pods64'] / T[a + 'grpo16']))
P
cat $R/trl3b.md 2>/dev/null; cat $R/status.txt; date
