#!/usr/bin/env bash
# How much of real producers' keyless traffic kroute's routing can move (issue 27, part 1): each
# test client with its defaults, with compression on, and with every other record keyed, through
# one kroute sidecar and straight to the brokers, with broker 2 answering late.
#
#   bench/coverage.sh                      every client x mode (4.5-7.5 minutes on 2 cores)
#   BENCH_CLIENTS=librdkafka BENCH_MODES=default BENCH_DOCS=none bench/coverage.sh    # smoke
#
# Clients (their own defaults unless the mode changes them):
#   librdkafka    examples/rdkafka_perf (not idempotent by default); compressed: lz4
#   java          tests/java KrouteClient produce (Kafka 4.1 client: idempotent by default); lz4
#   franz-go      tests/go/franz (idempotent, snappy by default); compressed: lz4
#   kafka-python  tests/python/producer.py (3.x: idempotent by default); compressed: gzip
# Modes: default; compressed; mixed (records 0, 2, 4, ... keyed, the others keyless, so batches mix
# them); sasl (the client authenticates itself as alice, SASL PLAIN, through a kroute in
# passthrough mode in front of the cluster's SASL_SSL listener, kroute's own identity SCRAM user
# kroute; direct: the cluster's SASL_PLAINTEXT listener). sasl needs a cluster started with
# --secured.
#
# Each cell: a fresh topic of 6 partitions, 2 led by each broker (RF 3), BENCH_RECORDS records of
# 1 KiB at BENCH_RATE/s; broker 2 delayed by BENCH_SLOW_MS (scripts/cluster.sh delay) for the
# whole run. Through kroute, a fresh sidecar (strict-cost on the topic) whose counters say what
# routing did with the bytes: moved (kroute_moved_bytes_total), kept by reason
# (kroute_kept_bytes_total). Straight to the brokers: the same client on its own fresh topic.
# Broker 2's share is counted on the brokers (end offsets per leader, records) in both cases.
#
# Keyless bytes: all the Produce bytes kroute saw (moved + kept) but those it kept as keyed
# (batches whose records all have keys, and the keyed parts of divided batches; a batch mixing
# keyed and keyless records that is kept whole counts under the reason it was kept, e.g.
# unsplittable). Eligible = moved + kept because no broker was better (no_better_broker) or no
# partition was free (no_partition); the rest was kept as idempotent (a producer kroute does not
# own), unsplittable, no_client_connection, uninspectable or malformed.
#
# Output: target/bench-coverage/ (results.tsv, raw/), and the table in docs/benchmarks.md
# between the bench-coverage markers (BENCH_DOCS=none: not written).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh

BENCH_CLIENTS=${BENCH_CLIENTS:-librdkafka java franz-go kafka-python}
BENCH_MODES=${BENCH_MODES:-default compressed mixed sasl}
BENCH_RECORDS=${BENCH_RECORDS:-6000}
BENCH_RATE=${BENCH_RATE:-2000}
BENCH_SLOW_MS=${BENCH_SLOW_MS:-30}
BENCH_PORT_BASE=${BENCH_PORT_BASE:-26300}
BENCH_DOCS=${BENCH_DOCS:-docs/benchmarks.md}
export KROUTE_CLUSTER_PORT_OFFSET=${KROUTE_CLUSTER_PORT_OFFSET:-0}
export KROUTE_CLUSTER_DIR=${KROUTE_CLUSTER_DIR:-$PWD/target/cluster}   # the tests' cluster: not while they run
OUT=target/bench-coverage
RAW=$OUT/raw
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
BUILD=1
KR_PIDS=()

say() { echo "coverage.sh: $*" >&2; }
die() { say "$*"; exit 1; }

cleanup() {
  local pid
  for pid in "${KR_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  scripts/cluster.sh delay 2 0 >/dev/null 2>&1 || true
}
trap cleanup EXIT

rm -rf "$OUT"
mkdir -p "$RAW"
started=$(date +%s)
build_kroute_and_rdkafka_perf
tests/java/build.sh >/dev/null || die "building the Java test client failed"
tests/go/build.sh || die "building the Go test client failed"
tests/python/setup.sh || die "setting up the Python test client failed"
PYTHON=target/python/bin/python3
relayed_cluster_up
bench_identity "bench/coverage.sh"
bench_machine_meta >"$OUT/meta"
scripts/cluster.sh delay 2 "$BENCH_SLOW_MS" >/dev/null

# The secured listeners (scripts/cluster.sh secured: "key=value" lines), empty if not secured.
SECURED=$(scripts/cluster.sh secured 2>/dev/null || true)
secured() { sed -n "s/^$1=//p" <<<"$SECURED"; }
PLAIN_JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";'
echo kroute-secret >"$RAW/kroute.password"
SASL_TOML="[upstream.tls]
ca_file = \"$(secured ca)\"

[upstream.sasl]
mode = \"passthrough\"
mechanism = \"SCRAM-SHA-256\"
username = \"kroute\"
password_file = \"$PWD/$RAW/kroute.password\""

# produce CLIENT MODE BOOTSTRAP TOPIC LOG: BENCH_RECORDS records, paced, the client's defaults
# changed only by MODE.
produce() {
  local client=$1 mode=$2 boot=$3 topic=$4 log=$5 extra=()
  case $client in
  librdkafka)
    case $mode in
    compressed) extra=(compression.codec=lz4) ;;
    mixed) extra=(kroute.keys=13 kroute.key_every=2) ;;
    sasl) extra=(security.protocol=SASL_PLAINTEXT sasl.mechanism=PLAIN sasl.username=alice sasl.password=alice-secret) ;;
    esac
    target/release/examples/rdkafka_perf "$boot" "$topic" "$BENCH_RECORDS" 1024 "$BENCH_RATE" \
      acks=all linger.ms=5 "${extra[@]}" ;;
  java)
    case $mode in
    compressed) extra=(--compression lz4) ;;
    mixed) extra=(--key-every 2) ;;
    sasl) extra=(--client-config security.protocol=SASL_PLAINTEXT --client-config sasl.mechanism=PLAIN
      --client-config "sasl.jaas.config=$PLAIN_JAAS") ;;
    esac
    tests/java/run.sh produce --bootstrap "$boot" --topic "$topic" --count "$BENCH_RECORDS" \
      --record-size 1024 --per-second "$BENCH_RATE" "${extra[@]}" ;;
  franz-go)
    case $mode in
    compressed) extra=(--compression lz4) ;;
    mixed) extra=(--key-every 2) ;;
    sasl) extra=(--sasl-plain alice:alice-secret) ;;
    esac
    target/go/franz-producer --bootstrap "$boot" --topic "$topic" --count "$BENCH_RECORDS" \
      --rate "$BENCH_RATE" --size 1024 "${extra[@]}" ;;
  kafka-python)
    case $mode in
    compressed) extra=(--compression gzip) ;;
    mixed) extra=(--key-every 2) ;;
    sasl) extra=(--sasl PLAIN:alice:alice-secret) ;;
    esac
    "$PYTHON" tests/python/producer.py --bootstrap "$boot" --topic "$topic" --count "$BENCH_RECORDS" \
      --rate "$BENCH_RATE" --size 1024 "${extra[@]}" ;;
  *) die "unknown client $client" ;;
  esac >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$client ($mode) failed: $log"; }
}

# offsets TOPIC FILE: "partition end_offset" lines, from the brokers.
offsets() {
  "$PYTHON" - "$BOOT" "$1" >"$2" <<'PY'
import sys
from kafka import KafkaConsumer, TopicPartition
consumer = KafkaConsumer(bootstrap_servers=sys.argv[1].split(","))
parts = [TopicPartition(sys.argv[2], p) for p in sorted(consumer.partitions_for_topic(sys.argv[2]))]
for tp, end in sorted(consumer.end_offsets(parts).items(), key=lambda kv: kv[0].partition):
    print(tp.partition, end)
PY
}

read -r ASSIGNMENT LEADERS < <(leader_assignment 2 2 2 | paste -sd' ')
printf 'client\tmode\tcase\ttopic\n' >"$OUT/cells.tsv"
cell=0
for client in $BENCH_CLIENTS; do
  for mode in $BENCH_MODES; do
    if [ "$mode" = sasl ] && [ -z "$SECURED" ]; then
      say "$client, sasl: skipped (the cluster is not secured)"
      continue
    fi
    for case in direct kroute; do
      cell=$((cell + 1))
      topic=bench-cov-$client-$mode-$case-$$-$cell
      scripts/cluster.sh create-topic "$topic" --replica-assignment "$ASSIGNMENT" \
        --config min.insync.replicas=2 >/dev/null || die "cannot create $topic"
      stem=$client-$mode-$case
      boot=$BOOT
      [ "$mode" = sasl ] && boot=$(secured sasl_plaintext)
      if [ "$case" = kroute ] && [ "$mode" = sasl ]; then
        start_sidecar_kroute "$stem" "$BENCH_PORT_BASE" "$topic" BENCH_PORT_BASE "$client $mode" \
          "$(secured sasl_ssl)" "$SASL_TOML"
      elif [ "$case" = kroute ]; then
        start_sidecar_kroute "$stem" "$BENCH_PORT_BASE" "$topic" BENCH_PORT_BASE "$client $mode"
      fi
      if [ "$case" = kroute ]; then
        wait_sidecar_ready "$stem" "$BENCH_PORT_BASE"
        boot=127.0.0.1:$((BENCH_PORT_BASE + 4))
      fi
      say "$client, $mode, $case"
      produce "$client" "$mode" "$boot" "$topic" "$RAW/$stem.out"
      offsets "$topic" "$RAW/$stem.offsets"
      if [ "$case" = kroute ]; then
        curl -fsS --max-time 5 "http://127.0.0.1:$((BENCH_PORT_BASE + 5))/metrics" >"$RAW/$stem.metrics" ||
          die "cannot read $stem's metrics"
        kill "${KR_PIDS[-1]}"
        wait "${KR_PIDS[-1]}" 2>/dev/null || true
        unset 'KR_PIDS[-1]'
      fi
      printf '%s\t%s\t%s\t%s\n' "$client" "$mode" "$case" "$topic" >>"$OUT/cells.tsv"
    done
  done
done
scripts/cluster.sh delay 2 0 >/dev/null

echo "elapsed=$(($(date +%s) - started))" >>"$OUT/meta"
python3 bench/coverage_report.py "$OUT" "$LEADERS" "$BENCH_RECORDS" "$BENCH_DOCS"
