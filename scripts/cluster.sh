#!/usr/bin/env bash
# Local Apache Kafka test cluster for kroute: 1 KRaft controller + 3 brokers on 127.0.0.1.
#
#   scripts/cluster.sh start [--relayed|--direct]
#                                            format (if fresh) + start all nodes, wait until the 3
#                                            brokers are registered; last stdout line = bootstrap.
#                                            Mode (see below): the flag, else $KROUTE_CLUSTER_MODE,
#                                            else direct; a (partly) running cluster keeps its mode
#   scripts/cluster.sh stop [--keep-data]    SIGTERM all nodes and relays (SIGKILL after a grace
#                                            period); removes data, mode and delays unless --keep-data
#   scripts/cluster.sh status                "mode M", then one line per node (and per relay);
#                                            exit 0 iff all 4 nodes (and in relayed mode 3 relays) run
#   scripts/cluster.sh bootstrap             the addresses clients use: direct mode
#                                            127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094, relayed
#                                            127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194
#   scripts/cluster.sh delay N MS            relayed mode: broker N answers MS ms late from now on,
#                                            for every client and for its followers (0 = no delay)
#   scripts/cluster.sh delays                one line per broker: "broker N MS"
#   scripts/cluster.sh cut N                 relayed mode: cut every open connection to broker N
#                                            (SIGUSR1 to its relay, which closes both sockets of
#                                            each; new connections work at once); exit 1 if the
#                                            relay is not running (or is an older build without cut)
#   scripts/cluster.sh create-topic NAME (--partitions N --replication-factor R |
#                                         --replica-assignment 1:2:3,2:3:1) [--config k=v]...
#                                            TopicCommand --create, then waits until every
#                                            partition has a leader
#   scripts/cluster.sh describe-topic NAME | delete-topic NAME
#   scripts/cluster.sh kill-broker N [--wait-fenced]
#                                            SIGKILL broker N (1..3); --wait-fenced also waits
#                                            (~6s) until the controller fenced it
#   scripts/cluster.sh start-broker N        restart broker N on its data (and its relay if it is
#                                            gone, relayed mode), wait until registered
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
# Modes (persisted in <state>/mode by start, so later commands such as start-broker use it):
#   direct   (default) brokers advertise their own listeners 19092..19094.
#   relayed  "a slow broker that every client sees": this kernel has no netem, so each broker N
#            gets a delay_relay (src/bin/delay_relay.rs, built by `cargo build --release --bin
#            delay_relay` when missing or stale) on 127.0.0.1:1919(1+N) forwarding to its real
#            listener 1909(1+N), and the broker ADVERTISES the relay. Clients, kroute and the other
#            brokers' replica fetchers (inter-broker traffic uses the advertised listener) thus all
#            reach broker N through its relay, which delays everything the broker sends back by the
#            ms in <state>/delay/brokerN (`delay N MS`; re-read every 100 ms). Relays are started
#            before the brokers, stopped by stop, restarted by start-broker, and survive
#            kill-broker (new connections to a killed broker just fail). Logs: <state>/logs/relayN.log.
#            The controller (19091) is not relayed.
#
# Environment:
#   KROUTE_KAFKA_VERSION  Apache Kafka version from Maven Central (default 4.1.2)
#   KROUTE_CACHE          jar dir (default $HOME/.cache/kroute/kafka-lib-<version>)
#   KROUTE_CLUSTER_DIR    state dir: config/, data/, logs/, pids/, delay/, mode
#                         (default <repo>/target/cluster)
#   KROUTE_CLUSTER_MODE   direct or relayed: the mode `start` uses when given no flag
#   KROUTE_DELAY_RELAY    delay_relay binary (default <target dir>/release/delay_relay)
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
DIRECT_BOOTSTRAP=127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094
RELAYED_BOOTSTRAP=127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194
MODE_FILE=$STATE/mode
RELAY_BIN=${KROUTE_DELAY_RELAY:-${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/delay_relay}

valid_mode() { [ "$1" = direct ] || [ "$1" = relayed ]; }
# the mode of the cluster in $STATE, as written by start (none: direct; $KROUTE_CLUSTER_MODE only
# matters to start)
MODE=$(cat "$MODE_FILE" 2>/dev/null || true)
MODE=${MODE:-direct}
valid_mode "$MODE" || { echo "cluster.sh: $MODE_FILE must say direct or relayed (got '$MODE')" >&2; exit 2; }
set_mode() { # MODE: the addresses clients use (advertised) depend on it
  MODE=$1
  if [ "$MODE" = relayed ]; then BOOTSTRAP=$RELAYED_BOOTSTRAP; else BOOTSTRAP=$DIRECT_BOOTSTRAP; fi
}
set_mode "$MODE"

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
relay_port() { echo $((19191 + $1)); }   # broker N's delay_relay (relayed mode): 19192..19194
advertised_port() { if [ "$MODE" = relayed ]; then relay_port "$1"; else node_port "$1"; fi; }

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
      -e "s#@ADVERTISED_PORT@#$(advertised_port "$n")#g" \
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

# delay relays (relayed mode): one delay_relay process per broker, 127.0.0.1:1919N -> :1909N

relay_pidfile() { echo "$STATE/pids/relay$1.pid"; }
relay_log() { echo "$STATE/logs/relay$1.log"; }
delay_file() { echo "$STATE/delay/broker$1"; }

relay_pid() { # prints the pid if broker N's relay (of this state dir) runs
  local f pid= c; f=$(relay_pidfile "$1")
  if [ -f "$f" ]; then
    pid=$(cat "$f" 2>/dev/null) || return 1
  else
    for c in $(grep -lF -- "$(delay_file "$1")" /proc/[0-9]*/cmdline 2>/dev/null || true); do
      tr '\0' ' ' <"$c" 2>/dev/null | grep -qF -- "delay_relay " && { pid=$(cut -d/ -f3 <<<"$c"); break; }
    done
  fi
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- " --delay-file $(delay_file "$1")" || return 1
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}

ensure_relay_bin() { # build target/release/delay_relay if missing or older than its source
  local src=$REPO_DIR/src/bin/delay_relay.rs
  [ -x "$RELAY_BIN" ] && { [ ! -f "$src" ] || [ "$RELAY_BIN" -nt "$src" ]; } && return 0
  command -v cargo >/dev/null || die "cargo not found (needed to build $RELAY_BIN)"
  say "building delay_relay (cargo build --release --bin delay_relay)"
  if ! (cd "$REPO_DIR" && cargo build --release --quiet --bin delay_relay 8>&- 9>&-) >&2; then
    # the bin links the crate's lib, which may be mid-edit: an older binary still does the job
    [ -x "$RELAY_BIN" ] || die "building delay_relay failed"
    say "building delay_relay failed, using the existing $RELAY_BIN"
  fi
  [ -x "$RELAY_BIN" ] || die "$RELAY_BIN missing after cargo build (KROUTE_DELAY_RELAY overrides the path)"
}

start_relay() { # N: start broker N's relay unless it runs; keeps the delay file
  local n=$1 port log pid deadline
  relay_pid "$n" >/dev/null && return 0
  port=$(relay_port "$n")
  deadline=$((SECONDS + 10))
  while port_busy "$port"; do
    [ "$SECONDS" -lt "$deadline" ] || die "port $port is in use by another process (not relay $n of $STATE)"
    sleep 0.2
  done
  mkdir -p "$STATE/delay" "$STATE/logs" "$STATE/pids"
  [ -f "$(delay_file "$n")" ] || echo 0 >"$(delay_file "$n")"
  log=$(relay_log "$n")
  [ -f "$log" ] && mv -f "$log" "$log.prev"
  # higher CPU priority where allowed (root): every broker byte passes a relay, so on a small busy
  # machine (2 cores, 4 JVMs + clients) the relays should not be the ones waiting for a CPU
  local prio=()
  nice -n -10 true 2>/dev/null && prio=(nice -n -10)
  setsid "${prio[@]}" "$RELAY_BIN" --listen "$HOST:$port" --target "$HOST:$(node_port "$n")" \
    --delay-file "$(delay_file "$n")" </dev/null >"$log" 2>&1 8>&- 9>&- &
  pid=$!
  echo "$pid" >"$(relay_pidfile "$n")"
  # listening before the broker advertises it
  deadline=$((SECONDS + 10))
  until port_busy "$port"; do
    pid_gone "$pid" && { cat "$log" >&2; die "relay $n exited during startup"; }
    [ "$SECONDS" -lt "$deadline" ] || { cat "$log" >&2; die "relay $n not listening on $port after 10s"; }
    sleep 0.05
  done
}

stop_relays() { # SIGTERM every relay of this state dir (also in direct mode: leftovers)
  local n pid
  for n in "${BROKERS[@]}"; do
    if pid=$(relay_pid "$n"); then
      kill -TERM "$pid" 2>/dev/null || true
      wait_pid_gone "$pid" 5 || { kill -KILL "$pid" 2>/dev/null || true; wait_pid_gone "$pid" 5 || true; }
    fi
    rm -f "$(relay_pidfile "$n")"
  done
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
  local want=${KROUTE_CLUSTER_MODE:-}
  case "${1:-}" in --relayed) want=relayed ;; --direct) want=direct ;; "") ;;
    *) die "usage: start [--relayed|--direct]" ;; esac
  [ -z "$want" ] || valid_mode "$want" || die "KROUTE_CLUSTER_MODE must be direct or relayed (got '$want')"
  ensure_lib
  lock_state
  local n missing=() cid running=0
  for n in $(all_nodes); do if node_pid "$n" >/dev/null; then running=1; else missing+=("$n"); fi; done
  if [ $running = 1 ]; then
    # (partly) running: keep its mode
    [ -z "$want" ] || [ "$want" = "$MODE" ] || die "the cluster runs in $MODE mode; stop it before starting it $want"
  else
    set_mode "${want:-direct}"
    mkdir -p "$STATE"
    echo "$MODE" >"$MODE_FILE"
    rm -rf "$STATE/delay"   # a fresh start has no delays
  fi
  if [ "$MODE" = relayed ]; then
    ensure_relay_bin
    # before the brokers: they advertise the relays, and replica fetchers connect through them
    for n in "${BROKERS[@]}"; do start_relay "$n"; done
  fi
  if [ ${#missing[@]} -eq 0 ]; then
    say "cluster already running ($MODE mode)"
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
  say "cluster up in ${SECONDS}s ($MODE mode)"
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
  stop_relays
  if [ $keep = 0 ]; then
    rm -rf "$STATE/data" "$STATE/cluster.id" "$STATE/delay" "$MODE_FILE"
    say "stopped, data removed"
  else
    say "stopped, data kept in $STATE/data"
  fi
}

cmd_status() {
  local n pid all=0 role
  echo "mode $MODE"
  for n in $(all_nodes); do
    role=broker; [ "$n" = "$CONTROLLER_ID" ] && role=controller
    if pid=$(node_pid "$n"); then
      echo "$role $n $HOST:$(node_port "$n") running pid=$pid"
    else
      echo "$role $n $HOST:$(node_port "$n") stopped"; all=1
    fi
  done
  for n in "${BROKERS[@]}"; do
    if pid=$(relay_pid "$n"); then
      echo "relay $n $HOST:$(relay_port "$n") -> $HOST:$(node_port "$n") running pid=$pid delay=$(delay_ms "$n")ms"
    elif [ "$MODE" = relayed ]; then
      echo "relay $n $HOST:$(relay_port "$n") -> $HOST:$(node_port "$n") stopped"; all=1
    fi
  done
  return $all
}

delay_ms() { # N: what broker N's relay reads from its delay file (invalid/missing = 0)
  local v; v=$(tr -d ' \t\n' 2>/dev/null <"$(delay_file "$1")" || true)
  [[ $v =~ ^[0-9]+$ ]] && echo $((10#$v)) || echo 0
}

cmd_delay() { # N MS
  need_broker_id "${1:-}"
  [[ ${2:-} =~ ^[0-9]+$ ]] || die "usage: delay N MS (MS: integer milliseconds, 0 = no delay)"
  [ "$MODE" = relayed ] || die "delays need a cluster started in relayed mode (start --relayed); this one is $MODE"
  mkdir -p "$STATE/delay"
  # atomic replace: the relay never reads a half-written file
  echo "$((10#$2))" >"$(delay_file "$1").tmp" && mv -f "$(delay_file "$1").tmp" "$(delay_file "$1")"
  relay_pid "$1" >/dev/null || say "warning: relay $1 is not running"
  say "broker $1: responses delayed by $((10#$2)) ms (the relay picks it up within 100 ms)"
}

cmd_delays() { # one line per broker: "broker N MS"
  local n
  for n in "${BROKERS[@]}"; do echo "broker $n $(delay_ms "$n")"; done
}

cmd_cut() { # N: SIGUSR1 to broker N's relay, which closes all connections it relays right now
  need_broker_id "${1:-}"
  [ $# -eq 1 ] || die "usage: cut N"
  [ "$MODE" = relayed ] || die "cut needs a cluster started in relayed mode (start --relayed); this one is $MODE"
  local pid
  pid=$(relay_pid "$1") || die "relay $1 is not running"
  # a relay built before `cut` existed does not handle SIGUSR1, whose default action kills it:
  # check its caught-signals mask (SIGUSR1 = 10, bit 9) first
  local caught
  caught=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null) || true
  [ -n "$caught" ] && (( (16#$caught >> 9) & 1 )) ||
    die "relay $1 (pid $pid) does not handle SIGUSR1 (an older delay_relay): restart the cluster"
  kill -USR1 "$pid" || die "could not signal relay $1 (pid $pid)"
  say "broker $1: open connections through relay $1 (pid $pid) cut (see $(relay_log "$1"))"
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
  if [ "$MODE" = relayed ]; then ensure_relay_bin; start_relay "$n"; fi
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
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status ;;
  bootstrap) echo "$BOOTSTRAP" ;;
  create-topic) cmd_create_topic "$@" ;;
  describe-topic) cmd_describe_topic "$@" ;;
  delete-topic) cmd_delete_topic "$@" ;;
  kill-broker) cmd_kill_broker "$@" ;;
  start-broker) cmd_start_broker "$@" ;;
  elect-leaders) cmd_elect_leaders "$@" ;;
  delay) cmd_delay "$@" ;;
  delays) cmd_delays ;;
  cut) cmd_cut "$@" ;;
  lib) ensure_lib; echo "$LIB" ;;
  tool) ensure_lib; [ $# -gt 0 ] || die "usage: tool CLASS ARGS..."; run_tool "$@" ;;
  -h|--help|help|"") usage ;;
  *) echo "cluster.sh: unknown command '$cmd'" >&2; usage ;;
esac
