#!/usr/bin/env bash
# Many sidecars, one cluster (issue 26 part 2): N kroute processes, each in front of its own
# producer, share one 3-broker cluster whose broker 2 has a capped link; against the same N
# producers straight to the brokers. Does broker 2's share stay put, or do the sidecars herd?
#
#   bench/fleet.sh                                          full run: N = 2, 4, 8, 16, direct and
#                                                           kroute each (about 10 minutes on 2 cores,
#                                                           cluster start included, builds not: 9.6 min)
#   BENCH_FLEET_NS="2" BENCH_FLEET_SECONDS=20 bench/fleet.sh
#                                                           smoke run (about 2 minutes)
#
# Cluster: one of its own next to the default one (scripts/cluster.sh with
# KROUTE_CLUSTER_PORT_OFFSET [4000] and KROUTE_CLUSTER_DIR [target/cluster-fleet]), in relayed
# mode, broker 2's link capped at BENCH_FLEET_CAP MB/s each way and brokers 1 and 3 at
# BENCH_FLEET_OTHER_CAP (scripts/cluster.sh cap). A leader's link carries the produce traffic in
# and the copies its two followers fetch out (RF 3), so broker N leads at most cap/2 MB/s of
# records: with the defaults 2 + 0.5 + 2 = 4.5 MB/s for the cluster, 0.5 for broker 2. Started if
# not running and then stopped at the end (BENCH_KEEP_CLUSTER=1 leaves it running); one already
# running must be in relayed mode, and gets its caps back and its topics deleted at the end.
#
# Topic: BENCH_FLEET_PARTITIONS_PER_BROKER partitions led by each broker, RF 3,
# min.insync.replicas=2, exact leaders (--replica-assignment, checked before and after).
#
# Load: BENCH_FLEET_LOAD MB/s offered in all (10^6 bytes of record values per second, below the
# cluster's capacity, above 3x broker 2's: a plain client's third binds the cap), split evenly
# over N producers: examples/rdkafka_perf.rs at a fixed THROUGHPUT, keyless records of
# BENCH_RECORD_SIZE bytes, acks=all linger.ms=5 batch.size=32768 max.in.flight 5,
# enable.idempotence=false, queue.buffering.max.kbytes = BENCH_FLEET_QUEUE_KB / N (the same total
# client buffer for every N, so the backlog a capped broker leaves behind, and the flush at the
# end, do not grow with N), for BENCH_FLEET_WARMUP + BENCH_FLEET_SECONDS s (kroute.seconds), then
# flushed.
#
# Cases, for each N in BENCH_FLEET_NS: direct (producer i -> the brokers) and kroute (producer i
# -> kroute i -> the brokers; N kroute processes, each its own config, listen ports and admin
# port, [routing] strategy = "strict-cost", include = the bench topic; started for the case and
# stopped after it).
#
# Measurement: a sampler (bench/fleet_report.py sample) asks every broker, every second, for the
# latest offset of each partition it leads (ListOffsets on the brokers' own listeners, not through
# the capped relays) and prints the sums per broker; records per broker per second are the
# differences. Per case, over the 1 s intervals after the warm-up: broker 2's share (mean and
# p5-p95), the mean absolute change of that share from one second to the next, the brokers'
# throughput, and each producer's p99 (rdkafka_perf's ProducerPerformance-style summary). The
# kroute cases prove the traffic went through kroute: the sidecars' kroute_request_bytes_total
# {api="Produce"} must cover the acknowledged records, and kroute_batches_moved_total is reported.
# A case fails (and the run) if a producer fails or the brokers hold fewer records than acknowledged.
#
# Environment (defaults in brackets):
#   BENCH_FLEET_NS        sidecar counts [2 4 8 16]
#   BENCH_FLEET_SECONDS   measured seconds per case [45]
#   BENCH_FLEET_WARMUP    seconds per case before the measurement [10]
#   BENCH_FLEET_CAP       broker 2's link, MB/s each way [1]
#   BENCH_FLEET_OTHER_CAP brokers 1 and 3, MB/s each way (0 = unlimited) [4]
#   BENCH_FLEET_LOAD      MB/s offered in all [3]
#   BENCH_FLEET_QUEUE_KB  the producers' queue.buffering.max.kbytes, in all [4096: a direct
#                         run's backlog for broker 2 fills it within the warm-up]
#   BENCH_FLEET_PARTITIONS_PER_BROKER [2]
#   BENCH_FLEET_PORT_BASE kroute i (1..N) listens on BASE+10i+1..+3 (brokers 1..3), +4
#                         (bootstrap), admin +5 [24400]
#   BENCH_FLEET_WARM_RUN  seconds of one uncounted direct run at the load, before the caps, so a
#                         fresh cluster's JVMs are warm (0 = none) [20]
#   BENCH_PRODUCER_PROPS  more librdkafka properties for every producer, "k=v k=v" [none]
#   BENCH_RECORD_SIZE     bytes per record [10240]
#   BENCH_DOCS            file whose "## Part 2: N sidecars on real processes" section is
#                         replaced, "none" to skip [docs/fleet.md]
#   BENCH_NOTES           a paragraph appended to the section (e.g. what else ran) [none]
#   BENCH_BUILD           1 = cargo build --release --bin kroute and --example rdkafka_perf [1]
#   BENCH_KEEP_CLUSTER    [0]
#   KROUTE_BIN            [target/release/kroute]   RDKAFKA_PERF_BIN [target/release/examples/rdkafka_perf]
# Output: target/bench-fleet/ (results.tsv, results-<date>.tsv, report.md; raw/: per case the
# samples, producer logs, kroute configs, logs and metrics, the latter also at the measured
# window's start and end: kroute-N.kI.w0.metrics, .w1.metrics).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
REPO=$PWD

export KROUTE_CLUSTER_PORT_OFFSET=${KROUTE_CLUSTER_PORT_OFFSET:-4000}
export KROUTE_CLUSTER_DIR=${KROUTE_CLUSTER_DIR:-$REPO/target/cluster-fleet}
NS=(${BENCH_FLEET_NS:-2 4 8 16})
SECS=${BENCH_FLEET_SECONDS:-45}
WARMUP=${BENCH_FLEET_WARMUP:-10}
CAP=${BENCH_FLEET_CAP:-1}
OTHER_CAP=${BENCH_FLEET_OTHER_CAP:-4}
LOAD=${BENCH_FLEET_LOAD:-3}
QUEUE_KB=${BENCH_FLEET_QUEUE_KB:-4096}
PPB=${BENCH_FLEET_PARTITIONS_PER_BROKER:-2}
PORT_BASE=${BENCH_FLEET_PORT_BASE:-24400}
WARM_RUN=${BENCH_FLEET_WARM_RUN:-20}
EXTRA_PROPS=(${BENCH_PRODUCER_PROPS:-})
RECORD_SIZE=${BENCH_RECORD_SIZE:-10240}
DOCS=${BENCH_DOCS:-docs/fleet.md}
BUILD=${BENCH_BUILD:-1}
KEEP_CLUSTER=${BENCH_KEEP_CLUSTER:-0}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
RDKAFKA_PERF_BIN=${RDKAFKA_PERF_BIN:-target/release/examples/rdkafka_perf}
OUT=$REPO/target/bench-fleet
RAW=$OUT/raw
RESULTS=$OUT/results.tsv
RUN_ID=$(date +%s)
TOPIC=fleet-$RUN_ID

say() { echo "fleet: $*" >&2; }
die() { echo "fleet: FAILED: $*" >&2; exit 1; }

for v in SECS WARMUP QUEUE_KB PPB PORT_BASE WARM_RUN RECORD_SIZE; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer (got '${!v}')"
done
for n in "${NS[@]}"; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "BENCH_FLEET_NS: '$n' is not a count"; done
for v in CAP OTHER_CAP LOAD; do [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "$v must be a number (got '${!v}')"; done
[ "$SECS" -ge 3 ] && [ "$PPB" -ge 1 ] || die "BENCH_FLEET_SECONDS >= 3 and BENCH_FLEET_PARTITIONS_PER_BROKER >= 1"
command -v curl >/dev/null || die "curl missing"
command -v python3 >/dev/null || die "python3 missing"
rm -rf "$RAW"
mkdir -p "$RAW"

# ---------------------------------------------------------------------------------------------
# cleanup

started_cluster=0
caps_before=
topic_made=0
KR_PIDS=()
PRODUCER_PIDS=()
SAMPLER_PID=
SCRAPER_PID=

stop_kroutes() {
  local p
  for p in "${KR_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${KR_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  KR_PIDS=()
}

cleanup() {
  local rc=$? p b c
  set +e
  for p in "${PRODUCER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  [ -n "$SAMPLER_PID" ] && kill -TERM "$SAMPLER_PID" 2>/dev/null && wait "$SAMPLER_PID" 2>/dev/null
  if [ -n "$SCRAPER_PID" ]; then # its sleep or curl first, then the subshell
    pkill -TERM -P "$SCRAPER_PID" 2>/dev/null
    kill -TERM "$SCRAPER_PID" 2>/dev/null && wait "$SCRAPER_PID" 2>/dev/null
  fi
  stop_kroutes
  if [ "$started_cluster" = 1 ] && [ "$KEEP_CLUSTER" != 1 ]; then
    say "stopping the cluster (started by this run)"; scripts/cluster.sh stop >/dev/null 2>&1
  else
    [ "$topic_made" = 1 ] && scripts/cluster.sh delete-topic "$TOPIC" >/dev/null 2>&1
    while read -r _ b c; do [ -n "$b" ] && scripts/cluster.sh cap "$b" "$c" >/dev/null 2>&1; done <<<"$caps_before"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# build, cluster, topic

if [ "$BUILD" = 1 ]; then build_kroute_and_rdkafka_perf; fi
[ -x "$KROUTE_BIN" ] || die "$KROUTE_BIN not found (cargo build --release)"
[ -x "$RDKAFKA_PERF_BIN" ] || die "$RDKAFKA_PERF_BIN not found (cargo build --release --example rdkafka_perf)"
CLIENT_VERSION=$("$RDKAFKA_PERF_BIN" --version)

relayed_cluster_up
# the brokers' own listeners, for the sampler (the relays would queue its requests behind the cap)
SAMPLE_AT=$(brokers_own_listeners)
for b in 1 2 3; do scripts/cluster.sh cap "$b" 0 >/dev/null || die "scripts/cluster.sh cap $b 0 failed"; done

# PPB partitions led by each broker, interleaved 1,2,3,1,2,3,...; followers in both orders
asg=() leaders=()
for ((i = 0; i < 3 * PPB; i++)); do
  l=$((i % 3 + 1)) f1=$(((i + 1) % 3 + 1)) f2=$(((i + 2) % 3 + 1))
  if (((i / 3) % 2)); then asg+=("$l:$f2:$f1"); else asg+=("$l:$f1:$f2"); fi
  leaders+=("$l")
done
ASSIGNMENT=$(IFS=,; echo "${asg[*]}")
LEADERS=$(IFS=,; echo "${leaders[*]}")
topic_made=1
scripts/cluster.sh create-topic "$TOPIC" --replica-assignment "$ASSIGNMENT" --config min.insync.replicas=2 >/dev/null ||
  die "creating $TOPIC failed"
check_leaders() { # WHEN
  local got
  got=$(scripts/cluster.sh tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --describe --topic "$TOPIC" 2>/dev/null |
    awk '$1 == "Topic:" && $3 == "Partition:" { print $4, $6 }' | sort -n | awk '{ print $2 }' | paste -sd,)
  [ "$got" = "$LEADERS" ] || die "$TOPIC: leaders $got $1, planned $LEADERS"
  say "$TOPIC: leaders $got ($1, as planned)"
}
check_leaders "after creation"

# ---------------------------------------------------------------------------------------------
# one case

RATE_TOTAL=$(awk -v l="$LOAD" -v s="$RECORD_SIZE" 'BEGIN { printf "%.3f", l * 1e6 / s }')
BASE_PROPS=(acks=all linger.ms=5 batch.size=32768 max.in.flight.requests.per.connection=5 enable.idempotence=false)

kroute_port() { echo $((PORT_BASE + 10 * $1 + $2)); } # I OFFSET

start_kroutes() { # N
  local n=$1 i
  for ((i = 1; i <= n; i++)); do
    start_sidecar_kroute "kroute-$n-$i" "$(kroute_port "$i" 0)" "$TOPIC" BENCH_FLEET_PORT_BASE \
      "written by bench/fleet.sh: sidecar $i of $n"
  done
  for ((i = 1; i <= n; i++)); do wait_sidecar_ready "kroute-$n-$i" "$(kroute_port "$i" 0)"; done
  say "$n kroutes ready (bootstrap ports $(kroute_port 1 4)..$(kroute_port "$n" 4) step 10)"
}

scrape_kroutes() { # TAG N SUFFIX: every sidecar's metrics to $RAW/TAG.kI.SUFFIX.metrics
  local i out
  for ((i = 1; i <= $2; i++)); do
    out=$RAW/$1.k$i.$3.metrics
    # a failed read leaves no file (the report then reads the whole run instead)
    if curl -fsS --max-time 5 "http://127.0.0.1:$(kroute_port "$i" 5)/metrics" >"$out.tmp"; then
      mv -f "$out.tmp" "$out"
    else
      rm -f "$out.tmp"; say "cannot read kroute $i's metrics at $3"
    fi
  done
}

run_case() { # CASE N [WARM_SECONDS]: CASE direct|kroute|warm
  local case=$1 n=$2 tag=$1-$2 i boot rate secs queue t_start failed=0
  secs=$((WARMUP + SECS))
  [ "$case" = warm ] && secs=$3
  rate=$(awk -v r="$RATE_TOTAL" -v n="$n" 'BEGIN { printf "%.3f", r / n }')
  queue=$((QUEUE_KB / n)); [ "$queue" -ge 64 ] || queue=64
  [ "$case" = kroute ] && start_kroutes "$n"
  say "$tag: $n producers x $rate records/s of $RECORD_SIZE B for ${secs}s (queue ${queue} KB each)"
  python3 bench/fleet_report.py sample "$SAMPLE_AT" "$TOPIC" "$LEADERS" >"$RAW/$tag.samples" 2>"$RAW/$tag.sampler.err" &
  SAMPLER_PID=$!
  sleep 1.5
  t_start=$(date +%s.%N)
  PRODUCER_PIDS=()
  for ((i = 1; i <= n; i++)); do
    if [ "$case" = kroute ]; then boot=127.0.0.1:$(kroute_port "$i" 4); else boot=$BOOT; fi
    "$RDKAFKA_PERF_BIN" "$boot" "$TOPIC" 1000000000 "$RECORD_SIZE" "$rate" "${BASE_PROPS[@]}" \
      "queue.buffering.max.kbytes=$queue" "client.id=fleet-$tag-$i" "kroute.seconds=$secs" "${EXTRA_PROPS[@]}" \
      >"$RAW/$tag.p$i.out" 2>"$RAW/$tag.p$i.err" &
    PRODUCER_PIDS+=($!)
  done
  if [ "$case" = kroute ]; then
    # the sidecars' histograms at the measured window's ends, so that their latency can be
    # read for the window alone (bench/fleet_report.py upstream-p99)
    (sleep "$WARMUP" && scrape_kroutes "$tag" "$n" w0 && sleep "$SECS" && scrape_kroutes "$tag" "$n" w1) &
    SCRAPER_PID=$!
  fi
  for ((i = 0; i < n; i++)); do
    wait "${PRODUCER_PIDS[$i]}" || { failed=1; tail -n 5 "$RAW/$tag.p$((i + 1)).err" >&2; }
  done
  PRODUCER_PIDS=()
  if [ -n "$SCRAPER_PID" ]; then wait "$SCRAPER_PID" || true; SCRAPER_PID=; fi
  say "$tag: producers done after $(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s"
  sleep 2
  kill -TERM "$SAMPLER_PID" 2>/dev/null; wait "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=
  [ "$failed" = 0 ] || die "a producer failed ($tag): $RAW/$tag.p*.err"
  if [ "$case" = kroute ]; then
    for ((i = 1; i <= n; i++)); do
      kill -0 "${KR_PIDS[$((i - 1))]}" 2>/dev/null || die "kroute $i of $n exited (see $RAW/kroute-$n-$i.log)"
      curl -fsS --max-time 5 "http://127.0.0.1:$(kroute_port "$i" 5)/metrics" >"$RAW/$tag.k$i.metrics" ||
        die "cannot read kroute $i's metrics"
    done
    stop_kroutes
    for ((i = 1; i <= n; i++)); do cp "$RAW/kroute-$n-$i.log" "$RAW/$tag.k$i.log"; done
  fi
  [ "$case" = warm ] && return
  python3 bench/fleet_report.py case "$RESULTS" case="$case" n="$n" record_size="$RECORD_SIZE" \
    warmup="$WARMUP" seconds="$SECS" t_start="$t_start" raw="$RAW/$tag" offered_mbps="$LOAD" rate="$rate" ||
    die "case $tag invalid (see above)"
}

# ---------------------------------------------------------------------------------------------
# run

[ -f "$RESULTS" ] && mv -f "$RESULTS" "$RESULTS.prev"
: >"$RESULTS"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$WARM_RUN" -gt 0 ]; then
  say "warm-up: one uncounted direct run, no caps, ${WARM_RUN}s"
  run_case warm 2 "$WARM_RUN"
fi
for b in 1 3; do scripts/cluster.sh cap "$b" "$OTHER_CAP" >/dev/null || die "scripts/cluster.sh cap $b $OTHER_CAP failed"; done
scripts/cluster.sh cap 2 "$CAP" >/dev/null || die "scripts/cluster.sh cap 2 $CAP failed"
say "caps (MB/s each way) brokers 1/2/3: $OTHER_CAP/$CAP/$OTHER_CAP; offered $LOAD MB/s in all"
for n in "${NS[@]}"; do
  run_case direct "$n"
  run_case kroute "$n"
done
check_leaders "at the end"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cp "$RESULTS" "$OUT/results-$(date -u +%Y%m%dT%H%M%SZ).tsv"

# ---------------------------------------------------------------------------------------------
# report

IDENTITY_PATHS=examples/rdkafka_perf.rs
bench_identity bench/fleet.sh
cap_lead() { awk -v c="$1" 'BEGIN { if (c == 0) print "unlimited"; else printf "%g MB/s", c / 2 }'; }
BENCH_META=$(cat <<EOF
$(bench_machine_meta)
port_offset=$KROUTE_CLUSTER_PORT_OFFSET
caps=$OTHER_CAP/$CAP/$OTHER_CAP
capacity_note=brokers 1 and 3 $(cap_lead "$OTHER_CAP") each, broker 2 $(cap_lead "$CAP")
partitions=$((3 * PPB))
leaders=$LEADERS
offered_mbps=$LOAD
record_size=$RECORD_SIZE
producer_props=$(echo ${BASE_PROPS[*]} queue.buffering.max.kbytes=$QUEUE_KB/N ${EXTRA_PROPS[*]})
client_version=$CLIENT_VERSION
warmup=$WARMUP
seconds=$SECS
loadavg_before=$load_before
loadavg_after=$load_after
duration_s=$SECONDS
notes=${BENCH_NOTES:-}
EOF
)
export BENCH_META
python3 bench/fleet_report.py report "$RESULTS" "$DOCS" | tee "$OUT/report.md"
