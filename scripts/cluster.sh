#!/usr/bin/env bash
# Local Apache Kafka test cluster for kroute: 1 KRaft controller + 3 brokers on 127.0.0.1.
#
#   scripts/cluster.sh start                 format (if fresh) + start all nodes, wait until the 3
#                                            brokers are registered; last stdout line = bootstrap
#   scripts/cluster.sh stop [--keep-data]    SIGTERM all nodes (SIGKILL after a grace period);
#                                            removes the data dir unless --keep-data
#   scripts/cluster.sh status                one line per node; exit 0 iff all 4 nodes run
#   scripts/cluster.sh bootstrap             prints 127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094
#   scripts/cluster.sh create-topic NAME (--partitions N --replication-factor R |
#                                         --replica-assignment 1:2:3,2:3:1) [--config k=v]...
#                                            TopicCommand --create, then waits until every
#                                            partition has a leader
#   scripts/cluster.sh describe-topic NAME | delete-topic NAME
#   scripts/cluster.sh kill-broker N [--wait-fenced]
#                                            SIGKILL broker N (1..3); --wait-fenced also waits
#                                            (~6s) until the controller fenced it
#   scripts/cluster.sh start-broker N        restart broker N on its data, wait until registered
#   scripts/cluster.sh elect-leaders [TOPIC] preferred leader election (auto rebalance is off, so
#                                            leaders stay where failover put them until this)
#   scripts/cluster.sh lib                   fetch (once) and print the Kafka jar dir:
#                                              java -cp "$(scripts/cluster.sh lib)/*" CLASS ...
#   scripts/cluster.sh tool CLASS ARGS...    run a Kafka tool class with quiet logging, e.g.
#                                              tool org.apache.kafka.tools.ProducerPerformance ...
#
# Layout: controller node 100 at 127.0.0.1:19091 (controller only, so any broker can be killed);
# brokers 1,2,3 at 127.0.0.1:19092/19093/19094.
#
# Environment:
#   KROUTE_KAFKA_VERSION  Apache Kafka version from Maven Central (default 4.1.2)
#   KROUTE_CACHE          jar dir (default $HOME/.cache/kroute/kafka-lib-<version>)
#   KROUTE_CLUSTER_DIR    state dir: config/, data/, logs/, pids/ (default <repo>/target/cluster)
#   KROUTE_START_TIMEOUT  seconds to wait for the brokers in start/start-broker (default 90)
#   JAVA                  java binary (Java 17+; default: java)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
KAFKA_CONF_DIR=$SCRIPT_DIR/kafka
KAFKA_VERSION=${KROUTE_KAFKA_VERSION:-4.1.2}
LIB=${KROUTE_CACHE:-$HOME/.cache/kroute/kafka-lib-$KAFKA_VERSION}
STATE=${KROUTE_CLUSTER_DIR:-$REPO_DIR/target/cluster}
START_TIMEOUT=${KROUTE_START_TIMEOUT:-90}
JAVA=${JAVA:-java}

HOST=127.0.0.1
CONTROLLER_ID=100
CONTROLLER_PORT=19091
BROKERS=(1 2 3)
BOOTSTRAP=127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094

BROKER_JVM_OPTS=(-Xms128m -Xmx512m -XX:+UseSerialGC -XX:MaxDirectMemorySize=256m
  -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$KAFKA_CONF_DIR/log4j2.properties")
CONTROLLER_JVM_OPTS=(-Xms64m -Xmx256m -XX:+UseSerialGC
  -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$KAFKA_CONF_DIR/log4j2.properties")
TOOL_JVM_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true
  "-Dlog4j2.configurationFile=$KAFKA_CONF_DIR/log4j2-tools.properties")

die() { echo "cluster.sh: $*" >&2; exit 1; }
say() { echo "cluster.sh: $*" >&2; }   # progress goes to stderr; stdout is for results

node_port() { if [ "$1" = "$CONTROLLER_ID" ]; then echo "$CONTROLLER_PORT"; else echo $((19091 + $1)); fi; }
node_conf() { echo "$STATE/config/node$1.properties"; }
node_pidfile() { echo "$STATE/pids/node$1.pid"; }
node_log() { echo "$STATE/logs/node$1.log"; }
all_nodes() { echo "$CONTROLLER_ID" "${BROKERS[@]}"; }

# ---------------------------------------------------------------------------------------------
# jars

ensure_lib() {
  [ -f "$LIB/.complete" ] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Kafka $KAFKA_VERSION jars into $LIB)"
  mkdir -p "$(dirname "$LIB")"
  exec 8>"$LIB.lock"
  flock -w 600 8 || die "timed out waiting for $LIB.lock"
  if [ ! -f "$LIB/.complete" ]; then
    say "fetching Apache Kafka $KAFKA_VERSION jars into $LIB"
    local binding=log4j-slf4j-impl tmp
    for _ in 1 2; do
      tmp=$(mktemp -d "$LIB.tmp.XXXXXX")
      if ! mvn -B -q -f "$KAFKA_CONF_DIR/pom.xml" "-Dkafka.version=$KAFKA_VERSION" "-Dslf4j.binding=$binding" \
          org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
          "-DoutputDirectory=$tmp" -DincludeScope=runtime >"$tmp.mvn.log" 2>&1; then
        tail -n 30 "$tmp.mvn.log" >&2; rm -rf "$tmp" "$tmp.mvn.log"
        die "mvn dependency:copy-dependencies failed for Kafka $KAFKA_VERSION"
      fi
      rm -f "$tmp.mvn.log"
      # the SLF4J binding must match the slf4j-api that Maven mediated into lib/
      if compgen -G "$tmp/slf4j-api-2.*.jar" >/dev/null && [ "$binding" = log4j-slf4j-impl ]; then
        rm -rf "$tmp"; binding=log4j-slf4j2-impl; continue
      fi
      break
    done
    [ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ] && [ -f "$tmp/kafka-tools-$KAFKA_VERSION.jar" ] &&
      [ -f "$tmp/kafka-clients-$KAFKA_VERSION.jar" ] || { rm -rf "$tmp"; die "Kafka jars missing after mvn"; }
    touch "$tmp/.complete"
    rm -rf "$LIB"
    mv "$tmp" "$LIB"
  fi
  flock -u 8; exec 8>&-
}

run_tool() { # CLASS ARGS...
  "$JAVA" "${TOOL_JVM_OPTS[@]}" -cp "$LIB/*" "$@"
}

# ---------------------------------------------------------------------------------------------
# processes

lock_state() {
  mkdir -p "$STATE"
  exec 9>"$STATE/.lock"
  flock -w 300 9 || die "another cluster.sh holds $STATE/.lock"
}

node_pid() { # prints the pid if node N runs (the pid file points at a JVM running N's config)
  local f pid=; f=$(node_pidfile "$1")
  if [ -f "$f" ]; then
    pid=$(cat "$f" 2>/dev/null) || return 1
  else
    # pid file lost (e.g. target/ wiped while running): look for a JVM running exactly N's config
    local c
    for c in $(grep -lF -- "$(node_conf "$1")" /proc/[0-9]*/cmdline 2>/dev/null || true); do
      tr '\0' ' ' <"$c" 2>/dev/null | grep -qF -- " kafka.Kafka " && { pid=$(cut -d/ -f3 <<<"$c"); break; }
    done
  fi
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- " kafka.Kafka " || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$(node_conf "$1")" || return 1
  # a zombie (killed, not yet reaped) counts as dead
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}

port_busy() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

pid_gone() { # PID: the process has exited (zombie counts as gone; sockets are closed by then)
  [ -d "/proc/$1" ] || return 0
  [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]
}

wait_pid_gone() { # PID SECONDS
  local deadline=$((SECONDS + $2))
  while ! pid_gone "$1"; do [ "$SECONDS" -lt "$deadline" ] || return 1; sleep 0.1; done
}

render_conf() { # NODE
  local n=$1 tmpl=broker.properties
  [ "$n" = "$CONTROLLER_ID" ] && tmpl=controller.properties
  mkdir -p "$STATE/config"
  sed -e "s#@NODE_ID@#$n#g" -e "s#@PORT@#$(node_port "$n")#g" -e "s#@LOG_DIR@#$STATE/data/node$n#g" \
      -e "s#@CONTROLLER_ID@#$CONTROLLER_ID#g" -e "s#@CONTROLLER@#$HOST:$CONTROLLER_PORT#g" \
      "$KAFKA_CONF_DIR/$tmpl" >"$(node_conf "$n")"
}

format_node() { # NODE CLUSTER_ID
  local n=$1
  [ -f "$STATE/data/node$n/meta.properties" ] && return 0
  run_tool kafka.tools.StorageTool format "--cluster-id=$2" -c "$(node_conf "$n")" --ignore-formatted \
    >"$STATE/logs/format-node$n.log" 2>&1 ||
    { cat "$STATE/logs/format-node$n.log" >&2; die "formatting node $n failed"; }
}

ensure_port_free() { # NODE
  local port deadline=$((SECONDS + 10)); port=$(node_port "$1")
  while port_busy "$port"; do  # e.g. a just-stopped process still closing its sockets
    [ "$SECONDS" -lt "$deadline" ] || die "port $port is in use by another process (not node $1 of $STATE)"
    sleep 0.2
  done
}

launch_node() { # NODE
  local n=$1 opts log pid
  if [ "$n" = "$CONTROLLER_ID" ]; then opts=("${CONTROLLER_JVM_OPTS[@]}"); else opts=("${BROKER_JVM_OPTS[@]}"); fi
  ensure_port_free "$n"
  log=$(node_log "$n")
  [ -f "$log" ] && mv -f "$log" "$log.prev"
  # own session, no inherited stdio or lock fd: callers (tests using Command::output) get EOF
  setsid "$JAVA" "${opts[@]}" -cp "$LIB/*" kafka.Kafka "$(node_conf "$n")" </dev/null >"$log" 2>&1 8>&- 9>&- &
  pid=$!
  echo "$pid" >"$(node_pidfile "$n")"
}

broker_versions() { # BOOTSTRAP: one line per broker in the metadata (fenced brokers are absent):
  # "host:port (id: N rack: null isFenced: false) -> (" when it answered, "-> ERROR: ..." if not
  run_tool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$1" 2>/dev/null |
    grep '^[^ ]* (id: ' || true
}

brokers_up() { # prints the ids of brokers that the metadata lists AND that answer ApiVersions
  broker_versions "${1:-$BOOTSTRAP}" | sed -n 's/^[^ ]* (id: \([0-9]*\) .*) -> (.*/\1/p' | sort -n | tr '\n' ' '
}

brokers_listed() { # prints the ids of the (unfenced) brokers in the metadata, reachable or not
  broker_versions "${1:-$BOOTSTRAP}" | sed -n 's/^[^ ]* (id: \([0-9]*\) .*/\1/p' | sort -n | tr '\n' ' '
}

log_tails() {
  local n
  for n in $(all_nodes); do
    echo "----- node $n ($(node_log "$n")) -----" >&2
    tail -n 25 "$(node_log "$n")" >&2 2>/dev/null || true
  done
}

wait_started() { # NODE DEADLINE: the node's own log says its startup finished
  local n=$1 deadline=$2
  until grep -q "Kafka Server started" "$(node_log "$n")" 2>/dev/null; do
    node_pid "$n" >/dev/null || { log_tails; die "node $n exited during startup"; }
    [ "$SECONDS" -lt "$deadline" ] || { log_tails; die "node $n did not start within ${START_TIMEOUT}s"; }
    sleep 0.3
  done
}

wait_registered() { # DEADLINE BROKER...: metadata lists all given brokers and each answers
  local deadline=$1; shift
  local up b ok
  while :; do
    up=" $(brokers_up) "; ok=1
    for b in "$@"; do [[ $up == *" $b "* ]] || ok=0; done
    [ $ok = 1 ] && return 0
    for b in $(all_nodes); do node_pid "$b" >/dev/null || { log_tails; die "node $b is not running"; }; done
    [ "$SECONDS" -lt "$deadline" ] || { log_tails; die "brokers $* not all registered within ${START_TIMEOUT}s (up:${up% })"; }
    sleep 0.5
  done
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_start() {
  ensure_lib
  lock_state
  local n missing=() cid
  for n in $(all_nodes); do node_pid "$n" >/dev/null || missing+=("$n"); done
  if [ ${#missing[@]} -eq 0 ]; then
    say "cluster already running"
    # it may still be starting (e.g. an earlier start timed out): wait for the brokers anyway
    wait_registered $((SECONDS + START_TIMEOUT)) "${BROKERS[@]}"
    echo "$BOOTSTRAP"; return 0
  fi
  mkdir -p "$STATE/data" "$STATE/logs" "$STATE/pids"
  if [ -f "$STATE/cluster.id" ]; then
    cid=$(cat "$STATE/cluster.id")
  else
    # 16 random bytes, base64url without padding = a Kafka cluster id (like Kafka's own
    # Uuid.randomUuid, none starting with '-', which the tools' argument parser would take for an option)
    cid=-
    while [[ $cid == -* ]]; do cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'); done
    echo "$cid" >"$STATE/cluster.id"
  fi
  local deadline=$((SECONDS + START_TIMEOUT))
  say "starting nodes ${missing[*]} (state: $STATE)"
  for n in "${missing[@]}"; do ensure_port_free "$n"; render_conf "$n"; done
  local pids=()
  for n in "${missing[@]}"; do format_node "$n" "$cid" & pids+=($!); done
  for n in "${pids[@]}"; do wait "$n" || die "format failed"; done
  # controller first: brokers register with it
  for n in "${missing[@]}"; do launch_node "$n"; done
  for n in "${missing[@]}"; do wait_started "$n" "$deadline"; done
  wait_registered "$deadline" "${BROKERS[@]}"
  say "cluster up in ${SECONDS}s"
  echo "$BOOTSTRAP"
}

stop_pids() { # GRACE_SECONDS NODE...
  local grace=$1 n pid; shift
  local live=()
  local pids=()
  for n in "$@"; do
    if pid=$(node_pid "$n"); then kill -TERM "$pid" 2>/dev/null || true; live+=("$n"); pids+=("$pid"); fi
  done
  local deadline=$((SECONDS + grace)) i
  for i in "${!live[@]}"; do
    n=${live[$i]}; pid=${pids[$i]}
    if ! wait_pid_gone "$pid" $((deadline > SECONDS ? deadline - SECONDS : 0)); then
      say "node $n did not stop within ${grace}s, SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_pid_gone "$pid" 10 || die "node $n (pid $pid) survives SIGKILL"
    fi
    rm -f "$(node_pidfile "$n")"
  done
}

cmd_stop() {
  local keep=0
  case "${1:-}" in --keep-data) keep=1 ;; "") ;; *) die "usage: stop [--keep-data]" ;; esac
  lock_state
  # brokers first (controlled shutdown talks to the controller), then the controller
  stop_pids 20 "${BROKERS[@]}"
  stop_pids 10 "$CONTROLLER_ID"
  if [ $keep = 0 ]; then
    rm -rf "$STATE/data" "$STATE/cluster.id"
    say "stopped, data removed"
  else
    say "stopped, data kept in $STATE/data"
  fi
}

cmd_status() {
  local n pid all=0 role
  for n in $(all_nodes); do
    role=broker; [ "$n" = "$CONTROLLER_ID" ] && role=controller
    if pid=$(node_pid "$n"); then
      echo "$role $n $HOST:$(node_port "$n") running pid=$pid"
    else
      echo "$role $n $HOST:$(node_port "$n") stopped"; all=1
    fi
  done
  return $all
}

need_broker_id() {
  [[ ${1:-} =~ ^[123]$ ]] || die "broker id must be 1, 2 or 3 (got '${1:-}')"
}

cmd_kill_broker() {
  need_broker_id "${1:-}"
  local n=$1 wait_fenced=0
  case "${2:-}" in --wait-fenced) wait_fenced=1 ;; "") ;; *) die "usage: kill-broker N [--wait-fenced]" ;; esac
  ensure_lib
  lock_state
  local pid
  if pid=$(node_pid "$n"); then
    kill -KILL "$pid"
    wait_pid_gone "$pid" 10 || die "broker $n (pid $pid) survives SIGKILL"
    rm -f "$(node_pidfile "$n")"
    say "broker $n killed (pid $pid)"
  else
    say "broker $n is not running"
  fi
  if [ $wait_fenced = 1 ]; then
    # the controller fences it after broker.session.timeout.ms (6s); then it leaves the metadata
    local deadline=$((SECONDS + 30)) listed
    while listed=" $(brokers_listed) "; [[ $listed == *" $n "* ]]; do
      [ "$SECONDS" -lt "$deadline" ] || die "broker $n still in the metadata after 30s"
      sleep 0.5
    done
    say "broker $n fenced"
  fi
}

cmd_elect_leaders() { # [TOPIC]: move leadership back to the preferred (first) replicas
  ensure_lib
  if [ -n "${1:-}" ]; then
    local parts p
    parts=$(run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --describe --topic "$1" |
      sed -n 's/.*Partition: \([0-9]*\).*/\1/p')
    [ -n "$parts" ] || die "topic $1 not found"
    for p in $parts; do
      run_tool org.apache.kafka.tools.LeaderElectionCommand --bootstrap-server "$BOOTSTRAP" \
        --election-type PREFERRED --topic "$1" --partition "$p" >&2 || true
    done
  else
    run_tool org.apache.kafka.tools.LeaderElectionCommand --bootstrap-server "$BOOTSTRAP" \
      --election-type PREFERRED --all-topic-partitions >&2 || true
  fi
}

cmd_start_broker() {
  need_broker_id "${1:-}"
  ensure_lib
  lock_state
  local n=$1
  node_pid "$CONTROLLER_ID" >/dev/null || die "controller is not running (use start)"
  if node_pid "$n" >/dev/null; then say "broker $n already running"; return 0; fi
  [ -f "$STATE/data/node$n/meta.properties" ] || die "broker $n has no formatted data in $STATE/data (use start)"
  local deadline=$((SECONDS + START_TIMEOUT))
  render_conf "$n"
  launch_node "$n"
  wait_started "$n" "$deadline"
  # ask the restarted broker itself too, so a stale registration of the killed process can't pass
  local up
  until up=" $(brokers_up "$HOST:$(node_port "$n")") " && [[ $up == *" $n "* ]]; do
    node_pid "$n" >/dev/null || { log_tails; die "broker $n exited during startup"; }
    [ "$SECONDS" -lt "$deadline" ] || { log_tails; die "broker $n not registered within ${START_TIMEOUT}s"; }
    sleep 0.5
  done
  say "broker $n up in ${SECONDS}s"
}

cmd_create_topic() {
  local name=${1:-}
  [ -n "$name" ] && [[ $name != -* ]] ||
    die "usage: create-topic NAME (--partitions N --replication-factor R | --replica-assignment 1:2:3,2:3:1) [--config k=v]..."
  shift
  ensure_lib
  run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --create --topic "$name" "$@" >&2 ||
    die "creating topic $name failed"
  # wait until every partition has a leader in the metadata a broker serves
  local deadline=$((SECONDS + 30)) out
  while :; do
    out=$(run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --describe --topic "$name" 2>/dev/null || true)
    if grep -q 'Partition: ' <<<"$out" && ! grep -qE 'Leader: (none|-1)' <<<"$out"; then break; fi
    [ "$SECONDS" -lt "$deadline" ] || die "topic $name has partitions without leader after 30s"
    sleep 0.3
  done
  echo "$name"
}

cmd_describe_topic() {
  ensure_lib
  run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --describe ${1:+--topic "$1"}
}

cmd_delete_topic() {
  [ -n "${1:-}" ] || die "usage: delete-topic NAME"
  ensure_lib
  run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --delete --topic "$1"
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

cmd=${1:-}; [ $# -gt 0 ] && shift
case "$cmd" in
  start) cmd_start ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status ;;
  bootstrap) echo "$BOOTSTRAP" ;;
  create-topic) cmd_create_topic "$@" ;;
  describe-topic) cmd_describe_topic "$@" ;;
  delete-topic) cmd_delete_topic "$@" ;;
  kill-broker) cmd_kill_broker "$@" ;;
  start-broker) cmd_start_broker "$@" ;;
  elect-leaders) cmd_elect_leaders "$@" ;;
  lib) ensure_lib; echo "$LIB" ;;
  tool) ensure_lib; [ $# -gt 0 ] || die "usage: tool CLASS ARGS..."; run_tool "$@" ;;
  -h|--help|help|"") usage ;;
  *) echo "cluster.sh: unknown command '$cmd'" >&2; usage ;;
esac
