#!/usr/bin/env bash
# (Record of what was sent, at commits 5e97017 / 50e1b67: the graph_autotune mode and rollout.max_autotune were
# removed after call 21 measured no gain.)
# Issue 18, call 21, two H100s (nvidia-h100-x2): call 20's autotune rows were void (dynamo reused the plain
# compiled step, compile 0 s, same 376 kernels): bench_decode and profile_gpu now reset dynamo per mode.
#   GPU 0: dec05   0.5B decode, graph_autotune then graph, batch 16 and 64
#   GPU 1: prof05  0.5B kernel profile, batch 16: graph_autotune
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf21 O=${OUT:-/tmp/perf21out} TAG=perf21 BUDGET=${BUDGET:-300}
source scripts/device/jobs.sh
date
(export CUDA_VISIBLE_DEVICES=0; job 290 dec05 python3 scripts/bench_decode.py --batches 16,64 --modes graph_autotune,graph --out $R/dec05) & P0=$!
(export CUDA_VISIBLE_DEVICES=1; job 290 prof05 python3 scripts/profile_gpu.py --parts decode --batches 16 --loops graph_autotune --out $R/prof05) & P1=$!
wait $P0 $P1
tar czf $O/$TAG.tgz -C /tmp perf21
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys
R = sys.argv[1]
for f in glob.glob(f'{R}/dec05/*.json'):
    for r in json.load(open(f)).get('rows', []):
        print('dec05 batch', r['batch'], 'limit %.3f ms' % r['limit_ms'], ', '.join(
            '%s %.3f ms (%.2fx, compile %.0f s)' % (m, r[m + '_ms'], r[m + '_x_limit'], r.get(m + '_compile_s', 0))
            for m in ('graph', 'graph_autotune') if m + '_ms' in r))
for f in glob.glob(f'{R}/prof05/results.json'):
    for d in json.load(open(f))['decode']:
        print('prof05', d['loop'], 'wall %.3f ms, kernels %.3f ms in %.0f launches' % (d['wall_ms'], d['kernel_ms'], d['kernel_calls']))
P
tail -5 $R/dec05.log; cat $R/status.txt; date
