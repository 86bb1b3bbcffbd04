#!/usr/bin/env bash
# Issue 18, call 13, one H100 (nvidia-h100-x1), the 3B LoRA shape at the new defaults (rollout.release_cache
# on, hardware.update_sdpa=flash):
#   trl3b   TRL GRPO 16/16 then pods GRPO 16/16 in one process, 2 steps each, each under an allocator trace:
#           the peak, and what is live at it by allocating frame (pods.bench.MemoryTrace)
#   gpu3b   pods GRPO 16/16 and PODS 64/16, 3 steps each (the first dropped): step time and phases
#   dec3b   decode ms per step of the graph loop at batch 16 and 64 against the bandwidth limit
# Sent as `bash scripts/device/perf18_call13.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf13 O=${OUT:-/tmp/perf13out} TAG=perf13 BUDGET=${BUDGET:-570}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
date
job 270 trl3b python3 scripts/bench_trl.py --lora $B3 --gradient-checkpointing --steps 2 --no-pods-extra \
  --memory-trace $R/traces --out $R/trl3b
cp $R/trl3b.md $R/traces/*.md $O/ 2>/dev/null
job 170 gpu3b python3 scripts/bench_gpu.py --lora $B3 --gradient-checkpointing --steps 3 --settings grpo16,pods64 --out $R/gpu3b
job 150 dec3b python3 scripts/bench_decode.py $B3 --batches 16,64 --modes graph --new-tokens 256 --out $R/dec3b
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
for f in sorted(glob.glob(sys.argv[1] + '/*/results.json')):
    j = json.load(open(f)); name = f.split('/')[-2]
    for r in j.get('rows', []):
        print(name, 'batch', r['batch'], 'graph %.2f ms, limit %.2f ms, %.2fx' % (r['graph_ms'], r['limit_ms'], r['graph_x_limit']))
    for k, v in j.get('settings', {}).items():
        p = v['per_step_s']
        print(name, k, 'steps', [round(x, 2) for x in p['step']], 'generation', [round(x, 2) for x in p['generation']],
              'update', [round(x, 2) for x in p['update']], 'peak %.2f GiB' % v['peak_mem_gib'], v.get('phase_peak_gib'))
P
head -12 $R/trl3b.md | tail -4; for f in $R/traces/*.md; do echo "== $f"; sed -n 3,3p $f; sed -n 5,22p $f; done
cat $R/status.txt; date
