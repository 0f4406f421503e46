#!/usr/bin/env bash
# Seed 000's full setup (issue 26 part 1): three producer "hosts" at once, each with 4 producers
# writing its own topic, all on the same three brokers, whose links are capped so the cluster's
# capacity binds. Case "direct": every producer straight to the brokers (the client's default
# partitioner). Case "kroute": each host's 4 producers behind that host's own kroute (one sidecar
# per host, 3 kroute processes). The two cases run one after the other on the same topics.
#
#   bench/seed_fleet.sh                                  full run: about 3.5 minutes on 2 cores
#                                                        (cluster start included, builds not)
#   BENCH_SEED_SECONDS=15 BENCH_SEED_WARMUP=5 BENCH_SEED_WARM_RUN=0 bench/seed_fleet.sh
#                                                        smoke run (about 2 minutes)
#
# Cluster: one of its own (scripts/cluster.sh with KROUTE_CLUSTER_PORT_OFFSET [4000] and
# KROUTE_CLUSTER_DIR [target/cluster-fleet], the cluster bench/fleet.sh uses: do not run both at
# once), relayed mode, every broker's link capped at BENCH_SEED_CAP MB/s each way. A leader's link
# carries the produce traffic in and the copies its two followers fetch out (RF 3), so each broker
# leads at most cap/2 MB/s of records: with the default 2 MB/s, 1 MB/s per broker and 3 MB/s for
# the cluster. Started if not running and stopped at the end (BENCH_KEEP_CLUSTER=1 leaves it
# running); one already running must be in relayed mode, and gets its caps back at the end.
#
# Topics (seed 000): testing-1 (36 partitions, leaders 22/10/4 on brokers 1/2/3), testing-2
# (16/16/4), testing-3 (12/12/12); RF 3, min.insync.replicas=2, exact leaders (--replica-assignment
# as bench/routing.sh lays them out, checked before and after). Recreated at the start of a run.
#
# Load: group g (host g) = 4 producers writing testing-g, examples/rdkafka_perf (librdkafka,
# light: 12 Java producers would not fit next to 4 brokers' JVMs on 2 cores) at a fixed rate:
# BENCH_SEED_LOAD MB/s [2.7] offered in all (10^6 bytes of record values per second), a third per
# group, a quarter of that per producer; keyless records of BENCH_RECORD_SIZE [10240] bytes,
# acks=all linger.ms=5 batch.size=32768 max.in.flight 5 enable.idempotence=false,
# queue.buffering.max.kbytes = BENCH_SEED_QUEUE_KB [4096] / 12 each. Why 2.7: a plain client
# spreads a topic's records evenly over its partitions, so broker 1 (50 of the 108 partitions)
# gets 2.7 x (22/36 + 16/36 + 12/36) / 3 = 1.25 MB/s against the 1 MB/s it can lead: the cap binds
# (the direct case tops out near 2.2 MB/s), while the cluster as a whole (3 MB/s) could carry the
# 2.7 MB/s (90%) if the records went where the capacity is.
#
# kroute (case kroute): kroute g listens on BENCH_SEED_PORT_BASE [24700] + 10g + 1..3 (brokers),
# +4 (bootstrap), admin +5; [routing] strategy = "strict-cost", include = [testing-g]; all other
# settings default; started for the case and stopped after it.
#
# Measurement: three samplers (bench/fleet_report.py sample, one per topic) ask every broker,
# every second, for the latest offsets of the partitions it leads (the brokers' own listeners, not
# the capped relays). bench/seed_fleet_report.py turns them into, per case, over the 1 s intervals
# after the warm-up: per broker and per group the throughput (MB/s), the share, the p5-p95 of the
# 1 s shares and their mean change from one second to the next; per group the producers' p50/p99
# (rdkafka_perf's summary, median of the 4, and the worst); in case kroute, per sidecar
# kroute_request_bytes_total{api="Produce"} (must cover 95% of the acknowledged bytes) and
# kroute_batches_moved_total. A case fails if a producer fails or a topic holds fewer records than
# its producers had acknowledged.
#
# Environment (defaults in brackets):
#   BENCH_SEED_SECONDS   measured seconds per case [35]
#   BENCH_SEED_WARMUP    seconds per case before the measurement [10]
#   BENCH_SEED_CAP       every broker's link, MB/s each way [2]
#   BENCH_SEED_LOAD      MB/s offered in all [2.7]
#   BENCH_SEED_QUEUE_KB  the producers' queue.buffering.max.kbytes, in all [4096]
#   BENCH_SEED_PORT_BASE [24700]
#   BENCH_SEED_WARM_RUN  seconds of one uncounted direct run without caps first (warm JVMs) [15]
#   BENCH_SEED_CASES     [direct kroute]
#   BENCH_PRODUCER_PROPS more librdkafka properties for every producer, "k=v k=v" [none]
#   BENCH_RECORD_SIZE    [10240]
#   BENCH_DOCS           file whose "## Part 1: seed 000's full setup" section is replaced
#                        (inserted before Part 2 if missing), "none" to skip [docs/fleet.md]
#   BENCH_NOTES          a paragraph appended to the section [none]
#   BENCH_BUILD          1 = cargo build --release --bin kroute and --example rdkafka_perf [1]
#   BENCH_KEEP_CLUSTER   [0]
#   KROUTE_BIN [target/release/kroute]  RDKAFKA_PERF_BIN [target/release/examples/rdkafka_perf]
# Output: target/bench-seed-fleet/ (report.md, cases/*.json; raw/: samples, producer logs, kroute
# configs, logs and metrics).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
REPO=$PWD

export KROUTE_CLUSTER_PORT_OFFSET=${KROUTE_CLUSTER_PORT_OFFSET:-4000}
export KROUTE_CLUSTER_DIR=${KROUTE_CLUSTER_DIR:-$REPO/target/cluster-fleet}
SECS=${BENCH_SEED_SECONDS:-35}
WARMUP=${BENCH_SEED_WARMUP:-10}
CAP=${BENCH_SEED_CAP:-2}
LOAD=${BENCH_SEED_LOAD:-2.7}
QUEUE_KB=${BENCH_SEED_QUEUE_KB:-4096}
PORT_BASE=${BENCH_SEED_PORT_BASE:-24700}
WARM_RUN=${BENCH_SEED_WARM_RUN:-15}
CASES=(${BENCH_SEED_CASES:-direct kroute})
EXTRA_PROPS=(${BENCH_PRODUCER_PROPS:-})
RECORD_SIZE=${BENCH_RECORD_SIZE:-10240}
DOCS=${BENCH_DOCS:-docs/fleet.md}
BUILD=${BENCH_BUILD:-1}
KEEP_CLUSTER=${BENCH_KEEP_CLUSTER:-0}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
RDKAFKA_PERF_BIN=${RDKAFKA_PERF_BIN:-target/release/examples/rdkafka_perf}
OUT=$REPO/target/bench-seed-fleet
RAW=$OUT/raw
GROUPS_N=3
PER_GROUP=4
TOPICS=(testing-1 testing-2 testing-3)
LAYOUTS=(22/10/4 16/16/4 12/12/12)

say() { echo "seed-fleet: $*" >&2; }
die() { echo "seed-fleet: FAILED: $*" >&2; exit 1; }

for v in SECS WARMUP QUEUE_KB PORT_BASE WARM_RUN RECORD_SIZE; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer (got '${!v}')"
done
for v in CAP LOAD; do [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "$v must be a number (got '${!v}')"; done
for c in "${CASES[@]}"; do [[ $c =~ ^(direct|kroute)$ ]] || die "BENCH_SEED_CASES: '$c' is not direct or kroute"; done
[ "$SECS" -ge 3 ] || die "BENCH_SEED_SECONDS >= 3"
command -v curl >/dev/null || die "curl missing"
command -v python3 >/dev/null || die "python3 missing"
rm -rf "$RAW" "$OUT/cases"
mkdir -p "$RAW" "$OUT/cases"

# ---------------------------------------------------------------------------------------------
# cleanup

started_cluster=0
caps_before=
KR_PIDS=()
PRODUCER_PIDS=()
SAMPLER_PIDS=()

stop_kroutes() {
  local p
  for p in "${KR_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${KR_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  KR_PIDS=()
}

stop_samplers() {
  local p
  for p in "${SAMPLER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${SAMPLER_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  SAMPLER_PIDS=()
}

cleanup() {
  local rc=$? p b c
  set +e
  for p in "${PRODUCER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  stop_samplers
  stop_kroutes
  if [ "$started_cluster" = 1 ] && [ "$KEEP_CLUSTER" != 1 ]; then
    say "stopping the cluster (started by this run)"; scripts/cluster.sh stop >/dev/null 2>&1
  else
    while read -r _ b c; do [ -n "$b" ] && scripts/cluster.sh cap "$b" "$c" >/dev/null 2>&1; done <<<"$caps_before"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# build, cluster, topics

if [ "$BUILD" = 1 ]; then build_kroute_and_rdkafka_perf; fi
[ -x "$KROUTE_BIN" ] || die "$KROUTE_BIN not found (cargo build --release)"
[ -x "$RDKAFKA_PERF_BIN" ] || die "$RDKAFKA_PERF_BIN not found (cargo build --release --example rdkafka_perf)"
CLIENT_VERSION=$("$RDKAFKA_PERF_BIN" --version)

relayed_cluster_up
SAMPLE_AT=$(brokers_own_listeners)
for b in 1 2 3; do scripts/cluster.sh cap "$b" 0 >/dev/null || die "scripts/cluster.sh cap $b 0 failed"; done

describe_leaders() { # TOPIC: the leaders of partition 0, 1, ... ("1,2,3,...")
  scripts/cluster.sh tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --describe --topic "$1" 2>/dev/null |
    awk '$1 == "Topic:" && $3 == "Partition:" { print $4, $6 }' | sort -n | awk '{ print $2 }' | paste -sd,
}
LEADERS=()
existing=$(scripts/cluster.sh tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --list 2>/dev/null || true)
for ((g = 0; g < GROUPS_N; g++)); do
  t=${TOPICS[$g]}
  read -r asg leaders < <(leader_assignment ${LAYOUTS[$g]//\// } | paste -sd' ')
  LEADERS+=("$leaders")
  if grep -qx "$t" <<<"$existing"; then
    say "$t exists: deleting it (recreated with its exact layout)"
    scripts/cluster.sh delete-topic "$t" >/dev/null 2>&1 || die "deleting $t failed"
  fi
  poll 20 1.5 scripts/cluster.sh create-topic "$t" --replica-assignment "$asg" --config min.insync.replicas=2 \
    >/dev/null 2>>"$RAW/create-topics.err" || { tail -n 5 "$RAW/create-topics.err" >&2; die "creating $t failed"; }
done
check_leaders() { # WHEN
  local g got
  for ((g = 0; g < GROUPS_N; g++)); do
    got=$(describe_leaders "${TOPICS[$g]}")
    [ "$got" = "${LEADERS[$g]}" ] || die "${TOPICS[$g]}: leaders $got $1, planned ${LEADERS[$g]}"
  done
  say "leaders of ${TOPICS[*]} as planned (${LAYOUTS[*]}) $1"
}
check_leaders "after creation"

# ---------------------------------------------------------------------------------------------
# one case

RATE=$(awk -v l="$LOAD" -v s="$RECORD_SIZE" -v n=$((GROUPS_N * PER_GROUP)) 'BEGIN { printf "%.3f", l * 1e6 / s / n }')
QUEUE=$((QUEUE_KB / (GROUPS_N * PER_GROUP))); [ "$QUEUE" -ge 64 ] || QUEUE=64
BASE_PROPS=(acks=all linger.ms=5 batch.size=32768 max.in.flight.requests.per.connection=5 enable.idempotence=false)

kroute_port() { echo $((PORT_BASE + 10 * $1 + $2)); } # GROUP(1..3) OFFSET

start_kroutes() {
  local g
  for ((g = 1; g <= GROUPS_N; g++)); do
    start_sidecar_kroute "kroute-$g" "$(kroute_port "$g" 0)" "${TOPICS[$((g - 1))]}" BENCH_SEED_PORT_BASE \
      "written by bench/seed_fleet.sh: the sidecar of host $g (topic ${TOPICS[$((g - 1))]})"
  done
  for ((g = 1; g <= GROUPS_N; g++)); do wait_sidecar_ready "kroute-$g" "$(kroute_port "$g" 0)"; done
  say "$GROUPS_N kroutes ready (bootstrap ports $(kroute_port 1 4)..$(kroute_port "$GROUPS_N" 4) step 10)"
}

run_case() { # CASE [SECONDS]: CASE direct|kroute|warm
  local case=$1 secs=$((WARMUP + SECS)) g i boot t_start failed=0 pid
  [ "$case" = warm ] && secs=$2
  [ "$case" = kroute ] && start_kroutes
  say "$case: $GROUPS_N groups x $PER_GROUP producers x $RATE records/s of $RECORD_SIZE B for ${secs}s (queue ${QUEUE} KB each)"
  for ((g = 1; g <= GROUPS_N; g++)); do
    python3 bench/fleet_report.py sample "$SAMPLE_AT" "${TOPICS[$((g - 1))]}" "${LEADERS[$((g - 1))]}" \
      >"$RAW/$case.g$g.samples" 2>"$RAW/$case.g$g.sampler.err" &
    SAMPLER_PIDS+=($!)
  done
  sleep 1.5
  t_start=$(date +%s.%N)
  PRODUCER_PIDS=()
  for ((g = 1; g <= GROUPS_N; g++)); do
    if [ "$case" = kroute ]; then boot=127.0.0.1:$(kroute_port "$g" 4); else boot=$BOOT; fi
    for ((i = 1; i <= PER_GROUP; i++)); do
      "$RDKAFKA_PERF_BIN" "$boot" "${TOPICS[$((g - 1))]}" 1000000000 "$RECORD_SIZE" "$RATE" "${BASE_PROPS[@]}" \
        "queue.buffering.max.kbytes=$QUEUE" "client.id=seed-$case-g$g-p$i" "kroute.seconds=$secs" "${EXTRA_PROPS[@]}" \
        >"$RAW/$case.g$g.p$i.out" 2>"$RAW/$case.g$g.p$i.err" &
      PRODUCER_PIDS+=($!)
    done
  done
  for pid in "${PRODUCER_PIDS[@]}"; do wait "$pid" || failed=1; done
  PRODUCER_PIDS=()
  say "$case: producers done after $(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s"
  sleep 2
  stop_samplers
  [ "$failed" = 0 ] || { tail -n 3 "$RAW/$case".g*.p*.err >&2; die "a producer failed ($case): $RAW/$case.g*.p*.err"; }
  if [ "$case" = kroute ]; then
    for ((g = 1; g <= GROUPS_N; g++)); do
      kill -0 "${KR_PIDS[$((g - 1))]}" 2>/dev/null || die "kroute $g exited (see $RAW/kroute-$g.log)"
      curl -fsS --max-time 5 "http://127.0.0.1:$(kroute_port "$g" 5)/metrics" >"$RAW/$case.k$g.metrics" ||
        die "cannot read kroute $g's metrics"
    done
    stop_kroutes
    for ((g = 1; g <= GROUPS_N; g++)); do cp "$RAW/kroute-$g.log" "$RAW/$case.k$g.log"; done
  fi
  [ "$case" = warm ] && return
  python3 bench/seed_fleet_report.py case "$OUT/cases/$case.json" case="$case" groups="$GROUPS_N" \
    per_group="$PER_GROUP" topics="$(IFS=,; echo "${TOPICS[*]}")" layouts="$(IFS=,; echo "${LAYOUTS[*]}")" \
    record_size="$RECORD_SIZE" warmup="$WARMUP" seconds="$SECS" t_start="$t_start" raw="$RAW/$case" ||
    die "case $case invalid (see above)"
}

# ---------------------------------------------------------------------------------------------
# run

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$WARM_RUN" -gt 0 ]; then
  say "warm-up: one uncounted direct run, no caps, ${WARM_RUN}s"
  run_case warm "$WARM_RUN"
fi
for b in 1 2 3; do scripts/cluster.sh cap "$b" "$CAP" >/dev/null || die "scripts/cluster.sh cap $b $CAP failed"; done
say "caps: every broker's link $CAP MB/s each way; offered $LOAD MB/s in all"
for c in "${CASES[@]}"; do run_case "$c"; done
check_leaders "at the end"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# report

IDENTITY_PATHS=examples/rdkafka_perf.rs
bench_identity bench/seed_fleet.sh
BENCH_META=$(cat <<EOF
$(bench_machine_meta)
port_offset=$KROUTE_CLUSTER_PORT_OFFSET
cap=$CAP
offered_mbps=$LOAD
rate=$RATE
record_size=$RECORD_SIZE
producer_props=$(echo ${BASE_PROPS[*]} queue.buffering.max.kbytes=$QUEUE ${EXTRA_PROPS[*]})
client_version=$CLIENT_VERSION
warmup=$WARMUP
seconds=$SECS
cases=${CASES[*]}
loadavg_before=$load_before
loadavg_after=$load_after
duration_s=$SECONDS
notes=${BENCH_NOTES:-}
EOF
)
export BENCH_META
printf '%s\n' "$BENCH_META" >"$OUT/meta.txt"  # BENCH_META="$(cat meta.txt)" seed_fleet_report.py report ... redoes the section
python3 bench/seed_fleet_report.py report "$OUT/cases" "$DOCS" | tee "$OUT/report.md"
