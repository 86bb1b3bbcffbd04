#!/usr/bin/env bash
# (Record of what was sent, at commits 5e97017 / 50e1b67: the graph_autotune mode and rollout.max_autotune were
# removed after call 21 measured no gain.)
# Issue 18, call 20, four H100s of one host (nvidia-h100-x4): does inductor's GEMM autotuning
# (rollout.max_autotune: Triton templates timed against cuBLAS, elementwise work fused around them) cut the
# decode step? Call 19: 0.5B graph 1.68 ms at batch 16 (4.73x the bandwidth limit), 376 kernels a step.
#   GPU 0: dec05   0.5B decode, graph vs graph_autotune, batch 16 and 64 (compile seconds reported)
#   GPU 1: prof05  0.5B kernel profile, batch 16: graph vs graph_autotune
#   GPU 2: dec3b   3B decode, graph vs graph_autotune, batch 16
#   GPU 3: full05  0.5B full fine-tune GRPO 16/16 then PODS 64/16, 6 steps, rollout.max_autotune=true
# Sent as `bash scripts/device/perf18_call20.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf20 O=${OUT:-/tmp/perf20out} TAG=perf20 BUDGET=${BUDGET:-420}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
date
(export CUDA_VISIBLE_DEVICES=0; job 400 dec05 python3 scripts/bench_decode.py --batches 16,64 --modes graph,graph_autotune --out $R/dec05) & P0=$!
(export CUDA_VISIBLE_DEVICES=1; job 400 prof05 python3 scripts/profile_gpu.py --parts decode --batches 16 --loops graph,graph_autotune --out $R/prof05) & P1=$!
(export CUDA_VISIBLE_DEVICES=2; job 400 dec3b python3 scripts/bench_decode.py $B3 --batches 16 --modes graph,graph_autotune --out $R/dec3b) & P2=$!
(export CUDA_VISIBLE_DEVICES=3; job 400 full05 python3 scripts/bench_gpu.py --settings grpo16,pods64 --steps 6 --set rollout.max_autotune=true --out $R/full05) & P3=$!
wait $P0 $P1 $P2 $P3
tar czf $O/$TAG.tgz -C /tmp perf20
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys
R = sys.argv[1]
for n in 'dec05', 'dec3b':
    for f in glob.glob(f'{R}/{n}/results.json'):
        for r in json.load(open(f))['rows']:
            print(n, 'batch', r['batch'], 'limit %.3f ms' % r['limit_ms'], ', '.join(
                '%s %.3f ms (%.2fx, compile %.0f s)' % (m, r[m + '_ms'], r[m + '_x_limit'], r.get(m + '_compile_s', 0))
                for m in ('graph', 'graph_autotune') if m + '_ms' in r))
for f in glob.glob(f'{R}/prof05/results.json'):
    for d in json.load(open(f))['decode']:
        print('prof05', d['loop'], 'wall %.3f ms, kernels %.3f ms in %.0f launches' % (d['wall_ms'], d['kernel_ms'], d['kernel_calls']))
for f in glob.glob(f'{R}/full05/results.json'):
    for k, v in json.load(open(f))['settings'].items():
        p = v['per_step_s']
        print('full05', k, 'step %.3f s' % v['step_s'], 'generation', [round(x, 3) for x in p['generation']], 'compile', [round(x, 1) for x in p.get('compile', [])])
P
cat $R/status.txt; date
