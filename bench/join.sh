#!/usr/bin/env bash
# Joining compressed batches (issue 27, part 3): what it gains and what it costs. Three idempotent
# producers that compress, franz-go (snappy, its default), librdkafka (asked to be idempotent,
# lz4) and the Java client (its defaults, lz4: 16 KiB batches, the small batches joining is
# for), each at full speed through one kroute sidecar with broker 2 answering late, with
# `routing.join_compressed` on and off, rounds alternating. Per run: throughput (records/s over
# the client's run), kroute's CPU seconds per GB produced (/proc/<pid>/stat), the batches joined
# (kroute_idempotent_batches_total{outcome="joined"}) and a check that every record reached the
# brokers (their end offsets). Then examples/join_cost: join()'s CPU per MB for each codec.
#
#   bench/join.sh                                   (about 5 minutes on 2 cores)
#   BENCH_ROUNDS=1 BENCH_DOCS=none bench/join.sh    # smoke
#
# Output: target/bench-join/ (results.tsv, raw/), and the tables in docs/benchmarks.md between
# the bench-join markers (BENCH_DOCS=none: not written).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh

BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_RECORDS=${BENCH_RECORDS:-200000}
BENCH_SLOW_MS=${BENCH_SLOW_MS:-30}
BENCH_PORT_BASE=${BENCH_PORT_BASE:-26400}
BENCH_DOCS=${BENCH_DOCS:-docs/benchmarks.md}
export KROUTE_CLUSTER_PORT_OFFSET=${KROUTE_CLUSTER_PORT_OFFSET:-0}
export KROUTE_CLUSTER_DIR=${KROUTE_CLUSTER_DIR:-$PWD/target/cluster}   # the tests' cluster: not while they run
OUT=target/bench-join
RAW=$OUT/raw
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
BUILD=1
KR_PIDS=()

say() { echo "join.sh: $*" >&2; }
die() { say "$*"; exit 1; }

cleanup() {
  local pid
  for pid in "${KR_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  scripts/cluster.sh delay 2 0 >/dev/null 2>&1 || true
}
trap cleanup EXIT

rm -rf "$OUT"
mkdir -p "$RAW"
build_kroute_and_rdkafka_perf
cargo build --release --example join_cost 2>&1 | tail -n 1 >&2
tests/java/build.sh >/dev/null || die "building the Java test client failed"
tests/go/build.sh || die "building the Go test client failed"
tests/python/setup.sh || die "setting up the Python test client failed"
PYTHON=target/python/bin/python3
relayed_cluster_up
bench_identity "bench/join.sh"
bench_machine_meta >"$OUT/meta"
scripts/cluster.sh delay 2 "$BENCH_SLOW_MS" >/dev/null
read -r ASSIGNMENT _ < <(leader_assignment 2 2 2 | paste -sd' ')

# produce CLIENT BOOTSTRAP TOPIC LOG: BENCH_RECORDS records of 1 KiB as fast as the client goes.
produce() {
  case $1 in
  franz-go) target/go/franz-producer --bootstrap "$2" --topic "$3" --count "$BENCH_RECORDS" --size 1024 ;;
  librdkafka) target/release/examples/rdkafka_perf "$2" "$3" "$BENCH_RECORDS" 1024 -1 \
    acks=all linger.ms=5 compression.codec=lz4 enable.idempotence=true ;;
  java) tests/java/run.sh produce --bootstrap "$2" --topic "$3" --count "$BENCH_RECORDS" \
    --record-size 1024 --compression lz4 ;;
  esac >"$4" 2>&1 || { tail -n 20 "$4" >&2; die "$1 failed: $4"; }
}

# cpu_seconds PID: user + system CPU of a process so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# records_in TOPIC: records on the brokers (sum of end offsets).
records_in() {
  "$PYTHON" - "$BOOT" "$1" <<'PY'
import sys
from kafka import KafkaConsumer, TopicPartition
consumer = KafkaConsumer(bootstrap_servers=sys.argv[1].split(","))
parts = [TopicPartition(sys.argv[2], p) for p in consumer.partitions_for_topic(sys.argv[2])]
print(sum(consumer.end_offsets(parts).values()))
PY
}

printf 'client\tjoin_compressed\tround\trecords_per_s\tcpu_s_per_gb\tjoined\trenumbered\n' >"$OUT/results.tsv"
run=0
for round in $(seq "$BENCH_ROUNDS"); do
  for client in franz-go librdkafka java; do
    # Alternate which setting goes first, so drift over the run hits both alike.
    settings="true false"
    [ $((round % 2)) = 0 ] && settings="false true"
    for join in $settings; do
      run=$((run + 1))
      topic=bench-join-$client-$join-$$-$run
      stem=$client-$join-$round
      scripts/cluster.sh create-topic "$topic" --replica-assignment "$ASSIGNMENT" \
        --config min.insync.replicas=2 >/dev/null || die "cannot create $topic"
      start_sidecar_kroute "$stem" "$BENCH_PORT_BASE" "$topic" BENCH_PORT_BASE "$stem" "$BOOT" "" \
        "join_compressed = $join"
      wait_sidecar_ready "$stem" "$BENCH_PORT_BASE"
      pid=${KR_PIDS[-1]}
      say "round $round: $client, join_compressed = $join"
      cpu_before=$(cpu_seconds "$pid")
      t0=$(date +%s.%N)
      produce "$client" "127.0.0.1:$((BENCH_PORT_BASE + 4))" "$topic" "$RAW/$stem.out"
      t1=$(date +%s.%N)
      cpu_after=$(cpu_seconds "$pid")
      curl -fsS --max-time 5 "http://127.0.0.1:$((BENCH_PORT_BASE + 5))/metrics" >"$RAW/$stem.metrics" ||
        die "cannot read $stem's metrics"
      kill "$pid"
      wait "$pid" 2>/dev/null || true
      unset 'KR_PIDS[-1]'
      got=$(records_in "$topic")
      [ "$got" = "$BENCH_RECORDS" ] || die "$stem: the brokers hold $got records, not $BENCH_RECORDS"
      outcome() { awk -v o="outcome=\"$1\"" 'index($0, "kroute_idempotent_batches_total{") == 1 && index($0, o) { s += $NF } END { print s + 0 }' "$RAW/$stem.metrics"; }
      awk -v c="$client" -v j="$join" -v r="$round" -v n="$BENCH_RECORDS" -v t0="$t0" -v t1="$t1" \
        -v cpu="$(awk -v a="$cpu_after" -v b="$cpu_before" 'BEGIN { print a - b }')" \
        -v joined="$(outcome joined)" -v renumbered="$(outcome renumbered)" \
        'BEGIN { printf "%s\t%s\t%s\t%.0f\t%.2f\t%d\t%d\n", c, j, r, n / (t1 - t0), cpu / (n * 1024 / 1e9), joined, renumbered }' \
        >>"$OUT/results.tsv"
      tail -n 1 "$OUT/results.tsv" >&2
    done
  done
done
scripts/cluster.sh delay 2 0 >/dev/null
target/release/examples/join_cost >"$OUT/join_cost.tsv"
cat "$OUT/join_cost.tsv" >&2
python3 bench/join_report.py "$OUT" "$BENCH_DOCS"
