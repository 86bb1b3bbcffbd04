#!/usr/bin/env bash
# One-GPU follow-ups to fastpath.sh on one card (the issue asks for an H100):
#   the paper's single-GPU shape (Qwen2.5-3B, LoRA r=64, 512 tokens): TRL GRPO, pods GRPO 16/16, PODS 64/16;
#   then the 10.7M headline policy on the easy chain sums, GRPO 16/16 vs PODS 64/16, 30 steps each, alone.
set -o pipefail
source scripts/device/setup.sh || exit 1
export OMP_NUM_THREADS=8
R=/tmp/one_gpu; mkdir -p $R
timeout 380 python3 scripts/bench_trl.py --steps 3 --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 \
  --intermediate 11008 --gradient-checkpointing --out $R/bench_trl_cuda_3b_lora > $R/trl_3b.log 2>&1
echo "trl_3b rc=$?"
python3 -m scripts.build_headline_model --out /tmp/headline_model --steps 550 > $R/build.log 2>&1
for v in "none 16 16" "max_variance 64 16"; do set -- $v
  timeout 60 python3 -m pods.train model=headline model.path=/tmp/headline_model dataset=arithmetic_local \
    hardware=gpu selector=$1 selector.n=$2 selector.m=$3 algo.prompts_per_step=8 optim.lr=1e-5 \
    rollout.temperature=0.9 rollout.batch_size=512 max_steps=30 eval.at_start=false eval.at_end=false \
    eval.every_steps=0 checkpoint.save_final=false hydra.run.dir=$R/h_$1 > $R/h_$1.log 2>&1
  echo "h_$1 rc=$?"
done
python3 results/fastpath_call/summarize.py $R | tee $R/summary.md
tar czf ${OUT:-/tmp}/one_gpu.tgz --exclude=checkpoints -C /tmp one_gpu
