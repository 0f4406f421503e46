#!/usr/bin/env bash
# Is reading through kroute slower than straight from the brokers because kroute adds time to
# each fetch, or because its CPU is taken from the brokers and the consumer on a machine that
# has none to spare? (issue 28, part 1: read throughput 0.80-0.86x direct on 2 cores.)
#
# Three cases per round, in rotating order, each Kafka's ConsumerPerformance (Java) reading the
# same pre-filled topic in a fresh group from the earliest offset:
#   direct   straight from the brokers
#   kroute   through kroute; its CPU share of the fetch phase (CPU seconds / fetch seconds)
#   hog      straight from the brokers, beside a process burning that same CPU share (a busy
#            loop duty-cycled every 10 ms at the kroute runs' mean share so far)
# If hog reads as slowly as kroute, the gap is kroute's CPU on a saturated machine; if hog reads
# as fast as direct, it is kroute's added latency. Each run also gives the consumer's mean fetch
# latency (ConsumerPerformance --print-metrics: fetch-latency-avg), which tells the same apart
# per fetch.
#
#   bench/fetch_cpu_share.sh             about 3 min on 2 cores (defaults)
#
#   BENCH_ROUNDS [5]   BENCH_RECORDS [1000000 x 1 KiB]   KROUTE_BIN [target/release/kroute, built]
#
# Uses the running test cluster (scripts/cluster.sh, any mode), or starts one in direct mode and
# stops it afterwards. Output: a markdown table on stdout; files in target/bench-fetch-cpu-share/.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${BENCH_ROUNDS:-5}
records=${BENCH_RECORDS:-1000000}
# shellcheck source=bench/common.sh
source bench/common.sh
read_bench_start fetch_cpu_share
KROUTE_BINS=${KROUTE_BIN:-}
read_bench_kroute_bins
KROUTE_BIN=$KROUTE_BINS
cargo build --release --quiet --example rdkafka_perf || die "building rdkafka_perf failed"

kroute_pid='' hog_pid=''
trap read_bench_cleanup EXIT
read_bench_cluster_up
lib=$(scripts/cluster.sh lib)
topic=fetch-cpu-share-$(date +%s)
fill_read_topic "$topic" "$records" "$raw"

plain_kroute_config "$raw/kroute.toml" "$BOOT"
start_plain_kroute "$KROUTE_BIN" "$raw/kroute.toml" "$raw/kroute.log"

consume() { # CASE BOOTSTRAP ROUND: ConsumerPerformance's fetch MB/s (the group join left out); sets fetch_s and latency_ms
  local out=$raw/$1-$3.txt result
  java -Xmx1g -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true \
    -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties -cp "$lib/*" \
    org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$2" --topic "$topic" \
    --messages "$records" --group "cpu-share-$1-$3-$(date +%s%N)" --timeout 60000 --print-metrics >"$out" 2>&1 ||
    { tail -n 5 "$out" >&2; die "the consumer failed ($1)"; }
  result=$(grep -E '^[0-9]{4}-' "$out" | tail -n 1) || die "no result line in $out"
  fetch_s=$(awk -F', ' '{ printf "%.3f", $8 / 1000 }' <<<"$result")
  # the consumer's mean fetch latency (--print-metrics), ms
  latency_ms=$(awk 'index($0, "consumer-fetch-manager-metrics:fetch-latency-avg:") == 1 { v = $NF } END { printf "%.2f", v }' "$out")
  awk -F', ' '{ print $9 }' <<<"$result"
}
hog() { # SHARE: burns SHARE of one core, duty-cycled every 10 ms, until killed
  python3 -c '
import sys, time
share = float(sys.argv[1])
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.01 * share:
        pass
    time.sleep(0.01 * (1 - share))' "$1" &
  hog_pid=$!
}

declare -A mbps latency
shares=()
cases=(direct kroute hog)
for round in $(seq 1 "$rounds"); do
  for k in 0 1 2; do
    c=${cases[$(((k + round - 1) % 3))]}
    case $c in
      direct) consume direct "$BOOT" "$round" >"$raw/mbps"; mbps[$c]+="$(cat "$raw/mbps") " ;;
      kroute)
        before=$(cpu_seconds "$kroute_pid")
        consume kroute 127.0.0.1:29092 "$round" >"$raw/mbps"; mbps[$c]+="$(cat "$raw/mbps") "
        # its CPU over the fetch phase: the JVM's start and the group join cost kroute next to nothing
        shares+=("$(awk -v a="$before" -v b="$(cpu_seconds "$kroute_pid")" -v t="$fetch_s" 'BEGIN { printf "%.3f", (b - a) / t }')") ;;
      hog)
        share=$(printf '%s\n' "${shares[@]:-0.25}" | awk '{ s += $1 } END { printf "%.3f", s / NR }')
        hog "$share"
        consume hog "$BOOT" "$round" >"$raw/mbps"; mbps[$c]+="$(cat "$raw/mbps") "
        kill "$hog_pid"; wait "$hog_pid" 2>/dev/null || true; hog_pid='' ;;
    esac
    latency[$c]+="$latency_ms "
    say "round $round, $c: ${mbps[$c]} (fetch latency ${latency[$c]}ms)"
  done
done
fetched=$(answer_bytes Fetch)
[ "$fetched" -ge $((rounds * records * 1024)) ] || die "kroute answered $fetched Fetch bytes, fewer than the kroute runs' records"
d=$(median <<<"${mbps[direct]}")
echo "kroute's CPU share of its fetch phases (cores): ${shares[*]}"
echo
echo "| case | fetch MB/s per round | median | vs direct | fetch latency ms per round (the consumer's fetch-latency-avg) | median |"
echo "|---|---|---:|---:|---|---:|"
for c in direct kroute hog; do
  m=$(median <<<"${mbps[$c]}")
  echo "| $c | ${mbps[$c]} | $m | $(awk -v a="$m" -v b="$d" 'BEGIN { printf "%.2fx", a / b }') | ${latency[$c]} | $(median <<<"${latency[$c]}") |"
done
