#!/usr/bin/env bash
# Issue 18, call 15, one H100 (nvidia-h100-x1), after call 14's traces: update widths on a 16-column grid
# (was 64: 7-11% more activation memory than TRL's own padding) and no float32 copy of each adapted layer's
# input under autocast (pods.models.skip_adapter_input_cast), with release_cache and update_sdpa=flash:
#   lora05w  0.5B LoRA GRPO 16/16, 51 steps: steady update (max / median over the 50 after warm-up)
#   trl3b    3B LoRA: TRL GRPO 16/16 then pods GRPO 16/16, one process, 2 steps each: peak memory
#   full05   0.5B full fine-tune: TRL bf16, TRL float32 masters, pods GRPO 16/16, one process, 2 steps each
# Sent as `bash scripts/device/perf18_call15.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf15 O=${OUT:-/tmp/perf15out} TAG=perf15 BUDGET=${BUDGET:-585}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
date
job 140 lora05w python3 scripts/bench_gpu.py --lora --settings grpo16 --steps 51 --out $R/lora05w
job 250 trl3b python3 scripts/bench_trl.py --lora $B3 --gradient-checkpointing --steps 2 --no-pods-extra --out $R/trl3b
job 190 full05 python3 scripts/bench_trl.py --steps 2 --trl-fp32 --no-pods-extra --out $R/full05
cp $R/trl3b.md $R/full05.md $O/ 2>/dev/null
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
for f in sorted(glob.glob(sys.argv[1] + '/*/results.json')):
    j = json.load(open(f)); name = f.split('/')[-2]
    for k, v in j.get('settings', {}).items():
        p = v['per_step_s']; u = p['update']; m = s.median(u)
        print(name, k, len(u), 'steps: step %.2f s, generation %.3f, update median %.3f max %.3f (%.2fx), peak %.2f GiB'
              % (v['step_s'], s.mean(p['generation']), m, max(u), max(u) / m, v['peak_mem_gib']))
        print('   slowest updates', sorted(((round(x, 3), i) for i, x in enumerate(u)), reverse=True)[:4])
        d = v.get('per_step_update_diagnostics', {}); print('   new shapes per step', d.get('new_shapes'))
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f))
    for k, v in j.get('runs', {}).items():
        print(f.split('/')[-1], k, 'step %s s, peak %s GiB' % (v.get('step_times'), v.get('peak_mem_gib')), v.get('error', ''))
    print('   ratios', j.get('ratios'))
P
cat $R/status.txt; date
