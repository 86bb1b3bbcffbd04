#!/usr/bin/env bash
# The fast-path benchmarks (issue 10) in one call on a 4-GPU machine, one job per GPU side by side:
#   GPU0: bench_trl, 0.5B shape, full fine-tune (TRL bf16 and TRL float32 masters, pods GRPO and PODS)
#   GPU1: bench_trl, 0.5B shape, LoRA r=64                       then GPUs 0+1: DDP and FSDP, 40 steps each
#   GPU2: bench_trl, Qwen2.5-3B shape, LoRA r=64 (the paper's single-GPU setting)
#   GPU3: headline policy build, bench_update, 10.7M policy GRPO 16/16 vs PODS 64/16 on chain sums,
#         bench_decode (0.5B shape, batch 16/64/256)
# Run from the repo root on the lent machine:  bash results/fastpath_call/call.sh   (results: $OUT/fastpath.tgz)
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=4
R=/tmp/fastpath; mkdir -p $R; T=${BUDGET:-530}
job() { local gpu=$1 name=$2; shift 2; echo "$(date +%T) start $name"
  CUDA_VISIBLE_DEVICES=$gpu timeout $T "$@" > $R/$name.log 2>&1; echo "$(date +%T) $name rc=$?" | tee -a $R/status; }
NOEVAL="eval.at_start=false eval.at_end=false eval.every_steps=0 checkpoint.save_final=false"
(job 0 trl_full python3 scripts/bench_trl.py --steps 4 --trl-fp32 --out $R/bench_trl_cuda) & P0=$!
(job 1 trl_lora python3 scripts/bench_trl.py --steps 4 --lora --out $R/bench_trl_cuda_lora) & P1=$!
(job 2 trl_3b python3 scripts/bench_trl.py --steps 4 --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 \
   --intermediate 11008 --gradient-checkpointing --out $R/bench_trl_cuda_3b_lora) &
(job 3 build python3 -m scripts.build_headline_model --out /tmp/headline_model --steps 550
 job 3 update python3 scripts/bench_update.py --out $R/bench_update
 for v in "none 16 16" "max_variance 64 16"; do set -- $v
   job 3 h_$1 python3 -m pods.train $NOEVAL model=headline model.path=/tmp/headline_model dataset=arithmetic_local hardware=gpu \
     selector=$1 selector.n=$2 selector.m=$3 algo.prompts_per_step=8 optim.lr=1e-5 max_steps=40 \
     hydra.run.dir=$R/h_$1; done
 job 3 decode python3 scripts/bench_decode.py --out $R/bench_decode) &
wait $P0 $P1
for hw in multi_gpu fsdp; do
  job 0,1 $hw python3 -m torch.distributed.run --nproc_per_node 2 -m pods.train hardware=$hw \
    dataset=arithmetic_local max_steps=40 eval.every_steps=20 hydra.run.dir=$R/$hw
done
wait
python3 results/fastpath_call/summarize.py $R | tee $R/summary.md
tar czf ${OUT:-/tmp}/fastpath.tgz --exclude='checkpoints' -C /tmp fastpath
cp $R/summary.md ${OUT:-/tmp}/ 2>/dev/null; cat $R/status
