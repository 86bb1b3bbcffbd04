#!/usr/bin/env bash
# Sourced by the device call scripts (scripts/device/perf18_call12.sh on): `job LIMIT NAME command...` runs
# one benchmark under its own timeout, capped by what is left of BUDGET seconds since sourcing (default 560),
# logs to $R/NAME.log, then copies $R/NAME/results.md (if the benchmark wrote one) and the status lines to
# $O and packs $R into $O/$TAG.tgz, so a job cut by the call's limit still leaves what the earlier ones made.
# Needs R (work folder), O (the folder that comes back: $OUT) and TAG set before sourcing.
mkdir -p "$R" "$O"
END=$((SECONDS + ${BUDGET:-560}))
job() {
  local t=$1 n=$2 left=$((END - SECONDS))
  shift 2
  [ "$t" -gt "$left" ] && t=$left
  if [ "$t" -lt 20 ]; then echo "$n skipped: $t s left" | tee -a "$R/status.txt"; return; fi
  echo "$(date +%T) $n, limit $t s"
  timeout -k 10 "$t" "$@" >"$R/$n.log" 2>&1
  local rc=$?
  echo "$(date +%T) $n rc=$rc" | tee -a "$R/status.txt"
  [ -f "$R/$n/results.md" ] && cp "$R/$n/results.md" "$O/$n.md"
  cp "$R/status.txt" "$O/"
  tar czf "$O/$TAG.tgz" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
}
