#!/usr/bin/env bash
# Issue 18, call 18, four H100s of one host (nvidia-h100-x4), one lane per GPU: where the generation time of
# a training step goes beyond the per-token replays (call 17: 0.5B generation 0.945 s for 512 tokens = 1.85 ms
# a token, against 1.44 ms per decode step in bench_decode; 3B 5.36 against 4.09).
#   GPU 0: dec05a/b  0.5B decode, graph loop, batch 16 and 64, 256 then 512 new tokens: fixed cost per call
#                    against the cost per token
#   GPU 1: ph3b      3B LoRA (shared base) generate() by part, batch 16 and 64 (scripts/decode_phases.py)
#          ph3bfit   the same, batch 16, cache sized to the prompt (rollout.size_cache_to_prompt)
#   GPU 2: ph05      0.5B, own copy (fused projections), by part, batch 16 and 64
#          ph05l     0.5B LoRA (shared base), by part, batch 16 and 64
#   GPU 3: gpu3bfit  3B LoRA GRPO 16/16 then PODS 64/16, 3 steps each, rollout.size_cache_to_prompt=true
# Sent as `bash scripts/device/perf18_call18.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf18 O=${OUT:-/tmp/perf18out} TAG=perf18 BUDGET=${BUDGET:-500}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
P="python3 scripts/decode_phases.py"
date
(export CUDA_VISIBLE_DEVICES=0
 job 200 dec05a python3 scripts/bench_decode.py --batches 16,64 --modes graph --new-tokens 256 --out $R/dec05a
 job 240 dec05b python3 scripts/bench_decode.py --batches 16,64 --modes graph --new-tokens 512 --out $R/dec05b) & P0=$!
(export CUDA_VISIBLE_DEVICES=1
 job 300 ph3b $P --lora $B3 --batches 16,64 --out $R/ph3b
 job 180 ph3bfit $P --lora $B3 --batches 16 --size-cache-to-prompt --out $R/ph3bfit) & P1=$!
(export CUDA_VISIBLE_DEVICES=2
 job 200 ph05 $P --batches 16,64 --out $R/ph05
 job 200 ph05l $P --lora --batches 16,64 --out $R/ph05l) & P2=$!
(export CUDA_VISIBLE_DEVICES=3
 job 480 gpu3bfit python3 scripts/bench_gpu.py --lora $B3 --gradient-checkpointing --settings grpo16,pods64 \
   --steps 3 --set rollout.size_cache_to_prompt=true --out $R/gpu3bfit) & P3=$!
wait $P0 $P1 $P2 $P3
tar czf $O/$TAG.tgz -C /tmp perf18
for n in ph3b ph3bfit ph05 ph05l; do [ -f $R/$n/results.md ] && cat $R/$n/results.md; done
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
R = sys.argv[1]
for n in 'dec05a', 'dec05b':
    for f in glob.glob(f'{R}/{n}/results.json'):
        for r in json.load(open(f))['rows']:
            print(n, 'batch', r['batch'], 'graph %.3f ms, limit %.3f ms (%.2fx)' % (r['graph_ms'], r['limit_ms'], r['graph_x_limit']))
for f in glob.glob(f'{R}/gpu3bfit/results.json'):
    for k, v in json.load(open(f))['settings'].items():
        p = v['per_step_s']
        print('gpu3bfit', k, 'step', [round(x, 3) for x in p['step']], 'generation', [round(x, 3) for x in p['generation']],
              'update', [round(x, 3) for x in p['update']], 'peak %.2f GiB' % v['peak_mem_gib'])
P
cat $R/status.txt; date
