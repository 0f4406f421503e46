#!/usr/bin/env bash
# The main job, end to end on this machine: a local 3-broker Apache Kafka cluster, kroute in
# front of it (proxy.toml), the real Java producer sending through kroute, a consumer reading
# everything back through kroute, and a short report that proves the traffic went through kroute.
#
#   scripts/demo.sh [RECORDS]      (default 200000 records of 1 KiB, acks=all)
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-200000}
work=target/demo; mkdir -p "$work"

cargo build --release --quiet
started_here=0
if ! scripts/cluster.sh status >/dev/null 2>&1; then
  scripts/cluster.sh stop >/dev/null 2>&1 || true
  scripts/cluster.sh start >/dev/null
  started_here=1
fi
kroute_pid=
cleanup() {
  [ -n "$kroute_pid" ] && kill "$kroute_pid" 2>/dev/null && wait "$kroute_pid" 2>/dev/null
  [ "$started_here" = 1 ] && scripts/cluster.sh stop >/dev/null 2>&1
  true
}
trap cleanup EXIT

./target/release/kroute --config proxy.toml 2>"$work/kroute.log" &
kroute_pid=$!
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:9644/ready >/dev/null 2>&1 && break
  kill -0 "$kroute_pid" 2>/dev/null || { cat "$work/kroute.log"; exit 1; }
  sleep 0.1
done
curl -sf http://127.0.0.1:9644/ready >/dev/null || { echo "kroute never became ready"; cat "$work/kroute.log"; exit 1; }

topic=demo-$(date +%s)
scripts/cluster.sh create-topic "$topic" --partitions 6 --replication-factor 3 --config min.insync.replicas=2 >/dev/null
metric() { curl -s http://127.0.0.1:9644/metrics | awk -v m="$1" -v l="$2" 'index($0, m) == 1 && index($0, l) { s += $NF } END { printf "%.0f", s }'; }

echo "== producing $records x 1 KiB records, acks=all, through kroute (bootstrap 127.0.0.1:9092)"
scripts/cluster.sh tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" \
  --num-records "$records" --record-size 1024 --throughput -1 \
  --producer-props bootstrap.servers=127.0.0.1:9092 acks=all linger.ms=5 | tail -1 | tee "$work/producer.txt"

echo "== consuming them back through kroute"
scripts/cluster.sh tool org.apache.kafka.tools.ConsumerPerformance --bootstrap-server 127.0.0.1:9092 \
  --topic "$topic" --messages "$records" --timeout 60000 --hide-header | tee "$work/consumer.txt"
consumed=$(awk -F', *' 'NF > 5 { print $5 }' "$work/consumer.txt" | tail -1)

echo
echo "== report"
echo "producer (through kroute): $(cat "$work/producer.txt")"
echo "records consumed back through kroute: ${consumed:-?} of $records"
echo "kroute Produce requests: $(metric kroute_requests_total 'api="Produce"'), bytes in: $(metric kroute_request_bytes_total 'api="Produce"')"
echo "kroute Fetch requests:   $(metric kroute_requests_total 'api="Fetch"'), bytes out: $(metric kroute_response_bytes_total 'api="Fetch"')"
echo "kroute Metadata requests rewritten: $(metric kroute_requests_total 'api="Metadata"')"
echo "idempotent producer batches renumbered by kroute: $(metric kroute_idempotent_batches_total 'outcome="renumbered"'), moved to another partition: $(metric kroute_batches_moved_total 'topic='), sequence errors passed to the client: $(metric kroute_idempotent_batches_total 'outcome="sequence_error_passed"')"
echo "Produce bytes per broker: 1: $(metric kroute_upstream_produce_bytes_total 'broker="1"'), 2: $(metric kroute_upstream_produce_bytes_total 'broker="2"'), 3: $(metric kroute_upstream_produce_bytes_total 'broker="3"')"
for b in 1 2 3; do
  n=$(metric kroute_upstream_request_duration_seconds_count "broker=\"$b\",api=\"Produce\"")
  s=$(curl -s http://127.0.0.1:9644/metrics | awk -v l="broker=\"$b\",api=\"Produce\"" 'index($0, "kroute_upstream_request_duration_seconds_sum") == 1 && index($0, l) { print $NF }')
  avg=$(awk -v n="$n" -v s="${s:-0}" 'BEGIN { if (n > 0) printf "%.2f", 1000 * s / n; else print "-" }')
  echo "broker $b: $n Produce round trips, avg upstream latency ${avg} ms"
done
echo "kroute warnings/errors: $(grep -cE ' (WARN|ERROR) ' "$work/kroute.log" || true) (log: $work/kroute.log)"
[ "${consumed:-0}" -ge "$records" ] || { echo "FAILED: not every record came back"; exit 1; }
