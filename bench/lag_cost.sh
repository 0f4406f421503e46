#!/usr/bin/env bash
# What the consumer-lag feature ([lag], docs/lag.md) costs kroute, on the local cluster
# (scripts/cluster.sh, relayed mode; it is never started, stopped or reconfigured here).
#
#   bench/lag_cost.sh               full run (~5 minutes on 2 cores, plus the build)
#   BENCH_BUILD=0 BENCH_DOCS=none bench/lag_cost.sh
#                                   without building, results only in target/bench-lag-cost/
#
# Setup: one topic of BENCH_PARTITIONS [50] partitions (RF 3) with BENCH_RECORDS [2000] records on
# each, and BENCH_GROUPS [200] consumer groups that each commit an offset on every partition
# (10,000 group-partitions), with examples/lag_cost.rs (OffsetCommit v8, generation -1: empty
# classic groups, as kafka-consumer-groups --reset-offsets makes them; one request per group).
# The groups keep committing: every BENCH_COMMIT_MS [1000] each group commits the next offset
# (100, 101, ...) on all its partitions, directly to the brokers (not through kroute: what is
# measured is the polling), so every poll sees new offsets and the windows fill; the lag stays
# ~1,900 and goes down, so every window is walked by every rule.
#
# Two release kroutes with the same config (like bench/routing.sh's, own free ports), except
#   lag-on   [lag] enabled = true, include = the bench's groups, poll_interval_ms =
#            BENCH_POLL_MS [2000], intervals = 15
#   lag-off  [lag] enabled = false
# Measured, once every lag-on window is full (kroute_lag_group_complete_ratio 1 for every group):
#   - memory: VmRSS of lag-on minus lag-off (both idle, before any produce traffic, lag-on's
#     /metrics rendered once), divided by kroute_lag_partitions; and again after the rest
#   - CPU per poll: utime+stime of lag-on (/proc/PID/stat) over BENCH_POLLS [15] polls
#     (kroute_lag_polls_total), no scrape in between; lag-off's over the same time as the idle
#     baseline
#   - kroute_lag_poll_duration_seconds (the last poll's): sampled after every poll of the next
#     BENCH_POLLS polls: median and max
#   - time to answer /metrics (all 10,000 partitions' series) and
#     /v3/kafka/<cluster>/consumer/<group>/lag (50 partitions): curl's time_total, BENCH_REQUESTS
#     [20] times each: median and max
#   - produce throughput with lag on vs off: Kafka's ProducerPerformance (Java, BENCH_PRODUCE_RECORDS
#     [40000] records of BENCH_RECORD_SIZE [1024] bytes, --throughput -1, acks=all) through lag-on
#     and lag-off alternately, BENCH_ROUNDS [3] rounds each (order swapped every round, one
#     uncounted warm-up run each first); ratio = median of the per-round ratios on/off. Each run
#     must show >= records x size more kroute_request_bytes_total{api="Produce"} on its kroute and
#     none on the other.
#   - the same store filled in memory, no cluster (lag_cost micro): statuses(), status() of one
#     group, metrics::render(), bytes held per partition
# Checks (the run fails otherwise): kroute_lag_groups = BENCH_GROUPS, kroute_lag_partitions =
# BENCH_GROUPS x BENCH_PARTITIONS, nothing refused, no failed poll, the committer kept up.
#
# Environment (defaults in brackets; the ones above too):
#   BENCH_BUILD     1 = cargo build --release, then --example lag_cost (a run of its own, as
#                   bench/routing.sh does for its example) [1]
#   BENCH_DOCS      file whose "## Cost" section is replaced (appended if absent), "none" to skip
#                   [docs/lag.md]
#   KROUTE_BIN      [target/release/kroute]     LAG_COST_BIN [target/release/examples/lag_cost]
# Output: target/bench-lag-cost/ (results.txt, kroute-*.log, kroute-*.toml, raw/).
# On exit: stops its kroutes and committer, deletes its groups and topics.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
REPO=$PWD

PARTITIONS=${BENCH_PARTITIONS:-50}
GROUPS_N=${BENCH_GROUPS:-200}
RECORDS=${BENCH_RECORDS:-2000}
COMMIT_MS=${BENCH_COMMIT_MS:-1000}
POLL_MS=${BENCH_POLL_MS:-2000}
POLLS=${BENCH_POLLS:-15}
REQUESTS=${BENCH_REQUESTS:-20}
PRODUCE_RECORDS=${BENCH_PRODUCE_RECORDS:-40000}
RECORD_SIZE=${BENCH_RECORD_SIZE:-1024}
ROUNDS=${BENCH_ROUNDS:-3}
BUILD=${BENCH_BUILD:-1}
DOCS=${BENCH_DOCS:-docs/lag.md}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
LAG_COST_BIN=${LAG_COST_BIN:-target/release/examples/lag_cost}
INTERVALS=15
CLUSTER_NAME=local

RELAYED_BOOTSTRAP=127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194
OUT=$REPO/target/bench-lag-cost
RAW=$OUT/raw
RUN_ID=$(date +%s)
TOPIC=lagcost-$RUN_ID
PTOPIC=lagcost-$RUN_ID-produce
PREFIX=lagcost-$RUN_ID-g
WANT_PARTITIONS=$((GROUPS_N * PARTITIONS))

say() { echo "bench: $*" >&2; }
die() { echo "bench: FAILED: $*" >&2; exit 1; }

for v in PARTITIONS GROUPS_N RECORDS COMMIT_MS POLL_MS POLLS REQUESTS PRODUCE_RECORDS RECORD_SIZE ROUNDS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
# the offsets committed stay below the log end for the whole run (lag > 0)
[ "$RECORDS" -gt 1000 ] || die "BENCH_RECORDS must be > 1000"

mkdir -p "$OUT" "$RAW"
rm -f "$RAW"/*

declare -A KR_PID=() KR_ADMIN=() KR_BOOT=()
committer_pid=
topics=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for k in "${!KR_PID[@]}"; do kill "${KR_PID[$k]}" 2>/dev/null || true; done
  [ -n "$committer_pid" ] && kill "$committer_pid" 2>/dev/null || true
  for k in "${!KR_PID[@]}"; do wait "${KR_PID[$k]}" 2>/dev/null || true; done
  [ -n "$committer_pid" ] && { wait "$committer_pid" 2>/dev/null || true; }
  if [ "${#topics[@]}" -gt 0 ]; then
    "$LAG_COST_BIN" delete "$RELAYED_BOOTSTRAP" "$PREFIX" "$GROUPS_N" >&2 || true
    for t in "${topics[@]}"; do scripts/cluster.sh delete-topic "$t" >/dev/null 2>&1 || true; done
    say "deleted topics ${topics[*]}"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# helpers

kroute_ready() { curl -fsS --max-time 2 -o /dev/null "http://${KR_ADMIN[$1]}/ready" 2>/dev/null; }
scrape() { curl -fsS --max-time 20 "http://${KR_ADMIN[$1]}/metrics"; } # KROUTE
value() { # FILE NAME [LABEL-SUBSTRING]: a series' value (sum of the matching series; 0 if none)
  awk -v n="$2" -v l="${3:-}" '($1 == n || index($1, n "{") == 1) && index($1, l) { v += $2 } END { printf "%.6f\n", v + 0 }' "$1"
}
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; } # PID: utime+stime
rss_kib() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"; }
CLK_TCK=$(getconf CLK_TCK)
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
max() { sort -g | tail -n 1; }
polls_total() { value "$1" kroute_lag_polls_total; } # FILE: ok + failed

# ---------------------------------------------------------------------------------------------
# cluster (used as it is)

cluster_bootstrap=$(scripts/cluster.sh bootstrap) || die "the cluster is not running (scripts/cluster.sh start --relayed)"
[ "$cluster_bootstrap" = "$RELAYED_BOOTSTRAP" ] || die "the cluster advertises $cluster_bootstrap, not $RELAYED_BOOTSTRAP (relayed mode)"
scripts/cluster.sh status >/dev/null 2>&1 || die "the cluster is not fully running (scripts/cluster.sh status)"
CLUSTER_DELAYS=$(scripts/cluster.sh delays | tr '\n' ' ')
CLUSTER_CAPS=$(scripts/cluster.sh caps | tr '\n' ' ')
KAFKA_LIB=$(scripts/cluster.sh lib)
TOOL_LOG4J=$REPO/scripts/kafka/log4j2-tools.properties
[ -f "$TOOL_LOG4J" ] || die "$TOOL_LOG4J missing"
PRODUCER_JVM=(java -Xms256m -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$TOOL_LOG4J" -cp "$KAFKA_LIB/*" org.apache.kafka.tools.ProducerPerformance)

if [ "$BUILD" = 1 ]; then
  say "cargo build --release"
  cargo build --release --quiet || die "cargo build --release failed"
  # a cargo run of its own: built together, the dev-dependencies' features would change kroute's
  say "cargo build --release --example lag_cost"
  cargo build --release --quiet --example lag_cost || die "cargo build --release --example lag_cost failed"
fi
[ -x "$KROUTE_BIN" ] || die "$KROUTE_BIN not found (cargo build --release)"
[ -x "$LAG_COST_BIN" ] || die "$LAG_COST_BIN not found (cargo build --release --example lag_cost)"

bench_start=$SECONDS
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# micro-measurement first (no cluster, nothing else of ours running)

say "lag_cost micro: $GROUPS_N x $PARTITIONS windows of $INTERVALS in memory"
"$LAG_COST_BIN" micro "$GROUPS_N" "$PARTITIONS" "$INTERVALS" "$REQUESTS" >"$RAW/micro.txt" || die "lag_cost micro failed"
micro() { awk -F= -v k="$1" '$1 == k { print $2 }' "$RAW/micro.txt"; }

# ---------------------------------------------------------------------------------------------
# setup: topics, records, groups

setup_start=$SECONDS
topics+=("$TOPIC" "$PTOPIC")
scripts/cluster.sh create-topic "$TOPIC" --partitions "$PARTITIONS" --replication-factor 3 >/dev/null ||
  die "creating $TOPIC failed"
scripts/cluster.sh create-topic "$PTOPIC" --partitions 3 --replication-factor 3 --config min.insync.replicas=2 >/dev/null ||
  die "creating $PTOPIC failed"
say "created $TOPIC ($PARTITIONS partitions) and $PTOPIC (3 partitions)"
"$LAG_COST_BIN" produce "$RELAYED_BOOTSTRAP" "$TOPIC" "$PARTITIONS" "$RECORDS" 2>"$RAW/produce.err" ||
  { cat "$RAW/produce.err" >&2; die "producing the records failed"; }
say "produced $RECORDS records on each partition of $TOPIC"
"$LAG_COST_BIN" commit "$RELAYED_BOOTSTRAP" "$TOPIC" "$PARTITIONS" "$PREFIX" "$GROUPS_N" 100 1 "$COMMIT_MS" \
  >"$RAW/commits.txt" 2>"$RAW/commits.err" &
committer_pid=$!
first_round() { [ -s "$RAW/commits.txt" ]; }
poll 600 0.1 first_round || { cat "$RAW/commits.err" >&2; die "the committer made no round in 60 s"; }
setup_s=$((SECONDS - setup_start))
say "setup done in ${setup_s}s: $(head -n 1 "$RAW/commits.txt")"

# ---------------------------------------------------------------------------------------------
# kroutes

free_base() { # first base B (9600, 9800, ...) with B+92, B+101..103 (on), B+192, B+201..203 (off), B+150..151 free
  local b p ok
  for b in 9600 9800 10000 10200 10400 10600 10800 11000; do
    ok=1
    for p in $((b + 92)) $((b + 101)) $((b + 102)) $((b + 103)) $((b + 192)) $((b + 201)) $((b + 202)) $((b + 203)) $((b + 150)) $((b + 151)); do
      port_open 127.0.0.1 "$p" && { ok=0; break; }
    done
    [ "$ok" = 1 ] && { echo "$b"; return 0; }
  done
  return 1
}
BASE=$(free_base) || die "no free ports"
i=0
for k in on off; do
  KR_BOOT[$k]=$((BASE + 92 + 100 * i))
  KR_ADMIN[$k]=127.0.0.1:$((BASE + 150 + i))
  if [ $k = on ]; then enabled=true; else enabled=false; fi
  cat >"$OUT/kroute-$k.toml" <<EOF
# written by bench/lag_cost.sh
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = ${KR_BOOT[$k]}
broker_port_base = $((BASE + 100 + 100 * i))

[upstream]
bootstrap_servers = ["127.0.0.1:19192", "127.0.0.1:19193", "127.0.0.1:19194"]

[admin]
listen = "${KR_ADMIN[$k]}"

[lag]
enabled = $enabled
cluster = "$CLUSTER_NAME"
include = ["$PREFIX-*"]
poll_interval_ms = $POLL_MS
intervals = $INTERVALS
EOF
  "$KROUTE_BIN" --config "$OUT/kroute-$k.toml" </dev/null >"$OUT/kroute-$k.log" 2>&1 &
  KR_PID[$k]=$!
  i=$((i + 1))
done
for k in on off; do
  poll 100 0.2 kroute_ready "$k" || { tail -n 20 "$OUT/kroute-$k.log" >&2; die "kroute-$k not ready within 20s"; }
  say "kroute lag-$k pid ${KR_PID[$k]} ready (bootstrap 127.0.0.1:${KR_BOOT[$k]}, admin ${KR_ADMIN[$k]})"
done
alive() { for k in on off; do kill -0 "${KR_PID[$k]}" 2>/dev/null || die "kroute lag-$k exited (see $OUT/kroute-$k.log)"; done
  kill -0 "$committer_pid" 2>/dev/null || { cat "$RAW/commits.err" >&2; die "the committer exited"; }; }

# ---------------------------------------------------------------------------------------------
# fill: wait, without scraping /metrics, until the last group's windows are full (Burrow's API)

group_complete() { # GROUP: its "complete" (0 if unknown)
  curl -fsS --max-time 5 "http://${KR_ADMIN[on]}/v3/kafka/$CLUSTER_NAME/consumer/$1/status" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["status"]["complete"])' 2>/dev/null || echo 0
}
full() { alive; for g in 0 $((GROUPS_N / 2)) $((GROUPS_N - 1)); do [ "$(group_complete "$PREFIX-$g")" = 1.0 ] || return 1; done; }
fill_start=$SECONDS
poll $(((INTERVALS + 30) * POLL_MS / 1000)) 1 full || die "windows not full after $(((INTERVALS + 30) * POLL_MS / 1000))s"
fill_s=$((SECONDS - fill_start))
scrape on >"$RAW/filled-on.prom" || die "cannot read lag-on's metrics"
scrape off >"$RAW/filled-off.prom" || die "cannot read lag-off's metrics"
groups_seen=$(value "$RAW/filled-on.prom" kroute_lag_groups | cut -d. -f1)
partitions_seen=$(value "$RAW/filled-on.prom" kroute_lag_partitions | cut -d. -f1)
[ "$groups_seen" = "$GROUPS_N" ] || die "kroute_lag_groups = $groups_seen, not $GROUPS_N"
[ "$partitions_seen" = "$WANT_PARTITIONS" ] || die "kroute_lag_partitions = $partitions_seen, not $WANT_PARTITIONS"
not_full=$(awk 'index($1, "kroute_lag_group_complete_ratio{") == 1 && $2 != 1 { n++ } END { print n + 0 }' "$RAW/filled-on.prom")
[ "$not_full" = 0 ] || die "$not_full groups' windows are not full"
say "all $groups_seen groups' $partitions_seen windows full after ${fill_s}s"
sleep 2
rss_on=$(rss_kib "${KR_PID[on]}"); rss_off=$(rss_kib "${KR_PID[off]}")
say "VmRSS lag-on $rss_on KiB, lag-off $rss_off KiB"

# ---------------------------------------------------------------------------------------------
# CPU per poll: no scrape in between

scrape on >"$RAW/cpu0.prom"; t_on0=$(cpu_ticks "${KR_PID[on]}"); t_off0=$(cpu_ticks "${KR_PID[off]}"); w0=$(date +%s.%N)
sleep $((POLLS * POLL_MS / 1000))
t_on1=$(cpu_ticks "${KR_PID[on]}"); t_off1=$(cpu_ticks "${KR_PID[off]}"); w1=$(date +%s.%N); scrape on >"$RAW/cpu1.prom"
alive
polls_cpu=$(awk -v a="$(polls_total "$RAW/cpu0.prom")" -v b="$(polls_total "$RAW/cpu1.prom")" 'BEGIN { printf "%d", b - a }')
[ "$polls_cpu" -ge 1 ] || die "no poll in $((POLLS * POLL_MS / 1000))s"
cpu_on_s=$(awk -v a="$t_on0" -v b="$t_on1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / h }')
cpu_off_s=$(awk -v a="$t_off0" -v b="$t_off1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / h }')
wall_cpu=$(awk -v a="$w0" -v b="$w1" 'BEGIN { printf "%.1f", b - a }')
cpu_per_poll_ms=$(awk -v c="$cpu_on_s" -v n="$polls_cpu" 'BEGIN { printf "%.0f", c * 1000 / n }')
say "CPU: lag-on ${cpu_on_s}s over $polls_cpu polls (${cpu_per_poll_ms} ms/poll), lag-off ${cpu_off_s}s, ${wall_cpu}s wall"

# ---------------------------------------------------------------------------------------------
# poll duration after every poll, then the answer times of /metrics and /lag

: >"$RAW/poll_seconds.txt"
last=$(polls_total "$RAW/cpu1.prom")
deadline=$((SECONDS + POLLS * POLL_MS / 1000 * 3))
while [ "$(wc -l <"$RAW/poll_seconds.txt")" -lt "$POLLS" ]; do
  [ $SECONDS -lt $deadline ] || die "fewer than $POLLS polls seen in time"
  sleep 0.5
  scrape on >"$RAW/p.prom" || die "cannot read lag-on's metrics"
  n=$(polls_total "$RAW/p.prom")
  if [ "$n" != "$last" ]; then value "$RAW/p.prom" kroute_lag_poll_duration_seconds >>"$RAW/poll_seconds.txt"; last=$n; fi
done
poll_med=$(median <"$RAW/poll_seconds.txt"); poll_max=$(max <"$RAW/poll_seconds.txt")
say "kroute_lag_poll_duration_seconds over $POLLS polls: median $poll_med, max $poll_max"

timed() { # URL OUTFILE: curl's time_total; fails on an HTTP error
  curl -fsS --max-time 20 -o "$2" -w '%{time_total}\n' "$1"
}
: >"$RAW/metrics_s.txt"; : >"$RAW/lag_s.txt"
for ((r = 0; r < REQUESTS; r++)); do
  timed "http://${KR_ADMIN[on]}/metrics" "$RAW/metrics.body" >>"$RAW/metrics_s.txt" || die "/metrics failed"
  g=$PREFIX-$(((r * 37) % GROUPS_N))
  timed "http://${KR_ADMIN[on]}/v3/kafka/$CLUSTER_NAME/consumer/$g/lag" "$RAW/lag.body" >>"$RAW/lag_s.txt" || die "/lag of $g failed"
done
metrics_bytes=$(wc -c <"$RAW/metrics.body"); metrics_lines=$(grep -c '^kroute_lag_partition_status{' "$RAW/metrics.body" || true)
lag_bytes=$(wc -c <"$RAW/lag.body")
lag_parts=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["status"]["partitions"]))' "$RAW/lag.body")
[ "$metrics_lines" = "$WANT_PARTITIONS" ] || die "/metrics has $metrics_lines kroute_lag_partition_status series, not $WANT_PARTITIONS"
[ "$lag_parts" = "$PARTITIONS" ] || die "/lag lists $lag_parts partitions, not $PARTITIONS"
metrics_med=$(median <"$RAW/metrics_s.txt"); metrics_max=$(max <"$RAW/metrics_s.txt")
lag_med=$(median <"$RAW/lag_s.txt"); lag_max=$(max <"$RAW/lag_s.txt")
say "/metrics ($metrics_bytes B): median ${metrics_med}s max ${metrics_max}s; /lag ($lag_bytes B): median ${lag_med}s max ${lag_max}s"

# ---------------------------------------------------------------------------------------------
# produce throughput through lag-on and lag-off, alternately

produce_bytes() { value "$1" kroute_request_bytes_total 'api="Produce"' | cut -d. -f1; } # FILE
: >"$OUT/produce.tsv"
run_produce() { # ROUND CASE(on|off) RECORDS
  local round=$1 case=$2 n=$3 log="$RAW/produce-$1-$2.log" k other t0 t1
  if [ "$case" = on ]; then other=off; else other=on; fi
  for k in on off; do scrape "$k" >"$RAW/produce-$round-$case.m0-$k" || die "scrape"; done
  t0=$(cpu_ticks "${KR_PID[$case]}")
  "${PRODUCER_JVM[@]}" --topic "$PTOPIC" --num-records "$n" --record-size "$RECORD_SIZE" --throughput -1 \
    --producer-props "bootstrap.servers=127.0.0.1:${KR_BOOT[$case]}" acks=all "client.id=lag-cost-$case" \
    >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "producer failed: $log"; }
  t1=$(cpu_ticks "${KR_PID[$case]}")
  alive
  for k in on off; do scrape "$k" >"$RAW/produce-$round-$case.m1-$k" || die "scrape"; done
  grep -qE 'Exception|ERROR' "$log" && { grep -E 'Exception|ERROR' "$log" | head -5 >&2; die "producer reported errors: $log"; }
  local line sent rps mbps rest
  line=$(grep -E 'records sent, .* 99\.9th\.?$' "$log" | tail -n 1) || die "no final ProducerPerformance line in $log"
  read -r sent rps mbps rest < <(sed -E 's/^([0-9]+) records sent, ([0-9.]+) records\/sec \(([0-9.]+) MB\/sec\), (.*)$/\1 \2 \3 \4/' <<<"$line")
  [ "$sent" = "$n" ] || die "$case: producer sent $sent of $n records ($log)"
  local mine theirs
  mine=$(($(produce_bytes "$RAW/produce-$round-$case.m1-$case") - $(produce_bytes "$RAW/produce-$round-$case.m0-$case")))
  theirs=$(($(produce_bytes "$RAW/produce-$round-$case.m1-$other") - $(produce_bytes "$RAW/produce-$round-$case.m0-$other")))
  [ "$mine" -ge $((n * RECORD_SIZE)) ] || die "lag-$case carried only $mine Produce bytes for $n x $RECORD_SIZE B: traffic did not go through it"
  [ "$theirs" = 0 ] || die "lag-$other saw $theirs Produce bytes during a lag-$case run"
  local cpu; cpu=$(awk -v a="$t0" -v b="$t1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / h }')
  say "$(printf 'produce %-6s lag-%-3s %8.0f rec/s %6.2f MB/s | kroute +%d B Produce, cpu %ss' "$round" "$case" "$rps" "$mbps" "$mine" "$cpu")"
  [ "$round" = warmup ] && return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$case" "$rps" "$mbps" "$mine" "$cpu" >>"$OUT/produce.tsv"
}
say "produce: $ROUNDS rounds x {lag-on, lag-off}, $PRODUCE_RECORDS x $RECORD_SIZE B records each (one warm-up each first)"
run_produce warmup on $((PRODUCE_RECORDS / 4))
run_produce warmup off $((PRODUCE_RECORDS / 4))
for ((r = 1; r <= ROUNDS; r++)); do
  if [ $((r % 2)) = 1 ]; then order="on off"; else order="off on"; fi
  for c in $order; do run_produce "$r" "$c" "$PRODUCE_RECORDS"; done
done
ratios=$(awk -F'\t' '{ v[$1 "/" $2] = $4 } END { for (r = 1; ("" r "/on") in v; r++) printf "%.3f\n", v[r "/on"] / v[r "/off"] }' "$OUT/produce.tsv")
ratio=$(median <<<"$ratios")
say "produce MB/s ratio lag-on / lag-off per round: $(paste -sd' ' <<<"$ratios"), median $ratio"

# ---------------------------------------------------------------------------------------------
# final checks

scrape on >"$RAW/end-on.prom" || die "cannot read lag-on's metrics"
rss_on_end=$(rss_kib "${KR_PID[on]}"); rss_off_end=$(rss_kib "${KR_PID[off]}")
for s in kroute_lag_groups:$GROUPS_N kroute_lag_partitions:$WANT_PARTITIONS kroute_lag_groups_refused_total:0 kroute_lag_partitions_refused_total:0; do
  got=$(value "$RAW/end-on.prom" "${s%%:*}" | cut -d. -f1)
  [ "$got" = "${s##*:}" ] || die "${s%%:*} = $got at the end, not ${s##*:}"
done
failed_polls=$(value "$RAW/end-on.prom" kroute_lag_polls_total 'outcome="failed"' | cut -d. -f1)
ok_polls=$(value "$RAW/end-on.prom" kroute_lag_polls_total 'outcome="ok"' | cut -d. -f1)
[ "$failed_polls" = 0 ] || die "$failed_polls polls failed (see $OUT/kroute-on.log)"
[ "$(value "$RAW/end-on.prom" kroute_lag_partitions_max | cut -d. -f1)" -ge "$WANT_PARTITIONS" ] || die "partitions cap below $WANT_PARTITIONS"
alive
rounds_made=$(wc -l <"$RAW/commits.txt")
commit_med_ms=$(awk '{ print $NF }' "$RAW/commits.txt" | median)
commit_max_ms=$(awk '{ print $NF }' "$RAW/commits.txt" | max)
[ "$commit_max_ms" -lt "$COMMIT_MS" ] || say "warning: a commit round took ${commit_max_ms} ms, longer than BENCH_COMMIT_MS"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
duration_s=$((SECONDS - bench_start))

mem_per_partition=$(awk -v a="$rss_on" -v b="$rss_off" -v n="$partitions_seen" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
mem_per_partition_end=$(awk -v a="$rss_on_end" -v b="$rss_off_end" -v n="$partitions_seen" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
ms() { awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }
produce_cell() { # CASE: median MB/s (and rec/s), median kroute CPU per run
  awk -F'\t' -v c="$1" '$2 == c { print $4 }' "$OUT/produce.tsv" | median
}
mb_on=$(produce_cell on); mb_off=$(produce_cell off)
cpu_run_on=$(awk -F'\t' '$2 == "on" { print $6 }' "$OUT/produce.tsv" | median)
cpu_run_off=$(awk -F'\t' '$2 == "off" { print $6 }' "$OUT/produce.tsv" | median)
per_round=$(awk -F'\t' '{ v[$1 "/" $2] = $4 } END { for (r = 1; ("" r "/on") in v; r++) printf "%s%.2f / %.2f", (r > 1 ? ", " : ""), v[r "/on"], v[r "/off"] }' "$OUT/produce.tsv")

# ---------------------------------------------------------------------------------------------
# report

export IDENTITY_PATHS=examples/lag_cost.rs  # read by bench_identity
bench_identity bench/lag_cost.sh
meta=$(bench_machine_meta)
metaval() { awk -F= -v k="$1" '$1 == k { sub(/^[^=]*=/, ""); print }' <<<"$meta"; }

cat >"$OUT/results.txt" <<EOF
$meta
cluster_delays=$CLUSTER_DELAYS
cluster_caps=$CLUSTER_CAPS
loadavg_before=$load_before
loadavg_after=$load_after
duration_s=$duration_s
setup_s=$setup_s
fill_s=$fill_s
groups=$groups_seen
partitions=$partitions_seen
polls_ok_total=$ok_polls
rss_on_kib=$rss_on
rss_off_kib=$rss_off
rss_on_end_kib=$rss_on_end
rss_off_end_kib=$rss_off_end
bytes_per_partition=$mem_per_partition
bytes_per_partition_end=$mem_per_partition_end
cpu_on_s=$cpu_on_s
cpu_off_s=$cpu_off_s
cpu_polls=$polls_cpu
cpu_wall_s=$wall_cpu
cpu_per_poll_ms=$cpu_per_poll_ms
poll_duration_median_s=$poll_med
poll_duration_max_s=$poll_max
metrics_median_s=$metrics_med
metrics_max_s=$metrics_max
metrics_bytes=$metrics_bytes
lag_median_s=$lag_med
lag_max_s=$lag_max
lag_bytes=$lag_bytes
produce_mbps_on=$mb_on
produce_mbps_off=$mb_off
produce_ratios=$(paste -sd' ' <<<"$ratios")
produce_ratio=$ratio
produce_cpu_on_s=$cpu_run_on
produce_cpu_off_s=$cpu_run_off
commit_rounds=$rounds_made
commit_round_median_ms=$commit_med_ms
commit_round_max_ms=$commit_max_ms
$(sed 's/^/micro_/; s/ (max /;max=/; s/)$//' "$RAW/micro.txt")
EOF
say "results: $OUT/results.txt"

section=$(cat <<EOF
## Cost

What watching $GROUPS_N groups x $PARTITIONS partitions ($partitions_seen windows of $INTERVALS commits)
costs kroute, measured by \`bench/lag_cost.sh\` on the local cluster (relayed). The groups commit
directly to the brokers every ${COMMIT_MS} ms (the next offset on all $PARTITIONS partitions, lag ~1,900
and falling), so every poll records a new commit in every window; kroute polls every ${POLL_MS} ms.
A second kroute with the same config but \`[lag] enabled = false\` runs beside it as the baseline.

| | lag on | lag off / note |
|---|---:|---|
| groups, windows tracked (\`kroute_lag_groups\`, \`kroute_lag_partitions\`) | $groups_seen, $partitions_seen | all windows full after ${fill_s} s, no poll failed, nothing refused |
| CPU per poll (utime+stime / polls, $polls_cpu polls, ${wall_cpu} s) | $cpu_per_poll_ms ms | ${cpu_on_s} s vs ${cpu_off_s} s for the idle lag-off kroute |
| \`kroute_lag_poll_duration_seconds\` ($POLLS polls) | median $(ms "$poll_med") ms, max $(ms "$poll_max") ms | wall time of a poll, mostly waiting for the brokers |
| \`/metrics\` answer ($REQUESTS requests, $((metrics_bytes / 1024)) KiB, $partitions_seen partition series) | median $(ms "$metrics_med") ms, max $(ms "$metrics_max") ms | curl's time_total |
| \`/v3/kafka/$CLUSTER_NAME/consumer/<group>/lag\` ($REQUESTS requests, $PARTITIONS partitions, $((lag_bytes / 1024)) KiB) | median $(ms "$lag_med") ms, max $(ms "$lag_max") ms | |
| memory: VmRSS | $((rss_on / 1024)) MiB | $((rss_off / 1024)) MiB; difference / windows = **$mem_per_partition B per group-partition** ($mem_per_partition_end B after the rest of the run) |
| produce through kroute (ProducerPerformance, $PRODUCE_RECORDS x $RECORD_SIZE B, acks=all, MB/s per round on / off) | $mb_on MB/s (median) | $mb_off MB/s; per round $per_round; **ratio on/off $ratio** (median of per-round ratios) |
| kroute CPU per produce run | $cpu_run_on s | $cpu_run_off s (medians) |

In memory, without a cluster (\`lag_cost micro\`, the same $partitions_seen windows and 60 log-end
points per partition, median of $REQUESTS): \`LagStore::statuses()\` $(micro statuses_ms | sed 's/ (max \(.*\))/ ms (max \1 ms)/'),
\`metrics::render()\` $(micro render_ms | sed 's/ (max \(.*\))/ ms (max \1 ms)/') for $(($(micro render_bytes) / 1024)) KiB, one group's \`status()\`
$(micro status_one_group_ms | sed 's/ (max \(.*\))/ ms (max \1 ms)/'); the store holds $(micro store_bytes) bytes, $(micro bytes_per_partition) B per group-partition
(counted by the allocator; RSS above adds the allocator's slack and the collector's buffers).

Traffic went through the kroute measured: every produce run added at least records x size to
its \`kroute_request_bytes_total{api="Produce"}\` and nothing to the other's. The producer, the
brokers, both kroutes and the committer share the machine's cores (broker link caps as found,
\`scripts/cluster.sh caps\`: $CLUSTER_CAPS), so the throughput is the shared machine's and varies
from round to round; the lag-on kroute's extra CPU during a produce run is its polls
($cpu_per_poll_ms ms each, one every ${POLL_MS} ms).

- date: $(metaval date); run time ${duration_s} s (setup ${setup_s} s)
- command: \`$(metaval command)\`
- machine: $(metaval nproc) cores ($(metaval cpu)), $(metaval mem), kernel $(metaval kernel), shared (load $load_before before, $load_after after)
- kroute: $(metaval kroute); Kafka $(metaval kafka); $(metaval java)
- raw: \`target/bench-lag-cost/\` (results.txt, raw/)
EOF
)
if [ "$DOCS" != none ]; then
  SECTION=$section python3 - "$DOCS" <<'PYEOF'
import os, re, sys
path = sys.argv[1]
text = open(path).read()
section = os.environ["SECTION"].rstrip("\n") + "\n"
m = re.search(r"^## Cost\n", text, re.M)
if m:
    nxt = re.search(r"^## ", text[m.end():], re.M)
    end = m.end() + nxt.start() if nxt else len(text)
    text = text[: m.start()] + section + ("\n" if nxt else "") + text[end:]
else:
    text = text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text)
PYEOF
  say "wrote the Cost section of $DOCS"
fi
printf '%s\n' "$section"
