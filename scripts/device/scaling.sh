#!/usr/bin/env bash
# Issue 28 on a machine of 4 GPUs: scaling of the real Trainer (scripts/bench_scaling.py), one part or several
# per call, each under its own time limit (a point's table is written as soon as it ends, so a part stopped by
# its limit keeps the points it finished). A launch costs about 90 s at the 0.5B shape on 4 H200s (measured:
# 3 points in 270 s), so plan one part per call:
#   bash scripts/device/scaling.sh weak_0.5b      # full fine-tune, DDP and FSDP, 1/2/4 GPUs (6 launches)
#   bash scripts/device/scaling.sh weak_3b_lora strong_0.5b   # 3B LoRA DDP 1/4; 8 prompts x 64/16 DDP 1/4/2
#   bash scripts/device/scaling.sh profile_0.5b   # the 4-GPU DDP and FSDP points, last step under torch.profiler
#   bash scripts/device/scaling.sh fsdp_keep_0.5b # FSDP with update.fsdp_reshard_after_forward=false, 1/2/4 GPUs
# .whl carried (docs/gpu.md). Output in $OUT: scaling.tgz (tables, raw records, logs, profiles) and table.md.
set -o pipefail
[ $# -gt 0 ] || { echo "give parts: weak_0.5b weak_3b_lora strong_0.5b profile_0.5b fsdp_keep_0.5b"; exit 2; }
source scripts/device/setup.sh || exit 1
OUTDIR=${OUT:-/tmp/scaling_out}; R=$OUTDIR/scaling; mkdir -p "$R"
B="python3 scripts/bench_scaling.py --threads 2"
part() {  # part <seconds> <name> <args>...: one bench under a limit; its launches do not outlive it
  local t=$1 name=$2; shift 2
  timeout "$t" $B "$@" --out "$R/$name.md" > "$R/$name.log" 2>&1; echo "$name: exit $?"; tail -2 "$R/$name.log"
  pkill -f bench.scaling_rank; pkill -f torchrun; sleep 2
}
for n in "$@"; do
  case $n in
    weak_0.5b) part 560 weak_0.5b --procs 1,2,4 --dist ddp,fsdp --steps 6 ;;
    weak_3b_lora) part 300 weak_3b_lora --procs 1,4 --dist ddp --lora --layers 36 --hidden 2048 --heads 16 \
      --kv-heads 2 --intermediate 11008 --steps 6 ;;
    strong_0.5b) part 280 strong_0.5b --procs 1,4,2 --dist ddp --strong 8 --steps 5 ;;
    profile_0.5b) part 300 profile_0.5b --procs 4 --dist ddp,fsdp --steps 5 --profile ;;
    fsdp_keep_0.5b) part 300 fsdp_keep_0.5b --procs 1,2,4 --dist fsdp --steps 6 \
      --set update.fsdp_reshard_after_forward=false ;;
    *) echo "unknown part $n"; exit 2 ;;
  esac
done
(cd "$OUTDIR" && tar czf scaling.tgz scaling)
for n in "$@"; do echo "## $n"; cat "$R/$n.md" 2>/dev/null || echo "(no point finished)"; echo; done | tee "$OUTDIR/table.md"
