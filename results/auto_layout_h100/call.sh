#!/usr/bin/env bash
# hardware=auto on one GPU (the default profile): the run settles the update's layout as the GPU profiles set it
# (width_bucket 16, fused_logprobs, row_bucket 8 for a full fine-tune) and trains. 20 steps of the tiny policy.
# Sent as `bash results/auto_layout_h100/call.sh` with carry [".whl"]; output under $OUT.
set -o pipefail
source scripts/device/setup.sh || exit 1
O=${OUT:-/tmp/autoout}; mkdir -p $O
timeout 240 python3 -m pods.train dataset=arithmetic_local max_steps=20 eval.every_steps=10 hydra.run.dir=/tmp/auto \
  2>&1 | tail -25 | tee $O/auto.log
grep -E "width_bucket|row_bucket|fused_logprobs|^  name|lora:" /tmp/auto/config.yaml | tee $O/hardware.txt
python3 - <<'P' | tee -a $O/hardware.txt
import json
r = [json.loads(x) for x in open('/tmp/auto/metrics.jsonl')]
print('eval', [round(x['eval/accuracy'], 3) for x in r if x.get('kind') == 'eval'], 'train steps', sum(x.get('kind') == 'train' for x in r))
P
