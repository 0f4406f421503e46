#!/usr/bin/env bash
# A share group (KIP-932) reading through kroute (issue 28, part 1): Kafka's
# ShareConsumerPerformance reads a pre-filled topic in a fresh share group (from the earliest
# offset), straight from the brokers and through each kroute build given, in rotating order per
# round. Reports MB/s per case and kroute's CPU seconds per GB of ShareFetch answers (its own
# counters, which also prove the reads went through it).
#
#   bench/share_fetch.sh                  about 1 min per round and case on 2 cores (defaults)
#
#   BENCH_ROUNDS    rounds [3]
#   BENCH_RECORDS   records of 1 KiB (6 partitions, 2 led by each broker) [300000]
#   KROUTE_BINS     kroute binaries [target/release/kroute, built]
#
# Needs brokers with share groups (Kafka 4.1 and later): uses the running test cluster
# (scripts/cluster.sh), or starts one and stops it afterwards, and turns the share.version feature
# on (FeatureCommand upgrade --feature share.version=1; a preview feature in Kafka 4.1).
# Output: a markdown table on stdout; files in target/bench-share-fetch/.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${BENCH_ROUNDS:-3}
records=${BENCH_RECORDS:-300000}
# shellcheck source=bench/common.sh
source bench/common.sh
read_bench_start share_fetch

read_bench_kroute_bins
cargo build --release --quiet --example rdkafka_perf || die "building rdkafka_perf failed"
read -r -a bins <<<"$KROUTE_BINS"

kroute_pid=''
trap read_bench_cleanup EXIT
read_bench_cluster_up
lib=$(scripts/cluster.sh lib)
jvm=(java -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true
  -Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties -cp "$lib/*")
"${jvm[@]}" org.apache.kafka.tools.FeatureCommand --bootstrap-server "$BOOT" upgrade \
  --feature share.version=1 >"$raw/feature.txt" 2>&1 || { cat "$raw/feature.txt" >&2; die "these brokers have no share groups"; }
topic=share-fetch-$(date +%s)
fill_read_topic "$topic" "$records" "$raw"

read_once() { # CASE BOOTSTRAP ROUND: one ShareConsumerPerformance run; prints MB/s
  local group="share-bench-$1-$3-$(date +%s%N)" out=$raw/$1-$3.txt
  "${jvm[@]}" kafka.admin.ConfigCommand --bootstrap-server "$BOOT" --entity-type groups --entity-name "$group" \
    --alter --add-config share.auto.offset.reset=earliest >/dev/null 2>&1 || die "setting $group's offset reset failed"
  "${jvm[@]}" org.apache.kafka.tools.ShareConsumerPerformance --bootstrap-server "$2" --topic "$topic" \
    --group "$group" --messages "$records" --timeout 120000 >"$out" 2>&1 || { tail -n 5 "$out" >&2; die "the share consumer failed ($1)"; }
  ! grep -q 'Exiting before consuming' "$out" || die "the share consumer read fewer than $records records ($1, $out)"
  tail -n 1 "$out" | awk -F', ' '{ print $4 }'
}

cases=(direct)
for i in "${!bins[@]}"; do cases+=("kroute$((i + 1))"); done
declare -A mbps cpu_gb
for round in $(seq 1 "$rounds"); do
  n=${#cases[@]}
  for k in $(seq 0 $((n - 1))); do
    c=${cases[$(((k + round - 1) % n))]}
    if [ "$c" = direct ]; then
      mbps[$c]+="$(read_once direct "$BOOT" "$round") "
    else
      plain_kroute_config "$raw/kroute.toml" "$BOOT"
      start_plain_kroute "${bins[${c#kroute} - 1]}" "$raw/kroute.toml" "$raw/kroute.log"
      mbps[$c]+="$(read_once "$c" 127.0.0.1:29092 "$round") "
      bytes=$(answer_bytes ShareFetch)
      [ "$bytes" -ge $((records * 1024)) ] || die "kroute answered $bytes ShareFetch bytes, fewer than the records ($c)"
      cpu_gb[$c]+="$(awk -v c="$(cpu_seconds "$kroute_pid")" -v b="$bytes" 'BEGIN { printf "%.2f", c / b * 1e9 }') "
      kill "$kroute_pid"; wait "$kroute_pid" 2>/dev/null || true; kroute_pid=''
    fi
    say "round $round, $c: ${mbps[$c]}"
  done
done
echo "| case | binary | MB/s per round | median | kroute CPU s/GB per round |"
echo "|---|---|---|---:|---|"
for c in "${cases[@]}"; do
  bin=-; [ "$c" = direct ] || bin=${bins[${c#kroute} - 1]}
  echo "| $c | $bin | ${mbps[$c]} | $(median <<<"${mbps[$c]}") | ${cpu_gb[$c]:--} |"
done
grep -E ' (WARN|ERROR) ' "$raw/kroute.log" >&2 && say "kroute logged the warnings above" || true
