#!/usr/bin/env bash
# Issue 18, call 19, four H100s of one host (nvidia-h100-x4), one lane per GPU, at the final code of calls 17-21:
#   GPU 0: gputest  the CUDA tests again (HFGenerator now names the CUDA index: canonical_device)
#          ph05l    0.5B LoRA generate() by part, batch 16 and 64: with "cuda" the shared base is now shared
#                   (call 18 passed "cuda", compared unequal to cuda:0, and decoded from a second copy)
#   GPU 1: ph3b     3B LoRA, the same, batch 16 and 64
#   GPU 2: lora05g  0.5B LoRA GRPO 16/16, 51 steps: steady update (target 5) at the final code
#   GPU 3: dec05    0.5B decode, graph_split vs graph, batch 16 and 64: the fusion's effect again, on another
#                   machine (call 17: 1.83 -> 1.44 ms at batch 16)
# Sent as `bash scripts/device/perf18_call19.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf19 O=${OUT:-/tmp/perf19out} TAG=perf19 BUDGET=${BUDGET:-330}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
P="python3 scripts/decode_phases.py"
date
(export CUDA_VISIBLE_DEVICES=0
 job 120 gputest python3 -m pytest -q -m gpu -p no:cacheprovider tests/rollout/test_hf.py tests/rollout/test_fused.py tests/test_timing.py
 job 180 ph05l $P --lora --batches 16,64 --out $R/ph05l) & P0=$!
(export CUDA_VISIBLE_DEVICES=1; job 300 ph3b $P --lora $B3 --batches 16,64 --out $R/ph3b) & P1=$!
(export CUDA_VISIBLE_DEVICES=2; job 200 lora05g python3 scripts/bench_gpu.py --lora --settings grpo16 --steps 51 --out $R/lora05g) & P2=$!
(export CUDA_VISIBLE_DEVICES=3; job 240 dec05 python3 scripts/bench_decode.py --batches 16,64 --modes graph_split,graph --out $R/dec05) & P3=$!
wait $P0 $P1 $P2 $P3
tar czf $O/$TAG.tgz -C /tmp perf19
for n in ph05l ph3b; do [ -f $R/$n/results.md ] && cat $R/$n/results.md; done
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
R = sys.argv[1]
for f in glob.glob(f'{R}/dec05/results.json'):
    for r in json.load(open(f))['rows']:
        print('dec05 batch', r['batch'], 'limit %.3f ms' % r['limit_ms'],
              ', '.join('%s %.3f ms (%.2fx)' % (m, r[m + '_ms'], r[m + '_x_limit']) for m in ('graph_split', 'graph')))
for n in 'ph05l', 'ph3b':
    for f in glob.glob(f'{R}/{n}/results.json'):
        for r in json.load(open(f))['rows']:
            print(n, 'batch', r['batch'], 'share', r['share'], 'merge %.3f s, restore %.3f s, sync %.3f s' % (r['merge'], r['restore'], r['sync']))
for f in glob.glob(f'{R}/lora05g/results.json'):
    v = json.load(open(f))['settings']['grpo16']; u = v['per_step_s']['update']; m = s.median(u)
    print('lora05g %d steps: step %.2f s, update median %.3f max %.3f (%.2fx), peak %.2f GiB' % (len(u), v['step_s'], m, max(u), max(u) / m, v['peak_mem_gib']))
P
tail -2 $R/gputest.log; cat $R/status.txt; date
