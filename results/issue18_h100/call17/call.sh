#!/usr/bin/env bash
# Issue 18, call 17, four H100s of one host (nvidia-h100-x4), one lane per GPU, then DDP/FSDP on two:
#   GPU 0: gputest  the CUDA tests (pytest -m gpu): graph loop with fused projections vs the generate loop,
#                   the released cache, the deferred stop check (never run since the cuda_tiny refactor)
#          dec05    0.5B decode ms per step, batch 16 and 64: graph_split (one GEMM per projection) vs graph
#                   (q/k/v and gate/up fused, pods/rollout/fused.py), against the bandwidth limit (target 3)
#   GPU 1: gpu3b    3B LoRA shape, GRPO 16/16 then PODS 64/16, 3 steps each, final defaults (targets 1-2)
#   GPU 2: full05   0.5B full fine-tune (fusion applies), GRPO 16/16 then PODS 64/16, 6 steps each
#          prof05   0.5B decode kernel profile, batch 16: graph_split, graph, graph_nocudnn
#   GPU 3: dec3b    3B decode, batch 16 and 64: graph_split vs graph
#   GPUs 2,3 first: multi_gpu (DDP) and fsdp, 40 steps of the tiny policy over NCCL (target 6)
# Sent as `bash scripts/device/perf18_call17.sh` with carry [".whl"]; results in $OUT, a short table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/perf17 O=${OUT:-/tmp/perf17out} TAG=perf17 BUDGET=${BUDGET:-550}
source scripts/device/jobs.sh
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008"
G="python3 scripts/bench_gpu.py"

date
(export CUDA_VISIBLE_DEVICES=0
 job 200 gputest python3 -m pytest -q -m gpu -p no:cacheprovider tests/rollout/test_hf.py tests/rollout/test_fused.py tests/test_timing.py
 job 220 dec05 python3 scripts/bench_decode.py --batches 16,64 --modes graph_split,graph --out $R/dec05) & P0=$!
(export CUDA_VISIBLE_DEVICES=1
 job 500 gpu3b $G --lora $B3 --gradient-checkpointing --settings grpo16,pods64 --steps 3 --out $R/gpu3b) & P1=$!
(export CUDA_VISIBLE_DEVICES=2,3
 for hw in multi_gpu fsdp; do
   job 70 $hw python3 -m torch.distributed.run --nproc_per_node 2 -m pods.train hardware=$hw \
     dataset=arithmetic_local max_steps=40 eval.every_steps=20 hydra.run.dir=$R/$hw
 done
 (export CUDA_VISIBLE_DEVICES=2
  job 160 full05 $G --settings grpo16,pods64 --steps 6 --out $R/full05
  job 150 prof05 python3 scripts/profile_gpu.py --parts decode --batches 16 --loops graph_split,graph,graph_nocudnn \
    --out $R/prof05) &
 (export CUDA_VISIBLE_DEVICES=3
  job 330 dec3b python3 scripts/bench_decode.py $B3 --batches 16,64 --modes graph_split,graph --out $R/dec3b) &
 wait) & P2=$!
wait $P0 $P1 $P2
tar czf $O/$TAG.tgz --exclude=checkpoints -C /tmp perf17
python3 - $R <<'P' | tee $O/summary.txt
import glob, json, sys, statistics as s
R = sys.argv[1]; T = {}
for f in sorted(glob.glob(R + '/*/results.json')):
    j = json.load(open(f)); name = f.split('/')[-2]
    for r in j.get('rows', []):
        print(name, 'batch', r['batch'], 'limit %.3f ms' % r['limit_ms'],
              ', '.join('%s %.2f ms (%.2fx)' % (m, r[m + '_ms'], r[m + '_x_limit']) for m in ('graph_split', 'graph') if m + '_ms' in r))
    for d in j.get('decode', []):
        print(name, d['loop'], 'b%d' % d['batch'], 'wall %.3f ms, kernels %.3f ms in %.0f launches' % (d['wall_ms'], d['kernel_ms'], d['kernel_calls']))
    for k, v in j.get('settings', {}).items():
        T[name + k] = v['step_s']; p = v['per_step_s']; u = p['update']; m = s.median(u)
        print(name, k, len(u), 'steps: step %.2f s, generation %.3f, update median %.3f max %.3f, peak %.2f GiB'
              % (v['step_s'], s.mean(p['generation']), m, max(u), v['peak_mem_gib']))
for a in 'full05', 'gpu3b':
    if a + 'pods64' in T and a + 'grpo16' in T:
        print(a, 'PODS/GRPO %.3f' % (T[a + 'pods64'] / T[a + 'grpo16']))
for hw in 'multi_gpu', 'fsdp':
    for f in glob.glob(f'{R}/{hw}/metrics.jsonl'):
        r = [json.loads(x) for x in open(f)]
        ev = [round(x.get('eval/accuracy', float('nan')), 3) for x in r if x.get('kind') == 'eval']
        tr = [x['timing/step'] for x in r if x.get('kind') == 'train']
        print(hw, 'eval', ev, 'steps', len(tr), 'median step s %.3f' % s.median(tr) if tr else '')
P
tail -3 $R/gputest.log; grep -h "Error" $R/multi_gpu.log $R/fsdp.log | tail -4; cat $R/status.txt; date
