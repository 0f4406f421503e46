#!/usr/bin/env bash
# Routing of keyless produce batches: the Java client's partitioner vs kroute strict-cost, side by
# side in one run on the local cluster (scripts/cluster.sh, relayed mode); with
# BENCH_CLIENT=librdkafka the same with librdkafka producers (its own partitioner).
#
#   bench/routing.sh                full run (defaults below, ~19 minutes on 2 cores)
#   BENCH_ROUNDS=1 BENCH_SCENARIOS="skew-22-10-4 slow-broker" BENCH_RECORDS=2000 BENCH_SLOW_RECORDS=600 \
#   BENCH_FIXED_SECONDS=4 BENCH_WARMUP_RECORDS=500 BENCH_DOCS=none bench/routing.sh
#                                   smoke run (~3 minutes)
#   BENCH_IDEMPOTENT=1 bench/routing.sh
#                                   the same with idempotent producers (the Java default), own
#                                   output dir, docs section and chart (see BENCH_IDEMPOTENT)
#   BENCH_CLIENT=librdkafka bench/routing.sh
#                                   librdkafka producers instead of the Java ones (see BENCH_CLIENT)
#
# Scenarios (one fresh topic per scenario x case, RF 3, min.insync.replicas=2, exact leaders via
# --replica-assignment, followers rotated so they are spread):
#   skew-22-10-4   36 partitions, leaders 22 on broker 1, 10 on broker 2, 4 on broker 3   (seed 000)
#   skew-16-16-4   36 partitions, leaders 16 / 16 / 4                                      (seed 000)
#   skew-12-12-12  36 partitions, leaders 12 / 12 / 12                                     (seed 000)
#   slow-broker    3 partitions, one led by each broker, broker BENCH_SLOW_BROKER answering
#                  BENCH_SLOW_MS late (scripts/cluster.sh delay; KIP-794's test layout)
# Cases (every producer: enable.idempotence=false acks=all, keyless 10 KiB records, linger.ms 5;
# with BENCH_IDEMPOTENT=1 enable.idempotence=true instead, max.in.flight 5 as by default):
#   direct-default     producers -> brokers, Java default (adaptive) partitioner
#   direct-noadaptive  producers -> brokers, partitioner.adaptive.partitioning.enable=false
#   kroute-strict      producers -> kroute ([routing] strategy strict-cost, include bench-rt-*) -> brokers
#   kroute-off         producers -> kroute ([routing] strategy off) -> brokers: the hop without routing
# With BENCH_CLIENT=librdkafka the producers are examples/rdkafka_perf.rs (librdkafka through the
# rdkafka crate; ProducerPerformance's output format), the cases direct-default (librdkafka's
# default partitioner: keyless records stick to a random partition for
# sticky.partitioning.linger.ms, 10 ms; no adaptive variant, so no direct-noadaptive),
# kroute-strict and kroute-off, and the producer properties mirror the Java producer's:
#   acks=all linger.ms=5 enable.idempotence=false|true (as above)
#   batch.size=BENCH_RDKAFKA_BATCH_SIZE [32768], not Java's 16384: both cap one partition's
#     batch (librdkafka's with the framing), but the Java producer puts the batches of many
#     partitions into one ProduceRequest and librdkafka (2.12) sends one partition per request,
#     so 16384 (one 10 KiB record per batch, as with Java) means one 10 KiB record per request and
#     a client-bound ~5 MB/s per producer, under the cluster's capacity (measured uncapped, direct,
#     one producer: 16384 4.9-5.7 MB/s, 32768 15.8, 65536 21.4, librdkafka's default 1000000 64);
#     32768 = at most 3 records of 10 KiB per batch
#   max.in.flight.requests.per.connection=5 (the Java default; librdkafka's is 1000000, and it
#     allows at most 5 with idempotence)
#   queue.buffering.max.kbytes=32768: 32 MiB queued at most, the Java producer's buffer.memory
#     (librdkafka's default is 1 GiB, which would take a whole max run in one burst)
# Phases: max throughput (--throughput -1, BENCH_RECORDS records per producer, BENCH_SLOW_RECORDS
# in slow-broker, where the direct cases are ~4x slower) and a fixed
# offered load (--throughput BENCH_FIXED_RATE per producer for BENCH_FIXED_SECONDS).
# Each run: BENCH_PRODUCERS ProducerPerformance JVMs in parallel on the run's topic.
# Each round runs every scenario x case once, cases in an order rotated per round.
#
# Each broker's share is measured on the brokers: the end offsets of every partition of the run's
# topic (GetOffsetShell) before/after the run, summed per leader (known layout). For kroute cases
# it is cross-checked with kroute_upstream_produce_bytes_total{broker}.
#
# Validity checks (the run fails if one does not hold):
#   - every producer reported all its records sent and no error
#   - the brokers' offsets grew by exactly the records sent (more: duplicates, flagged)
#   - kroute cases: kroute_request_bytes_total{api="Produce"} of that case's kroute grew by
#     >= records x size, and the other kroute's did not move; direct cases: neither moved
#   - the topics' leaders are the planned ones (checked after creation and at the end)
# With BENCH_IDEMPOTENT=1 also (kroute's kroute_idempotent_batches_total{outcome} deltas):
#   - no duplicates at all: the brokers' offsets grew by exactly the records sent
#   - no producer log names OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID or
#     INVALID_PRODUCER_EPOCH (or their exception classes; for librdkafka also their rdkafka names
#     and librdkafka's texts, e.g. "Broker: Broker received an out of order sequence number"), and
#     a librdkafka producer never bumped its epoch (statistics epoch_cnt <= 1: librdkafka recovers
#     from a sequence error silently by taking a new epoch)
#   - kroute-strict: renumbered grew, no batch was kept for reason `idempotent` (not renumbered),
#     no producer was refused (kroute_idempotent_producers_refused_total), sequence_error_passed
#     stayed 0, and batches moved (kroute_batches_moved_total) in unequal and slow-broker layouts
#   - kroute-off: no idempotent outcome moved (renumbered stays 0)
#   resent / answered_from_memory / busy / sequence_error_hidden / waited / joined are reported per
#   run and case.
#
# Environment (defaults in brackets):
#   BENCH_ROUNDS          rounds [2]
#   BENCH_SCENARIOS       [skew-22-10-4 skew-16-16-4 skew-12-12-12 slow-broker]
#   BENCH_CLIENT          producer client: java (org.apache.kafka.tools.ProducerPerformance) or
#                         librdkafka (target/release/examples/rdkafka_perf, built with
#                         BENCH_BUILD=1; RDKAFKA_PERF_BIN to use another); output in
#                         target/bench-routing-librdkafka/ (-idempotent/ with BENCH_IDEMPOTENT=1),
#                         docs sections "Routing results: librdkafka producers" / "Routing results:
#                         librdkafka, idempotent producers", charts
#                         docs/routing-benchmark-librdkafka{,-idempotent}.png [java]
#   BENCH_RDKAFKA_BATCH_SIZE  librdkafka's batch.size (see above) [32768]
#   BENCH_CASES           [direct-default direct-noadaptive kroute-strict kroute-off; with
#                         BENCH_CLIENT=librdkafka: direct-default kroute-strict kroute-off]
#   BENCH_PRODUCERS       producer processes per run [2]
#   BENCH_RECORDS         records per producer per max-throughput run [5000]
#   BENCH_SLOW_RECORDS    the same in the slow-broker scenario [3500] (both > the producer's 32 MiB
#                         buffer.memory, so a max run reaches a steady state instead of one burst)
#   BENCH_PRODUCER_PROPS  extra producer properties for every case, "k=v k=v" [none]
#   BENCH_RECORD_SIZE     bytes per record [10240]
#   BENCH_FIXED_RATE      records/s PER PRODUCER in the fixed-load phase [150: 2 x 150 x 10 KiB
#                         = 2.9 MiB/s, which every case sustains with equal brokers on 2 cores], or
#                         "auto" = BENCH_FIXED_FRACTION x the median direct-default max of
#                         skew-12-12-12 (equal brokers) of this run, split over the producers
#   BENCH_FIXED_FRACTION  [0.5]
#   BENCH_FIXED_SECONDS   duration of each fixed-load run [12]
#   BENCH_WARMUP_RECORDS  records per producer of one uncounted run per case first (0 = none) [3000]
#   BENCH_PHASES          "max fixed" (or one of them) [max fixed]
#   BENCH_SLOW_BROKER     [2]     BENCH_SLOW_MS [20]
#   BENCH_SLOW_LAYOUT     leaders per broker in slow-broker, "a/b/c" [1/1/1]
#   BENCH_CAPS            bandwidth cap of each broker's link, MB/s in each direction, "a/b/c"
#                         (scripts/cluster.sh cap; replication to followers counts against the
#                         leader's outgoing link), for the whole run: brokers with their own
#                         capacity, seed 000's setting [none: the shared CPU is the limit]
#   BENCH_DOCS            file whose routing results section is replaced, "none" to skip
#                         [docs/benchmarks.md]
#   BENCH_CHART           PNG chart path, "none" to skip [docs/routing-benchmark.png, or
#                         target/bench-routing/routing-benchmark.png when BENCH_DOCS=none]
#   BENCH_ROUTING_EXTRA   extra lines for kroute-strict's [routing] table, e.g.
#                         "lane_spill_depth = 5", to compare settings side by side [none]
#   BENCH_BUILD           1 = cargo build --release first (and --example rdkafka_perf with
#                         BENCH_CLIENT=librdkafka) [1]
#   KROUTE_BIN            kroute binary [target/release/kroute]
#   BENCH_IDEMPOTENT      1 = idempotent producers (enable.idempotence=true) and the checks above;
#                         output in target/bench-routing-idempotent/, docs section "Routing results:
#                         idempotent producers", chart docs/routing-benchmark-idempotent.png [0]
#   BENCH_BASELINE        with BENCH_IDEMPOTENT=1: a results TSV of a non-idempotent run (e.g.
#                         target/bench-routing/results-<date>.tsv); the report then compares
#                         kroute-strict's gains with that run's [none]
# Raw per-run lines and all logs: target/bench-routing/ (results.tsv, raw/, kroute-*.log),
# target/bench-routing-idempotent/ with BENCH_IDEMPOTENT=1 (-librdkafka in both names with
# BENCH_CLIENT=librdkafka).
# Starts the cluster in relayed mode if nothing runs (and stops it at the end only then); refuses
# to use a cluster running in direct mode. On exit: stops its kroutes, resets the delay of the
# slow broker to 0, deletes the topics it created.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
REPO=$PWD

ROUNDS=${BENCH_ROUNDS:-2}
SCENARIOS=(${BENCH_SCENARIOS:-skew-22-10-4 skew-16-16-4 skew-12-12-12 slow-broker})
CLIENT=${BENCH_CLIENT:-java}
if [ "$CLIENT" = librdkafka ]; then CASES=(${BENCH_CASES:-direct-default kroute-strict kroute-off})
else CASES=(${BENCH_CASES:-direct-default direct-noadaptive kroute-strict kroute-off}); fi
PRODUCERS=${BENCH_PRODUCERS:-2}
RECORDS=${BENCH_RECORDS:-5000}
SLOW_RECORDS=${BENCH_SLOW_RECORDS:-3500}
EXTRA_PROPS=(${BENCH_PRODUCER_PROPS:-})
RECORD_SIZE=${BENCH_RECORD_SIZE:-10240}
FIXED_RATE=${BENCH_FIXED_RATE:-150}
FIXED_FRACTION=${BENCH_FIXED_FRACTION:-0.5}
FIXED_SECONDS=${BENCH_FIXED_SECONDS:-12}
WARMUP_RECORDS=${BENCH_WARMUP_RECORDS:-3000}
PHASES=${BENCH_PHASES:-max fixed}
SLOW_BROKER=${BENCH_SLOW_BROKER:-2}
SLOW_MS=${BENCH_SLOW_MS:-20}
SLOW_LAYOUT=${BENCH_SLOW_LAYOUT:-1/1/1}
CAPS=${BENCH_CAPS:-}
DOCS=${BENCH_DOCS:-docs/benchmarks.md}
IDEMPOTENT=${BENCH_IDEMPOTENT:-0}
BASELINE=${BENCH_BASELINE:-}
if [ "$CLIENT" = librdkafka ]; then SUFFIX=-librdkafka; else SUFFIX=; fi
if [ "$IDEMPOTENT" = 1 ]; then OUTNAME=bench-routing$SUFFIX-idempotent CHARTNAME=routing-benchmark$SUFFIX-idempotent.png
else OUTNAME=bench-routing$SUFFIX CHARTNAME=routing-benchmark$SUFFIX.png; fi
if [ "$DOCS" = none ]; then CHART=${BENCH_CHART:-target/$OUTNAME/$CHARTNAME}
else CHART=${BENCH_CHART:-docs/$CHARTNAME}; fi
BUILD=${BENCH_BUILD:-1}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
RDKAFKA_PERF_BIN=${RDKAFKA_PERF_BIN:-target/release/examples/rdkafka_perf}
RDKAFKA_BATCH_SIZE=${BENCH_RDKAFKA_BATCH_SIZE:-32768}

RELAYED_BOOTSTRAP=127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194
# two kroutes, started once for the whole bench (ports distinct from bench/passthrough.sh's)
declare -A KR_BOOT=([strict]=9392 [off]=9492) KR_BASE=([strict]=9400 [off]=9500)
declare -A KR_ADMIN=([strict]=127.0.0.1:9746 [off]=127.0.0.1:9747) KR_PID=()
OUT=$REPO/target/$OUTNAME
RAW=$OUT/raw
OFFS=$OUT/offsets
RESULTS=$OUT/results.tsv
RUN_ID=$(date +%s)
TOPIC_PREFIX=bench-rt-$RUN_ID

say() { echo "bench: $*" >&2; }
die() { echo "bench: FAILED: $*" >&2; exit 1; }

for v in ROUNDS PRODUCERS RECORDS SLOW_RECORDS RECORD_SIZE FIXED_SECONDS WARMUP_RECORDS SLOW_BROKER SLOW_MS RDKAFKA_BATCH_SIZE; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "BENCH_$v must be a non-negative integer (got '${!v}')"
done
[ "$ROUNDS" -ge 1 ] && [ "$RECORDS" -ge 1 ] && [ "$SLOW_RECORDS" -ge 1 ] && [ "$FIXED_SECONDS" -ge 1 ] && [ "$PRODUCERS" -ge 1 ] ||
  die "rounds, records, seconds, producers must be >= 1"
[[ $SLOW_BROKER =~ ^[123]$ ]] || die "BENCH_SLOW_BROKER must be 1, 2 or 3"
[[ $SLOW_LAYOUT =~ ^[0-9]+/[0-9]+/[0-9]+$ ]] || die "BENCH_SLOW_LAYOUT must be a/b/c"
[[ -z $CAPS || $CAPS =~ ^[0-9.]+/[0-9.]+/[0-9.]+$ ]] || die "BENCH_CAPS must be a/b/c (MB/s per broker)"
[[ $FIXED_RATE == auto || $FIXED_RATE =~ ^[0-9]+$ ]] || die "BENCH_FIXED_RATE must be auto or records/s per producer"
[[ $IDEMPOTENT =~ ^[01]$ ]] || die "BENCH_IDEMPOTENT must be 0 or 1"
[[ $CLIENT == java || $CLIENT == librdkafka ]] || die "BENCH_CLIENT must be java or librdkafka (got '$CLIENT')"
if [ -n "$BASELINE" ]; then
  [ "$IDEMPOTENT" = 1 ] || die "BENCH_BASELINE needs BENCH_IDEMPOTENT=1"
  [ -f "$BASELINE" ] || die "BENCH_BASELINE: $BASELINE not found"
  BASELINE=$(realpath "$BASELINE")
fi
if [ "$IDEMPOTENT" = 1 ]; then IDEMPOTENCE=true; else IDEMPOTENCE=false; fi
for p in $PHASES; do [[ $p == max || $p == fixed ]] || die "BENCH_PHASES: unknown phase '$p'"; done
for s in "${SCENARIOS[@]}"; do
  [[ $s =~ ^skew-[0-9]+-[0-9]+-[0-9]+$ || $s == slow-broker ]] || die "unknown scenario '$s' (skew-A-B-C or slow-broker)"
done
for c in "${CASES[@]}"; do
  case $c in direct-default|direct-noadaptive|kroute-strict|kroute-off) ;; *) die "unknown case '$c'" ;; esac
  [[ $CLIENT == librdkafka && $c == direct-noadaptive ]] &&
    die "direct-noadaptive is a Java-only case (partitioner.adaptive.partitioning.enable); librdkafka has no adaptive partitioner: drop it from BENCH_CASES"
done
if [[ $FIXED_RATE == auto && " $PHASES " == *" fixed "* ]]; then
  [[ " $PHASES " == *" max "* && " ${CASES[*]} " == *" direct-default "* ]] &&
    printf '%s\n' "${SCENARIOS[@]}" | grep -qx 'skew-[0-9]*-[0-9]*-[0-9]*' ||
    die "BENCH_FIXED_RATE=auto needs the max phase, the direct-default case and a skew scenario; give a rate"
fi
command -v curl >/dev/null || die "curl missing"
command -v python3 >/dev/null || die "python3 missing"
mkdir -p "$RAW" "$OFFS"

# ---------------------------------------------------------------------------------------------
# cleanup

started_cluster=0
delay_set=0
caps_set=0
topics=()

cleanup() {
  local rc=$? k t
  set +e
  for k in "${!KR_PID[@]}"; do kill -TERM "${KR_PID[$k]}" 2>/dev/null; wait "${KR_PID[$k]}" 2>/dev/null; done
  if [ "$delay_set" = 1 ]; then scripts/cluster.sh delay "$SLOW_BROKER" 0 >/dev/null 2>&1; fi
  if [ "$caps_set" = 1 ]; then for b in 1 2 3; do scripts/cluster.sh cap "$b" 0 >/dev/null 2>&1; done; fi
  if [ "$started_cluster" = 1 ]; then
    say "stopping the cluster (started by this run)"; scripts/cluster.sh stop >/dev/null 2>&1
  else
    for t in "${topics[@]}"; do scripts/cluster.sh delete-topic "$t" >/dev/null 2>&1; done
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# helpers

kroute_ready() { curl -fsS --max-time 2 -o /dev/null "http://${KR_ADMIN[$1]}/ready" 2>/dev/null; }
scrape() { # KROUTE FILE
  curl -fsS --max-time 5 "http://${KR_ADMIN[$1]}/metrics" >"$2" || die "cannot read kroute-$1 metrics"
}


# ---------------------------------------------------------------------------------------------
# cluster

if ! scripts/cluster.sh status >/dev/null 2>&1; then
  if scripts/cluster.sh status 2>/dev/null | grep -q ' running pid='; then
    die "the cluster is partly running; fix it (scripts/cluster.sh status) before benchmarking"
  fi
  scripts/cluster.sh stop >/dev/null 2>&1 || true
  say "starting the cluster (relayed mode)"
  scripts/cluster.sh start --relayed >/dev/null
  started_cluster=1
fi
cluster_bootstrap=$(scripts/cluster.sh bootstrap)
[ "$cluster_bootstrap" = "$RELAYED_BOOTSTRAP" ] ||
  die "the cluster advertises $cluster_bootstrap, not $RELAYED_BOOTSTRAP: it runs in direct mode (stop it and rerun, or scripts/cluster.sh start --relayed)"
# a delay left over from someone else would skew the equal-broker scenarios
if scripts/cluster.sh delays | awk '$3 != 0 { bad = 1 } END { exit !bad }'; then
  die "a broker has a delay set ($(scripts/cluster.sh delays | tr '\n' ' ')); reset it with scripts/cluster.sh delay N 0"
fi
if scripts/cluster.sh caps | awk '$3 != "unlimited" && $3 != 0 { bad = 1 } END { exit !bad }'; then
  die "a broker has a bandwidth cap set ($(scripts/cluster.sh caps | tr '\n' ' ')); reset it with scripts/cluster.sh cap N 0"
fi
if [ -n "$CAPS" ]; then
  read -r c1 c2 c3 <<<"${CAPS//\// }"
  caps_set=1
  for b in 1 2 3; do
    cap=c$b
    scripts/cluster.sh cap "$b" "${!cap}" >/dev/null || die "scripts/cluster.sh cap $b ${!cap} failed"
  done
  say "bandwidth caps (MB/s, each direction) brokers 1/2/3: $CAPS"
fi
KAFKA_LIB=$(scripts/cluster.sh lib)
TOOL_LOG4J=$REPO/scripts/kafka/log4j2-tools.properties
[ -f "$TOOL_LOG4J" ] || die "$TOOL_LOG4J missing"
# the producer JVM (like kafka-producer-perf-test.sh: 512 MB heap; full JIT; quiet logging)
PRODUCER_JVM=(java -Xms256m -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$TOOL_LOG4J" -cp "$KAFKA_LIB/*" org.apache.kafka.tools.ProducerPerformance)
TOOL_JVM=(java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$TOOL_LOG4J" -cp "$KAFKA_LIB/*")

if [ "$BUILD" = 1 ]; then
  say "cargo build --release"
  cargo build --release --quiet || die "cargo build --release failed"
  if [ "$CLIENT" = librdkafka ]; then
    # a cargo run of its own: built together, the dev-dependencies' features would change kroute's
    say "cargo build --release --example rdkafka_perf"
    cargo build --release --quiet --example rdkafka_perf || die "cargo build --release --example rdkafka_perf failed"
  fi
fi
[ -x "$KROUTE_BIN" ] || die "$KROUTE_BIN not found (cargo build --release)"
CLIENT_VERSION=
# librdkafka producers: properties mirroring the Java producer's (see the header)
RDKAFKA_PROPS=(acks=all linger.ms=5 "batch.size=$RDKAFKA_BATCH_SIZE" max.in.flight.requests.per.connection=5
  queue.buffering.max.kbytes=32768 "enable.idempotence=$IDEMPOTENCE")
if [ "$CLIENT" = librdkafka ]; then
  [ -x "$RDKAFKA_PERF_BIN" ] || die "$RDKAFKA_PERF_BIN not found (cargo build --release --example rdkafka_perf)"
  CLIENT_VERSION=$("$RDKAFKA_PERF_BIN" --version) || die "$RDKAFKA_PERF_BIN --version failed"
  say "producers: $RDKAFKA_PERF_BIN ($CLIENT_VERSION), ${RDKAFKA_PROPS[*]}"
fi

# ---------------------------------------------------------------------------------------------
# kroutes

for k in strict off; do
  for p in "${KR_BOOT[$k]}" $((KR_BASE[$k] + 1)) $((KR_BASE[$k] + 2)) $((KR_BASE[$k] + 3)) "${KR_ADMIN[$k]##*:}"; do
    port_open 127.0.0.1 "$p" && die "port $p is already in use (another kroute bench?)"
  done
  if [ $k = strict ]; then strategy=strict-cost; else strategy=off; fi
  cat >"$OUT/kroute-$k.toml" <<EOF
# written by bench/routing.sh
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = ${KR_BOOT[$k]}
broker_port_base = ${KR_BASE[$k]}

[upstream]
bootstrap_servers = ["127.0.0.1:19192", "127.0.0.1:19193", "127.0.0.1:19194"]

[admin]
listen = "${KR_ADMIN[$k]}"

[routing]
strategy = "$strategy"
include = ["bench-rt-*"]
EOF
  # explicit, though it is the default: kroute renumbers (and may move) idempotent batches
  if [ "$IDEMPOTENT" = 1 ]; then echo "idempotent = true" >>"$OUT/kroute-$k.toml"; fi
  if [ $k = strict ] && [ -n "${BENCH_ROUTING_EXTRA:-}" ]; then
    printf '%s\n' "$BENCH_ROUTING_EXTRA" >>"$OUT/kroute-$k.toml"
  fi
  "$KROUTE_BIN" --config "$OUT/kroute-$k.toml" </dev/null >"$OUT/kroute-$k.log" 2>&1 &
  KR_PID[$k]=$!
done
for k in strict off; do
  poll 100 0.2 kroute_ready "$k" || { tail -n 20 "$OUT/kroute-$k.log" >&2; die "kroute-$k not ready within 20s"; }
  say "kroute-$k pid ${KR_PID[$k]} ready (bootstrap 127.0.0.1:${KR_BOOT[$k]}, admin ${KR_ADMIN[$k]})"
done

# ---------------------------------------------------------------------------------------------
# topics: one per scenario x case

declare -A TOPIC LEADERS LAYOUT
for s in "${SCENARIOS[@]}"; do
  if [ "$s" = slow-broker ]; then lay=$SLOW_LAYOUT; else lay=$(sed 's/^skew-//; s/-/\//g' <<<"$s"); fi
  LAYOUT[$s]=$lay
  read -r asg leaders < <(leader_assignment ${lay//\// } | paste -sd' ')
  [ -n "$asg" ] || die "empty layout $lay"
  for c in "${CASES[@]}"; do
    t=$TOPIC_PREFIX-$s-$c
    say "creating $t (leaders $lay, RF 3, min.insync.replicas=2)"
    topics+=("$t")
    scripts/cluster.sh create-topic "$t" --replica-assignment "$asg" --config min.insync.replicas=2 >/dev/null
    TOPIC[$s/$c]=$t
    LEADERS[$t]=$leaders
    : >"$OFFS/$t"   # fresh topic: every offset 0
  done
done

check_leaders() { # every topic's partition leaders are the planned ones
  local out t
  out=$("${TOOL_JVM[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$RELAYED_BOOTSTRAP" \
    --describe --topic "$TOPIC_PREFIX-.*" 2>/dev/null) || die "describing the bench topics failed"
  for t in "${topics[@]}"; do
    got=$(awk -v t="$t" '$1 == "Topic:" && $2 == t && $3 == "Partition:" { print $4, $6 }' <<<"$out" |
      sort -n | awk '{ print $2 }' | paste -sd,)
    [ "$got" = "${LEADERS[$t]}" ] || die "$t: leaders are '$got', planned '${LEADERS[$t]}'"
  done
}
check_leaders
say "leaders of ${#topics[@]} topics checked"

read_offsets() { # TOPIC FILE
  "${TOOL_JVM[@]}" org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$RELAYED_BOOTSTRAP" \
    --topic "$1" >"$2.tmp" 2>"$RAW/getoffsetshell.err" || { cat "$RAW/getoffsetshell.err" >&2; die "GetOffsetShell $1 failed"; }
  mv "$2.tmp" "$2"
}

set_delay() { # MS
  scripts/cluster.sh delay "$SLOW_BROKER" "$1" >/dev/null || die "scripts/cluster.sh delay $SLOW_BROKER $1 failed"
  if [ "$1" != 0 ]; then delay_set=1; else delay_set=0; fi
}

# ---------------------------------------------------------------------------------------------
# one run: PRODUCERS producers in parallel

[ -f "$RESULTS" ] && mv -f "$RESULTS" "$RESULTS.prev"
: >"$RESULTS"

run_case() { # PHASE ROUND SCENARIO CASE RECORDS_PER_PRODUCER THROUGHPUT_PER_PRODUCER
  local phase=$1 round=$2 scen=$3 case=$4 n=$5 tput=$6
  local t=${TOPIC[$scen/$case]} tag="$phase-$round-$scen-$case" bootstrap props=() i pids=() k
  case $case in
    direct-*) bootstrap=$RELAYED_BOOTSTRAP ;;
    kroute-strict) bootstrap=127.0.0.1:${KR_BOOT[strict]} ;;
    kroute-off) bootstrap=127.0.0.1:${KR_BOOT[off]} ;;
  esac
  [ "$case" = direct-noadaptive ] && props+=(partitioner.adaptive.partitioning.enable=false)
  props+=("${EXTRA_PROPS[@]}")
  for k in strict off; do scrape "$k" "$RAW/$tag.m0-$k"; done
  local t0 t1; t0=$(date +%s.%N)
  for ((i = 1; i <= PRODUCERS; i++)); do
    if [ "$CLIENT" = librdkafka ]; then
      "$RDKAFKA_PERF_BIN" "$bootstrap" "$t" "$n" "$RECORD_SIZE" "$tput" "${RDKAFKA_PROPS[@]}" \
        "client.id=kroute-bench-$case-$i" "${props[@]}" >"$RAW/$tag.p$i.log" 2>&1 &
    else
      "${PRODUCER_JVM[@]}" --topic "$t" --num-records "$n" --record-size "$RECORD_SIZE" --throughput "$tput" \
        --producer-props "bootstrap.servers=$bootstrap" acks=all "enable.idempotence=$IDEMPOTENCE" \
        "client.id=kroute-bench-$case-$i" "${props[@]}" >"$RAW/$tag.p$i.log" 2>&1 &
    fi
    pids+=($!)
  done
  local failed=0
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { failed=1; tail -n 20 "$RAW/$tag.p$((i + 1)).log" >&2; }; done
  t1=$(date +%s.%N)
  [ "$failed" = 0 ] || die "a producer failed ($tag): $RAW/$tag.p*.log"
  for k in strict off; do
    kill -0 "${KR_PID[$k]}" 2>/dev/null || die "kroute-$k exited (see $OUT/kroute-$k.log)"
    scrape "$k" "$RAW/$tag.m1-$k"
  done
  cp "$OFFS/$t" "$RAW/$tag.o0"
  read_offsets "$t" "$OFFS/$t"
  cp "$OFFS/$t" "$RAW/$tag.o1"
  python3 bench/routing_report.py record "$RESULTS" phase="$phase" round="$round" scenario="$scen" \
    case="$case" topic="$t" leaders="${LEADERS[$t]}" records="$n" producers="$PRODUCERS" \
    record_size="$RECORD_SIZE" offered="$tput" wall_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
    raw="$RAW/$tag" idempotent="$IDEMPOTENT" client="$CLIENT" || die "run $tag invalid (see above)"
}

run_phase() { # PHASE RECORDS_PER_PRODUCER SLOW_BROKER_RECORDS_PER_PRODUCER THROUGHPUT_PER_PRODUCER
  local phase=$1 n=$2 slow_n=$3 tput=$4 r i s sn
  for ((r = 1; r <= ROUNDS; r++)); do
    for s in "${SCENARIOS[@]}"; do
      sn=$n
      if [ "$s" = slow-broker ]; then set_delay "$SLOW_MS"; sn=$slow_n; fi
      for ((i = 0; i < ${#CASES[@]}; i++)); do
        run_case "$phase" "$r" "$s" "${CASES[$(((i + r - 1) % ${#CASES[@]}))]}" "$sn" "$tput"
      done
      if [ "$s" = slow-broker ]; then set_delay 0; fi
    done
  done
}

# ---------------------------------------------------------------------------------------------
# run

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bench_start=$SECONDS
if [ "$WARMUP_RECORDS" -gt 0 ]; then
  say "warm-up: one uncounted run per case on ${SCENARIOS[0]}, $WARMUP_RECORDS records per producer"
  [ "${SCENARIOS[0]}" = slow-broker ] && set_delay "$SLOW_MS"
  for c in "${CASES[@]}"; do run_case warmup warmup "${SCENARIOS[0]}" "$c" "$WARMUP_RECORDS" -1; done
  [ "${SCENARIOS[0]}" = slow-broker ] && set_delay 0
fi
if [[ " $PHASES " == *" max "* ]]; then
  say "phase max: $ROUNDS rounds x {${SCENARIOS[*]}} x {${CASES[*]}}, $PRODUCERS x $RECORDS records ($SLOW_RECORDS in slow-broker), --throughput -1"
  run_phase max "$RECORDS" "$SLOW_RECORDS" -1
fi
rate=
if [[ " $PHASES " == *" fixed "* ]]; then
  rate=$FIXED_RATE
  if [ "$rate" = auto ]; then
    rate=$(python3 bench/routing_report.py fixed-rate "$RESULTS" "$FIXED_FRACTION" "$PRODUCERS")
  fi
  say "phase fixed: $ROUNDS rounds, $rate records/s per producer (x $PRODUCERS) for ${FIXED_SECONDS}s each"
  run_phase fixed $((rate * FIXED_SECONDS)) $((rate * FIXED_SECONDS)) "$rate"
fi
check_leaders
say "leaders unchanged at the end (checked)"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cp "$RESULTS" "$OUT/results-$(date -u +%Y%m%dT%H%M%SZ).tsv"

# ---------------------------------------------------------------------------------------------
# report

if [ "$CLIENT" = librdkafka ]; then IDENTITY_PATHS=examples/rdkafka_perf.rs; fi
bench_identity bench/routing.sh
layouts=$(for s in "${SCENARIOS[@]}"; do printf '%s=%s;' "$s" "${LAYOUT[$s]}"; done)
BENCH_META=$(cat <<EOF
$(bench_machine_meta)
rounds=$ROUNDS
producers=$PRODUCERS
records=$RECORDS
slow_records=$SLOW_RECORDS
producer_props=${EXTRA_PROPS[*]}
record_size=$RECORD_SIZE
fixed_seconds=$FIXED_SECONDS
fixed_rate=$rate
fixed_rate_setting=$FIXED_RATE
fixed_fraction=$FIXED_FRACTION
warmup_records=$WARMUP_RECORDS
slow_broker=$SLOW_BROKER
slow_ms=$SLOW_MS
caps=$CAPS
layouts=$layouts
loadavg_before=$load_before
loadavg_after=$load_after
duration_s=$((SECONDS - bench_start))
topic_prefix=$TOPIC_PREFIX
idempotent=$IDEMPOTENT
baseline=$BASELINE
routing_extra=$(tr '\n' ';' <<<"${BENCH_ROUTING_EXTRA:-}")
$(if [ "$CLIENT" = librdkafka ]; then printf 'client=%s\nclient_version=%s\nclient_props=%s\n' "$CLIENT" "$CLIENT_VERSION" "${RDKAFKA_PROPS[*]}"; fi)
EOF
)
export BENCH_META
python3 bench/routing_report.py report "$RESULTS" "$DOCS" "$CHART"
