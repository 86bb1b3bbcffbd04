#!/usr/bin/env bash
# Run the test suite (or the tests given) while a known load keeps the CPU cores busy, optionally in a random
# order, and write the outcome to results/ci_stress/<date>-<commit>[-<n>].md. A test that passes only on an
# idle machine, or only after another test, fails here.
#
#   bash scripts/ci_stress.sh                               # whole suite, one busy-loop burner per core
#   bash scripts/ci_stress.sh tests/reward                  # a subset (any pytest arguments)
#   bash scripts/ci_stress.sh --random-order tests/reward   # also shuffle the order (seed printed)
#   bash scripts/ci_stress.sh --burners 0 --seed 7 --random-order   # order only, no load
#
# Options (before the pytest arguments): --burners N (default: the number of cores, `nproc`), --random-order,
# --seed S (the shuffle's seed; default: random), --out DIR (default results/ci_stress). The shuffle is
# tests/conftest.py's (PODS_TEST_ORDER_SEED): modules in a random order, then the tests inside each.
# Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."

burners=$(nproc)
random_order=0
seed=""
out_dir=results/ci_stress
while [[ $# -gt 0 ]]; do
  case "$1" in
    --burners) burners=$2; shift 2 ;;
    --random-order) random_order=1; shift ;;
    --seed) seed=$2; shift 2 ;;
    --out) out_dir=$2; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) break ;;
  esac
done
[[ "$burners" =~ ^[0-9]+$ ]] || { echo "ci_stress.sh: --burners $burners: not a whole number" >&2; exit 2; }
if [[ $random_order == 1 && -z "$seed" ]]; then seed=$((RANDOM * 32768 + RANDOM)); fi
[[ -z "$seed" || "$seed" =~ ^[0-9]+$ ]] || { echo "ci_stress.sh: --seed $seed: not a whole number" >&2; exit 2; }
python=${PYTHON:-python}

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (with uncommitted changes)" || true)
stamp=$(date -u +%Y-%m-%d)
mkdir -p "$out_dir"
report="$out_dir/$stamp-$commit.md"
n=1
while [[ -e "$report" ]]; do n=$((n + 1)); report="$out_dir/$stamp-$commit-$n.md"; done

# The load: each burner is one Python busy loop, 100% of one core for as long as the tests run.
pids=()
stop_burners() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_burners EXIT
for _ in $(seq 1 "$burners"); do
  "$python" -c 'while 1: pass' &
  pids+=($!)
done
load="$burners busy-loop burners (\`python -c 'while 1: pass'\`) on $(nproc) cores"
[[ $burners == 0 ]] && load="none added (0 burners) on $(nproc) cores"
order="file order"
[[ -n "$seed" ]] && order="shuffled, PODS_TEST_ORDER_SEED=$seed"

log=$(mktemp)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
echo "ci_stress: load: $load; order: $order; commit $commit$dirty; report: $report"
set +e
env ${seed:+PODS_TEST_ORDER_SEED=$seed} "$python" -m pytest -q -p no:cacheprovider --durations=10 "$@" 2>&1 \
  | tee "$log"
status=${PIPESTATUS[0]}
set -e
seconds=$(($(date +%s) - start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
stop_burners

summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped)|(passed|failed|errors?)( |,).* in [0-9.]+s' "$log" | tail -1)
count() { local n; n=$(echo "$summary" | grep -oE "[0-9]+ $1" | head -1 | cut -d' ' -f1); echo "${n:-0}"; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//' || true)
{
  echo "# Test suite under load: $stamp, commit $commit$dirty"
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| command | \`bash scripts/ci_stress.sh --burners $burners${seed:+ --random-order --seed $seed} $*\` |"
  echo "| tests | \`pytest -q $*\` |"
  echo "| load | $load |"
  echo "| order | $order |"
  echo "| machine | $(uname -m), $(nproc) cores${cpu:+, $cpu}, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 2^20}' /proc/meminfo) |"
  echo "| load average (1, 5, 15 min) | before $load_before; at the end $load_after |"
  echo "| passed / failed / errors / skipped | $(count passed) / $(count failed) / $(count 'errors?') / $(count skipped) |"
  echo "| duration | ${seconds} s |"
  echo "| pytest exit status | $status |"
  echo
  echo "pytest's summary: \`${summary:-none (see the log)}\`"
  echo
  echo "## Failures and the slowest tests (pytest's output)"
  echo
  echo '```'
  grep -E '^(FAILED|ERROR) ' "$log" || echo "(no failures)"
  echo
  sed -n '/slowest .*durations/,/^\(=\|$\)/p' "$log" | grep -v '^=' | head -12
  echo '```'
} >"$report"
rm -f "$log"
echo "ci_stress: wrote $report (pytest exit status $status, ${seconds} s)"
exit "$status"
