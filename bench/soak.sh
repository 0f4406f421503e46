#!/usr/bin/env bash
# Chaos soak (issue 14, item 4): producers and group consumers run through kroute for
# SOAK_MINUTES while a chaos loop kills and restarts brokers, cuts connections, delays brokers,
# moves leaders and restarts kroute; then every acknowledged record must have been consumed.
#
#   bench/soak.sh                              # 30 minutes
#   SOAK_MINUTES=3 bench/soak.sh               # quick check
#   SOAK_SEED=12345 bench/soak.sh              # replay a run's fault schedule (the seed is printed)
#
# Its own cluster: scripts/cluster.sh with KROUTE_CLUSTER_DIR=target/soak/cluster and
# KROUTE_CLUSTER_PORT_OFFSET=SOAK_PORT_OFFSET (2000: controller 21091, brokers 21092..21094, relays
# 21192..21194), relayed mode; kroute on 127.0.0.1:(19700 + offset) (brokers +1..3) with its admin
# on 19790 + offset. The shared cluster (default ports, target/cluster) is never touched. The soak
# cluster is started fresh (a leftover one is stopped and its data removed) and stopped at the
# end (SOAK_KEEP_CLUSTER=1 keeps it running).
#
# Load, all through kroute ([routing] strict-cost, include soak-*): two topics, 6 partitions,
# replication factor 3, min.insync.replicas 2:
#   jl  Java producer (bench/soak/SoakProducer.java, client defaults: idempotent, acks=all), keyless -> soak-keyless
#   jk  Java producer, keyed (SOAK_KEYS keys)                                                        -> soak-keyed
#   rl  librdkafka producer (examples/soak_rdkafka.rs, enable.idempotence=true; debug=eos, of which
#       it logs the lines on idempotence errors, e.g. DUPSEQ), keyless                           -> soak-keyless
#   rk  librdkafka producer, keyed                                                                 -> soak-keyed
#   one Java consumer process (bench/soak/SoakConsumer.java) with SOAK_CONSUMERS members in
#   group soak-group on both topics, committing after every poll.
# Every record has a unique id (producer prefix + counter) and, keyed, a per-key sequence; the
# producers log every outcome (a/f lines with partition, offset, send and ack times), the
# consumers every record they get.
#
# Chaos: after a random gap (SOAK_GAP_MIN..SOAK_GAP_MAX s) one fault, steps sequenced by
# conditions (broker registered, kroute ready, replicas back in sync, traffic flowing again):
#   broker-kill   SIGKILL a broker, down 5..20 s, start-broker, wait for full ISRs and kroute's
#                 metadata listing 3 brokers
#   cut           scripts/cluster.sh cut N (every connection to broker N closed by its relay)
#   delay         broker N answers 50..1000 ms late for 10..30 s, then 0
#   elect         preferred leader election on every partition (leaders go back after failovers)
#   reassign      kafka-reassign-partitions on one partition: drop a replica, add it back last
#                 (a real copy), then a preferred election for it, so its leader moves
#   kroute-term   SIGTERM kroute (must exit 0 after its drain), start it again
#   kroute-kill   SIGKILL kroute, start it again
# A broker kill or a reassignment starts only when no partition is under-replicated (so at most
# one replica of a partition is ever missing: no acknowledged record may be lost). kroute faults
# alternate with the others, and happen only before the RSS window (the last
# SOAK_RSS_WINDOW_MINUTES, default 20 or 2/3 of a shorter run) minus a warm-up of min(2 min,
# window/4), so the RSS of one kroute process is judged over the window. The schedule (fault
# kinds, brokers, gaps, delays) comes from bash's RANDOM seeded with SOAK_SEED; timings, and so
# where the schedule ends, differ between replays.
#
# After SOAK_MINUTES: the chaos stops, the producers stop and flush, the consumers read up to
# the end offsets, kroute gets a final SIGTERM. bench/soak/check.py then checks (exit 1 if one
# fails):
#   - 0 lost: every acknowledged id was consumed;
#   - duplicates (an id at two offsets) only for records in flight (sent, not yet answered) at a
#     kroute SIGKILL;
#   - keyed records: each key in one partition, acknowledged positions = consumed positions, per
#     key in sequence order (first copies);
#   - acknowledged offsets (when not -1) are where the record was consumed;
#   - kroute's RSS (sampled every 10 s) flat over the window: least-squares growth over the window
#     <= max(8 MiB, 10% of the window's median RSS);
#   - no panic in kroute's log, exit code 0 at every SIGTERM;
#   - the traffic went through kroute: its Produce request bytes (summed over its processes, read
#     just before each stop) >= the acknowledged payload bytes.
# Report: target/soak/<run>/report.md (per fault type: injected, client errors and warnings,
# records lost, duplicates; RSS over time; kroute's counters), printed at the end.
#
# Environment (defaults in brackets):
#   SOAK_MINUTES [30]  SOAK_SEED [random]  SOAK_PORT_OFFSET [2000]  SOAK_RATE records/s per
#   producer [100]  SOAK_VALUE_BYTES [200]  SOAK_KEYS keys per keyed producer [16]
#   SOAK_CONSUMERS group members [3]  SOAK_GAP_MIN / SOAK_GAP_MAX seconds between faults [5 / 25]
#   SOAK_RSS_WINDOW_MINUTES [20, or 2/3 of SOAK_MINUTES if shorter]  SOAK_BUILD 1 = cargo build first [1]
#   SOAK_KEEP_CLUSTER [0]  KROUTE_BIN, SOAK_RDKAFKA_BIN (used instead of building)
#   SOAK_PRODUCERS which of the producers above run [jl jk rl rk]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
source bench/common.sh

MINUTES=${SOAK_MINUTES:-30}
SEED=${SOAK_SEED:-$(( $(od -An -N4 -tu4 /dev/urandom) % 1000000 ))}
OFFSET=${SOAK_PORT_OFFSET:-2000}
RATE=${SOAK_RATE:-100}
VALUE_BYTES=${SOAK_VALUE_BYTES:-200}
KEYS=${SOAK_KEYS:-16}
CONSUMERS=${SOAK_CONSUMERS:-3}
GAP_MIN=${SOAK_GAP_MIN:-5}
GAP_MAX=${SOAK_GAP_MAX:-25}
BUILD=${SOAK_BUILD:-1}
KEEP_CLUSTER=${SOAK_KEEP_CLUSTER:-0}
PRODUCERS=${SOAK_PRODUCERS:-jl jk rl rk}
for p in $PRODUCERS; do
  [[ $p =~ ^(jl|jk|rl|rk)$ ]] || { echo "soak: SOAK_PRODUCERS: unknown producer '$p' (jl jk rl rk)" >&2; exit 2; }
done
for v in MINUTES SEED OFFSET RATE VALUE_BYTES KEYS CONSUMERS GAP_MIN GAP_MAX; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "soak: SOAK_$v must be a non-negative integer (got '${!v}')" >&2; exit 2; }
done
[ "$MINUTES" -ge 1 ] && [ "$RATE" -ge 1 ] && [ "$GAP_MAX" -ge "$GAP_MIN" ] && [ "$VALUE_BYTES" -ge 64 ] ||
  { echo "soak: SOAK_MINUTES, SOAK_RATE >= 1, SOAK_GAP_MAX >= SOAK_GAP_MIN, SOAK_VALUE_BYTES >= 64" >&2; exit 2; }
# the shared cluster runs on offset 0: never this one
[ "$OFFSET" -ge 1000 ] && [ "$OFFSET" -le 40000 ] || { echo "soak: SOAK_PORT_OFFSET must be 1000..40000" >&2; exit 2; }
if [ -n "${SOAK_RSS_WINDOW_MINUTES:-}" ]; then
  [[ $SOAK_RSS_WINDOW_MINUTES =~ ^[0-9]+$ ]] || { echo "soak: SOAK_RSS_WINDOW_MINUTES must be an integer" >&2; exit 2; }
  WINDOW_S=$((SOAK_RSS_WINDOW_MINUTES * 60))
else
  WINDOW_S=$((MINUTES * 40 < 1200 ? MINUTES * 40 : 1200))   # 20 min, or 2/3 of a shorter run
fi

# the soak cluster: every scripts/cluster.sh call of this script (and its children) goes to it
export KROUTE_CLUSTER_DIR=$REPO/target/soak/cluster
export KROUTE_CLUSTER_PORT_OFFSET=$OFFSET
export KROUTE_CLUSTER_MODE=relayed
unset KROUTE_CLUSTER_SECURED
cl() { "$REPO/scripts/cluster.sh" "$@"; }
# the brokers as advertised in relayed mode (their relays)
BOOT=127.0.0.1:$((19192 + OFFSET)),127.0.0.1:$((19193 + OFFSET)),127.0.0.1:$((19194 + OFFSET))
KR_PORT=$((19700 + OFFSET))
KR_ADMIN=127.0.0.1:$((19790 + OFFSET))
KR_BOOT=127.0.0.1:$KR_PORT

RUN_ID=$(date -u +%Y%m%d-%H%M%S)
RUN=$REPO/target/soak/run-$RUN_ID
mkdir -p "$RUN/bin" "$RUN/java" "$RUN/logs"
ln -sfn "run-$RUN_ID" "$REPO/target/soak/latest"
say() { echo "soak: [$(date -u +%H:%M:%S)] $*" >&2; echo "$(date +%s%3N) $*" >>"$RUN/soak.log"; }
die() { say "FAILED: $*"; exit 1; }
now_ms() { date +%s%3N; }

# ---------------------------------------------------------------------------------------------
# build: binaries copied into the run dir, so a rebuild by someone else mid-run changes nothing

if [ -n "${KROUTE_BIN:-}" ]; then BUILD=0; fi
if [ "$BUILD" = 1 ]; then
  say "building kroute and examples/soak_rdkafka (release)"
  cargo build --release -q --bin kroute --example soak_rdkafka
fi
cp "${KROUTE_BIN:-target/release/kroute}" "$RUN/bin/kroute"
cp "${SOAK_RDKAFKA_BIN:-target/release/examples/soak_rdkafka}" "$RUN/bin/soak_rdkafka"
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
# shellcheck disable=SC2034  # read by bench_identity
IDENTITY_PATHS="bench/soak.sh bench/soak examples/soak_rdkafka.rs"
bench_identity "bench/soak.sh"
LIB=$(cl lib)
javac --release 17 -Xlint:-options -encoding UTF-8 -cp "$LIB/*" -d "$RUN/java" bench/soak/*.java
JAVA_CP="$RUN/java:$LIB/*"
JAVA_OPTS=(-Xmx256m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$REPO/bench/soak/log4j2.properties")

{
  echo "seed=$SEED"
  echo "minutes=$MINUTES"
  echo "rss_window_s=$WINDOW_S"
  echo "rate=$RATE"
  echo "value_bytes=$VALUE_BYTES"
  echo "keys=$KEYS"
  echo "consumers=$CONSUMERS"
  echo "port_offset=$OFFSET"
  echo "producers=$PRODUCERS"
  bench_machine_meta
} >"$RUN/meta.txt"
say "seed $SEED (SOAK_SEED=$SEED replays the schedule), $MINUTES min, run dir $RUN"
RANDOM=$SEED

# ---------------------------------------------------------------------------------------------
# processes

KROUTE_PID=
SAMPLER_PID=
PRODUCER_PIDS=()
CONSUMER_PID=
cleanup() {
  local rc=$?
  set +e
  [ -z "$SAMPLER_PID" ] || kill "$SAMPLER_PID" 2>/dev/null
  touch "$RUN/stop-producers" "$RUN/stop-consumers"
  for p in "${PRODUCER_PIDS[@]}" $CONSUMER_PID; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  [ -z "$KROUTE_PID" ] || kill -KILL "$KROUTE_PID" 2>/dev/null
  if [ "$KEEP_CLUSTER" != 1 ]; then cl stop >/dev/null 2>&1; fi
  exit $rc
}
trap cleanup EXIT

cat >"$RUN/proxy.toml" <<EOF
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = $KR_PORT
broker_port_base = $KR_PORT

[upstream]
bootstrap_servers = [$(sed 's/[^,]*/"&"/g' <<<"$BOOT")]
metadata_refresh_ms = 2000

[admin]
listen = "$KR_ADMIN"

[routing]
strategy = "strict-cost"
include = ["soak-*"]
EOF

# kroute's metrics; "" if it does not answer
metrics() { curl -sf -m 5 "http://$KR_ADMIN/metrics" || true; }
# counter NAME [LABEL_FILTER]: sum of the series of NAME on kroute's /metrics (0 if none)
counter() {
  metrics | awk -v n="$1" -v f="${2:-}" '$1 ~ "^"n"({|$)" && index($1, f) { s += $NF } END { printf "%.0f\n", s + 0 }'
}
# the counters that say what went through kroute, as "ms pid series value" lines in metrics.log
snapshot_metrics() {
  local m t; t=$(now_ms); m=$(metrics)
  [ -n "$m" ] || return 0
  grep -E '^kroute_(request_bytes_total|requests_total|upstream_produce_bytes_total|idempotent_batches_total|batches_moved_total|records_moved_total|batches_kept_total|idempotent_producers(_[a-z]+)?_total|upstream_disconnects_total|upstream_connect_failures_total|upstream_unavailable_total|upstream_request_timeouts_total|shutdown_connections_cut_total|client_connections_total|brokers_known)' <<<"$m" |
    awk -v t="$t" -v p="$KROUTE_PID" '{ print t, p, $1, $NF }' >>"$RUN/metrics.log" || true
}

start_kroute() {
  echo "=== $(date -u '+%F %T') kroute start" >>"$RUN/kroute.log"
  "$RUN/bin/kroute" --config "$RUN/proxy.toml" >>"$RUN/kroute.log" 2>&1 &
  KROUTE_PID=$!
  echo "$KROUTE_PID" >"$RUN/kroute.pid"
  local deadline=$((SECONDS + 60)) n
  until [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://$KR_ADMIN/ready")" = 200 ]; do
    kill -0 "$KROUTE_PID" 2>/dev/null || { tail -20 "$RUN/kroute.log" >&2; die "kroute exited at its start"; }
    [ $SECONDS -lt $deadline ] || die "kroute not ready within 60 s"
    sleep 0.1
  done
  for n in 1 2 3; do
    until (exec 3<>"/dev/tcp/127.0.0.1/$((KR_PORT + n))") 2>/dev/null; do
      [ $SECONDS -lt $deadline ] || die "kroute's listener for broker $n not up within 60 s"
      sleep 0.1
    done
  done
}

# stop_kroute SIGNAL: signal kroute, wait for its exit; STOP_RC = exit code (take a
# snapshot_metrics first: the counters of a process are read last just before it stops)
stop_kroute() {
  local sig=$1
  echo "$(now_ms) $KROUTE_PID $sig" >>"$RUN/kroute-stops.log"
  kill -"$sig" "$KROUTE_PID"
  STOP_RC=0
  { wait "$KROUTE_PID"; } 2>/dev/null || STOP_RC=$?
  echo "$(now_ms) $KROUTE_PID exit=$STOP_RC" >>"$RUN/kroute-stops.log"
  KROUTE_PID=
}

# RSS of kroute (and its counters) every 10 s: "ms pid rss_kib" lines in rss.log
sampler() {
  local pid rss
  while :; do
    pid=$(cat "$RUN/kroute.pid" 2>/dev/null || true)
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    [ -z "$rss" ] || echo "$(now_ms) $pid $rss" >>"$RUN/rss.log"
    KROUTE_PID=$pid snapshot_metrics
    sleep 10
  done
}

# ---------------------------------------------------------------------------------------------
# cluster helpers (all on the soak cluster)

describe() { cl tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --describe --topic 'soak-.*' 2>/dev/null; }
# under-replicated partitions of the soak topics, one line each ("" when every ISR is full)
urp() { cl tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --describe --topic 'soak-.*' --under-replicated-partitions 2>/dev/null || echo "describe failed"; }
# "topic partition leader" lines
leaders() { describe | sed -n 's/.*Topic: \([^ \t]*\)[ \t]*Partition: \([0-9]*\)[ \t]*Leader: \([-0-9a-z]*\).*/\1 \2 \3/p' | sort; }
wait_isr_full() { # TIMEOUT_S
  local deadline=$((SECONDS + $1)) u
  while u=$(urp); [ -n "$u" ]; do
    [ $SECONDS -lt $deadline ] || { say "WARNING: partitions still under-replicated after $1 s: $(tr '\n' ';' <<<"$u")"; return 1; }
    sleep 2
  done
}
wait_brokers_known() { # N TIMEOUT_S: kroute's metadata lists N brokers
  local deadline=$((SECONDS + $2))
  until [ "$(counter kroute_brokers_known)" = "$1" ]; do
    [ $SECONDS -lt $deadline ] || { say "WARNING: kroute lists $(counter kroute_brokers_known) brokers, not $1, after $2 s"; return 1; }
    sleep 0.5
  done
}
# wait_traffic: kroute passes Produce bytes on to the brokers again
wait_traffic() {
  local a deadline=$((SECONDS + 60))
  a=$(counter kroute_upstream_produce_bytes_total)
  until [ "$(counter kroute_upstream_produce_bytes_total)" -gt "$a" ]; do
    [ $SECONDS -lt $deadline ] || { say "WARNING: no produce traffic through kroute within 60 s"; return 1; }
    sleep 0.5
  done
}
healthy() { # all brokers up, delays 0, ISRs full
  local n
  for n in 1 2 3; do cl delay "$n" 0 >/dev/null 2>&1 || true; done
  cl status >/dev/null 2>&1 || { for n in 1 2 3; do cl start-broker "$n" >/dev/null 2>&1 || true; done; }
  wait_isr_full 180 || true
}

# ---------------------------------------------------------------------------------------------
# faults: each appends "start_ms end_ms kind detail" to faults.log

FAULT_T0=0
fault_begin() { FAULT_T0=$(now_ms); say "fault $*"; echo "$FAULT_T0 $*" >>"$RUN/faults-begun.log"; }
fault_end() { echo "$FAULT_T0 $(now_ms) $*" >>"$RUN/faults.log"; }
rnd() { R=$(( $1 + RANDOM % ($2 - $1 + 1) )); }   # R = random integer in [$1, $2] (no subshell)

f_broker_kill() {
  rnd 1 3; local b=$R; rnd 5 20; local down=$R
  wait_isr_full 180 || true
  fault_begin broker-kill "broker=$b down=${down}s"
  cl kill-broker "$b" >/dev/null 2>&1
  sleep "$down"
  cl start-broker "$b" >/dev/null 2>>"$RUN/logs/chaos.err" || say "WARNING: start-broker $b failed"
  wait_isr_full 180 || true
  wait_brokers_known 3 60 || true
  fault_end broker-kill "broker=$b down=${down}s"
}
f_cut() {
  rnd 1 3; local b=$R
  fault_begin cut "broker=$b"
  cl cut "$b" >/dev/null 2>>"$RUN/logs/chaos.err"
  wait_traffic || true
  fault_end cut "broker=$b"
}
DELAYS=(50 100 200 500 1000)
f_delay() {
  rnd 1 3; local b=$R; rnd 0 4; local ms=${DELAYS[$R]}; rnd 10 30; local dur=$R
  fault_begin delay "broker=$b ms=$ms for=${dur}s"
  cl delay "$b" "$ms" >/dev/null 2>&1
  sleep "$dur"
  cl delay "$b" 0 >/dev/null 2>&1
  wait_traffic || true
  fault_end delay "broker=$b ms=$ms for=${dur}s"
}
f_elect() {
  fault_begin elect "all partitions"
  local before after moved
  before=$(leaders)
  cl elect-leaders >/dev/null 2>>"$RUN/logs/chaos.err" || true
  after=$(leaders)
  moved=$(diff <(echo "$before") <(echo "$after") | grep -c '^>' || true)
  fault_end elect "leaders_moved=$moved"
}
f_reassign() {
  rnd 0 1; local topic; [ $R = 0 ] && topic=soak-keyless || topic=soak-keyed
  rnd 0 5; local p=$R
  local reps; reps=$(describe | sed -n "s/.*Topic: ${topic}[ \t]*Partition: ${p}[ \t].*Replicas: \([0-9,]*\).*/\1/p")
  [ -n "$reps" ] || { say "WARNING: no replicas found for $topic-$p"; return 0; }
  IFS=, read -r r0 r1 r2 <<<"$reps"
  wait_isr_full 180 || true
  fault_begin reassign "$topic-$p replicas=$reps -> $r1,$r2 -> $r1,$r2,$r0"
  local step rc=0
  for step in "$r1,$r2" "$r1,$r2,$r0"; do
    echo "{\"version\":1,\"partitions\":[{\"topic\":\"$topic\",\"partition\":$p,\"replicas\":[$step]}]}" >"$RUN/reassign.json"
    cl tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --bootstrap-server "$BOOT" \
      --reassignment-json-file "$RUN/reassign.json" --execute >>"$RUN/logs/chaos.out" 2>>"$RUN/logs/chaos.err" || rc=1
    local deadline=$((SECONDS + 180)) v
    while :; do
      v=$(cl tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --bootstrap-server "$BOOT" \
        --reassignment-json-file "$RUN/reassign.json" --verify 2>&1 || true)
      grep -q "is completed" <<<"$v" && ! grep -q "in progress" <<<"$v" && break
      [ $SECONDS -lt $deadline ] || { say "WARNING: reassignment to [$step] not complete after 180 s"; rc=1; break; }
      sleep 1
    done
  done
  cl tool org.apache.kafka.tools.LeaderElectionCommand --bootstrap-server "$BOOT" --election-type PREFERRED \
    --topic "$topic" --partition "$p" >>"$RUN/logs/chaos.out" 2>>"$RUN/logs/chaos.err" || true
  wait_isr_full 180 || true
  fault_end reassign "$topic-$p $reps->$r1,$r2,$r0 leader=$(leaders | awk -v t="$topic" -v p="$p" '$1 == t && $2 == p { print $3 }') rc=$rc"
}
f_kroute() { # TERM|KILL
  local sig=$1 kind
  [ "$sig" = KILL ] && kind=kroute-kill || kind=kroute-term
  snapshot_metrics
  fault_begin "$kind" "pid=$KROUTE_PID"
  stop_kroute "$sig"
  start_kroute
  wait_traffic || true
  fault_end "$kind" "exit=$STOP_RC"
}

# ---------------------------------------------------------------------------------------------
# run

say "starting the soak cluster (state $KROUTE_CLUSTER_DIR, port offset $OFFSET)"
cl stop >/dev/null 2>&1 || true
cl start --relayed >/dev/null 2>"$RUN/logs/cluster-start.err" || { cat "$RUN/logs/cluster-start.err" >&2; die "cluster start"; }
for t in soak-keyless soak-keyed; do
  cl create-topic "$t" --replica-assignment 1:2:3,2:3:1,3:1:2,1:3:2,2:1:3,3:2:1 \
    --config min.insync.replicas=2 >/dev/null 2>>"$RUN/logs/cluster-start.err" || die "create-topic $t"
done
start_kroute
sampler &
SAMPLER_PID=$!

say "load: producers $PRODUCERS, each $RATE records/s of $VALUE_BYTES bytes, $CONSUMERS consumers, through $KR_BOOT"
java "${JAVA_OPTS[@]}" -cp "$JAVA_CP" SoakConsumer --bootstrap "$KR_BOOT" --group soak-group \
  --topics soak-keyless,soak-keyed --members "$CONSUMERS" --out "$RUN/consumer" --stop "$RUN/stop-consumers" \
  2>"$RUN/logs/consumer.err" &
CONSUMER_PID=$!
for spec in "jl soak-keyless 0" "jk soak-keyed $KEYS"; do
  read -r prefix topic keys <<<"$spec"
  [[ " $PRODUCERS " == *" $prefix "* ]] || continue
  java "${JAVA_OPTS[@]}" -cp "$JAVA_CP" SoakProducer --bootstrap "$KR_BOOT" --topic "$topic" --prefix "$prefix" \
    --rate "$RATE" --keys "$keys" --value-bytes "$VALUE_BYTES" --stop "$RUN/stop-producers" \
    --out "$RUN/producer-$prefix.log" 2>"$RUN/logs/producer-$prefix.err" &
  PRODUCER_PIDS+=($!)
done
for spec in "rl soak-keyless 0" "rk soak-keyed $KEYS"; do
  read -r prefix topic keys <<<"$spec"
  [[ " $PRODUCERS " == *" $prefix "* ]] || continue
  "$RUN/bin/soak_rdkafka" "$KR_BOOT" "$topic" "$prefix" "$RATE" "$keys" "$VALUE_BYTES" "$RUN/stop-producers" \
    "$RUN/producer-$prefix.log" enable.idempotence=true debug=eos 2>"$RUN/logs/producer-$prefix.err" &
  PRODUCER_PIDS+=($!)
done
LOAD_T0=$SECONDS
echo "$(now_ms)" >"$RUN/load-start"
wait_traffic || die "no produce traffic through kroute"

END=$((LOAD_T0 + MINUTES * 60))
# kroute restarts only before the RSS window and a warm-up before it (2 minutes, or a quarter of
# the window if that is shorter)
KROUTE_CUTOFF=$((END - WINDOW_S - (WINDOW_S / 4 < 120 ? WINDOW_S / 4 : 120)))
OTHERS=(broker-kill cut delay elect reassign)
deck=()
kroute_next=1
[ $((RANDOM % 2)) = 0 ] && ksig=(TERM KILL) || ksig=(KILL TERM)
while :; do
  rnd "$GAP_MIN" "$GAP_MAX"; gap=$R
  # the last fault must end before the load does: leave it a minute
  [ $((SECONDS + gap + 60)) -lt $END ] || break
  sleep "$gap"
  if [ $SECONDS -lt $KROUTE_CUTOFF ] && [ $kroute_next = 1 ]; then
    f_kroute "${ksig[0]}"; ksig=("${ksig[1]}" "${ksig[0]}"); kroute_next=0
    continue
  fi
  if [ ${#deck[@]} = 0 ]; then   # a shuffled deck: every kind once per round
    deck=("${OTHERS[@]}")
    for ((i = ${#deck[@]} - 1; i > 0; i--)); do rnd 0 "$i"; t=${deck[$i]}; deck[$i]=${deck[$R]}; deck[$R]=$t; done
  fi
  kind=${deck[0]}; deck=("${deck[@]:1}")
  case $kind in
    broker-kill) f_broker_kill ;; cut) f_cut ;; delay) f_delay ;; elect) f_elect ;; reassign) f_reassign ;;
  esac
  kroute_next=1
done
say "chaos over; load until the end ($(( END - SECONDS )) s)"
healthy
while [ $SECONDS -lt $END ]; do sleep 1; done
echo "$(now_ms)" >"$RUN/load-end"

say "stopping the producers (they flush)"
touch "$RUN/stop-producers"
for p in "${PRODUCER_PIDS[@]}"; do wait "$p" || say "WARNING: producer pid $p exited with $?"; done
PRODUCER_PIDS=()
# the end offsets, straight from the brokers; then the consumers read up to them
cl tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$BOOT" --topic 'soak-.*' --time -1 \
  >"$RUN/end-offsets.txt" 2>>"$RUN/logs/chaos.err" || die "GetOffsetShell"
say "end offsets: $(awk -F: '{ s += $3 } END { print s }' "$RUN/end-offsets.txt") records; waiting for the consumers"
deadline=$((SECONDS + 300))
until python3 bench/soak/check.py --caught-up "$RUN" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || { say "WARNING: the consumers did not reach the end offsets within 300 s"; break; }
  sleep 2
done
touch "$RUN/stop-consumers"
wait "$CONSUMER_PID" || say "WARNING: the consumer exited with $?"
CONSUMER_PID=
kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=
snapshot_metrics
stop_kroute TERM
[ "$STOP_RC" = 0 ] || say "WARNING: kroute's final SIGTERM: exit $STOP_RC"
say "checking"
set +e
python3 bench/soak/check.py "$RUN" >"$RUN/report.md"
status=$?
set -e
cat "$RUN/report.md"
say "report: $RUN/report.md"
exit $status
