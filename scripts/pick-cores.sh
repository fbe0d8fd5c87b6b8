#!/usr/bin/env bash
# Prints N comma-separated CPU numbers on distinct physical cores, skipping core 0 (the OS's
# favourite for interrupts). Used to pin the spinning threads of a benchmark.
n=${1:-3}
declare -A seen
out=()
for d in /sys/devices/system/cpu/cpu[0-9]*; do
  cpu=${d##*cpu}
  core=$(cat "$d/topology/core_id" 2>/dev/null || echo "$cpu")
  pkg=$(cat "$d/topology/physical_package_id" 2>/dev/null || echo 0)
  key="$pkg:$core"
  [ "$cpu" = 0 ] && { seen[$key]=1; continue; }
  [ -n "${seen[$key]:-}" ] && continue
  seen[$key]=1
  out+=("$cpu")
done
IFS=$'\n' sorted=($(sort -n <<<"${out[*]}")); unset IFS
printf '%s\n' "${sorted[@]:0:$n}" | paste -sd, -
