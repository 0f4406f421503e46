#!/usr/bin/env bash
# Fuzz seeds from real traffic (docs/hardening.md, "Fuzzing" / "Seeds"): records, with tcpdump on
# the loopback interface, the Java client, librdkafka, franz-go and kafka-python talking straight
# to the running test cluster (scripts/cluster.sh start), then fuzz/capture/convert.py turns the
# captured requests and the brokers' responses into fuzz/corpus/<target>/capture-* (the old
# capture-* files are replaced; the seed-* files of fuzz/examples/seeds.rs are left alone).
#
#   scripts/capture-seeds.sh              capture + convert
#   scripts/capture-seeds.sh --convert P  convert an earlier capture (pcap file P) only
#
# Environment: CAPTURE_COUNT records per producer run (default 10); CAPTURE_IFACE (default lo);
# CAPTURE_KROUTE_PORT (default 18892: kroute's bootstrap; +7 admin, +9..+11 brokers 1-3);
# KROUTE_BIN (default target/release/kroute; the Java-through-kroute runs are skipped without it).
#
# Every capture client's client.id starts with "capture-<client>" (capture-java, capture-
# librdkafka, capture-franz-go, capture-kafka-python); the converter keeps only connections
# carrying such ids, so other traffic on the shared cluster is dropped. The clients: producers in
# every codec (none, gzip, snappy, lz4, zstd), idempotent and plain, keyed and keyless,
# acks all/1/0, one transactional (Java); an admin client each (Metadata, DescribeCluster); a
# consumer group each (FindCoordinator, JoinGroup/SyncGroup or the KIP-848 heartbeat for Java's
# second group, Fetch, OffsetCommit); Kafka's MetadataQuorumCommand (DescribeQuorum). All into a
# topic of its own (capture-seeds-<pid>, 3 partitions, replication 3), deleted at the end. Each
# run is a few seconds.
#
# Needs: root (tcpdump; installed with apt-get when missing), java/javac (tests/java), go (the
# franz-go client, fuzz/capture/franz), python3 (a venv in target/capture-venv with
# fuzz/capture/requirements.txt: kafka-python, confluent-kafka = librdkafka, dpkt, codecs).
# Outputs: target/capture/traffic.pcap, target/capture/summary.txt (also copied to
# fuzz/capture/last-capture.txt).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
OUT=$REPO/target/capture
VENV=$REPO/target/capture-venv
PCAP=$OUT/traffic.pcap
COUNT=${CAPTURE_COUNT:-10}
IFACE=${CAPTURE_IFACE:-lo}
mkdir -p "$OUT"

log() { echo "capture-seeds: $*" >&2; }

setup_venv() {
  local stamp=$VENV/.requirements
  if [ -x "$VENV/bin/python3" ] && cmp -s fuzz/capture/requirements.txt "$stamp"; then return; fi
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check -r fuzz/capture/requirements.txt
  cp fuzz/capture/requirements.txt "$stamp"
}

convert() {
  local bootstrap=$1 pcap=$2 kroute=${3:-127.0.0.1:18892,127.0.0.1:18901,127.0.0.1:18902,127.0.0.1:18903}
  "$VENV/bin/python3" fuzz/capture/convert.py --pcap "$pcap" --bootstrap "$bootstrap" --kroute "$kroute" \
    --corpus "$REPO/fuzz/corpus" --summary "$OUT/summary.txt"
  cp "$OUT/summary.txt" fuzz/capture/last-capture.txt
  log "summary: fuzz/capture/last-capture.txt"
}

setup_venv
BOOTSTRAP=$(scripts/cluster.sh bootstrap)
if [ "${1:-}" = "--convert" ]; then
  convert "$BOOTSTRAP" "${2:?--convert needs a pcap file}"
  exit 0
fi

# Other sessions' benchmarks must not share the machine with these clients.
while [ -e /tmp/kroute-bench-running ]; do log "waiting for /tmp/kroute-bench-running"; sleep 20; done

if ! command -v tcpdump >/dev/null; then
  log "installing tcpdump"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >/dev/null
fi
scripts/cluster.sh status >/dev/null || { log "the cluster is not running (scripts/cluster.sh start)"; exit 1; }

log "building the clients"
JAVA_DIR=$(tests/java/build.sh)
(cd fuzz/capture/franz && go build -o "$OUT/capture-franz" .)
JAVA_CLIENT=("${JAVA:-java}" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$(cat "$JAVA_DIR/classpath")" KrouteClient)

TOPIC=capture-seeds-$$
TCPDUMP_PID=
cleanup() {
  if [ -n "$KROUTE_PID" ] && kill -0 "$KROUTE_PID" 2>/dev/null; then
    kill "$KROUTE_PID"; wait "$KROUTE_PID" 2>/dev/null || true
  fi
  if [ -n "$TCPDUMP_PID" ] && kill -0 "$TCPDUMP_PID" 2>/dev/null; then
    kill -INT "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2>/dev/null || true
  fi
  scripts/cluster.sh delete-topic "$TOPIC" >/dev/null 2>&1 && log "deleted topic $TOPIC" || true
}
trap cleanup EXIT
scripts/cluster.sh create-topic "$TOPIC" --partitions 3 --replication-factor 3 >/dev/null
log "topic $TOPIC created"

# kroute (target/release/kroute, when built) on ports of its own: two Java producers go through
# it, so that they send Produce v12, the newest kroute offers, as Java clients behind kroute do
# (to a 4.1 broker they send v13, which produce_body does not read). Only those clients' requests
# are kept (the converter's --kroute): kroute's answers and its own upstream traffic are kroute's.
KROUTE_BIN=${KROUTE_BIN:-$REPO/target/release/kroute}
KROUTE_PORT=${CAPTURE_KROUTE_PORT:-18892}   # bootstrap; brokers at +8+N (18901..18903), admin +7
KROUTE_PID=
KROUTE_ADDR=
if [ -x "$KROUTE_BIN" ] && ! ss -ltn | grep -qE ":($KROUTE_PORT|$((KROUTE_PORT + 7))|$((KROUTE_PORT + 9))|$((KROUTE_PORT + 10))|$((KROUTE_PORT + 11))) "; then
  (cd "$OUT" && exec "$KROUTE_BIN" --bootstrap-servers "$BOOTSTRAP" --bind-host 127.0.0.1 \
    --advertised-host 127.0.0.1 --bootstrap-port "$KROUTE_PORT" --broker-port-base $((KROUTE_PORT + 8)) \
    --admin-listen 127.0.0.1:$((KROUTE_PORT + 7))) >"$OUT/kroute.log" 2>&1 &
  KROUTE_PID=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$((KROUTE_PORT + 7))/ready" >/dev/null 2>&1 && { KROUTE_ADDR=127.0.0.1:$KROUTE_PORT; break; }
    sleep 0.2
  done
  [ -n "$KROUTE_ADDR" ] && log "kroute at $KROUTE_ADDR" || log "kroute did not get ready (see $OUT/kroute.log); no Java run through it"
else
  log "no kroute run ($KROUTE_BIN missing or port $KROUTE_PORT busy)"
fi
KROUTE_PORTS=$KROUTE_ADDR
[ -z "$KROUTE_ADDR" ] || KROUTE_PORTS="$KROUTE_ADDR,127.0.0.1:$((KROUTE_PORT + 9)),127.0.0.1:$((KROUTE_PORT + 10)),127.0.0.1:$((KROUTE_PORT + 11))"

# Only the ports the clients dial (the bootstrap's, which the brokers advertise): in relayed mode
# the relays' own connections to the brokers carry the same bytes again.
filter=$(echo "$BOOTSTRAP${KROUTE_PORTS:+,$KROUTE_PORTS}" | tr ',' '\n' | sed 's/.*://; s/^/tcp port /' | paste -sd' ' | sed 's/ tcp/ or tcp/g')
rm -f "$PCAP"
tcpdump -i "$IFACE" -s 0 -B 32768 -U -w "$PCAP" "$filter" 2>"$OUT/tcpdump.log" &
TCPDUMP_PID=$!
for _ in $(seq 50); do grep -q "listening on" "$OUT/tcpdump.log" 2>/dev/null && break; sleep 0.1; done
log "tcpdump on $IFACE: $filter"

failed=0
run() { # NAME CMD...: a client run of at most 60 s; a failure is reported, not fatal
  local name=$1; shift
  if timeout 60 "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; then
    log "$name: $(tail -1 "$OUT/$name.out")"
  else
    log "$name FAILED (rc $?): $(tail -2 "$OUT/$name.err" | tr '\n' ' ')"
    failed=$((failed + 1))
  fi
}

# Java (kafka-clients of the cluster's version): 5 codecs, idempotent and not, keyed and not,
# acks all/1, one transactional producer.
JP=("${JAVA_CLIENT[@]}" produce --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --count "$COUNT" --record-size 60 --linger-ms 5)
run java-none    "${JP[@]}" --compression none   --idempotent true  --client-config client.id=capture-java-none
run java-gzip    "${JP[@]}" --compression gzip   --idempotent false --keyed --client-config client.id=capture-java-gzip
run java-snappy  "${JP[@]}" --compression snappy --idempotent true  --keyed --client-config client.id=capture-java-snappy
run java-lz4     "${JP[@]}" --compression lz4    --acks 1 --client-config client.id=capture-java-lz4
run java-zstd    "${JP[@]}" --compression zstd   --transactional-id capture-java-txn --keyed --client-config client.id=capture-java-zstd-txn
if [ -n "$KROUTE_ADDR" ]; then
  JK=("${JAVA_CLIENT[@]}" produce --bootstrap "$KROUTE_ADDR" --topic "$TOPIC" --count "$COUNT" --record-size 60 --linger-ms 5)
  run java-kroute-snappy "${JK[@]}" --compression snappy --idempotent true --keyed --client-config client.id=capture-java-via-kroute-snappy
  run java-kroute-zstd   "${JK[@]}" --compression zstd --acks 1 --client-config client.id=capture-java-via-kroute-zstd
  kill "$KROUTE_PID" 2>/dev/null; wait "$KROUTE_PID" 2>/dev/null || true
  KROUTE_PID=
fi
# franz-go: the same matrix; three runs with Produce capped at v12, what kroute offers clients
# (the brokers take v13, which Java 4.1 and franz-go then send).
FG=("$OUT/capture-franz" --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --count "$COUNT")
run franz-none   "${FG[@]}" --codec none   --client-id capture-franz-go-none
run franz-gzip   "${FG[@]}" --codec gzip   --idempotent=false --keyed --max-produce-version 12 --client-id capture-franz-go-gzip
run franz-snappy "${FG[@]}" --codec snappy --keyed --max-produce-version 12 --client-id capture-franz-go-snappy
run franz-lz4    "${FG[@]}" --codec lz4    --idempotent=false --client-id capture-franz-go-lz4
run franz-zstd   "${FG[@]}" --codec zstd   --keyed --max-produce-version 12 --client-id capture-franz-go-zstd
# kafka-python and librdkafka (confluent-kafka): producers, admin, a consumer group each.
run kafka-python "$VENV/bin/python3" fuzz/capture/clients.py kafka-python --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --count "$COUNT"
run librdkafka   "$VENV/bin/python3" fuzz/capture/clients.py librdkafka --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --count "$COUNT"
# The repo's own librdkafka build (rdkafka crate), when it is built: keyless, idempotent, lz4.
perf=$REPO/target/release/examples/rdkafka_perf
if [ -x "$perf" ]; then
  run rdkafka-perf "$perf" "$BOOTSTRAP" "$TOPIC" "$COUNT" 60 -1 client.id=capture-librdkafka-rs \
    enable.idempotence=true compression.codec=lz4 linger.ms=5
fi
# Consumer groups and admin traffic.
run java-admin    "${JAVA_CLIENT[@]}" admin-describe --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --client-config client.id=capture-java-admin
run java-classic  "${JAVA_CLIENT[@]}" consume --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --expect "$COUNT" --timeout-ms 20000 \
  --group capture-java-group --group-protocol classic --client-config client.id=capture-java-consumer
run java-consumer "${JAVA_CLIENT[@]}" consume --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --expect "$COUNT" --timeout-ms 20000 \
  --group capture-java-group848 --group-protocol consumer --client-config client.id=capture-java-consumer848
printf 'client.id=capture-java-quorum\n' >"$OUT/quorum.properties"
run java-quorum   scripts/cluster.sh tool org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$BOOTSTRAP" \
  --command-config "$OUT/quorum.properties" describe --status
run franz-group   "${FG[@]}" --group capture-franz-go-group --client-id capture-franz-go-consumer

sleep 1
kill -INT "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2>/dev/null || true
TCPDUMP_PID=
log "tcpdump: $(grep -E 'captured|dropped' "$OUT/tcpdump.log" | tr '\n' ' ')"
convert "$BOOTSTRAP" "$PCAP" "$KROUTE_PORTS"
[ "$failed" -eq 0 ] || log "$failed client run(s) failed (see $OUT/*.err)"
