#!/usr/bin/env bash
# Issue 18, call 12, one H100 (nvidia-h100-x1):
#   gputest  the graph loop's CUDA tests, with the new release path (rollout.release_cache)
#   prof05   0.5B shape: causal SDPA forward+backward per backend at new widths (first call vs later: is the
#            first-time update shape cuDNN's per-shape plan?), then the kernels of one decode step, graph and
#            generate loops, batch 16 and 64 (scripts/profile_gpu.py)
#   sdpa3b   the same SDPA table at the 3B shape (16 query heads, 2 KV heads, head dim 128)
#   lora05f  0.5B LoRA GRPO 16/16, 51 steps, hardware.update_sdpa=flash, release_cache on (the default now):
#            steady update (max / median) against call 8 (cuDNN first, no release: 3.56x on its first step)
# Sent as `bash scripts/device/perf18_call12.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf12 O=${OUT:-/tmp/perf12out} TAG=perf12
source scripts/device/jobs.sh
date
job 100 gputest python3 -m pytest -q -m gpu tests/rollout/test_hf.py -k "graph_loop"
job 200 prof05 python3 scripts/profile_gpu.py --out $R/prof05
job 60 sdpa3b python3 scripts/profile_gpu.py --parts sdpa --layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --out $R/sdpa3b
job 170 lora05f python3 scripts/bench_gpu.py --lora --settings grpo16 --steps 51 --set hardware.update_sdpa=flash --out $R/lora05f
tail -3 $R/gputest.log
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
for f in sorted(glob.glob(sys.argv[1] + '/*/results.json')):
    j = json.load(open(f)); name = f.split('/')[-2]
    for d in j.get('decode', []):
        print(name, 'decode', d['loop'], 'b%d' % d['batch'], 'wall %.3f ms, kernels %.3f ms in %d launches'
              % (d['wall_ms'], d['kernel_ms'], d['kernel_calls']))
    for r in j.get('sdpa', []):
        print(name, 'sdpa', r['backend'], r['width'], 'first %s ms, later %s ms' % (r.get('first_ms'), r.get('steady_ms')), r.get('error', ''))
    for k, v in j.get('settings', {}).items():
        p = v['per_step_s']; u = p['update']; m = s.median(u)
        print(name, k, len(u), 'steps: step %.2f s, generation %.3f, update median %.3f max %.3f (%.2fx), peak %.2f GiB'
              % (v['step_s'], s.mean(p['generation']), m, max(u), max(u) / m, v['peak_mem_gib']))
        print('   slowest updates', sorted(((round(x, 3), i) for i, x in enumerate(u)), reverse=True)[:4])
P
cat $R/status.txt; date
