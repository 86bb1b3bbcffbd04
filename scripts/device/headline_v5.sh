#!/usr/bin/env bash
# Headline v5 (results/headline_v5/PLAN.md): headline v4's frozen design (results/headline_v5/frozen.env, a copy of
# v4's) with one change, the code: today's defaults decide the generate-call sizes and the decode (rollout.batch_size
# and eval.batch_size auto, rollout.hf.decode_attention and share_prefill auto), where v4 set rollout.batch_size=512
# and eval.batch_size=1024. GRPO 16/16 and PODS 64/16 of each seed, 2 seeds a GPU (4 runs per GPU), on any number
# of GPUs; prints the call's table (the paper-rule read, per-seed checks, the step costs shared).
#   bash scripts/device/headline_v5.sh confirm --seeds 5001-5002     # 1 GPU; 5001-5008 on 4
# Everything else (policy check, window, evals, reads) is headline_v4.sh's confirm phase, unchanged.
set -o pipefail
[ "${1:-}" = confirm ] || { echo "headline v5 has one phase: confirm --seeds A-B (PLAN.md: no pilot)"; exit 2; }
export FROZEN=${FROZEN:-results/headline_v5/frozen.env} HV_BATCHES="" HV4_WORK=${HV5_WORK:-/tmp/hv5}
export OUT=${OUT:-/tmp/headline_v5_out}
exec bash "$(dirname "$0")/headline_v4.sh" "$@"
