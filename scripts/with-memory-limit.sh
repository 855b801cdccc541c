#!/usr/bin/env bash
# Runs a command in a memory cgroup limited to LIMIT bytes (suffixes K, M, G),
# swap included, and prints the cgroup's peak memory use and how often the
# limit was hit. Needs root (a cgroup is created under the caller's own).
#
#   scripts/with-memory-limit.sh 1G target/release/streamwork-bench \
#       --workload STATE-STORED --keys 100000000 --events 200000000 \
#       --interval-ms 200 --runs 1 --checked-only
#
# Works with cgroup v1 (memory controller) and v2.
set -euo pipefail
limit="$1"
shift
bytes=$(numfmt --from=iec "$limit")
name="streamwork-limit-$$"
if [ -d /sys/fs/cgroup/memory ]; then
    parent="/sys/fs/cgroup/memory$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)"
    group="$parent/$name"
    mkdir "$group"
    echo "$bytes" > "$group/memory.limit_in_bytes"
    if [ -e "$group/memory.memsw.limit_in_bytes" ]; then
        echo "$bytes" > "$group/memory.memsw.limit_in_bytes" || true
    fi
    peak_file="$group/memory.max_usage_in_bytes"
    fail_file="$group/memory.failcnt"
else
    parent="/sys/fs/cgroup$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)"
    group="$parent/$name"
    mkdir "$group"
    echo "$bytes" > "$group/memory.max"
    echo 0 > "$group/memory.swap.max" || true
    peak_file="$group/memory.peak"
    fail_file="$group/memory.events"
fi
cleanup() { rmdir "$group" 2>/dev/null || true; }
trap cleanup EXIT
status=0
(echo "$BASHPID" > "$group/cgroup.procs" && exec "$@") || status=$?
echo "memory limit $limit: peak $(numfmt --to=iec "$(cat "$peak_file")"), limit hit: $(tr '\n' ' ' < "$fail_file")" >&2
exit "$status"
