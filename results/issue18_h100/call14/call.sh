#!/usr/bin/env bash
# Issue 18, call 14, one H100 (nvidia-h100-x1), at the new defaults (rollout.release_cache on,
# hardware.update_sdpa=flash, the generation copy made without a host-side random init):
#   pods3b  pods GRPO 16/16 at the 3B LoRA shape, 2 steps, under an allocator trace (call 13 traced TRL's
#           run in the same benchmark; its pods run was cut): what is live at pods' peak
#   dec3b   decode ms per step of the graph loop at batch 16 and 64 against the bandwidth limit (3B shape)
#   full05  0.5B full fine-tune: TRL (bf16, then float32 masters) and pods GRPO 16/16 in one process, 2 steps
#           each, each under an allocator trace
# Sent as `bash scripts/device/perf18_call14.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf14 O=${OUT:-/tmp/perf14out} TAG=perf14 BUDGET=${BUDGET:-575}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
date
job 130 pods3b python3 scripts/bench_gpu.py --lora $B3 --gradient-checkpointing --steps 2 --settings grpo16 \
  --memory-trace $R/traces3b --out $R/pods3b
job 225 dec3b python3 scripts/bench_decode.py $B3 --batches 16,64 --modes graph --new-tokens 256 --out $R/dec3b
job 220 full05 python3 scripts/bench_trl.py --steps 2 --trl-fp32 --no-pods-extra --memory-trace $R/traces05 --out $R/full05
mkdir -p $O/traces3b $O/traces05; cp $R/traces3b/*.md $O/traces3b/; cp $R/traces05/*.md $O/traces05/; cp $R/full05.md $O/ 2>/dev/null
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + '/*/results.json')):
    j = json.load(open(f)); name = f.split('/')[-2]
    for r in j.get('rows', []):
        print(name, 'batch', r['batch'], 'graph %.2f ms, limit %.2f ms, %.2fx' % (r['graph_ms'], r['limit_ms'], r['graph_x_limit']))
    for k, v in j.get('settings', {}).items():
        p = v['per_step_s']
        print(name, k, 'steps', p['step'], 'generation', p['generation'], 'update', p['update'], 'peak %.2f GiB' % v['peak_mem_gib'])
        print('   phase peaks', {a: round(b, 3) for a, b in v.get('phase_peak_gib', {}).items()})
P
grep -h "^| trl\|^| pods" $R/full05.md; grep -h "model loaded\|batch" $R/dec3b.log
for f in $R/traces3b/*.md $R/traces05/*.md; do echo "== $f"; sed -n 3,3p $f; sed -n 7,20p $f; done
cat $R/status.txt; date
