#!/usr/bin/env bash
# Runs the README's demo (scripts/demo.sh) N times in a row and summarizes kroute's gain over
# the direct run: throughput ratio and p99 ratio of every run, their median, min and max, and
# the machine's load around each run (the demo's absolute numbers follow the machine's load,
# its ratios less so). Issue 26 part 6: the README's claim is re-measured with this.
#
#   bench/demo_repeat.sh [N]          # default 10 runs; about 75 s each on 2 cores, cluster running
#
# Extra environment is passed on to the demo (e.g. DEMO_SLOW="delay 20"). Each run's full output
# is kept in target/demo-repeat/run-K.txt; the summary goes to stdout and target/demo-repeat/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/demo_repeat.sh [N]" >&2; exit 2; }
out=target/demo-repeat
rm -rf "$out"
mkdir -p "$out"

for k in $(seq 1 "$runs"); do
  load_before=$(cut -d' ' -f1 /proc/loadavg)
  scripts/demo.sh >"$out/run-$k.txt" 2>&1 || { echo "run $k failed: $out/run-$k.txt" >&2; exit 1; }
  load_after=$(cut -d' ' -f1 /proc/loadavg)
  # The demo's table rows: "throughput (MB/s)  direct  kroute  ratio | fullspeed".
  tput=$(awk '/^throughput \(MB\/s\)/ { print $3, $4, $5 }' "$out/run-$k.txt")
  p99=$(awk '/^p99 latency, send to ack/ { print $7, $8, $9 }' "$out/run-$k.txt")
  [ -n "$tput" ] && [ -n "$p99" ] || { echo "run $k: no result table in $out/run-$k.txt" >&2; exit 1; }
  echo "$k $tput $p99 $load_before $load_after" | tee -a "$out/runs.txt" >&2
done

python3 - "$out/runs.txt" <<'EOF' | tee "$out/summary.txt"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
ratio = lambda s: float(s.rstrip("x"))
tput = [ratio(r[3]) for r in rows]
p99 = [ratio(r[6]) for r in rows]
print(f"{len(rows)} runs of scripts/demo.sh")
print("| run | direct MB/s | kroute MB/s | throughput ratio | direct p99 ms | kroute p99 ms | p99 ratio | load 1 min before / after |")
print("|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]} | {r[7]} / {r[8]} |")
for name, xs in (("throughput", tput), ("p99", p99)):
    print(f"{name} ratio: median {statistics.median(xs):.2f}x, min {min(xs):.2f}x, max {max(xs):.2f}x")
EOF
