#!/usr/bin/env bash
# Issue 18, call 4, one H100 (nvidia-h100-x1): what calls 1-3 (perf3b.sh) left unmeasured, with room for the
# 30-40 s of compiles each run pays outside its training clock. In order of priority:
#   full05   0.5B full fine-tune: GRPO 16/16 then PODS 64/16, 6 steps each (first dropped), one process
#   lora05p  0.5B LoRA r=64: PODS 64/16, 6 steps
#   lora05g  0.5B LoRA r=64: GRPO 16/16, 51 steps: the GRPO side of the LoRA ratio and the steady-update check
#            (max / median update time over the 50 steps after the first)
#   trl3b    3B LoRA shape: TRL GRPO 16/16 then pods GRPO 16/16, 2 steps each, one process (peak memory);
#            gets what is left of the budget, so it may be cut
# Each job has its own timeout, capped by what is left of BUDGET seconds (default 530). After each job the
# tables go to $OUT and everything (logs, results.json, the metrics.jsonl of a run cut by its timeout) to
# $OUT/perf4.tgz, so a cut job still returns what it measured. A short table is printed last.
# The call sent this file's commands (comment lines dropped) as `run`'s command: the checkout it ran from is
# /work/main, not this worktree, and bench_gpu.py / bench_trl.py / setup.sh are the same there.
# CPU smoke run: DRY="--device cpu --layers 2 --hidden 64 --heads 0 --kv-heads 0 --intermediate 0 --vocab 512
#   --completion-len 16 --steps 3" (appended to every benchmark's arguments; skips setup.sh).
set -o pipefail
[ -n "$DRY" ] || { source scripts/device/setup.sh || exit 1; }
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
R=/tmp/perf4; O=${OUT:-/tmp/perf4out}; mkdir -p $R $O; END=$((SECONDS+${BUDGET:-530})); date
B3="--layers 36 --hidden 2048 --heads 16 --kv-heads 2 --intermediate 11008 --gradient-checkpointing"
G="python3 scripts/bench_gpu.py"
job() { local t=$1 n=$2 l=$((END-SECONDS)); shift 2; [ $t -gt $l ] && t=$l
  [ $t -lt 20 ] && { echo "$n skipped: $t s left" | tee -a $R/status.txt; return; }; echo "$(date +%T) $n, limit $t s"
  timeout -k 10 $t "$@" $DRY >$R/$n.log 2>&1; local rc=$?; echo "$(date +%T) $n rc=$rc" | tee -a $R/status.txt
  for f in /tmp/pods-bench*/*/metrics.jsonl; do [ -f $f ] && cp $f $R/$n-$(basename $(dirname $f)).jsonl; done
  rm -rf /tmp/pods-bench*; cp $R/$n/results.md $O/$n.md; cp $R/status.txt $R/*.md $O/; tar czf $O/perf4.tgz -C /tmp perf4; } 2>/dev/null
job 150 full05 $G --settings grpo16,pods64 --steps 6 --out $R/full05
job 100 lora05p $G --lora --settings pods64 --steps 6 --out $R/lora05p
job 220 lora05g $G --lora --settings grpo16 --steps 51 --out $R/lora05g
job 540 trl3b python3 scripts/bench_trl.py --lora $B3 --steps 2 --no-pods-extra --out $R/trl3b
python3 - $R <<'E'|tee $O/summary.txt
import glob,json,sys,statistics as s
T={}
for f in sorted(glob.glob(sys.argv[1]+'/*/results.json')):
 j=f.split('/')[-2]
 for k,v in json.load(open(f))['settings'].items():
  T[j[:6]+k]=t=v['step_s'];p=v['per_step_s'];u=p['update'];m=s.median(u)
  print(j,k,len(u),'steps: step %.2f s, generation %.2f, update median %.3f max %.3f (%.2fx), peak %.2f GiB'%(t,s.mean(p['generation']),m,max(u),max(u)/m,v['peak_mem_gib']))
for a in'full05','lora05':
 if a+'pods64' in T and a+'grpo16' in T:print(a,'PODS/GRPO %.2f'%(T[a+'pods64']/T[a+'grpo16']))
E
cat $R/trl3b.md; ls $R/*.jsonl; date
cat $R/status.txt
