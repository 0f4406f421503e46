#!/usr/bin/env bash
# What many consumers reading through kroute cost it in memory (issue 28, part 2: "memory per
# fetch bounded by what is in flight, not by fetch.max.bytes per connection times connections").
#
# N librdkafka consumers (examples/rdkafka_consume, each in a group of its own, librdkafka's
# defaults: fetch.max.bytes 50 MB, 1 MB per partition) read a pre-filled topic through kroute
# from the earliest offset, all at once, then stay at the log end, fetching nothing, for HOLD s.
# kroute's memory is read from /proc: its peak RSS (VmHWM) while they read, and its RSS once
# every consumer has caught up (the mean of 1 s samples over the hold, after the first 5 s: what
# idle connections keep). Each kroute build given runs in turn against the same topic, each
# with its own fresh process; kroute's Fetch answer bytes (at least every consumer's records)
# prove the reads went through kroute.
#
#   bench/fetch_memory.sh                 about 3 min per build on 2 cores (defaults)
#
#   BENCH_CONSUMERS   consumers at once [50]
#   BENCH_RECORDS     records of 1 KiB in the topic (6 partitions, 2 led by each broker) [100000]
#   BENCH_HOLD_S      seconds at the log end [20]
#   KROUTE_BINS       kroute binaries to compare, in that order [target/release/kroute, built]
#
# Uses the running test cluster (scripts/cluster.sh, any mode), or starts one in direct mode and
# stops it afterwards. Output: a markdown table on stdout; files in target/bench-fetch-memory/.
set -euo pipefail
cd "$(dirname "$0")/.."
consumers=${BENCH_CONSUMERS:-50}
records=${BENCH_RECORDS:-100000}
hold=${BENCH_HOLD_S:-20}
# shellcheck source=bench/common.sh
source bench/common.sh
read_bench_start fetch_memory

read_bench_kroute_bins
say "cargo build --release --example rdkafka_consume --example rdkafka_perf"
cargo build --release --quiet --example rdkafka_consume --example rdkafka_perf || die "building the examples failed"

kroute_pid='' consumer_pids=()
trap read_bench_cleanup EXIT
read_bench_cluster_up
topic=fetch-memory-$(date +%s)
fill_read_topic "$topic" "$records" "$raw"

status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }   # PID FIELD

echo "| kroute | consumers | read through kroute | kroute CPU s/GB read | peak RSS while reading | RSS at the log end (mean) | RSS at start |"
echo "|---|---:|---:|---:|---:|---:|---:|"
n=0
for bin in $KROUTE_BINS; do
  n=$((n + 1))
  plain_kroute_config "$raw/kroute-$n.toml" "$BOOT"
  start_plain_kroute "$bin" "$raw/kroute-$n.toml" "$raw/kroute-$n.log"
  rss_start=$(status_kb "$kroute_pid" VmRSS)
  say "build $n ($bin): $consumers consumers reading $records records each"
  consumer_pids=()
  for c in $(seq 1 "$consumers"); do
    RDKAFKA_CONSUME_HOLD_S=$hold target/release/examples/rdkafka_consume 127.0.0.1:29092 "$topic" "$records" \
      >"$raw/consumer-$n-$c.txt" 2>"$raw/consumer-$n-$c.err" &
    consumer_pids+=($!)
  done
  # every consumer has printed its result line: all have caught up
  for _ in $(seq 1 600); do
    done_n=$(cat "$raw"/consumer-$n-*.txt | grep -c . || true)
    [ "$done_n" -ge "$consumers" ] && break
    for p in "${consumer_pids[@]}"; do kill -0 "$p" 2>/dev/null || wait "$p" || die "a consumer failed (build $n): $(cat "$raw"/consumer-$n-*.err | head -n 3)"; done
    sleep 1
  done
  [ "$done_n" -ge "$consumers" ] || die "the consumers did not catch up within 600 s (build $n)"
  peak=$(status_kb "$kroute_pid" VmHWM)
  sleep 5   # the last answers leave kroute; then what the idle connections keep
  samples=()
  for _ in $(seq 1 $((hold > 10 ? hold - 10 : 1))); do samples+=("$(status_kb "$kroute_pid" VmRSS)"); sleep 1; done
  for p in "${consumer_pids[@]}"; do wait "$p" || die "a consumer failed at the log end (build $n)"; done
  consumer_pids=()
  read_mb=$(awk "BEGIN { printf \"%.0f\", $(answer_bytes Fetch) / 1e6 }")
  [ "$read_mb" -ge $((consumers * records * 1024 / 1000000)) ] ||
    die "kroute answered $read_mb MB of Fetch, less than the $consumers consumers' records (build $n)"
  cpu=$(cpu_seconds "$kroute_pid")
  kill "$kroute_pid"; wait "$kroute_pid" 2>/dev/null || true; kroute_pid=''
  idle=$(printf '%s\n' "${samples[@]}" | awk '{ s += $1 } END { printf "%.0f", s / NR }')
  mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
  echo "| $bin | $consumers | $read_mb MB | $(awk -v c="$cpu" -v m="$read_mb" 'BEGIN { printf "%.2f", c / m * 1000 }') | $(mib "$peak") | $(mib "$idle") | $(mib "$rss_start") |"
done
