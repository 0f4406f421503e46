#!/usr/bin/env bash
# Pass-through cost of kroute, side by side in one run on the local cluster (scripts/cluster.sh).
#
#   bench/passthrough.sh            full run (defaults below, ~10 minutes on 2 cores)
#   BENCH_ROUNDS=1 BENCH_RECORDS=20000 BENCH_FIXED_SECONDS=5 BENCH_DOCS=none bench/passthrough.sh
#                                   smoke run
#   BENCH_SECURITY=tls bench/passthrough.sh       the same with TLS on both sides
#   BENCH_SECURITY=sasl_ssl bench/passthrough.sh  the same with SASL_SSL (SCRAM-SHA-512 as alice)
#
# Kafka's Java producer perf test (org.apache.kafka.tools.ProducerPerformance, 1 KiB records,
# acks=all) produces to one fresh topic (6 partitions, RF 3, min.insync.replicas=2) three ways:
#   direct  producer -> brokers 127.0.0.1:19092-19094
#   kroute  producer -> kroute (bootstrap 127.0.0.1:9192, brokers 9200+id) -> brokers
#   relay   producer -> socat (plain TCP relay, one per broker) -> brokers: the L4 floor
# in two phases: max throughput (--throughput -1) and a fixed offered load (--throughput N).
# Every round runs each case once, in an order rotated per round, so drift hits all cases.
# A third phase, fetch (BENCH_PHASES="max fetch"), reads back what the max phase wrote: Kafka's
# Java consumer perf test (org.apache.kafka.tools.ConsumerPerformance, a fresh group each run,
# from the earliest offset) reads BENCH_FETCH_RECORDS records the same three ways, and kroute's
# CPU seconds are reported per GB of Fetch answers it forwarded (issue 28, part 1).
#
# Secured variants (BENCH_SECURITY): direct and kroute only; the relay case (and its namespace)
# is skipped, the L4-floor comparison is the unsecured run's. The cluster must run as after
# `scripts/cluster.sh start --direct --secured`; if it runs otherwise, the bench stops it,
# starts it so, and at the end stops it and starts it again the way it ran before (with fresh
# data: stop removes topics and delays); if none ran, it stops the one it started.
#   tls       direct  producer (security.protocol=SSL, PEM trust store = the test CA) -> the
#                     brokers' SSL listeners 127.0.0.1:19301-19303
#             kroute  the same producer config -> kroute's TLS listener ([listen.tls]: the
#                     brokers' certificate, SAN IP:127.0.0.1) -> kroute ([upstream.tls] ca_file
#                     = the test CA) -> the SSL listeners
#   sasl_ssl  direct  producer (SASL_SSL, SCRAM-SHA-512 as alice) -> the SASL_SSL listeners
#                     127.0.0.1:19331-19333
#             kroute  the same producer config -> kroute's TLS listener -> kroute in
#                     [upstream.sasl] mode = "passthrough" without credentials of its own (the
#                     client's SASL exchange goes through to the broker) -> [upstream.tls] -> the
#                     SASL_SSL listeners. kroute then learns the brokers from the clients'
#                     metadata, and /ready answers as soon as it listens.
#
# The relay case runs the producer in a network namespace that has no route to the host's
# loopback. Inside it, an iptables OUTPUT DNAT rule turns 127.0.0.1:19092-19094 (the addresses
# the brokers advertise in metadata) into 10.255.77.1:<same port> across a veth pair, where the
# socat relays listen (the brokers themselves listen on 127.0.0.1 only). So every connection the
# producer makes to any broker, including the ones it learns from metadata, must cross a relay;
# there is no other path. docs/benchmarks.md explains this in detail.
#
# Validity checks (the run fails if one does not hold):
#   - each kroute round: kroute_request_bytes_total{api="Produce"} grew by >= records x size
#   - each direct/relay round: that counter did not move (the traffic did not touch kroute)
#   - each relay round: the veth carried >= records x size bytes from the namespace
#   - the namespace cannot reach an unrelayed host port (controller 127.0.0.1:19091)
#   - the producer reported all records sent and no errors
# Every run also records kroute's CPU seconds (utime+stime of /proc/<pid>/stat), reported per GB
# of Produce request bytes kroute received.
#
# Environment (defaults in brackets):
#   BENCH_SECURITY        none, tls or sasl_ssl (see above) [none]
#   BENCH_ROUNDS          rounds per phase [5]
#   BENCH_RECORDS         records per max-throughput run [200000]
#   BENCH_RECORD_SIZE     bytes per record [1024]
#   BENCH_COMPRESSION     the producer's compression.type (none, lz4, zstd, snappy, gzip) [none];
#                         the fetch phase then reads compressed batches. Checks that a run went
#                         through kroute or the relay then ask for a twentieth of the records'
#                         bytes on the wire (compressed), and CPU per GB is per GB on the wire.
#   BENCH_FIXED_RATE      offered load in records/s for the fixed-load phase, or "auto" =
#                         BENCH_FIXED_FRACTION x the median direct max throughput [auto]
#   BENCH_FIXED_FRACTION  [0.5]
#   BENCH_FIXED_SECONDS   duration of each fixed-load run [20]
#   BENCH_WARMUP_RECORDS  one uncounted run per case before the rounds (0 = none) [50000]
#   BENCH_PHASES          "max fixed", "max fetch", ... (any of max, fixed, fetch) [max fixed]
#   BENCH_FETCH_RECORDS   records per fetch run (the topic must hold them) [BENCH_RECORDS]
#   BENCH_FETCH_CLIENT    java (ConsumerPerformance) or librdkafka (examples/rdkafka_consume.rs,
#                         its defaults; built with BENCH_BUILD=1; unsecured runs only) [java]
#   BENCH_L4_RELAY        the relay case's relay: socat, or delay_relay (the test cluster's relay,
#                         relay/: Rust and tokio, 64 KiB reads, each read forwarded as it arrives;
#                         built with kroute when BENCH_BUILD=1) [socat]
#   BENCH_DOCS            file whose results section (one per BENCH_SECURITY) is replaced,
#                         "none" to skip [docs/benchmarks.md]
#   BENCH_BUILD           1 = cargo build --release first [1]
#   KROUTE_BIN            kroute binary [target/release/kroute]
# Raw per-round lines and all logs: target/bench/ (results.tsv, raw/, kroute.log, socat*.log);
# secured modes: target/bench-tls/ and target/bench-sasl_ssl/ (plus client.properties).
# Needs root (network namespace, veth, iptables inside the namespace); installs socat and
# iptables with apt-get if missing (secured modes: neither). Starts the cluster if it is not
# running and stops it again at the end only if it started it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
REPO=$PWD

ROUNDS=${BENCH_ROUNDS:-5}
RECORDS=${BENCH_RECORDS:-200000}
RECORD_SIZE=${BENCH_RECORD_SIZE:-1024}
COMPRESSION=${BENCH_COMPRESSION:-none}
[[ $COMPRESSION =~ ^(none|lz4|zstd|snappy|gzip)$ ]] || { echo "bench: BENCH_COMPRESSION: unknown codec '$COMPRESSION'" >&2; exit 2; }
WIRE_DIVISOR=1; [ "$COMPRESSION" = none ] || WIRE_DIVISOR=20
FIXED_RATE=${BENCH_FIXED_RATE:-auto}
FIXED_FRACTION=${BENCH_FIXED_FRACTION:-0.5}
FIXED_SECONDS=${BENCH_FIXED_SECONDS:-20}
WARMUP_RECORDS=${BENCH_WARMUP_RECORDS:-50000}
PHASES=${BENCH_PHASES:-max fixed}
FETCH_RECORDS=${BENCH_FETCH_RECORDS:-$RECORDS}
DOCS=${BENCH_DOCS:-docs/benchmarks.md}
BUILD=${BENCH_BUILD:-1}
FETCH_CLIENT=${BENCH_FETCH_CLIENT:-java}
RDKAFKA_CONSUME_BIN=${RDKAFKA_CONSUME_BIN:-target/release/examples/rdkafka_consume}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}

SECURITY=${BENCH_SECURITY:-none}
CASES=(direct kroute relay)
[ "$SECURITY" = none ] || CASES=(direct kroute)
RELAY=0; [[ " ${CASES[*]} " != *" relay "* ]] || RELAY=1
BROKER_PORTS=(19092 19093 19094)
PLAIN_BOOTSTRAP=127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094
DIRECT_BOOTSTRAP=$PLAIN_BOOTSTRAP   # what the direct case dials (secured modes: set below)
KROUTE_BOOTSTRAP_PORT=9192
KROUTE_BROKER_BASE=9200
KROUTE_ADMIN=127.0.0.1:9744
NS=kroute-bench            # network namespace of the relay case
VETH_HOST=krbench0         # host end of the veth pair
VETH_NS=krbench1           # namespace end
RELAY_IP=10.255.77.1       # host end address: the socat relays listen here
L4_RELAY=${BENCH_L4_RELAY:-socat}
[[ $L4_RELAY =~ ^(socat|delay_relay)$ ]] || { echo "bench: BENCH_L4_RELAY: socat or delay_relay, not '$L4_RELAY'" >&2; exit 2; }
NS_IP=10.255.77.2
OUT=$REPO/target/bench
[ "$SECURITY" = none ] || OUT=$REPO/target/bench-$SECURITY
RAW=$OUT/raw
RESULTS=$OUT/results.tsv
TOPIC=kroute-bench-$(date +%s)

say() { echo "bench: $*" >&2; }
die() { echo "bench: FAILED: $*" >&2; exit 1; }

[[ $SECURITY =~ ^(none|tls|sasl_ssl)$ ]] || die "BENCH_SECURITY must be none, tls or sasl_ssl (got '$SECURITY')"
for v in ROUNDS RECORDS RECORD_SIZE FIXED_SECONDS WARMUP_RECORDS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "BENCH_$v must be a non-negative integer (got '${!v}')"
done
[ "$ROUNDS" -ge 1 ] && [ "$RECORDS" -ge 1 ] && [ "$FIXED_SECONDS" -ge 1 ] || die "rounds, records, seconds must be >= 1"
[[ $FIXED_RATE == auto || $FIXED_RATE =~ ^[0-9]+$ ]] || die "BENCH_FIXED_RATE must be auto or records/s"
for p in $PHASES; do [[ $p == max || $p == fixed || $p == fetch ]] || die "BENCH_PHASES: unknown phase '$p'"; done
[[ $FETCH_RECORDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_FETCH_RECORDS must be a positive integer"
if [[ " $PHASES " == *" fetch "* && " $PHASES " != *" max "* ]]; then
  die "the fetch phase reads what the max phase wrote: BENCH_PHASES must have max too"
fi
if [[ $FIXED_RATE == auto && " $PHASES " == *" fixed "* && " $PHASES " != *" max "* ]]; then
  die "BENCH_FIXED_RATE=auto needs the max phase; give a rate"
fi
[ "$RELAY" = 0 ] || [ "$(id -u)" = 0 ] || die "needs root (network namespace + iptables for the relay case)"

# ---------------------------------------------------------------------------------------------
# tools

ensure_pkg() { # COMMAND PACKAGE
  command -v "$1" >/dev/null && return 0
  say "installing $2"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2"; } >/dev/null 2>&1 ||
    die "apt-get install $2 failed"
  command -v "$1" >/dev/null || die "$1 still missing after installing $2"
}
if [ "$RELAY" = 1 ]; then
  ensure_pkg socat socat
  ensure_pkg iptables iptables
  command -v ip >/dev/null || die "ip (iproute2) missing"
fi
ensure_pkg curl curl
command -v python3 >/dev/null || die "python3 missing"

mkdir -p "$RAW"

# ---------------------------------------------------------------------------------------------
# cleanup

started_cluster=0
restore_cluster=   # secured modes: the flags to start the cluster with again at the end
kroute_pid=
relay_pids=()
topic_created=0

cleanup() {
  local rc=$? p c
  set +e
  if [ -n "$kroute_pid" ]; then kill -TERM "$kroute_pid" 2>/dev/null; wait "$kroute_pid" 2>/dev/null; fi
  for p in "${relay_pids[@]}"; do
    # socat forks one child per connection; end the children of our relays, then the relay
    for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do kill -TERM "$c" 2>/dev/null; done
    kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null
  done
  if [ "$RELAY" = 1 ]; then
    ip netns del "$NS" 2>/dev/null   # takes the veth pair with it
    ip link del "$VETH_HOST" 2>/dev/null
  fi
  if [ "$topic_created" = 1 ]; then scripts/cluster.sh delete-topic "$TOPIC" >/dev/null 2>&1; fi
  if [ -n "$restore_cluster" ]; then
    say "restoring the cluster as it ran before: scripts/cluster.sh stop; scripts/cluster.sh start $restore_cluster"
    scripts/cluster.sh stop >/dev/null 2>&1
    # shellcheck disable=SC2086  # the flags are words
    KROUTE_CLUSTER_MODE= KROUTE_CLUSTER_SECURED= scripts/cluster.sh start $restore_cluster >/dev/null ||
      { say "restoring the cluster FAILED"; rc=1; }
  elif [ "$started_cluster" = 1 ]; then say "stopping the cluster (started by this run)"; scripts/cluster.sh stop >/dev/null 2>&1; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# helpers


metric() { # NAME API: value of a kroute counter (0 if not yet present)
  curl -fsS --max-time 5 "http://$KROUTE_ADMIN/metrics" |
    awk -v n="$1" -v a="api=\"$2\"" 'index($1, n "{") == 1 && index($1, a) { v = $2 } END { printf "%.0f\n", v + 0 }'
}
kroute_produce_bytes() { metric kroute_request_bytes_total Produce; }
kroute_produce_requests() { metric kroute_requests_total Produce; }
kroute_fetch_bytes() { metric kroute_response_bytes_total Fetch; }
kroute_rss_kib() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$kroute_pid/status"; }
kroute_connections() {
  curl -fsS --max-time 5 "http://$KROUTE_ADMIN/metrics" |
    awk '$1 == "kroute_client_connections_total" { v = $2 } END { printf "%.0f\n", v + 0 }'
}
# connections the namespace's DNAT rule redirected to the relays (the nat table sees the first
# packet of each connection only)
relay_connections() {
  [ "$RELAY" = 1 ] || { echo 0; return; }
  ip netns exec "$NS" iptables -t nat -L OUTPUT -v -n -x | awk '$3 == "DNAT" { v += $1 } END { print v + 0 }'
}

cpu_ticks() { # PID [children]: utime+stime (+cutime+cstime) in clock ticks
  local f; f=$(sed 's/^.*) //' "/proc/$1/stat") || return 1
  # after "pid (comm) ": state=1 ... utime=12 stime=13 cutime=14 cstime=15
  awk -v ch="${2:-}" '{ t = $12 + $13; if (ch == "children") t += $14 + $15; print t }' <<<"$f"
}
CLK_TCK=$(getconf CLK_TCK)
# PID: "utime stime" in clock ticks, where the time went: kroute's own code, or the kernel's
# (socket reads and writes; on loopback the sender also pays for delivering to the receiver)
cpu_split() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12, $13 }'; }
# TICKS0 TICKS1: "user U s, system S s" between two cpu_split readings
cpu_split_text() {
  awk -v a="$1" -v b="$2" -v h="$CLK_TCK" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "user %.2f s, system %.2f s", (y[1] - x[1]) / h, (y[2] - x[2]) / h }'
}

relay_ticks() { local p t=0; for p in "${relay_pids[@]}"; do t=$((t + $(cpu_ticks "$p" children))); done; echo $t; }
# the relays' "utime stime" (their exited per-connection children's included), as cpu_split
relay_split() {
  local p u=0 s=0 a b
  for p in "${relay_pids[@]}"; do
    read -r a b < <(sed 's/^.*) //' "/proc/$p/stat" | awk '{ print $12 + $14, $13 + $15 }')
    u=$((u + a)) s=$((s + b))
  done
  echo "$u $s"
}
relay_children() { local p n=0; for p in "${relay_pids[@]}"; do n=$((n + $(ps -o pid= --ppid "$p" | wc -l))); done; echo $n; }
no_relay_children() { [ "$(relay_children)" = 0 ]; }
veth_rx() { if [ "$RELAY" = 1 ]; then cat "/sys/class/net/$VETH_HOST/statistics/rx_bytes"; else echo 0; fi; }
veth_tx() { if [ "$RELAY" = 1 ]; then cat "/sys/class/net/$VETH_HOST/statistics/tx_bytes"; else echo 0; fi; }

kroute_ready() { curl -fsS --max-time 2 -o /dev/null "http://$KROUTE_ADMIN/ready" 2>/dev/null; }
ns_port_open() { ip netns exec "$NS" bash -c "(exec 3<>/dev/tcp/$1/$2) 2>/dev/null"; }

# ---------------------------------------------------------------------------------------------
# cluster, topic, kroute, relay

if [ "$SECURITY" = none ]; then
  if ! scripts/cluster.sh status >/dev/null 2>&1; then
    scripts/cluster.sh stop >/dev/null 2>&1 || true   # clear a half-running cluster
    say "starting the cluster"
    KROUTE_CLUSTER_MODE=direct scripts/cluster.sh start >/dev/null
    started_cluster=1
  fi
else
  # secured modes need `start --direct --secured`: a cluster running otherwise is restarted so,
  # and restarted as it was by cleanup
  cluster_status=$(scripts/cluster.sh status 2>/dev/null) && cluster_ok=1 || cluster_ok=0
  prev_mode=$(awk '$1 == "mode" { print $2 }' <<<"$cluster_status")
  prev_secured=$(awk '$1 == "secured" { print $2 }' <<<"$cluster_status")
  if [ "$cluster_ok" = 1 ] && [ "$prev_mode" = direct ] && [ "$prev_secured" = yes ]; then
    say "the cluster runs in direct mode, secured: using it as it is"
  else
    if grep -qE '^(controller|broker) .* running pid=' <<<"$cluster_status"; then
      restore_cluster="--${prev_mode:-direct}"; [ "$prev_secured" != yes ] || restore_cluster+=" --secured"
      say "the cluster runs in ${prev_mode:-?} mode, secured: ${prev_secured:-?}$([ "$cluster_ok" = 1 ] || echo ", not complete");" \
        "restarting it --direct --secured (at the end: stop; start $restore_cluster)"
    else
      started_cluster=1
    fi
    scripts/cluster.sh stop >/dev/null 2>&1 || die "scripts/cluster.sh stop failed"
    say "starting the cluster --direct --secured"
    KROUTE_CLUSTER_MODE= KROUTE_CLUSTER_SECURED= scripts/cluster.sh start --direct --secured >/dev/null ||
      die "scripts/cluster.sh start --direct --secured failed"
  fi
fi

# the direct and relay cases need the brokers to advertise their own listeners (cluster.sh's
# "direct" mode), not relays in front of them
cluster_bootstrap=$(scripts/cluster.sh bootstrap)
[ "$cluster_bootstrap" = "$PLAIN_BOOTSTRAP" ] ||
  die "the cluster advertises $cluster_bootstrap, not $PLAIN_BOOTSTRAP (restart it in direct mode)"

# secured modes: the listeners the direct case dials and kroute forwards to, the test PKI, and
# the client settings both cases use (a properties file: the JAAS line contains '=' and spaces)
CLIENT_CONFIG=()   # --producer.config FILE
CONSUMER_CONFIG=() # --consumer.config FILE
ADMIN_CONFIG=()    # --command-config FILE
if [ "$SECURITY" != none ]; then
  secured_info=$(scripts/cluster.sh secured) || die "scripts/cluster.sh secured failed (is the cluster secured?)"
  secured_key() { sed -n "s/^$1=//p" <<<"$secured_info"; }
  CA=$(secured_key ca); BROKER_CERT=$(secured_key broker_cert); BROKER_KEY=$(secured_key broker_key)
  listeners_key=ssl; [ "$SECURITY" = tls ] || listeners_key=sasl_ssl
  DIRECT_BOOTSTRAP=$(secured_key "$listeners_key")
  [ -n "$DIRECT_BOOTSTRAP" ] && [ -f "$CA" ] && [ -f "$BROKER_CERT" ] && [ -f "$BROKER_KEY" ] ||
    die "scripts/cluster.sh secured lacks $listeners_key=, ca=, broker_cert= or broker_key= (got: $secured_info)"
  {
    echo "# written by bench/passthrough.sh (BENCH_SECURITY=$SECURITY)"
    if [ "$SECURITY" = tls ]; then
      echo "security.protocol=SSL"
    else
      echo "security.protocol=SASL_SSL"
      echo "sasl.mechanism=SCRAM-SHA-512"
      echo 'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="alice-secret";'
    fi
    echo "ssl.truststore.type=PEM"
    echo "ssl.truststore.location=$CA"
  } >"$OUT/client.properties"
  CLIENT_CONFIG=(--producer.config "$OUT/client.properties")
  CONSUMER_CONFIG=(--consumer.config "$OUT/client.properties")
  ADMIN_CONFIG=(--command-config "$OUT/client.properties")
  say "security $SECURITY: direct case -> $DIRECT_BOOTSTRAP; client settings $OUT/client.properties"
fi
KAFKA_LIB=$(scripts/cluster.sh lib)
TOOL_LOG4J=$REPO/scripts/kafka/log4j2-tools.properties
[ -f "$TOOL_LOG4J" ] || die "$TOOL_LOG4J missing"
# the producer JVM (like kafka-producer-perf-test.sh: 512 MB heap; full JIT; quiet logging)
PRODUCER_JVM=(java -Xms256m -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$TOOL_LOG4J" -cp "$KAFKA_LIB/*" org.apache.kafka.tools.ProducerPerformance)
CONSUMER_JVM=(java -Xms256m -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$TOOL_LOG4J" -cp "$KAFKA_LIB/*" org.apache.kafka.tools.ConsumerPerformance)
advertised=$(java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true \
    "-Dlog4j2.configurationFile=$TOOL_LOG4J" -cp "$KAFKA_LIB/*" org.apache.kafka.tools.BrokerApiVersionsCommand \
    --bootstrap-server "$DIRECT_BOOTSTRAP" "${ADMIN_CONFIG[@]}" 2>/dev/null | sed -n 's/^\([^ ]*\) (id: .*/\1/p' | sort | tr '\n' ',')
[ "$advertised" = "$DIRECT_BOOTSTRAP," ] ||
  die "brokers advertise '${advertised%,}' in metadata, expected $DIRECT_BOOTSTRAP (the relay case DNATs exactly those; the direct case must reach the brokers' own listeners)"
say "brokers advertise ${advertised%,} (checked in metadata)"

if [ "$BUILD" = 1 ]; then
  say "cargo build --release"
  cargo build --release --quiet || die "cargo build --release failed"
  if [ "$FETCH_CLIENT" = librdkafka ]; then
    cargo build --release --quiet --example rdkafka_consume || die "cargo build --example rdkafka_consume failed"
  fi
  if [ "$L4_RELAY" = delay_relay ]; then
    cargo build --release --quiet -p delay-relay || die "cargo build -p delay-relay failed"
  fi
fi
DELAY_RELAY_BIN=target/release/delay_relay
[ "$L4_RELAY" = socat ] || [ "$RELAY" = 0 ] || [ -x "$DELAY_RELAY_BIN" ] || die "$DELAY_RELAY_BIN not found (BENCH_BUILD=1 builds it)"
case $FETCH_CLIENT in
  java) ;;
  librdkafka) [ "$SECURITY" = none ] || die "BENCH_FETCH_CLIENT=librdkafka: unsecured runs only"
    [ -x "$RDKAFKA_CONSUME_BIN" ] || die "$RDKAFKA_CONSUME_BIN not found (BENCH_BUILD=1 builds it)" ;;
  *) die "BENCH_FETCH_CLIENT must be java or librdkafka (got '$FETCH_CLIENT')" ;;
esac
[ -x "$KROUTE_BIN" ] || die "$KROUTE_BIN not found (cargo build --release)"

for p in "$KROUTE_BOOTSTRAP_PORT" $((KROUTE_BROKER_BASE + 1)) $((KROUTE_BROKER_BASE + 2)) $((KROUTE_BROKER_BASE + 3)) "${KROUTE_ADMIN##*:}"; do
  port_open 127.0.0.1 "$p" && die "port $p is already in use (another kroute bench?)"
done

say "creating topic $TOPIC (6 partitions, RF 3, leaders 2 per broker, min.insync.replicas=2)"
scripts/cluster.sh create-topic "$TOPIC" --replica-assignment 1:2:3,2:3:1,3:1:2,1:3:2,2:1:3,3:2:1 \
  --config min.insync.replicas=2 >/dev/null
topic_created=1

# kroute forwards to the listeners the direct case dials; secured modes: TLS on both sides (the
# brokers' certificate names 127.0.0.1, so kroute can serve it), sasl_ssl: SASL passthrough
upstream_list=$(sed 's/^/"/; s/,/", "/g; s/$/"/' <<<"$DIRECT_BOOTSTRAP")
{
  cat <<EOF
# written by bench/passthrough.sh
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = $KROUTE_BOOTSTRAP_PORT
broker_port_base = $KROUTE_BROKER_BASE

EOF
  [ "$SECURITY" = none ] || cat <<EOF
[listen.tls]
cert_file = "$BROKER_CERT"
key_file = "$BROKER_KEY"

EOF
  cat <<EOF
[upstream]
bootstrap_servers = [$upstream_list]

EOF
  [ "$SECURITY" = none ] || cat <<EOF
[upstream.tls]
ca_file = "$CA"

EOF
  # no kroute credentials: clients authenticate themselves through kroute
  [ "$SECURITY" != sasl_ssl ] || cat <<EOF
[upstream.sasl]
mode = "passthrough"

EOF
  cat <<EOF
[admin]
listen = "$KROUTE_ADMIN"
EOF
} >"$OUT/kroute.toml"
"$KROUTE_BIN" --config "$OUT/kroute.toml" </dev/null >"$OUT/kroute.log" 2>&1 &
kroute_pid=$!
# /ready: kroute has learnt the cluster; in SASL passthrough without credentials it learns the
# brokers from the clients' metadata instead, and is ready once it listens (its broker ports
# open with the first client's metadata), so nothing more is waited for here
poll 100 0.2 kroute_ready || { tail -n 20 "$OUT/kroute.log" >&2; die "kroute not ready within 20s"; }
say "kroute pid $kroute_pid ready ($KROUTE_ADMIN; config $OUT/kroute.toml)"

# relay namespace: its only way out is the veth; 127.0.0.1:19092-19094 is DNATed to the relays
setup_relay() {
  ip netns del "$NS" 2>/dev/null || true
  ip link del "$VETH_HOST" 2>/dev/null || true
  if ip -4 -o addr show | grep -q " ${RELAY_IP%.*}\."; then die "${RELAY_IP%.*}.0/24 is in use on this host"; fi
  ip netns add "$NS"
  ip link add "$VETH_HOST" type veth peer name "$VETH_NS"
  ip link set "$VETH_NS" netns "$NS"
  ip addr add "$RELAY_IP/30" dev "$VETH_HOST"
  ip link set "$VETH_HOST" up
  ip -n "$NS" link set lo up
  ip -n "$NS" addr add "$NS_IP/30" dev "$VETH_NS"
  ip -n "$NS" link set "$VETH_NS" up
  # packets addressed to 127.0.0.1 may leave through the veth once DNATed ...
  ip netns exec "$NS" sysctl -qw net.ipv4.conf.all.route_localnet=1 "net.ipv4.conf.$VETH_NS.route_localnet=1"
  ip netns exec "$NS" iptables -t nat -A OUTPUT -d 127.0.0.1/32 -p tcp --dport 19092:19094 \
    -j DNAT --to-destination "$RELAY_IP"
  # ... with the namespace's veth address as source (127.0.0.1 is not routable on the veth)
  ip netns exec "$NS" iptables -t nat -A POSTROUTING -o "$VETH_NS" -j SNAT --to-source "$NS_IP"
  for p in "${BROKER_PORTS[@]}"; do
    if [ "$L4_RELAY" = delay_relay ]; then
      "$DELAY_RELAY_BIN" --listen "$RELAY_IP:$p" --target "127.0.0.1:$p" </dev/null >"$OUT/relay-$p.log" 2>&1 &
    else
      socat "TCP4-LISTEN:$p,bind=$RELAY_IP,reuseaddr,fork,nodelay" "TCP4:127.0.0.1:$p,nodelay" \
        </dev/null >"$OUT/socat-$p.log" 2>&1 &
    fi
    relay_pids+=($!)
  done
  for p in "${BROKER_PORTS[@]}"; do
    poll 50 0.1 port_open "$RELAY_IP" "$p" || die "$L4_RELAY on $RELAY_IP:$p did not come up"
    poll 1 0 ns_port_open 127.0.0.1 "$p" || die "namespace cannot reach broker port $p through the relay"
  done
  poll 50 0.1 no_relay_children || die "relay probe connections did not close"
  # the controller port is not relayed: if the namespace could reach the host loopback, this would connect
  if ns_port_open 127.0.0.1 19091; then die "namespace $NS reaches the host's 127.0.0.1 directly: relay case invalid"; fi
  say "relay: namespace $NS -> DNAT -> $L4_RELAY on $RELAY_IP:19092-19094 (pids ${relay_pids[*]}) -> brokers; unrelayed 127.0.0.1:19091 unreachable from the namespace (checked)"
}
[ "$RELAY" = 0 ] || setup_relay

# ---------------------------------------------------------------------------------------------
# one producer run

RESULT_HEADER="phase	round	case	records	records_per_s	mb_per_s	avg_ms	max_ms	p50_ms	p95_ms	p99_ms	p999_ms	offered_rps	kroute_produce_bytes	kroute_produce_requests	kroute_connections	kroute_cpu_s	relay_bytes	relay_connections	relay_cpu_s	wall_s"
[ -f "$RESULTS" ] && mv -f "$RESULTS" "$RESULTS.prev"
echo "$RESULT_HEADER" >"$RESULTS"

run_case() { # PHASE ROUND CASE RECORDS THROUGHPUT  (ROUND "warmup" is not recorded)
  local phase=$1 round=$2 case=$3 n=$4 tput=$5
  local log="$RAW/$phase-$round-$case.log" bootstrap prefix=()
  case $case in
    direct) bootstrap=$DIRECT_BOOTSTRAP ;;   # secured modes: the brokers' SSL / SASL_SSL listeners
    kroute) bootstrap=127.0.0.1:$KROUTE_BOOTSTRAP_PORT ;;
    relay)  bootstrap=$DIRECT_BOOTSTRAP; prefix=(ip netns exec "$NS") ;;  # same addresses, namespace relays them
  esac
  local kb0 kr0 kc0 kt0 rb0 rc0 rt0 t0 kb1 kr1 kc1 kt1 rb1 rc1 rt1 t1
  kb0=$(kroute_produce_bytes); kr0=$(kroute_produce_requests); kc0=$(kroute_connections); kt0=$(cpu_ticks "$kroute_pid")
  local ks0 ks1 rs0 rs1; ks0=$(cpu_split "$kroute_pid"); rs0=$(relay_split)
  rb0=$(veth_rx); rc0=$(relay_connections); rt0=$(relay_ticks); t0=$(date +%s.%N)
  if ! "${prefix[@]}" "${PRODUCER_JVM[@]}" \
      --topic "$TOPIC" --num-records "$n" --record-size "$RECORD_SIZE" --throughput "$tput" "${CLIENT_CONFIG[@]}" \
      --producer-props "bootstrap.servers=$bootstrap" acks=all "client.id=kroute-bench-$case" \
      "compression.type=$COMPRESSION" \
      >"$log" 2>&1; then
    tail -n 20 "$log" >&2; die "producer failed ($phase round $round, $case): $log"
  fi
  t1=$(date +%s.%N)
  # socat children exit when the producer's connections close; their CPU time then lands in the
  # parents' cutime/cstime
  poll 100 0.1 no_relay_children || die "relay connections still open 10s after the producer exited"
  kb1=$(kroute_produce_bytes); kr1=$(kroute_produce_requests); kc1=$(kroute_connections); kt1=$(cpu_ticks "$kroute_pid")
  ks1=$(cpu_split "$kroute_pid"); rs1=$(relay_split)
  rb1=$(veth_rx); rc1=$(relay_connections); rt1=$(relay_ticks)
  kill -0 "$kroute_pid" 2>/dev/null || die "kroute exited (see $OUT/kroute.log)"

  grep -qE 'Exception|ERROR' "$log" && { grep -E 'Exception|ERROR' "$log" | head -5 >&2; die "producer reported errors: $log"; }
  local line; line=$(grep -E 'records sent, .* 99\.9th\.?$' "$log" | tail -n 1) ||
    die "no final ProducerPerformance line in $log"
  local parsed
  parsed=$(sed -E 's/^([0-9]+) records sent, ([0-9.]+) records\/sec \(([0-9.]+) MB\/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency, ([0-9]+) ms 50th, ([0-9]+) ms 95th, ([0-9]+) ms 99th, ([0-9]+) ms 99\.9th\.?$/\1 \2 \3 \4 \5 \6 \7 \8 \9/' <<<"$line")
  local sent rps mbps avg max p50 p95 p99 p999
  read -r sent rps mbps avg max p50 p95 p99 p999 <<<"$parsed"
  [[ $sent =~ ^[0-9]+$ && -n $p999 ]] || die "cannot parse '$line' ($log)"
  [ "$sent" = "$n" ] || die "$case: producer sent $sent of $n records ($log)"

  local dkb=$((kb1 - kb0)) dkr=$((kr1 - kr0)) dkc=$((kc1 - kc0)) drb=$((rb1 - rb0)) drc=$((rc1 - rc0)) payload=$((n * RECORD_SIZE))
  local kcpu rcpu
  kcpu=$(awk -v a="$kt0" -v b="$kt1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / h }')
  rcpu=$(awk -v a="$rt0" -v b="$rt1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / h }')
  case $case in
    kroute)
      [ "$dkb" -ge $((payload / WIRE_DIVISOR)) ] ||
        die "kroute round carried only $dkb Produce request bytes for $n x $RECORD_SIZE B records: traffic did not go through kroute"
      [ "$drb" -lt $((payload / 100)) ] || die "relay veth carried $drb bytes during a kroute round" ;;
    direct)
      [ "$dkb" = 0 ] || die "kroute saw $dkb Produce bytes during a direct round"
      [ "$drb" -lt $((payload / 100)) ] || die "relay veth carried $drb bytes during a direct round" ;;
    relay)
      [ "$dkb" = 0 ] || die "kroute saw $dkb Produce bytes during a relay round"
      [ "$drb" -ge $((payload / WIRE_DIVISOR)) ] ||
        die "relay veth carried only $drb bytes for $n x $RECORD_SIZE B records: traffic did not go through the relay" ;;
  esac
  local wall; wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  say "$(printf '%-5s %-6s %-6s %8.0f rec/s %7.2f MB/s avg %8.2f ms p99 %5d ms | kroute +%d B Produce (%d req, %d conn) cpu %ss | relay +%d B (%d conn) cpu %ss' \
    "$phase" "$round" "$case" "$rps" "$mbps" "$avg" "$p99" "$dkb" "$dkr" "$dkc" "$kcpu" "$drb" "$drc" "$rcpu")"
  [ "$case" != kroute ] || say "      kroute's cpu: $(cpu_split_text "$ks0" "$ks1")"
  [ "$case" != relay ] || say "      the relays' cpu: $(cpu_split_text "$rs0" "$rs1")"
  [ "$round" = warmup ] && return 0
  printf '%s\n' "$phase	$round	$case	$n	$rps	$mbps	$avg	$max	$p50	$p95	$p99	$p999	$tput	$dkb	$dkr	$dkc	$kcpu	$drb	$drc	$rcpu	$wall" >>"$RESULTS"
}

# java_consumer_metric NAME LOG: the value ConsumerPerformance --print-metrics gave the consumer's
# fetch-manager metric NAME, 3 decimals ("-" if absent)
java_consumer_metric() {
  awk -v m="consumer-fetch-manager-metrics:$1:" 'index($0, m) == 1 { v = $NF } END { if (v == "" || v == "NaN") print "-"; else printf "%.3f\n", v }' "$2"
}

# one consumer run: reads FETCH_RECORDS from the earliest offset in a fresh group
FETCH_HEADER="round	case	records	mb_per_s	fetch_mb_per_s	records_per_s	kroute_fetch_bytes	kroute_cpu_s	kroute_rss_kib	relay_bytes	relay_cpu_s	wall_s	lat_mean_ms	lat_p50_ms	lat_p99_ms	lat_max_ms"
run_fetch_case() { # ROUND CASE
  local round=$1 case=$2 n=$FETCH_RECORDS log="$RAW/fetch-$1-$2.log" bootstrap prefix=()
  case $case in
    direct) bootstrap=$DIRECT_BOOTSTRAP ;;
    kroute) bootstrap=127.0.0.1:$KROUTE_BOOTSTRAP_PORT ;;
    relay)  bootstrap=$DIRECT_BOOTSTRAP; prefix=(ip netns exec "$NS") ;;
  esac
  local kb0 kt0 rb0 rt0 t0 kb1 kt1 rb1 rt1 t1 rss
  kb0=$(kroute_fetch_bytes); kt0=$(cpu_ticks "$kroute_pid"); rb0=$(veth_tx); rt0=$(relay_ticks); t0=$(date +%s.%N)
  # --print-metrics: the consumer's fetch-latency-avg and -max at the end
  local consumer=("${CONSUMER_JVM[@]}" --bootstrap-server "$bootstrap" --topic "$TOPIC"
    --messages "$n" --timeout 60000 --group "kroute-bench-fetch-$round-$case-$$" "${CONSUMER_CONFIG[@]}" --print-metrics)
  # the same result line either way (examples/rdkafka_consume.rs prints ConsumerPerformance's),
  # then librdkafka's round trips to the brokers while reading (RDKAFKA_CONSUME_RTT)
  [ "$FETCH_CLIENT" = java ] || consumer=(env RDKAFKA_CONSUME_RTT=1 "$RDKAFKA_CONSUME_BIN" "$bootstrap" "$TOPIC" "$n")
  if ! "${prefix[@]}" "${consumer[@]}" >"$log" 2>&1; then
    tail -n 20 "$log" >&2; die "consumer failed (fetch round $round, $case): $log"
  fi
  t1=$(date +%s.%N)
  rss=$(kroute_rss_kib)
  poll 100 0.1 no_relay_children || die "relay connections still open 10s after the consumer exited"
  kb1=$(kroute_fetch_bytes); kt1=$(cpu_ticks "$kroute_pid"); rb1=$(veth_tx); rt1=$(relay_ticks)
  kill -0 "$kroute_pid" 2>/dev/null || die "kroute exited (see $OUT/kroute.log)"
  grep -qE 'Exception|ERROR' "$log" && { grep -E 'Exception|ERROR' "$log" | head -5 >&2; die "consumer reported errors: $log"; }
  # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
  # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
  local line mb mbps nmsg fetch_mbps fetch_rps
  line=$(grep -E '^[0-9]{4}-' "$log" | tail -n 1) || die "no ConsumerPerformance result line in $log"
  IFS=', ' read -r _ _ _ _ mb mbps nmsg _ _ _ fetch_mbps fetch_rps <<<"$line"
  [[ $nmsg =~ ^[0-9]+$ ]] || die "cannot parse '$line' ($log)"
  [ "$nmsg" -ge "$n" ] || die "$case: consumer read $nmsg of $n records ($log)"
  local lat_mean=- lat_p50=- lat_p99=- lat_max=-
  if [ "$FETCH_CLIENT" = java ]; then
    lat_mean=$(java_consumer_metric fetch-latency-avg "$log"); lat_max=$(java_consumer_metric fetch-latency-max "$log")
  else
    read -r lat_mean lat_p50 lat_p99 lat_max < <(sed -n 's/^fetch_rtt_ms mean=\([^ ]*\) p50=\([^ ]*\) p99=\([^ ]*\) max=\([^ ]*\) .*/\1 \2 \3 \4/p' "$log")
    [ -n "$lat_max" ] || die "no fetch_rtt_ms line in $log"
  fi
  local dkb=$((kb1 - kb0)) drb=$((rb1 - rb0)) payload=$((n * RECORD_SIZE)) kcpu rcpu wall
  kcpu=$(awk -v a="$kt0" -v b="$kt1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / h }')
  rcpu=$(awk -v a="$rt0" -v b="$rt1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / h }')
  case $case in
    kroute) [ "$dkb" -ge $((payload / WIRE_DIVISOR)) ] ||
              die "kroute forwarded only $dkb Fetch answer bytes for $n x $RECORD_SIZE B records: traffic did not go through kroute" ;;
    direct) [ "$dkb" -lt $((payload / 100)) ] || die "kroute forwarded $dkb Fetch bytes during a direct round" ;;
    relay)  [ "$dkb" -lt $((payload / 100)) ] || die "kroute forwarded $dkb Fetch bytes during a relay round"
            [ "$drb" -ge $((payload / WIRE_DIVISOR)) ] ||
              die "relay veth carried only $drb bytes to the consumer for $n x $RECORD_SIZE B records: traffic did not go through the relay" ;;
  esac
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  say "$(printf 'fetch %-6s %-6s %7.2f MB/s (fetching %7.2f) | kroute +%d B Fetch cpu %ss rss %d KiB | relay +%d B cpu %ss' \
    "$round" "$case" "$mbps" "$fetch_mbps" "$dkb" "$kcpu" "$rss" "$drb" "$rcpu")"
  printf '%s\n' "$round	$case	$nmsg	$mbps	$fetch_mbps	$fetch_rps	$dkb	$kcpu	$rss	$drb	$rcpu	$wall	$lat_mean	$lat_p50	$lat_p99	$lat_max" >>"$OUT/fetch.tsv"
}

run_phase() { # PHASE RECORDS THROUGHPUT
  local phase=$1 n=$2 tput=$3 r i
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < ${#CASES[@]}; i++)); do
      run_case "$phase" "$r" "${CASES[$(((i + r - 1) % ${#CASES[@]}))]}" "$n" "$tput"
    done
  done
}

# ---------------------------------------------------------------------------------------------
# run

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bench_start=$SECONDS
if [ "$WARMUP_RECORDS" -gt 0 ]; then
  for c in "${CASES[@]}"; do run_case warmup warmup "$c" "$WARMUP_RECORDS" -1; done
fi
if [[ " $PHASES " == *" max "* ]]; then
  say "phase max: $ROUNDS rounds x ${CASES[*]}, $RECORDS records each, --throughput -1"
  run_phase max "$RECORDS" -1
fi
if [[ " $PHASES " == *" fixed "* ]]; then
  rate=$FIXED_RATE
  if [ "$rate" = auto ]; then
    rate=$(python3 bench/summarize.py --fixed-rate "$FIXED_FRACTION" "$RESULTS")
  fi
  say "phase fixed: $ROUNDS rounds x ${CASES[*]}, $rate records/s for ${FIXED_SECONDS}s each"
  run_phase fixed $((rate * FIXED_SECONDS)) "$rate"
fi
if [[ " $PHASES " == *" fetch "* ]]; then
  say "phase fetch: $ROUNDS rounds x ${CASES[*]}, $FETCH_RECORDS records read each from the earliest offset"
  echo "$FETCH_HEADER" >"$OUT/fetch.tsv"
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < ${#CASES[@]}; i++)); do
      run_fetch_case "$r" "${CASES[$(((i + r - 1) % ${#CASES[@]}))]}"
    done
  done
else
  rm -f "$OUT/fetch.tsv"
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cp "$RESULTS" "$OUT/results-$(date -u +%Y%m%dT%H%M%SZ).tsv"

# ---------------------------------------------------------------------------------------------
# report

bench_identity bench/passthrough.sh
BENCH_META=$(cat <<EOF
$(bench_machine_meta)
socat=$([ "$RELAY" = 0 ] || [ "$L4_RELAY" != socat ] || socat -V | sed -n 's/^socat version \([^ ]*\).*/\1/p')
l4_relay=$L4_RELAY
security=$SECURITY
cases=${CASES[*]}
direct_bootstrap=$DIRECT_BOOTSTRAP
rounds=$ROUNDS
records=$RECORDS
record_size=$RECORD_SIZE
fixed_seconds=$FIXED_SECONDS
fixed_rate=${rate:-}
fixed_rate_setting=$FIXED_RATE
fixed_fraction=$FIXED_FRACTION
warmup_records=$WARMUP_RECORDS
fetch_records=$([[ " $PHASES " != *" fetch "* ]] || echo "$FETCH_RECORDS")
fetch_client=$FETCH_CLIENT
loadavg_before=$load_before
loadavg_after=$load_after
duration_s=$((SECONDS - bench_start))
topic=$TOPIC
EOF
)
export BENCH_META
BENCH_FETCH_TSV=$([ ! -f "$OUT/fetch.tsv" ] || echo "$OUT/fetch.tsv") python3 bench/summarize.py "$RESULTS" "$DOCS"
