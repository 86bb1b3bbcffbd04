#!/usr/bin/env bash
# Issue 18, call 16, one H100 (nvidia-h100-x1): every target at the defaults of calls 12-16 (rollout.release_cache,
# hardware.update_sdpa=flash, width_bucket 16, no float32 copy of adapter inputs, the heap frozen after step 1):
#   lora05g  0.5B LoRA GRPO 16/16, 51 steps: steady update (max / median over the 50 after warm-up)
#   lora05p  0.5B LoRA PODS 64/16, 6 steps (PODS / GRPO with lora05g)
#   full05   0.5B full fine-tune, GRPO 16/16 then PODS 64/16, 6 steps each
#   gpu3b    3B LoRA shape, GRPO 16/16 then PODS 64/16, 3 steps each
#   dec05    0.5B decode ms per step, graph loop, batch 16 and 64, against the bandwidth limit
# Sent as `bash scripts/device/perf18_call16.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf16 O=${OUT:-/tmp/perf16out} TAG=perf16 BUDGET=${BUDGET:-580}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --gradient-checkpointing"
G="python3 scripts/bench_gpu.py"
date
job 140 lora05g $G --lora --settings grpo16 --steps 51 --out $R/lora05g
job 80 lora05p $G --lora --settings pods64 --steps 6 --out $R/lora05p
job 120 full05 $G --settings grpo16,pods64 --steps 6 --out $R/full05
job 160 gpu3b $G --lora $B3 --settings grpo16,pods64 --steps 3 --out $R/gpu3b
job 75 dec05 python3 scripts/bench_decode.py --batches 16,64 --modes graph --out $R/dec05
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
T = {}
for f in sorted(glob.glob(sys.argv[1] + '/*/results.json')):
    j = json.load(open(f)); name = f.split('/')[-2]
    for r in j.get('rows', []):
        print(name, 'batch', r['batch'], 'graph %.2f ms, limit %.3f ms, %.2fx' % (r['graph_ms'], r['limit_ms'], r['graph_x_limit']))
    for k, v in j.get('settings', {}).items():
        T[name[:6] + k] = v['step_s']; p = v['per_step_s']; u = p['update']; m = s.median(u)
        print(name, k, len(u), 'steps: step %.2f s, generation %.3f, update median %.3f max %.3f (%.2fx), peak %.2f GiB'
              % (v['step_s'], s.mean(p['generation']), m, max(u), max(u) / m, v['peak_mem_gib']))
        d = v.get('per_step_update_diagnostics', {})
        print('   slowest updates', [(round(u[i], 3), i, d.get('gc_s', [0] * len(u))[i], d.get('new_shapes', [0] * len(u))[i])
                                     for i in sorted(range(len(u)), key=lambda i: -u[i])[:3]])
for a in 'full05', 'lora05':
    if a + 'pods64' in T and a + 'grpo16' in T:
        print(a, 'PODS/GRPO %.3f' % (T[a + 'pods64'] / T[a + 'grpo16']))
if 'gpu3b' + 'grpo16' in T:
    print('gpu3b PODS/GRPO %.3f' % (T['gpu3bpods64'] / T['gpu3bgrpo16']))
P
cat $R/status.txt; date
