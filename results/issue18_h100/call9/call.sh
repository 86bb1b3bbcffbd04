#!/usr/bin/env bash
# Issue 18, call 9, two H100s of one host (nvidia-h100-x2). Two lanes side by side, one GPU each, then both:
#   GPU 0: trl3b   3B LoRA shape: TRL GRPO 16/16 then pods GRPO 16/16, 2 steps each, one process (peak memory)
#   GPU 1: trl05   0.5B full fine-tune: TRL bf16, TRL float32 masters, pods GRPO 16/16, 3 steps each, one process
#          lora05x 0.5B LoRA GRPO 16/16, 51 steps, hardware.expandable_segments=true (call 8's one slow step was
#                  a first-time shape with 56 cudaMallocs: does the expandable allocator remove it?)
#   both:  multi_gpu (DDP) and fsdp, 40 steps of the tiny policy over NCCL (issue 18 target 6)
# Sent as `bash scripts/device/perf18_call9.sh` with carry [".whl"]; results in $OUT/perf9.tgz, a table last.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
R=/tmp/perf9; O=${OUT:-/tmp/perf9out}; mkdir -p $R $O; END=$((SECONDS+${BUDGET:-560})); date
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --gradient-checkpointing"
job() { local gpu=$1 t=$2 n=$3 l=$((END-SECONDS)); shift 3; [ $t -gt $l ] && t=$l
  [ $t -lt 20 ] && { echo "$n skipped: $t s left" | tee -a $R/status.txt; return; }; echo "$(date +%T) $n on $gpu, limit $t s"
  CUDA_VISIBLE_DEVICES=$gpu TMPDIR=/tmp/t$n timeout -k 10 $t "$@" >$R/$n.log 2>&1; local rc=$?
  echo "$(date +%T) $n rc=$rc" | tee -a $R/status.txt; rm -rf /tmp/t$n; }
mkdir -p /tmp/ttrl3b /tmp/ttrl05 /tmp/tlora05x /tmp/tmulti_gpu /tmp/tfsdp
(job 0 440 trl3b python3 scripts/bench_trl.py --lora $B3 --steps 2 --no-pods-extra --out $R/trl3b) & P0=$!
(job 1 240 trl05 python3 scripts/bench_trl.py --steps 3 --trl-fp32 --no-pods-extra --out $R/trl05
 job 1 170 lora05x python3 scripts/bench_gpu.py --lora --settings grpo16 --steps 51 \
   --set hardware.expandable_segments=true --out $R/lora05x) & P1=$!
wait $P0 $P1
for hw in multi_gpu fsdp; do
  job 0,1 60 $hw python3 -m torch.distributed.run --nproc_per_node 2 -m pods.train hardware=$hw \
    dataset=arithmetic_local max_steps=40 eval.every_steps=20 hydra.run.dir=$R/$hw
done
tar czf $O/perf9.tgz --exclude='checkpoints' -C /tmp perf9
for f in $R/*.md $R/*/results.md; do [ -f $f ] && { echo "== $f"; cat $f; }; done
python3 - $R <<'P'
import json, statistics as s, sys, glob
for f in glob.glob(sys.argv[1] + '/lora05x/results.json'):
    v = json.load(open(f))['settings']['grpo16']; u = v['per_step_s']['update']; m = s.median(u)
    print('lora05x: %d steps, step %.2f s, update median %.3f max %.3f (%.2fx), peak %.2f GiB' % (len(u), v['step_s'], m, max(u), max(u) / m, v['peak_mem_gib']))
    d = v['per_step_update_diagnostics']; print('  over 1.5x:', [(i, u[i], {k: d[k][i] for k in d}) for i, x in enumerate(u) if x > 1.5 * m])
for hw in 'multi_gpu', 'fsdp':
    for f in glob.glob(f'{sys.argv[1]}/{hw}/metrics.jsonl'):
        r = [json.loads(x) for x in open(f)]
        ev = [round(x.get('eval/accuracy', float('nan')), 3) for x in r if x.get('kind') == 'eval']
        tr = [x['timing/step'] for x in r if x.get('kind') == 'train']
        print(hw, 'eval', ev, 'steps', len(tr), 'median step s %.3f' % s.median(tr) if tr else '')
P
grep -h "Error\|error" $R/multi_gpu.log $R/fsdp.log | tail -4; cat $R/status.txt; date
