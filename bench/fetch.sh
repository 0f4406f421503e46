#!/usr/bin/env bash
# Reading through kroute, every case of issue 28's part 1 in one command: consumers reading a
# pre-filled topic straight from the brokers, through kroute and through an L4 relay (socat),
# side by side in rotating order, with plain and TLS connections, 1 KiB and 100 KiB records,
# uncompressed and lz4, Kafka's ConsumerPerformance and librdkafka. Each case is one run of
# bench/passthrough.sh (BENCH_PHASES="max fetch": its max phase writes the topic, its fetch
# phase reads it back; see there for the method and the checks that each run's traffic went
# where it should). Reports per case: read throughput and its ratio to direct, fetch latency,
# the proxies' CPU per GB read and kroute's RSS.
#
#   bench/fetch.sh                      every case, 3 rounds: about 25 min on 2 cores
#   BENCH_FETCH_CASES="1k-java 1k-tls" bench/fetch.sh      some of them
#
#   BENCH_FETCH_CASES   any of (default: all, in this order)
#       1k-java         1 KiB records, uncompressed, ConsumerPerformance (Java 4.1 client)
#       1k-librdkafka   the same read by examples/rdkafka_consume (librdkafka 2.12); its fetch
#                       latency has a p50 and p99 (librdkafka's round trips to the brokers),
#                       the Java consumer's only a mean and a max
#       1k-lz4          1 KiB records in lz4 batches, ConsumerPerformance
#       100k-java       100 KiB records, uncompressed, ConsumerPerformance
#       1k-tls          1 KiB records, TLS on both sides (no relay case), ConsumerPerformance
#   BENCH_ROUNDS [3]    KROUTE_BIN [target/release/kroute]    BENCH_BUILD [1]
#
# The cluster: one for every case, in direct mode and secured (scripts/cluster.sh start --direct
# --secured); a cluster that ran otherwise before is restarted so and restored as it ran. Output: the report on
# stdout and in target/bench-fetch/report.md; each case's own report and fetch table in
# target/bench-fetch/.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "fetch: $*" >&2; }
die() { echo "fetch: FAILED: $*" >&2; exit 1; }
cases=${BENCH_FETCH_CASES:-1k-java 1k-librdkafka 1k-lz4 100k-java 1k-tls}
rounds=${BENCH_ROUNDS:-3}
out=target/bench-fetch
rm -rf "$out"; mkdir -p "$out"

# case_settings CASE: the bench/passthrough.sh settings of CASE, one VAR=value per word. A read
# takes 1,000,000 records of 1 KiB (1 GB) or 9,000 of 100 KiB (0.9 GB), or what the max phase
# wrote before it if that is less (3 cases x BENCH_ROUNDS runs of BENCH_RECORDS).
case_settings() {
  local written=$((3 * rounds * 200000)) one_k
  one_k="BENCH_RECORDS=200000 BENCH_WARMUP_RECORDS=20000 BENCH_FETCH_RECORDS=$((written < 1000000 ? written : 1000000))"
  case $1 in
    1k-java) echo "$one_k" ;;
    1k-librdkafka) echo "$one_k BENCH_FETCH_CLIENT=librdkafka" ;;
    1k-lz4) echo "$one_k BENCH_COMPRESSION=lz4" ;;
    100k-java) echo "BENCH_RECORD_SIZE=102400 BENCH_RECORDS=3000 BENCH_WARMUP_RECORDS=300 BENCH_FETCH_RECORDS=$((3 * rounds * 3000 < 9000 ? 3 * rounds * 3000 : 9000))" ;;
    1k-tls) echo "$one_k BENCH_SECURITY=tls" ;;
    *) return 1 ;;
  esac
}
for c in $cases; do case_settings "$c" >/dev/null || die "BENCH_FETCH_CASES: unknown case '$c'"; done

# One cluster for every case: direct mode (the direct and relay cases dial the brokers' own
# listeners) and secured (the TLS case). A cluster running otherwise is restarted so, and
# restarted as it ran at the end; one this bench started is stopped.
status=$(scripts/cluster.sh status 2>/dev/null) && complete=1 || complete=0
mode=$(awk '$1 == "mode" { print $2 }' <<<"$status")
secured=$(awk '$1 == "secured" { print $2 }' <<<"$status")
restore=''
if [ "$complete" = 1 ] && [ "$mode" = direct ] && [ "$secured" = yes ]; then
  say "the cluster runs in direct mode, secured: using it as it is"
else
  if grep -qE '^(controller|broker) .* running pid=' <<<"$status"; then
    restore="--${mode:-direct}"; [ "$secured" != yes ] || restore+=" --secured"
  else
    restore=stop
  fi
  say "starting the cluster --direct --secured (at the end: $([ "$restore" = stop ] && echo stop || echo "start $restore"))"
  scripts/cluster.sh stop >/dev/null 2>&1 || die "scripts/cluster.sh stop failed"
  KROUTE_CLUSTER_MODE= KROUTE_CLUSTER_SECURED= scripts/cluster.sh start --direct --secured >/dev/null ||
    die "scripts/cluster.sh start --direct --secured failed"
fi
restore_cluster() {
  [ -n "$restore" ] || return 0
  scripts/cluster.sh stop >/dev/null 2>&1
  [ "$restore" = stop ] && return 0
  say "restoring the cluster: scripts/cluster.sh start $restore"
  # shellcheck disable=SC2086 # the flags are words
  KROUTE_CLUSTER_MODE= KROUTE_CLUSTER_SECURED= scripts/cluster.sh start $restore >/dev/null || say "restoring the cluster failed"
}
trap restore_cluster EXIT

if [ "${BENCH_BUILD:-1}" = 1 ]; then
  say "cargo build --release (kroute, examples/rdkafka_consume)"
  cargo build --release --quiet --bin kroute --example rdkafka_consume || die "cargo build --release failed"
fi
started=$(date -u '+%Y-%m-%d %H:%M UTC')
for c in $cases; do
  read -ra settings <<<"$(case_settings "$c")"
  security=none
  for s in "${settings[@]}"; do [[ $s != BENCH_SECURITY=* ]] || security=${s#*=}; done
  say "case $c: ${settings[*]}"
  env "${settings[@]}" BENCH_ROUNDS="$rounds" BENCH_PHASES="max fetch" BENCH_DOCS=none BENCH_BUILD=0 \
    bench/passthrough.sh >"$out/$c.md" 2>"$out/$c.log" || { tail -n 20 "$out/$c.log" >&2; die "case $c failed: $out/$c.log"; }
  dir=target/bench; [ "$security" = none ] || dir=target/bench-$security
  cp "$dir/fetch.tsv" "$out/$c.fetch.tsv"
done

{
  echo "### Run of $started (bench/fetch.sh, $rounds rounds, kroute $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src || echo ' + uncommitted changes'))"
  echo
  echo "\`BENCH_FETCH_CASES=\"$cases\" BENCH_ROUNDS=$rounds bench/fetch.sh\`"
  echo
  for c in $cases; do
    echo "#### $c ($(case_settings "$c"))"
    echo
    # the fetch table and its goal lines, from "**Reading it back**" to the next blank line after them
    awk '/^\*\*Reading it back\*\*/ { on = 1 } on && /^\*\*Traffic went/ { exit } on { print }' "$out/$c.md"
  done
} | tee "$out/report.md"
