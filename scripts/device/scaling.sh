#!/usr/bin/env bash
# Issue 28 on a lent machine of 2 or 4 GPUs (or more): scaling of the real Trainer (scripts/bench_scaling.py) at
# 1 GPU and every power of two up to the machine's count, and the multi-GPU correctness checks; one part or
# several per call, each under its own time limit (a point's table is written as soon as it ends, so a part
# stopped by its limit keeps the points it finished). A 0.5B launch cost about 90 s on 4 H200s; each launch now
# prints where its seconds went. Plan one or two parts per call:
#   bash scripts/device/scaling.sh weak_0.5b      # full FT: DDP, FSDP (units of ~1e8 parameters), FSDP a unit per layer
#   bash scripts/device/scaling.sh weak_3b_lora strong_0.5b   # 3B LoRA under DDP; 8 prompts x 64/16 under DDP
#   bash scripts/device/scaling.sh correct curves # 1 vs k GPUs, one update (bf16 tolerance); DDP/FSDP eval curves
# DISTS=fsdp picks the layouts of weak_0.5b; PROCS=1,4 the process counts; PROFILE=1 profiles weak_3b_lora's last
# step too; DECODE_PARTS=1 splits its generation by the graph loop's parts; REPEATS=2 runs each part's points
# twice in turn (paired efficiencies); KINDS=ddp,fsdp the layouts `correct` checks (default: DDP, FSDP in units,
# FSDP in units computing as one process does, FSDP a unit per layer); LIMIT=<s> overrides every part's limit.
# .whl carried (docs/gpu.md). Output in $OUT: scaling.tgz (tables, raw records, logs, profiles), table.md and
# each part's tables (<part>.md, <part>.profile.md); a second invocation in the same call adds to them.
set -o pipefail
[ $# -gt 0 ] || { echo "give parts: weak_0.5b weak_3b_lora strong_0.5b correct curves"; exit 2; }
source scripts/device/setup.sh || exit 1
OUTDIR=${OUT:-/tmp/scaling_out}; R=/tmp/scaling_run/scaling; mkdir -p "$R" "$OUTDIR"  # $OUT returns <= 8 files
NG=$(nvidia-smi -L | grep -c '^GPU ')  # whole GPUs (MIG devices are listed below them)
P=1; for k in 2 4 8; do [ "$k" -le "$NG" ] && P=$P,$k; done  # 1,2 on 2 GPUs; 1,2,4 on 4
P=${PROCS:-$P}  # PROCS=1,4: only those points
PROF3B="--steps 6"; [ "${PROFILE:-0}" = 1 ] && PROF3B="--steps 7 --profile"  # the profiled step is not read
[ "${DECODE_PARTS:-0}" = 1 ] && PROF3B="$PROF3B --decode-parts"  # weak_3b_lora: generation by the loop's parts
B="python3 scripts/bench_scaling.py --threads 2 --procs $P --repeats ${REPEATS:-1}"  # REPEATS=2: 1,4,1,4
part() {  # part <seconds> <name> <command>...: one part under a limit; its launches do not outlive it
  local t=$1 name=$2; shift 2
  timeout "$t" "$@" > "$R/$name.log" 2>&1; echo "$name: exit $? ($SECONDS s into the call)"; tail -2 "$R/$name.log"
  # python processes only: a bare `pkill -f update_ranks` also matched the shell whose command line named the script
  # (a pip-installed torchrun runs as `python .../bin/torchrun`, so the first pattern covers it)
  for p in bench.scaling_rank torchrun torch.distributed.run update_ranks; do pkill -f "^[^ ]*python[^ ]* .*$p"; done
  sleep 2
}
for n in "$@"; do
  case $n in
    weak_0.5b) part "${LIMIT:-540}" $n $B --dist "${DISTS:-ddp,fsdp,fsdp_per_layer}" --side-by-side --steps 7 --profile \
      --out "$R/$n.md" ;;
    weak_3b_lora) part "${LIMIT:-420}" $n $B --dist ddp --lora --layers 36 --hidden 2048 --heads 16 --kv-heads 2 \
      --intermediate 11008 $PROF3B --out "$R/$n.md" ;;
    strong_0.5b) part "${LIMIT:-250}" $n $B --dist ddp --strong 8 --steps 5 --out "$R/$n.md" ;;
    correct) part "${LIMIT:-240}" $n python3 scripts/check_update_ranks.py --device cuda --procs 2 \
      --kinds "${KINDS:-ddp,fsdp_units,fsdp_units_gather32_nocache,fsdp}" --out "$R/$n.md" ;;
    curves)  # 40 steps of the shipped tiny policy on 2 GPUs under DDP and under FSDP: the same eval curve
      for hw in multi_gpu fsdp; do
        rm -rf "$R/curves_$hw"  # a second call on a warm machine: a fresh run, not a refusal to overwrite
        part "${LIMIT:-120}" curves_$hw python3 -m torch.distributed.run --nproc_per_node 2 -m pods.train \
          hardware=$hw dataset=arithmetic_local max_steps=40 eval.every_steps=20 run_dir=$R/curves_$hw
      done
      python3 - "$R" <<'PY' | tee "$R/$n.md"
import json, statistics, sys
for hw in ("multi_gpu", "fsdp"):
    try:
        recs = [json.loads(x) for x in open(f"{sys.argv[1]}/curves_{hw}/metrics.jsonl")]
    except OSError:
        print(f"{hw}: no run"); continue
    ev = [(r["step"], round(r.get("eval/accuracy", float("nan")), 4)) for r in recs if r.get("kind") == "eval"]
    steps = [r["timing/step"] for r in recs if r.get("kind") == "train"]
    med = f"{statistics.median(steps):.3f} s" if steps else "none"
    print(f"{hw}: eval (step, accuracy) {ev}; {len(steps)} steps, median step {med}")
PY
      ;;
    *) echo "unknown part $n"; exit 2 ;;
  esac
done
(cd /tmp/scaling_run && tar czf "$OUTDIR/scaling.tgz" --exclude=checkpoints scaling)
cp "$R"/*.md "$OUTDIR"/ 2>/dev/null
for n in "$@"; do echo "## $n"; cat "$R/$n.md" 2>/dev/null || echo "(no point finished)"; echo; done | tee "$OUTDIR/table.md"
