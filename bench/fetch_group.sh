#!/usr/bin/env bash
# Many consumers in one group reading through kroute (issue 28, part 1: "with many consumers,
# e.g. 50 in a group"): N librdkafka consumers (examples/rdkafka_consume) join one consumer group
# on a topic of N partitions, so each reads one partition to its end, straight from the brokers
# and through kroute, alternating per round. Reports the group's throughput (all records read,
# from the group's first record to its last), the time from start to the first record (the
# group's join, N members at once), and kroute's CPU per GB and peak RSS.
#
#   bench/fetch_group.sh                  about 1 min per round on 2 cores (defaults)
#
#   BENCH_CONSUMERS [50]   BENCH_RECORDS [500000 x 1 KiB, over all partitions]   BENCH_ROUNDS [3]
#   KROUTE_BIN [target/release/kroute, built]
#
# Uses the running test cluster (scripts/cluster.sh, any mode), or starts one in direct mode and
# stops it afterwards. Output: a markdown table on stdout; files in target/bench-fetch-group/.
set -euo pipefail
cd "$(dirname "$0")/.."
consumers=${BENCH_CONSUMERS:-50}
records=${BENCH_RECORDS:-500000}
rounds=${BENCH_ROUNDS:-3}
# shellcheck source=bench/common.sh
source bench/common.sh
read_bench_start fetch_group

KROUTE_BINS=${KROUTE_BIN:-}
read_bench_kroute_bins
cargo build --release --quiet --example rdkafka_consume --example rdkafka_perf || die "building the examples failed"

kroute_pid='' consumer_pids=()
trap read_bench_cleanup EXIT
read_bench_cluster_up
topic=fetch-group-$(date +%s)
assignment=$(for ((p = 0; p < consumers; p++)); do
  b=$((p % 3 + 1)); printf '%s:%s:%s,' "$b" $(((b % 3) + 1)) $((((b + 1) % 3) + 1))
done)
scripts/cluster.sh create-topic "$topic" --replica-assignment "${assignment%,}" >/dev/null 2>&1 ||
  die "creating $topic failed"
# keyed (100,000 keys): every partition gets its share, so every member has records to read
say "filling $topic ($consumers partitions): $records records of 1 KiB"
target/release/examples/rdkafka_perf "$BOOT" "$topic" "$records" 1024 -1 acks=all linger.ms=20 kroute.keys=100000 \
  >"$raw/fill.txt" 2>"$raw/fill.err" || { cat "$raw/fill.err" >&2; die "filling the topic failed"; }
plain_kroute_config "$raw/kroute.toml" "$BOOT"
start_plain_kroute "$KROUTE_BINS" "$raw/kroute.toml" "$raw/kroute.log"

read_as_group() { # CASE BOOTSTRAP ROUND: N consumers in one fresh group; prints "MB/s join_s re-read"
  local group="fetch-group-$1-$3-$(date +%s%N)" c
  consumer_pids=()
  # A member that left would hand its partition to another, which would read it again from the
  # last commit: each stays in the group after its result line until all have one. And members
  # commit as they read (every 100 ms, and when a rebalance takes a partition away): the test
  # cluster starts a new group's first generation at once (no initial rebalance delay), so the
  # first members to join read a little before the last ones join and the partitions move. To
  # keep that short, all are started first and join at once (a go file).
  local go=$raw/go-$1-$3
  for c in $(seq 1 "$consumers"); do
    RDKAFKA_CONSUME_GO=$go RDKAFKA_CONSUME_IDLE_END_MS=3000 RDKAFKA_CONSUME_HOLD_S=600 \
      target/release/examples/rdkafka_consume "$2" "$topic" 0 "group.id=$group" \
      enable.auto.commit=true auto.commit.interval.ms=100 \
      >"$raw/$1-$3-$c.txt" 2>"$raw/$1-$3-$c.err" &
    consumer_pids+=($!)
  done
  local deadline=$((SECONDS + 300)) done_n=0
  until [ "$(compgen -G "$go.ready.*" | wc -l)" -ge "$consumers" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "the consumers did not start within 300 s ($1, round $3)"
    sleep 0.1
  done
  touch "$go"
  while [ "$done_n" -lt "$consumers" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "the group did not finish within 300 s ($1, round $3)"
    for c in "${consumer_pids[@]}"; do
      kill -0 "$c" 2>/dev/null || die "a consumer failed ($1, round $3): $(cat "$raw"/$1-$3-*.err | head -n 3)"
    done
    sleep 0.5
    done_n=$(cat "$raw"/$1-$3-*.txt | grep -c . || true)
  done
  kill "${consumer_pids[@]}" 2>/dev/null || true
  wait "${consumer_pids[@]}" 2>/dev/null || true
  consumer_pids=()
  # each line: start, end (the last record), MiB, ..., records, ..., rebalance ms, fetch ms, ...
  python3 - "$records" "$raw"/$1-$3-*.txt <<'PY'
import sys
from datetime import datetime
want, files = int(sys.argv[1]), sys.argv[2:]
ms = lambda t: datetime.strptime(t[:19], "%Y-%m-%d %H:%M:%S").timestamp() * 1000 + int(t[20:])
starts, firsts, lasts, mib, n = [], [], [], 0.0, 0
for f in files:
    v = open(f).read().strip().split(", ")
    start, last = ms(v[0]), ms(v[1])
    starts.append(start)
    if int(v[4]):  # a member left nothing to read (its partition read before a rebalance) read none
        lasts.append(last); firsts.append(last - int(v[7]))
    mib += float(v[2]); n += int(v[4])
# At least once: a partition that moves in a rebalance while the members join is read again
# from its last commit by its new owner; those bytes are fetched too.
if n < want:
    sys.exit(f"the group read {n} records, the topic holds {want}")
window = (max(lasts) - min(firsts)) / 1000
print(f"{mib * 1.048576 / window:.1f} {(min(firsts) - min(starts)) / 1000:.1f} {n - want}")
PY
}

declare -A mbps join reread
cpu_before=$(cpu_seconds "$kroute_pid")
for round in $(seq 1 "$rounds"); do
  for c in $( ((round % 2)) && echo "direct kroute" || echo "kroute direct"); do
    if [ "$c" = direct ]; then boot=$BOOT; else boot=127.0.0.1:29092; fi
    read_as_group "$c" "$boot" "$round" >"$raw/result" || die "round $round, $c: $(cat "$raw/result")"
    read -r m j again <"$raw/result"
    mbps[$c]+="$m " join[$c]+="$j " reread[$c]+="$again "
    say "round $round, $c: $m MB/s, first record after $j s, $again records read twice"
  done
done
fetched=$(answer_bytes Fetch)
[ "$fetched" -ge $((rounds * records * 1024)) ] || die "kroute answered $fetched Fetch bytes, fewer than its rounds' records"
cpu=$(awk -v a="$cpu_before" -v b="$(cpu_seconds "$kroute_pid")" -v f="$fetched" 'BEGIN { printf "%.2f", (b - a) / f * 1e9 }')
peak=$(awk '$1 == "VmHWM:" { printf "%.1f MiB", $2 / 1024 }' "/proc/$kroute_pid/status")
d=$(median <<<"${mbps[direct]}")
echo "| case | group MB/s per round | median | vs direct | first record after (s) | records read twice |"
echo "|---|---|---:|---:|---|---|"
for c in direct kroute; do
  m=$(median <<<"${mbps[$c]}")
  echo "| $c | ${mbps[$c]} | $m | $(awk -v a="$m" -v b="$d" 'BEGIN { printf "%.2fx", a / b }') | ${join[$c]} | ${reread[$c]} |"
done
echo
echo "kroute: $cpu s of CPU per GB of Fetch answers (the group's joins and polling included), peak RSS $peak, $consumers consumers in one group, $(grep -cE ' (WARN|ERROR) ' "$raw/kroute.log" || true) warnings"
