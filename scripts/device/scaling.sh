#!/usr/bin/env bash
# Issue 28 on a machine of 4 GPUs, one call: weak scaling of the real Trainer at the 0.5B shape (full
# fine-tune, DDP and FSDP, 1/2/4 GPUs), at the 3B shape with LoRA (DDP, 1 and 4 GPUs), and strong scaling of
# the headline's global batch (8 prompts x n=64, m=16; DDP, 1/2/4 GPUs), each under its own time limit so a
# slow part leaves the others' tables. Output in $OUT: scaling.tgz (tables, raw records, profiles), table.md.
#   bash scripts/device/scaling.sh            # .whl carried (docs/gpu.md)
set -o pipefail
source scripts/device/setup.sh || exit 1
OUTDIR=${OUT:-/tmp/scaling_out}; R=$OUTDIR/scaling; mkdir -p "$R"
B="python3 scripts/bench_scaling.py --threads 2"
part() {  # part <seconds> <name> <args>...: one bench under a limit; its launches do not outlive it
  local t=$1 name=$2; shift 2
  timeout "$t" $B "$@" --out "$R/$name.md" > "$R/$name.log" 2>&1; echo "$name: exit $?"; tail -2 "$R/$name.log"
  pkill -f bench.scaling_rank; pkill -f torchrun; sleep 2
}
part 270 weak_0.5b --procs 1,2,4 --dist ddp,fsdp --steps 7
part 170 weak_3b_lora --procs 1,4 --dist ddp --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 \
  --intermediate 11008 --steps 6
part 110 strong_0.5b --procs 1,4,2 --dist ddp --strong 8 --steps 5
(cd "$OUTDIR" && tar czf scaling.tgz scaling)
for n in weak_0.5b weak_3b_lora strong_0.5b; do  # the finished table, else the last partial one in the log
  echo "## $n"; if [ -f "$R/$n.md" ]; then cat "$R/$n.md"; else grep '^|' "$R/$n.log" | tail -8; fi; echo
done | tee "$OUTDIR/table.md"
