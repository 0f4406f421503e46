#!/usr/bin/env bash
# kroute's CPU per forwarded Produce request, for one or more builds side by side: one Java
# producer (ProducerPerformance, 1 KiB records, acks=all) at a fixed rate through kroute into a
# topic of 6 partitions, two led by each broker. After a warm-up, kroute's CPU time (from
# /proc/<pid>/stat) and its own count of Produce requests (`kroute_requests_total`) are read at
# the start and the end of the measured window; the row is their ratio. The builds run in turns,
# round after round, so a machine that drifts drifts for all of them.
#
#   KROUTE_BINS="target/release/kroute /tmp/other/kroute" bench/produce_cpu.sh
#
#   KROUTE_BINS      builds to compare (default: cargo build --release, target/release/kroute)
#   BENCH_RATE       records/s (default 14000)
#   BENCH_SECONDS    producer run per build and round (default 28; the first 8 s not counted)
#   BENCH_ROUNDS     rounds (default 2)
#
# Needs the test cluster running (scripts/cluster.sh start, any mode), warm: brokers fresh from a
# start are slow for about 30 s (a first run right after a start read 108 us per request against
# 81 in the next round). kroute listens on 127.0.0.1:29092 and its admin endpoint on 29199.
# Prints one row per build and round.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
say() { echo "produce_cpu: $*" >&2; }
die() { echo "produce_cpu: FAILED: $*" >&2; exit 1; }

rate=${BENCH_RATE:-14000} seconds=${BENCH_SECONDS:-28} rounds=${BENCH_ROUNDS:-2} warmup=8
[ "$seconds" -gt $((warmup + 4)) ] || die "BENCH_SECONDS must be more than $((warmup + 4))"
scripts/cluster.sh status >/dev/null 2>&1 || die "no cluster running (scripts/cluster.sh start)"
read_bench_kroute_bins
work=target/bench/produce_cpu
mkdir -p "$work"
plain_kroute_config "$work/kroute.toml" "$(scripts/cluster.sh bootstrap)"
lib=$(scripts/cluster.sh lib)
kroute_pid=''
trap '[ -n "$kroute_pid" ] && kill "$kroute_pid" 2>/dev/null; true' EXIT

produce_requests() { # kroute's Produce requests so far
  curl -sf http://127.0.0.1:29199/metrics |
    awk '/^kroute_requests_total\{/ && /api="Produce"/ { s += $NF } END { printf "%.0f", s }'
}

one_run() { # BIN ROUND: prints the row
  local bin=$1 round=$2 topic log=$work/kroute.log out=$work/producer.txt r0 r1 c0 c1
  topic=produce-cpu-$(date +%s%N)
  scripts/cluster.sh create-topic "$topic" --replica-assignment 1:2:3,2:3:1,3:1:2,1:3:2,2:1:3,3:2:1 \
    --config min.insync.replicas=2 >/dev/null 2>"$work/create-topic.err" ||
    { cat "$work/create-topic.err" >&2; die "creating $topic failed"; }
  : >"$log"
  start_plain_kroute "$bin" "$work/kroute.toml" "$log"
  java -Xms256m -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true \
    -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties -cp "$lib/*" \
    org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records $((rate * seconds)) \
    --record-size 1024 --throughput "$rate" --producer-props bootstrap.servers=127.0.0.1:29092 acks=all \
    >"$out" 2>&1 &
  local producer=$!
  sleep "$warmup"   # a fixed window of a fixed-rate run, not a wait for a condition
  r0=$(produce_requests) c0=$(cpu_seconds "$kroute_pid")
  sleep $((seconds - warmup - 4))
  r1=$(produce_requests) c1=$(cpu_seconds "$kroute_pid")
  wait "$producer" || die "the producer failed ($out)"
  kill "$kroute_pid"; wait "$kroute_pid" 2>/dev/null || true; kroute_pid=''
  scripts/cluster.sh delete-topic "$topic" >/dev/null 2>&1 || true
  [ "$r1" -gt "$r0" ] || die "no Produce request went through kroute ($bin)"
  awk -v b="$bin" -v k="$round" -v r=$((r1 - r0)) -v c0="$c0" -v c1="$c1" -v p="$(tail -n 1 "$out")" \
    'BEGIN { split(p, f, " records/sec"); n = split(f[1], g, " ");
             printf "| %s | %d | %d | %.2f | %.1f | %s |\n", b, k, r, c1 - c0, 1e6 * (c1 - c0) / r, g[n] }'
}

echo "| build | round | Produce requests | kroute CPU s | CPU per request, us | producer records/s |"
echo "|---|---:|---:|---:|---:|---:|"
for ((round = 1; round <= rounds; round++)); do
  for bin in $KROUTE_BINS; do one_run "$bin" "$round"; done
done
