#!/usr/bin/env bash
# Every registered read of headline v4 (results/headline_v4/PLAN.md) over archived calls, on any machine:
#   bash scripts/headline_v4_reads.sh confirm results/headline_v4/confirm A=results/headline_v4/confirmA \
#       B=results/headline_v4/confirmB C=results/headline_v4/confirmC
#   bash scripts/headline_v4_reads.sh arms results/headline_v4/arms A=results/headline_v4/armsA B=...
#   bash scripts/headline_v4_reads.sh grid results/headline_v4/grid A=results/headline_v4/grid
# Each NAME=DIR holds one call's <phase>.tgz (and alone.tgz); they are unpacked under $HV4R (default
# /tmp/hv4r) and the reads written to the output folder:
#   blocked.md (primary: paper rule per call and combined, with the paired area's sign-flip p),
#   blocked_strict.md, blocked_per_step.md, blocked_per_rollout.md, pooled_{paper,strict,per_step,per_rollout}/,
#   seed_checks.md (per-seed checks per call), step_costs.md (shared and alone per call), seed_curves.png.
# GRID_STEP and X_MAX (default 10 and 300) set the checkpoints; the grid phase reads one call with pods.compare.
set -euo pipefail
PHASE=${1:?give a phase: confirm, arms or grid}; OUTD=${2:?give the output folder}; shift 2
[ $# -ge 1 ] || { echo "give at least one NAME=DIR call"; exit 2; }
GS=${GRID_STEP:-10}; XM=${X_MAX:-300}; R=${HV4R:-/tmp/hv4r}/$PHASE
A=(--baseline none-n16-m16 --x-min 0)
# the reads pooled over calls: calls that ran on a frozen tree (confirm C, D) load the same shipped policy from
# the tree's own copy, so their runs differ from the others' in model.path alone; read them as one experiment
P=(--pool model.path)
mkdir -p "$OUTD"; rm -rf "$R"; mkdir -p "$R"
BLOCKS=(); DIRS=()
for call in "$@"; do
  name=${call%%=*}; dir=${call#*=}
  [ -f "$dir/$PHASE.tgz" ] || { echo "no $dir/$PHASE.tgz"; exit 1; }
  mkdir -p "$R/$name"; tar xzf "$dir/$PHASE.tgz" -C "$R/$name"
  [ -f "$dir/alone.tgz" ] && mkdir -p "$R/alone_$name" && tar xzf "$dir/alone.tgz" -C "$R/alone_$name"
  BLOCKS+=(--block "$name=$R/$name/$PHASE"); DIRS+=("$R/$name/$PHASE")
done
if [ "$PHASE" = grid ]; then
  python -m pods.compare "${DIRS[@]}" --rule paper "${A[@]}" "${P[@]}" --grid-step "$GS" --x-max "$XM" --out "$OUTD/paper" > /dev/null
  python -m pods.compare "${DIRS[@]}" --rule paper "${A[@]}" "${P[@]}" --x step --out "$OUTD/per_step" > /dev/null
  python scripts/plot_nm_grid.py "$OUTD/paper/summary.csv" --out "$OUTD/nm_grid.png"
else
  python scripts/blocked_compare.py "${BLOCKS[@]}" "${A[@]}" --grid-step "$GS" --x-max "$XM" --sign-flip > "$OUTD/blocked.md"
  python scripts/blocked_compare.py "${BLOCKS[@]}" "${A[@]}" --rule strict --grid-step "$GS" --x-max "$XM" \
    > "$OUTD/blocked_strict.md"
  python scripts/blocked_compare.py "${BLOCKS[@]}" "${A[@]}" --x step > "$OUTD/blocked_per_step.md"
  python scripts/blocked_compare.py "${BLOCKS[@]}" "${A[@]}" --x rollouts > "$OUTD/blocked_per_rollout.md"
  python -m pods.compare "${DIRS[@]}" --rule paper "${A[@]}" "${P[@]}" --grid-step "$GS" --x-max "$XM" --out "$OUTD/pooled_paper" > /dev/null
  python -m pods.compare "${DIRS[@]}" --rule strict "${A[@]}" "${P[@]}" --grid-step "$GS" --x-max "$XM" --out "$OUTD/pooled_strict" > /dev/null
  python -m pods.compare "${DIRS[@]}" --rule paper "${A[@]}" "${P[@]}" --x step --out "$OUTD/pooled_per_step" > /dev/null
  python -m pods.compare "${DIRS[@]}" --rule paper "${A[@]}" "${P[@]}" --x rollouts --out "$OUTD/pooled_per_rollout" > /dev/null
fi
{
  for d in "${DIRS[@]}"; do
    echo "## $(basename "$(dirname "$d")")"; echo
    python scripts/pilot_seed_checks.py "$d" --grid-step "$GS" --x-max "$XM"; echo
  done
} > "$OUTD/seed_checks.md"
{
  for call in "$@"; do
    name=${call%%=*}
    echo "## $name, shared"; echo; python scripts/phase_totals.py "$R/$name/$PHASE"; echo
    if [ -d "$R/alone_$name" ]; then echo "## $name, alone"; echo; python scripts/phase_totals.py "$R/alone_$name"; echo; fi
  done
} > "$OUTD/step_costs.md"
python scripts/plot_seed_curves.py "${DIRS[@]}" --grid-step "$GS" --x-max "$XM" --out "$OUTD/seed_curves.png"
echo "wrote $OUTD"
