#!/usr/bin/env bash
# Local Apache Kafka test cluster for kroute: 1 KRaft controller (or 1 ZooKeeper server) + 3
# brokers on 127.0.0.1, of any Kafka version from 2.8 to 4.x.
#
#   scripts/cluster.sh start [--relayed|--direct] [--secured] [--kraft|--zookeeper]
#                                            format (if fresh) + start all nodes, wait until the 3
#                                            brokers are registered; last stdout line = bootstrap.
#                                            Kafka $KROUTE_KAFKA_VERSION (default 4.1.2); metadata
#                                            in KRaft or ZooKeeper: the flag, else
#                                            $KROUTE_CLUSTER_METADATA, else zookeeper before 4.0
#                                            and kraft from 4.0 (see "Versions" below).
#                                            Mode (see below): the flag, else $KROUTE_CLUSTER_MODE,
#                                            else direct; a (partly) running cluster keeps its mode.
#                                            --secured (or $KROUTE_CLUSTER_SECURED=1): also the TLS
#                                            and SASL listeners (see "Secured" below); a (partly)
#                                            running cluster keeps whether it is secured, and
#                                            `start --secured` fails on one running without it.
#                                            Data kept by `stop --keep-data` is resumed (with a note
#                                            when it holds 1000+ partition directories per broker)
#   scripts/cluster.sh stop [--keep-data]    SIGTERM all nodes and relays (SIGKILL after a grace
#                                            period); removes data, mode, secured flag, delays and
#                                            caps
#                                            unless --keep-data (<state>/pki is kept: reused)
#   scripts/cluster.sh status                "mode M", "secured yes|no", then one line per node (and
#                                            per relay); exit 0 iff all 4 nodes (and in relayed mode
#                                            3 relays, each relaying all of its broker's listeners) run
#   scripts/cluster.sh secured               secured mode: key=value lines (files, addresses; see
#                                            "Secured" below); exit 1 if the cluster is not secured
#   scripts/cluster.sh bootstrap             the addresses clients use: direct mode
#                                            127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094, relayed
#                                            127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194
#   scripts/cluster.sh delay N MS            relayed mode: broker N answers MS ms late from now on,
#                                            for every client and for its followers (0 = no delay)
#   scripts/cluster.sh delays                one line per broker: "broker N MS"
#   scripts/cluster.sh cap N MBPS            relayed mode: broker N's link carries at most MBPS MB/s
#                                            (10^6 bytes/s, decimal, e.g. 12.5; 0 = unlimited) in
#                                            each direction, for every client and its followers;
#                                            returns once the relay applied it (within ~100 ms)
#   scripts/cluster.sh caps                  one line per broker: "broker N MBPS" (0 = unlimited)
#   scripts/cluster.sh restart-relays [N...] relayed mode: restart the relays (all, or brokers N),
#                                            e.g. to run a rebuilt delay_relay; their delay and cap
#                                            files are kept. The brokers keep running, but every
#                                            connection through a restarted relay is dropped once
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
#                                            gone, relayed mode) in the cluster's mode (and secured
#                                            flag), wait until registered
#   scripts/cluster.sh elect-leaders [TOPIC] preferred leader election (auto rebalance is off, so
#                                            leaders stay where failover put them until this)
#   scripts/cluster.sh lib [VERSION|default] fetch (once) and print the Kafka jar dir of the
#                                            cluster's version (or of VERSION, or of the default):
#                                              java -cp "$(scripts/cluster.sh lib)/*" CLASS ...
#   scripts/cluster.sh default-version       the version `start` runs when not told (4.1.2)
#   scripts/cluster.sh tool CLASS ARGS...    run a Kafka tool class with quiet logging, e.g.
#                                              tool org.apache.kafka.tools.ProducerPerformance ...
#
# Layout: controller node 100 at 127.0.0.1:19091 (controller only, so any broker can be killed;
# in zookeeper mode the ZooKeeper server); brokers 1,2,3 at 127.0.0.1:19092/19093/19094.
#
# Versions: any released Apache Kafka from 2.8.0 to 4.x that Maven Central serves (tested:
# 2.8.2, 3.3.1, 3.6.2, 3.9.1, 4.0.2, 4.1.2, 4.2.2, 4.4.0; scripts/matrix.sh). 2.x and 3.x log
# with log4j 1 (scripts/kafka/log4j*.properties) and run ZooKeeper from the ZooKeeper jar they
# depend on (KRaft from 3.3, secured KRaft from 3.5: SCRAM users at format time); 4.x logs with
# log4j2 and runs KRaft only. Tools are named by their 4.x classes (`tool` maps them to the old
# kafka.admin ones on older versions). `start` writes the version and metadata mode to
# <state>/version and <state>/metadata: later commands use the cluster's version, whatever
# KROUTE_KAFKA_VERSION says; `start` of another version on a running cluster (or kept data) fails.
#
# Modes (persisted in <state>/mode by start, so later commands such as start-broker use it):
#   direct   (default) brokers advertise their own listeners 19092..19094.
#   relayed  "a slow broker that every client sees": this kernel has no netem, so each broker N
#            gets a delay_relay (relay/, a package of its own, built by a static `cargo build --release
#            --target x86_64-unknown-linux-gnu --workspace --bin delay_relay` when missing or stale) on 127.0.0.1:1919(1+N) forwarding to its real
#            listener 1909(1+N), and the broker ADVERTISES the relay. Clients, kroute and the other
#            brokers' replica fetchers (inter-broker traffic uses the advertised listener) thus all
#            reach broker N through its relay, which delays everything the broker sends back by the
#            ms in <state>/delay/brokerN (`delay N MS`; re-read every 100 ms), and caps its
#            bandwidth per direction at the MB/s in <state>/cap/brokerN (`cap N MBPS`: a token
#            bucket, like the broker's own link; re-read every 100 ms). Relays are started
#            before the brokers, stopped by stop, restarted by start-broker, and survive
#            kill-broker (new connections to a killed broker just fail). Logs: <state>/logs/relayN.log.
#            The controller (19091) is not relayed. In secured mode the same relay process (one
#            per broker, one delay file) also relays each secured listener of its broker, from
#            the listener's port + 1000 (TLS passes through: the relay only moves bytes), and the
#            broker advertises those relay ports too; so `delay N MS` and `cut N` act on every
#            listener of broker N.
#
# Secured (persisted in <state>/secured as yes|no by start, like the mode): each broker N (1..3)
# keeps PLAINTEXT (1909(1+N)), the controller listener and PLAINTEXT inter-broker traffic as
# above, and adds these listeners (port; relay port in relayed mode = port + 1000):
#   SSL             19300+N (20300+N)  TLS, server certificate only
#   MTLS            19310+N (20310+N)  TLS, client certificate required (ssl.client.auth=required;
#                                      principal User:CN=<cert CN>, e.g. User:CN=kroute)
#   SASL_PLAINTEXT  19320+N (20320+N)  SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
#   SASL_SSL        19330+N (20330+N)  the same mechanisms over TLS
#   REAUTH          19340+N (20340+N)  SASL_SSL with connections.max.reauth.ms=10000 (KIP-368)
# Users (PLAIN via JAAS; SCRAM-SHA-256 and -512 created when the controller is formatted):
# alice/alice-secret, bob/bob-secret, kroute/kroute-secret, admin/admin-secret.
# Authorization (brokers and controller): StandardAuthorizer, allow.everyone.if.no.acl.found=true,
# super.users User:ANONYMOUS (PLAINTEXT clients), User:kroute, User:admin, User:CN=kroute. After
# the first start on fresh data, start adds one ACL: User:alice may Write, Describe and Create
# topics with the prefix "acl-". So acl-* topics are closed to every other non-super principal
# (bob: TOPIC_AUTHORIZATION_FAILED, for the Java client already in its Metadata response, as he
# may not Describe them either), while all other topics and the cluster (e.g. IdempotentWrite, so
# idempotent producers work) stay open to everyone. PLAINTEXT clients are ANONYMOUS (a super user).
# PKI: made with openssl in <state>/pki on the first secured start, then reused (delete the dir
# to regenerate). RSA 2048, keys PKCS#8 PEM without password, v3 certificates valid 10 years:
#   ca.pem ca.key                  test CA (CA:TRUE)
#   broker.pem broker.key          the brokers' certificate (CN=localhost, SAN IP:127.0.0.1 and
#                                  DNS:localhost); broker-keystore.pem = key + cert + CA, served
#                                  with ssl.keystore.type=PEM; ca.pem is the brokers' trust store
#   kroute.pem kroute.key          client certificate CN=kroute (kroute-keystore.pem = key + cert)
#   alice.pem alice.key            client certificate CN=alice (alice-keystore.pem = key + cert)
#   expired.pem expired.key        like broker.pem, signed by the test CA, valid only 2020-01-01
#                                  to 2020-01-02 (not served; for negative tests)
#   unknown-ca.pem unknown-ca.key  a second CA nobody trusts
#   unknown-broker.pem/.key        like broker.pem, signed by the unknown CA (not served)
# `secured` prints (one per line, paths absolute, addresses the advertised ones, i.e. the relay
# ports in relayed mode): ca= unknown_ca= broker_cert= broker_key= kroute_cert= kroute_key=
# kroute_keystore= alice_cert= alice_key= alice_keystore= expired_cert= expired_key=
# unknown_ca_cert= unknown_ca_key= (the unknown CA's broker certificate and key), then
# plaintext= ssl= mtls= sasl_plaintext= sasl_ssl= reauth= each as 127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3.
#
# Environment:
#   KROUTE_KAFKA_VERSION  Apache Kafka version from Maven Central for `start` (default 4.1.2)
#   KROUTE_CLUSTER_METADATA  kraft or zookeeper: the metadata mode `start` uses when given no flag
#   KROUTE_CACHE          where each version's jars go, in kafka-lib-<version> (default
#                         $HOME/.cache/kroute)
#   KROUTE_CLUSTER_DIR    state dir: config/, data/, logs/, pids/, delay/, cap/, pki/, mode,
#                         secured
#                         (default <repo>/target/cluster)
#   KROUTE_CLUSTER_PORT_OFFSET  N (default 0): every port above + N (controller, brokers, relays,
#                         secured listeners and their relays), for a second cluster next to the
#                         default one; give it its own KROUTE_CLUSTER_DIR too, and pass the same
#                         offset to every later command on that cluster (e.g. 2000: controller
#                         21091, brokers 21092..21094, relays 21192..21194, SSL 21301..)
#   KROUTE_CLUSTER_MODE   direct or relayed: the mode `start` uses when given no flag
#   KROUTE_CLUSTER_SECURED  1 or yes: `start` behaves as with --secured
#   KROUTE_DELAY_RELAY    delay_relay binary (default
#                         <target dir>/x86_64-unknown-linux-gnu/release/delay_relay)
#   KROUTE_START_TIMEOUT  seconds to wait for the brokers in start/start-broker (default 90)
#   JAVA                  java binary (Java 17+; default: java)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
KAFKA_CONF_DIR=$SCRIPT_DIR/kafka
STATE=${KROUTE_CLUSTER_DIR:-$REPO_DIR/target/cluster}
DEFAULT_KAFKA_VERSION=4.1.2
# The version and metadata mode a cluster was started with are kept in its state dir: every later
# command (start-broker, tool, ...) runs that version, whatever the environment says.
VERSION_FILE=$STATE/version
METADATA_FILE=$STATE/metadata
KAFKA_VERSION=$(cat "$VERSION_FILE" 2>/dev/null || true)
KAFKA_VERSION=${KAFKA_VERSION:-${KROUTE_KAFKA_VERSION:-$DEFAULT_KAFKA_VERSION}}
START_TIMEOUT=${KROUTE_START_TIMEOUT:-90}
JAVA=${JAVA:-java}
PORT_OFFSET=${KROUTE_CLUSTER_PORT_OFFSET:-0}
[[ $PORT_OFFSET =~ ^[0-9]{1,5}$ ]] && [ $((10#$PORT_OFFSET)) -le 40000 ] ||
  { echo "cluster.sh: KROUTE_CLUSTER_PORT_OFFSET must be an integer 0..40000 (got '$PORT_OFFSET')" >&2; exit 2; }
PORT_OFFSET=$((10#$PORT_OFFSET))

HOST=127.0.0.1
CONTROLLER_ID=100
CONTROLLER_PORT=$((19091 + PORT_OFFSET))
BROKERS=(1 2 3)
DIRECT_BOOTSTRAP=127.0.0.1:$((19092 + PORT_OFFSET)),127.0.0.1:$((19093 + PORT_OFFSET)),127.0.0.1:$((19094 + PORT_OFFSET))
RELAYED_BOOTSTRAP=127.0.0.1:$((19192 + PORT_OFFSET)),127.0.0.1:$((19193 + PORT_OFFSET)),127.0.0.1:$((19194 + PORT_OFFSET))
MODE_FILE=$STATE/mode
SECURED_FILE=$STATE/secured
PKI=$STATE/pki
RELAY_BIN=${KROUTE_DELAY_RELAY:-${CARGO_TARGET_DIR:-$REPO_DIR/target}/x86_64-unknown-linux-gnu/release/delay_relay}

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
# secured listeners (start --secured): name, security protocol, base port (broker N: base + N; its
# relay: base + N + RELAY_OFFSET) and the key of its address list in `cluster.sh secured`
SEC_NAMES=(SSL MTLS SASL_PLAINTEXT SASL_SSL REAUTH)
SEC_PROTOCOLS=(SSL SSL SASL_PLAINTEXT SASL_SSL SASL_SSL)
SEC_BASES=($((19300 + PORT_OFFSET)) $((19310 + PORT_OFFSET)) $((19320 + PORT_OFFSET)) $((19330 + PORT_OFFSET)) $((19340 + PORT_OFFSET)))
SEC_KEYS=(ssl mtls sasl_plaintext sasl_ssl reauth)
RELAY_OFFSET=1000
SASL_USERS=(alice bob kroute admin)   # password: NAME-secret
SECURED=$(cat "$SECURED_FILE" 2>/dev/null || true)
SECURED=${SECURED:-no}
[ "$SECURED" = yes ] || [ "$SECURED" = no ] ||
  { echo "cluster.sh: $SECURED_FILE must say yes or no (got '$SECURED')" >&2; exit 2; }

die() { echo "cluster.sh: $*" >&2; exit 1; }

# Kafka generations (docs/compatibility.md): 2.8 .. 3.x log with log4j 1 and run ZooKeeper (from
# 3.3 KRaft too, with SCRAM users at format time from 3.5); 4.x logs with log4j2 and is KRaft only.
version_check() { # VERSION: exits with a clear error unless it is one cluster.sh can run
  [[ $1 =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] ||
    die "Kafka version '$1' is not a release number like 3.9.1 (KROUTE_KAFKA_VERSION)"
  local major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
  { [ "$major" = 2 ] && [ "$minor" -ge 8 ]; } || [ "$major" = 3 ] || [ "$major" = 4 ] ||
    die "Kafka $1 is outside the range cluster.sh runs (2.8.0 to 4.x)"
}
version_at_least() { # MAJOR MINOR: the version in use is at least MAJOR.MINOR
  [ "$KAFKA_MAJOR" -gt "$1" ] || { [ "$KAFKA_MAJOR" = "$1" ] && [ "$KAFKA_MINOR" -ge "$2" ]; }
}
use_version() { # VERSION: its jars, logging generation and JVM options
  version_check "$1"
  KAFKA_VERSION=$1
  KAFKA_MAJOR=${KAFKA_VERSION%%.*}
  KAFKA_MINOR=${KAFKA_VERSION#*.}; KAFKA_MINOR=${KAFKA_MINOR%%.*}
  LIB=${KROUTE_CACHE:-$HOME/.cache/kroute}/kafka-lib-$KAFKA_VERSION
  local node_logging tool_logging
  if version_at_least 4 0; then
    LOG4J=2
    node_logging="-Dlog4j2.configurationFile=$KAFKA_CONF_DIR/log4j2.properties"
    tool_logging="-Dlog4j2.configurationFile=$KAFKA_CONF_DIR/log4j2-tools.properties"
  else
    LOG4J=1
    node_logging="-Dlog4j.configuration=file:$KAFKA_CONF_DIR/log4j.properties"
    tool_logging="-Dlog4j.configuration=file:$KAFKA_CONF_DIR/log4j-tools.properties"
  fi
  BROKER_JVM_OPTS=(-Xms128m -Xmx512m -XX:+UseSerialGC -XX:MaxDirectMemorySize=256m
    -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true "$node_logging")
  CONTROLLER_JVM_OPTS=(-Xms64m -Xmx256m -XX:+UseSerialGC
    -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true "$node_logging")
  TOOL_JVM_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true
    "$tool_logging")
}
use_version "$KAFKA_VERSION"
# metadata: kraft or zookeeper (start: --kraft/--zookeeper, else $KROUTE_CLUSTER_METADATA, else
# zookeeper before 4.0, as most clusters of those versions still run, and kraft from 4.0)
default_metadata() { if version_at_least 4 0; then echo kraft; else echo zookeeper; fi; }
META=$(cat "$METADATA_FILE" 2>/dev/null || true)
META=${META:-$(default_metadata)}
metadata_check() { # MODE: one this version can run
  case "$1" in
    kraft) version_at_least 3 3 || die "Kafka $KAFKA_VERSION has no production KRaft: use zookeeper" ;;
    zookeeper) version_at_least 4 0 && die "Kafka $KAFKA_VERSION has no ZooKeeper mode (removed in 4.0): use kraft" ;;
    *) die "metadata mode must be kraft or zookeeper (got '$1')" ;;
  esac
  return 0
}
say() { echo "cluster.sh: $*" >&2; }   # progress goes to stderr; stdout is for results

# Node 100 is the KRaft controller, or in zookeeper mode the ZooKeeper server (from the ZooKeeper
# jar that Kafka 2.x/3.x depend on); brokers are kafka.Kafka either way.
zookeeper_node() { [ "$1" = "$CONTROLLER_ID" ] && [ "$META" = zookeeper ]; }
node_main() { if zookeeper_node "$1"; then echo org.apache.zookeeper.server.ZooKeeperServerMain; else echo kafka.Kafka; fi; }
node_port() { if [ "$1" = "$CONTROLLER_ID" ]; then echo "$CONTROLLER_PORT"; else echo $((19091 + PORT_OFFSET + $1)); fi; }
node_conf() { echo "$STATE/config/node$1.properties"; }
node_pidfile() { echo "$STATE/pids/node$1.pid"; }
node_log() { echo "$STATE/logs/node$1.log"; }
all_nodes() { echo "$CONTROLLER_ID" "${BROKERS[@]}"; }
relay_port() { echo $((19191 + PORT_OFFSET + $1)); }   # broker N's delay_relay (relayed mode): 19192..19194
advertised_port() { if [ "$MODE" = relayed ]; then relay_port "$1"; else node_port "$1"; fi; }
sec_port() { echo $((SEC_BASES[$1] + $2)); }  # SECURED_LISTENER_INDEX BROKER
sec_advertised_port() { # SECURED_LISTENER_INDEX BROKER
  if [ "$MODE" = relayed ]; then echo $((SEC_BASES[$1] + $2 + RELAY_OFFSET)); else sec_port "$1" "$2"; fi
}
node_ports() { # NODE: every port the node listens on
  node_port "$1"
  if [ "$SECURED" = yes ] && [ "$1" != "$CONTROLLER_ID" ]; then
    local i; for i in "${!SEC_NAMES[@]}"; do sec_port "$i" "$1"; done
  fi
}
relay_pairs() { # N: "LISTEN_PORT TARGET_PORT" lines of broker N's relay (all its listeners)
  echo "$(relay_port "$1") $(node_port "$1")"
  if [ "$SECURED" = yes ]; then
    local i p; for i in "${!SEC_NAMES[@]}"; do p=$(sec_port "$i" "$1"); echo "$((p + RELAY_OFFSET)) $p"; done
  fi
}
sec_bootstrap() { # SECURED_LISTENER_INDEX: the advertised addresses of that listener, all brokers
  local b out=
  for b in "${BROKERS[@]}"; do out+=${out:+,}$HOST:$(sec_advertised_port "$1" "$b"); done
  echo "$out"
}

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
    local binding=log4j-slf4j-impl tmp pom=pom.xml
    [ "$LOG4J" = 2 ] || pom=pom-log4j1.xml   # 2.x/3.x: their own log4j 1 backend (see the pom)
    for _ in 1 2; do
      tmp=$(mktemp -d "$LIB.tmp.XXXXXX")
      if ! mvn -B -q -f "$KAFKA_CONF_DIR/$pom" "-Dkafka.version=$KAFKA_VERSION" "-Dslf4j.binding=$binding" \
          org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
          "-DoutputDirectory=$tmp" -DincludeScope=runtime >"$tmp.mvn.log" 2>&1; then
        tail -n 30 "$tmp.mvn.log" >&2; rm -rf "$tmp" "$tmp.mvn.log"
        die "Apache Kafka $KAFKA_VERSION cannot be fetched from Maven (mvn dependency:copy-dependencies failed, above): is it a released version?"
      fi
      rm -f "$tmp.mvn.log"
      # the SLF4J binding must match the slf4j-api that Maven mediated into lib/
      if [ "$LOG4J" = 2 ] && compgen -G "$tmp/slf4j-api-2.*.jar" >/dev/null && [ "$binding" = log4j-slf4j-impl ]; then
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

run_tool() { # CLASS ARGS... (CLASS as named in Kafka 4.x: older versions are mapped, tool_class)
  local class; class=$(tool_class "$1"); shift
  "$JAVA" "${TOOL_JVM_OPTS[@]}" -cp "$LIB/*" "$class" "$@"
}

# Kafka 3.5 to 3.8 moved the command-line tools from kafka.admin (Scala, in the kafka jar) to
# org.apache.kafka.tools (kafka-tools), some into sub-packages: a tool named by its 4.x class runs
# under its old name on a version that lacks the new one. The jars' class lists are read once.
tool_class() { # CLASS: the class to run for CLASS on this version
  local index=$LIB/.classes simple=${1##*.} alt tmp
  if [ ! -s "$index" ]; then
    tmp=$(mktemp "$index.XXXXXX")
    python3 - "$LIB" >"$tmp" <<'PY' && mv -f "$tmp" "$index"
import sys, zipfile, pathlib
for jar in sorted(pathlib.Path(sys.argv[1]).glob("*.jar")):
    for name in zipfile.ZipFile(jar).namelist():
        if name.endswith(".class") and "$" not in name:
            print(name[:-6].replace("/", "."))
PY
    rm -f "$tmp"
  fi
  for alt in "$1" "kafka.admin.$simple" "kafka.tools.$simple" "org.apache.kafka.tools.$simple"; do
    grep -qxF "$alt" "$index" 2>/dev/null && { echo "$alt"; return; }
  done
  echo "$1"   # not found: let java say so
}

# ---------------------------------------------------------------------------------------------
# processes

lock_state() {
  mkdir -p "$STATE"
  exec 9>"$STATE/.lock"
  flock -w 300 9 || die "another cluster.sh holds $STATE/.lock"
}

cmdline() { # PID: its command line, arguments separated (and ended) by spaces; empty if gone
  # stderr first: redirections apply left to right, and a vanished pid's file fails the read
  tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" || true
}

node_pid() { # prints the pid if node N runs (the pid file points at a JVM running N's config)
  local f pid= c cmd; f=$(node_pidfile "$1")
  if [ -f "$f" ]; then
    pid=$(cat "$f" 2>/dev/null) || return 1
  else
    # pid file lost (e.g. target/ wiped while running): look for a JVM running exactly N's config
    for c in $(grep -lF -- "$(node_conf "$1")" /proc/[0-9]*/cmdline 2>/dev/null || true); do
      cmd=$(tr '\0' ' ' <"$c" 2>/dev/null || true)
      [[ $cmd == *" $(node_main "$1") "* ]] && { pid=$(cut -d/ -f3 <<<"$c"); break; }
    done
  fi
  [ -n "$pid" ] || return 1
  # (captured, not piped into grep -q: under pipefail an early grep exit could fail the check)
  cmd=$(cmdline "$pid")
  [[ $cmd == *" $(node_main "$1") "* && $cmd == *"$(node_conf "$1")"* ]] || return 1
  # a zombie (killed, not yet reaped) counts as dead
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}

node_gone() { # N: node N's process has really exited. Not the same as `! node_pid N`, which is
  # also false for a process that is alive but not (yet) recognisable as node N
  node_pid "$1" >/dev/null && return 1
  local pid; pid=$(cat "$(node_pidfile "$1")" 2>/dev/null || true)
  [ -z "$pid" ] || pid_gone "$pid"
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

wait_exec() { # PID WORD SECONDS: wait until the process has exec'ed its program, i.e. its command
  # line contains WORD. Right after `setsid PROG ... &`, $! is still a forked bash subshell whose
  # command line is this script's (on a loaded machine for a while): checks of the command line
  # made then would call a starting process dead. Returns 1 if it exited, 2 on timeout.
  local deadline=$((SECONDS + $3)) cmd
  while :; do
    pid_gone "$1" && return 1
    cmd=$(cmdline "$1")
    [[ $cmd == *"$2"* ]] && return 0
    [ "$SECONDS" -lt "$deadline" ] || return 2
    sleep 0.05
  done
}

render_conf() { # NODE
  local n=$1 tmpl=broker.properties listeners= advertised= map= users= secured i u meta
  [ "$n" = "$CONTROLLER_ID" ] && tmpl=controller.properties
  zookeeper_node "$n" && tmpl=zookeeper.properties
  # lines marked @KRAFT@ or @ZK@ are kept (unmarked) in that metadata mode only; @PEM_PLAIN@ from
  # Kafka 3.0, @PEM_ENCRYPTED@ before (2.x refuses a PEM key without a password)
  if [ "$META" = zookeeper ]; then meta=(-e '/^@KRAFT@/d' -e 's#^@ZK@##'); else meta=(-e '/^@ZK@/d' -e 's#^@KRAFT@##'); fi
  if version_at_least 3 0; then meta+=(-e '/^@PEM_ENCRYPTED@/d' -e 's#^@PEM_PLAIN@##')
  else meta+=(-e '/^@PEM_PLAIN@/d' -e 's#^@PEM_ENCRYPTED@##'); fi
  if [ "$SECURED" = yes ]; then
    secured=(-e 's#^@SECURED@##')
    if [ "$n" != "$CONTROLLER_ID" ]; then
      for i in "${!SEC_NAMES[@]}"; do
        listeners+=",${SEC_NAMES[$i]}://$HOST:$(sec_port "$i" "$n")"
        advertised+=",${SEC_NAMES[$i]}://$HOST:$(sec_advertised_port "$i" "$n")"
        map+=",${SEC_NAMES[$i]}:${SEC_PROTOCOLS[$i]}"
      done
      for u in "${SASL_USERS[@]}"; do users+="${users:+ }user_$u=\"$u-secret\""; done
    fi
  else
    secured=(-e '/^@SECURED@/d')
  fi
  mkdir -p "$STATE/config"
  sed "${secured[@]}" "${meta[@]}" \
      -e "s#@NODE_ID@#$n#g" -e "s#@PORT@#$(node_port "$n")#g" -e "s#@LOG_DIR@#$STATE/data/node$n#g" \
      -e "s#@ADVERTISED_PORT@#$(advertised_port "$n")#g" \
      -e "s#@CONTROLLER_ID@#$CONTROLLER_ID#g" -e "s#@CONTROLLER@#$HOST:$CONTROLLER_PORT#g" \
      -e "s#@SECURED_LISTENERS@#$listeners#g" -e "s#@SECURED_ADVERTISED@#$advertised#g" \
      -e "s#@SECURED_PROTOCOL_MAP@#$map#g" -e "s#@PKI_DIR@#$PKI#g" -e "s#@PLAIN_USERS@#$users#g" \
      "$KAFKA_CONF_DIR/$tmpl" >"$(node_conf "$n")"
}

format_node() { # NODE CLUSTER_ID (KRaft only: ZooKeeper brokers register on their first start)
  local n=$1 scram=() u m
  [ "$META" = kraft ] || return 0
  [ -f "$STATE/data/node$n/meta.properties" ] && return 0
  # secured: the SCRAM users go into the bootstrap metadata of the controller (the only voter:
  # the one that starts the metadata log, so the only one whose bootstrap records count)
  if [ "$SECURED" = yes ] && [ "$n" = "$CONTROLLER_ID" ]; then
    for u in "${SASL_USERS[@]}"; do
      for m in SCRAM-SHA-256 SCRAM-SHA-512; do scram+=(--add-scram "$m=[name=$u,password=$u-secret]"); done
    done
  fi
  run_tool kafka.tools.StorageTool format "--cluster-id=$2" -c "$(node_conf "$n")" --ignore-formatted \
    "${scram[@]}" >"$STATE/logs/format-node$n.log" 2>&1 ||
    { cat "$STATE/logs/format-node$n.log" >&2; die "formatting node $n failed"; }
  if [ ${#scram[@]} -gt 0 ]; then touch "$STATE/data/node$n/kroute-scram-users"; fi
}

ensure_port_free() { # NODE: all of the node's ports
  local port deadline=$((SECONDS + 10))
  for port in $(node_ports "$1"); do
    while port_busy "$port"; do  # e.g. a just-stopped process still closing its sockets
      [ "$SECONDS" -lt "$deadline" ] || die "port $port is in use by another process (not node $1 of $STATE)"
      sleep 0.2
    done
  done
}

launch_node() { # NODE
  local n=$1 opts log pid
  if [ "$n" = "$CONTROLLER_ID" ]; then opts=("${CONTROLLER_JVM_OPTS[@]}"); else opts=("${BROKER_JVM_OPTS[@]}"); fi
  ensure_port_free "$n"
  log=$(node_log "$n")
  [ -f "$log" ] && mv -f "$log" "$log.prev"
  # own session, no inherited stdio or lock fd: callers (tests using Command::output) get EOF
  # every node at niceness 0, whoever starts it: a test run under `nice` that restarts a broker
  # must not leave that broker at a lower priority than the others (benchmarks compare them)
  local prio=()
  [ "$(nice)" = 0 ] || { nice -n "$((0 - $(nice)))" true 2>/dev/null && prio=(nice -n "$((0 - $(nice)))"); }
  setsid "${prio[@]}" "$JAVA" "${opts[@]}" -cp "$LIB/*" "$(node_main "$n")" "$(node_conf "$n")" </dev/null >"$log" 2>&1 8>&- 9>&- &
  pid=$!
  echo "$pid" >"$(node_pidfile "$n")"
  # node_pid recognises the node by its command line: wait until the child has exec'ed
  local rc=0
  wait_exec "$pid" " $(node_main "$n") " 60 || rc=$?
  case $rc in
    0) ;;
    1) tail -n 25 "$log" >&2 2>/dev/null || true; die "node $n (pid $pid) exited right after its launch" ;;
    *) die "node $n (pid $pid) did not exec java within 60s" ;;
  esac
}

# delay relays (relayed mode): one delay_relay process per broker, 127.0.0.1:1919N -> :1909N
# (secured: plus one --listen/--target pair per secured listener, port + 1000 -> port)

relay_pidfile() { echo "$STATE/pids/relay$1.pid"; }
relay_log() { echo "$STATE/logs/relay$1.log"; }
delay_file() { echo "$STATE/delay/broker$1"; }
cap_file() { echo "$STATE/cap/broker$1"; }

relay_pid() { # prints the pid if broker N's relay (of this state dir) runs
  local f pid= c cmd; f=$(relay_pidfile "$1")
  if [ -f "$f" ]; then
    pid=$(cat "$f" 2>/dev/null) || return 1
  else
    for c in $(grep -lF -- "$(delay_file "$1")" /proc/[0-9]*/cmdline 2>/dev/null || true); do
      cmd=$(tr '\0' ' ' <"$c" 2>/dev/null || true)
      [[ $cmd == *"delay_relay "* ]] && { pid=$(cut -d/ -f3 <<<"$c"); break; }
    done
  fi
  [ -n "$pid" ] || return 1
  cmd=$(cmdline "$pid")
  [[ $cmd == *" --delay-file $(delay_file "$1") "* ]] || return 1
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}

relay_complete() { # N PID: the running relay relays every listener broker N has in this mode
  local cmd l t; cmd=$(cmdline "$2")
  while read -r l t; do
    [[ $cmd == *" --listen $HOST:$l --target $HOST:$t "* ]] || return 1
  done < <(relay_pairs "$1")
}

# The relay is built exactly as scripts/image.sh builds kroute's image binary (static, for the
# explicit x86_64 target): the two builds then share every compiled dependency, which halves
# the release compile time of a test run on a fresh machine.
ensure_relay_bin() { # build the delay_relay if missing or older than its source
  local src=$REPO_DIR/relay/src/main.rs manifest=$REPO_DIR/relay/Cargo.toml
  [ -x "$RELAY_BIN" ] && { [ ! -f "$src" ] || [ "$RELAY_BIN" -nt "$src" ]; } &&
    { [ ! -f "$manifest" ] || [ "$RELAY_BIN" -nt "$manifest" ]; } && return 0
  command -v cargo >/dev/null || die "cargo not found (needed to build $RELAY_BIN)"
  say "building delay_relay (static release build, as scripts/image.sh builds kroute)"
  # The same build as the image's (scripts/static-build.sh), so a test run compiles the release
  # dependencies once.
  if ! (cd "$REPO_DIR" && . scripts/static-build.sh && static_build delay_relay 8>&- 9>&-) >&2; then
    # e.g. a workspace mid-edit: an older binary still does the job
    [ -x "$RELAY_BIN" ] || die "building delay_relay failed"
    say "building delay_relay failed, using the existing $RELAY_BIN"
  fi
  [ -x "$RELAY_BIN" ] || die "$RELAY_BIN missing after cargo build (KROUTE_DELAY_RELAY overrides the path)"
}

start_relay() { # N: start broker N's relay unless it runs (with all pairs); keeps the delay file
  local n=$1 port log pid deadline l t args=() ports=()
  if pid=$(relay_pid "$n"); then
    relay_complete "$n" "$pid" && return 0
    # e.g. left over from an unsecured run: lacks the secured listeners' pairs
    say "relay $n (pid $pid) does not relay all listeners of broker $n: restarting it"
    stop_relay "$n"
  fi
  while read -r l t; do
    args+=(--listen "$HOST:$l" --target "$HOST:$t"); ports+=("$l")
  done < <(relay_pairs "$n")
  deadline=$((SECONDS + 10))
  for port in "${ports[@]}"; do
    while port_busy "$port"; do
      [ "$SECONDS" -lt "$deadline" ] || die "port $port is in use by another process (not relay $n of $STATE)"
      sleep 0.2
    done
  done
  mkdir -p "$STATE/delay" "$STATE/logs" "$STATE/pids"
  [ -f "$(delay_file "$n")" ] || echo 0 >"$(delay_file "$n")"
  local cap=()
  if relay_bin_caps; then
    # like the delay file: created if missing, kept across relay restarts
    mkdir -p "$STATE/cap"
    [ -f "$(cap_file "$n")" ] || echo 0 >"$(cap_file "$n")"
    cap=(--cap-file "$(cap_file "$n")")
  fi
  log=$(relay_log "$n")
  [ -f "$log" ] && mv -f "$log" "$log.prev"
  # higher CPU priority where allowed (root): every broker byte passes a relay, so on a small busy
  # machine (2 cores, 4 JVMs + clients) the relays should not be the ones waiting for a CPU
  local prio=()
  nice -n -10 true 2>/dev/null && prio=(nice -n -10)
  setsid "${prio[@]}" "$RELAY_BIN" "${args[@]}" \
    --delay-file "$(delay_file "$n")" "${cap[@]}" </dev/null >"$log" 2>&1 8>&- 9>&- &
  pid=$!
  echo "$pid" >"$(relay_pidfile "$n")"
  # exec'ed (relay_pid recognises it by its command line), then listening (on every port) before
  # the broker advertises it
  local rc=0
  wait_exec "$pid" " --delay-file $(delay_file "$n") " 60 || rc=$?
  [ $rc != 1 ] || { cat "$log" >&2; die "relay $n exited during startup"; }
  deadline=$((SECONDS + 10))
  for port in "${ports[@]}"; do
    until port_busy "$port"; do
      pid_gone "$pid" && { cat "$log" >&2; die "relay $n exited during startup"; }
      [ "$SECONDS" -lt "$deadline" ] || { cat "$log" >&2; die "relay $n not listening on $port after 10s"; }
      sleep 0.05
    done
  done
}

relay_bin_caps() { # the relay binary takes --cap-file (one built before caps existed does not;
  # ensure_relay_bin may fall back to such a build when the crate does not compile)
  "$RELAY_BIN" --help 2>/dev/null | grep -q -- --cap-file
}

relay_caps() { # N PID: the running relay of broker N was started with its cap file
  [[ $(cmdline "$2") == *" --cap-file $(cap_file "$1") "* ]]
}

stop_relay() { # N: SIGTERM broker N's relay (SIGKILL if it lingers)
  local pid
  if pid=$(relay_pid "$1"); then
    kill -TERM "$pid" 2>/dev/null || true
    wait_pid_gone "$pid" 5 || { kill -KILL "$pid" 2>/dev/null || true; wait_pid_gone "$pid" 5 || true; }
  fi
  rm -f "$(relay_pidfile "$1")"
}

stop_relays() { # SIGTERM every relay of this state dir (also in direct mode: leftovers)
  local n
  for n in "${BROKERS[@]}"; do stop_relay "$n"; done
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

node_started() { # NODE: the node finished its startup (a ZooKeeper server: it listens; a broker or
  # controller: its log says so, in KRaft "Kafka Server started", in zookeeper mode
  # "[KafkaServer id=N] started")
  if zookeeper_node "$1"; then port_busy "$(node_port "$1")"; return; fi
  grep -qE "Kafka Server started|\] started \(kafka.server.KafkaServer\)" "$(node_log "$1")" 2>/dev/null
}

wait_started() { # NODE DEADLINE: the node finished its startup
  local n=$1 deadline=$2
  until node_started "$n"; do
    ! node_gone "$n" || { log_tails; die "node $n exited during startup"; }
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
    for b in $(all_nodes); do ! node_gone "$b" || { log_tails; die "node $b is not running"; }; done
    [ "$SECONDS" -lt "$deadline" ] || { log_tails; die "brokers $* not all registered within ${START_TIMEOUT}s (up:${up% })"; }
    sleep 0.5
  done
}

# ---------------------------------------------------------------------------------------------
# secured mode: PKI and ACLs

ensure_pki() { # <state>/pki (see "Secured" in the header): made once, then reused
  [ -f "$PKI/.complete" ] && return 0
  command -v openssl >/dev/null || die "openssl not found (needed once to make the test PKI in $PKI)"
  say "making the test PKI in $PKI (openssl)"
  local tmp; tmp=$(mktemp -d "$STATE/pki.tmp.XXXXXX")
  cat >"$tmp/openssl.cnf" <<'CNF'
# made by scripts/cluster.sh; paths are relative to the PKI dir (only used while it is made)
[req]
distinguished_name = req_dn
prompt = no
[req_dn]
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
# `openssl ca` (only for expired.pem: `req -x509` cannot backdate)
[ca]
default_ca = test_ca
[test_ca]
database = ca-index.txt
new_certs_dir = ca-newcerts
certificate = ca.pem
private_key = ca.key
rand_serial = yes
default_md = sha256
policy = policy_any
unique_subject = no
email_in_dn = no
copy_extensions = none
[policy_any]
commonName = supplied
CNF
  if ! (
    set -e
    cd "$tmp"
    mkdir ca-newcerts; : >ca-index.txt
    ossl() { openssl "$@" -config openssl.cnf >>openssl.log 2>&1 || { echo "failed: openssl $*" >>openssl.log; return 1; }; }
    new=(-newkey rsa:2048 -noenc -days 3650)   # -noenc: PKCS#8 "BEGIN PRIVATE KEY", no password
    ossl req -x509 "${new[@]}" -extensions ca_ext -subj "/CN=kroute test CA" -keyout ca.key -out ca.pem
    ossl req -x509 "${new[@]}" -extensions server_ext -CA ca.pem -CAkey ca.key -subj /CN=localhost \
      -keyout broker.key -out broker.pem
    ossl req -x509 "${new[@]}" -extensions client_ext -CA ca.pem -CAkey ca.key -subj /CN=kroute \
      -keyout kroute.key -out kroute.pem
    ossl req -x509 "${new[@]}" -extensions client_ext -CA ca.pem -CAkey ca.key -subj /CN=alice \
      -keyout alice.key -out alice.pem
    ossl req -new -newkey rsa:2048 -noenc -subj /CN=localhost -keyout expired.key -out expired.csr
    ossl ca -batch -notext -extensions server_ext -startdate 20200101000000Z -enddate 20200102000000Z \
      -in expired.csr -out expired.pem
    ossl req -x509 "${new[@]}" -extensions ca_ext -subj "/CN=kroute unknown test CA" \
      -keyout unknown-ca.key -out unknown-ca.pem
    ossl req -x509 "${new[@]}" -extensions server_ext -CA unknown-ca.pem -CAkey unknown-ca.key \
      -subj /CN=localhost -keyout unknown-broker.key -out unknown-broker.pem
    cat broker.key broker.pem ca.pem >broker-keystore.pem
    cat kroute.key kroute.pem >kroute-keystore.pem
    cat alice.key alice.pem >alice-keystore.pem
    rm -rf expired.csr ca-newcerts ca-index.txt* openssl.log
    touch .complete
  ); then
    cat "$tmp/openssl.log" >&2 2>/dev/null || true
    rm -rf "$tmp"
    die "making the test PKI failed"
  fi
  rm -rf "$PKI"
  mv "$tmp" "$PKI"
}

ensure_encrypted_keystore() { # <state>/pki/broker-keystore-encrypted.pem: broker-keystore.pem with
  # its key encrypted (password kroute-test), for Kafka 2.x; made once next to the PKI. PKCS#5 v1
  # (3DES): the JDK's key factories have no PBES2, which 2.x asks for by its generic name
  local out=$PKI/broker-keystore-encrypted.pem tmp
  [ -f "$out" ] && return 0
  tmp=$(mktemp "$PKI/.enc.XXXXXX")
  openssl pkcs8 -topk8 -in "$PKI/broker.key" -v1 PBE-SHA1-3DES \
      -passout pass:kroute-test >"$tmp" 2>/dev/null || { rm -f "$tmp"; die "encrypting the broker key failed"; }
  cat "$PKI/broker.pem" "$PKI/ca.pem" >>"$tmp"
  mv -f "$tmp" "$out"
}

create_scram_users() { # zookeeper mode, once per data dir: the SCRAM users that a KRaft cluster
  # gets at format time, through a broker (KIP-554, Kafka 2.7+)
  local marker=$STATE/data/kroute-scram-users u
  [ "$META" = zookeeper ] && [ ! -f "$marker" ] || return 0
  for u in "${SASL_USERS[@]}"; do
    run_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "$BOOTSTRAP" --alter \
      --add-config "SCRAM-SHA-256=[password=$u-secret],SCRAM-SHA-512=[password=$u-secret]" \
      --entity-type users --entity-name "$u" >>"$STATE/logs/scram.log" 2>&1 ||
      { cat "$STATE/logs/scram.log" >&2; die "creating the SCRAM user $u failed"; }
  done
  touch "$marker"
}

create_acls() { # once per data dir: alice may Write, Describe, Create topics prefixed acl-
  local marker=$STATE/data/kroute-acls
  [ -f "$marker" ] && return 0
  run_tool org.apache.kafka.tools.AclCommand --bootstrap-server "$BOOTSTRAP" --add \
    --allow-principal User:alice --operation Write --operation Describe --operation Create \
    --topic acl- --resource-pattern-type prefixed >"$STATE/logs/acls.log" 2>&1 ||
    { cat "$STATE/logs/acls.log" >&2; die "creating the ACLs failed"; }
  touch "$marker"
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_start() {
  local want=${KROUTE_CLUSTER_MODE:-} want_secured=no arg want_meta=${KROUTE_CLUSTER_METADATA:-}
  case "${KROUTE_CLUSTER_SECURED:-}" in 1|yes|true) want_secured=yes ;; ""|0|no|false) ;;
    *) die "KROUTE_CLUSTER_SECURED must be 1 or 0 (got '$KROUTE_CLUSTER_SECURED')" ;; esac
  for arg in "$@"; do
    case "$arg" in --relayed) want=relayed ;; --direct) want=direct ;; --secured) want_secured=yes ;;
      --kraft) want_meta=kraft ;; --zookeeper) want_meta=zookeeper ;;
      *) die "usage: start [--relayed|--direct] [--secured] [--kraft|--zookeeper]" ;; esac
  done
  [ -z "$want" ] || valid_mode "$want" || die "KROUTE_CLUSTER_MODE must be direct or relayed (got '$want')"
  lock_state
  local n missing=() cid running=0
  for n in $(all_nodes); do if node_pid "$n" >/dev/null; then running=1; else missing+=("$n"); fi; done
  if [ -n "${KROUTE_KAFKA_VERSION:-}" ] && [ "$KROUTE_KAFKA_VERSION" != "$KAFKA_VERSION" ]; then
    # $STATE/version names another version: of a cluster still running, or of kept data
    [ $running = 0 ] || die "the cluster runs Kafka $KAFKA_VERSION; stop it before starting $KROUTE_KAFKA_VERSION"
    [ ! -d "$STATE/data" ] || die "the data in $STATE/data is Kafka $KAFKA_VERSION's: stop (without --keep-data) before starting $KROUTE_KAFKA_VERSION"
    rm -f "$VERSION_FILE" "$METADATA_FILE"
    flock -u 9; exec 9>&-
    exec "${BASH_SOURCE[0]}" start "$@"
  fi
  if [ $running = 1 ]; then
    # (partly) running: keep its mode and secured flag (secured only adds listeners and users:
    # whoever did not ask for it can use a secured cluster as well)
    [ -z "$want" ] || [ "$want" = "$MODE" ] || die "the cluster runs in $MODE mode; stop it before starting it $want"
    [ "$want_secured" = no ] || [ "$SECURED" = yes ] ||
      die "the cluster runs without --secured; stop it before starting it --secured"
    [ -z "$want_meta" ] || [ "$want_meta" = "$META" ] ||
      die "the cluster runs with $META; stop it before starting it with $want_meta"
  else
    set_mode "${want:-direct}"
    SECURED=$want_secured
    [ -f "$METADATA_FILE" ] && [ -d "$STATE/data" ] && [ -n "$want_meta" ] && [ "$want_meta" != "$META" ] &&
      die "the data in $STATE/data is of a $META cluster: stop (without --keep-data) before starting it with $want_meta"
    [ -f "$METADATA_FILE" ] || META=${want_meta:-$(default_metadata)}
    metadata_check "$META"
    [ "$SECURED" = no ] || [ "$META" = zookeeper ] || version_at_least 3 5 ||
      die "a secured KRaft cluster needs Kafka 3.5 or newer (SCRAM users at format time): use --zookeeper"
    if [ "$SECURED" = yes ] && [ -f "$STATE/data/node$CONTROLLER_ID/meta.properties" ] &&
        [ ! -f "$STATE/data/node$CONTROLLER_ID/kroute-scram-users" ]; then
      die "the data in $STATE/data was formatted without --secured (no SCRAM users): stop (without --keep-data) first"
    fi
    mkdir -p "$STATE"
    echo "$MODE" >"$MODE_FILE"
    echo "$SECURED" >"$SECURED_FILE"
    echo "$KAFKA_VERSION" >"$VERSION_FILE"
    echo "$META" >"$METADATA_FILE"
    rm -rf "$STATE/delay" "$STATE/cap"   # a fresh start has no delays and no caps
    # Kept data (stop --keep-data, or a machine stopped with the cluster running) is resumed.
    # Thousands of partitions left by earlier test runs make the 512 MB brokers slow and, once,
    # ran one out of heap: say so, since a fresh cluster is one `stop` away.
    local kept=0
    if [ -d "$STATE/data/node${BROKERS[0]}" ]; then
      kept=$(find "$STATE/data/node${BROKERS[0]}" -mindepth 1 -maxdepth 1 -type d | wc -l)
    fi
    [ "$kept" -lt 1000 ] ||
      say "note: resuming kept data with $kept partition directories per broker (slow brokers, heap pressure); 'stop' first for a fresh cluster"
  fi
  ensure_lib
  [ "$SECURED" = no ] || { ensure_pki; ensure_encrypted_keystore; }
  if [ "$MODE" = relayed ]; then
    ensure_relay_bin
    # before the brokers: they advertise the relays, and replica fetchers connect through them
    for n in "${BROKERS[@]}"; do start_relay "$n"; done
  fi
  if [ ${#missing[@]} -eq 0 ]; then
    say "cluster already running ($MODE mode$([ "$SECURED" = no ] || echo ", secured"))"
    # it may still be starting (e.g. an earlier start timed out): wait for the brokers anyway
    wait_registered $((SECONDS + START_TIMEOUT)) "${BROKERS[@]}"
    [ "$SECURED" = no ] || { create_scram_users; create_acls; }
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
  [ "$SECURED" = no ] || { create_scram_users; create_acls; }
  say "cluster up in ${SECONDS}s (Kafka $KAFKA_VERSION, $META, $MODE mode$([ "$SECURED" = no ] || echo ", secured"))"
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
    rm -rf "$STATE/data" "$STATE/cluster.id" "$STATE/delay" "$STATE/cap" "$MODE_FILE" "$SECURED_FILE" \
      "$VERSION_FILE" "$METADATA_FILE"
    say "stopped, data removed"
  else
    say "stopped, data kept in $STATE/data"
  fi
}

cmd_status() {
  local n pid all=0 role l t relayed out
  echo "mode $MODE"
  echo "secured $SECURED"
  echo "kafka $KAFKA_VERSION $META"
  for n in $(all_nodes); do
    role=broker; [ "$n" = "$CONTROLLER_ID" ] && role=controller
    zookeeper_node "$n" && role=zookeeper
    if pid=$(node_pid "$n"); then
      echo "$role $n $HOST:$(node_port "$n") running pid=$pid"
    else
      echo "$role $n $HOST:$(node_port "$n") stopped"; all=1
    fi
  done
  for n in "${BROKERS[@]}"; do
    # secured: "relay N 127.0.0.1:19192 -> 127.0.0.1:19092 [20301->19301 ...] running ..."
    relayed=
    if [ "$SECURED" = yes ]; then
      while read -r l t; do [ "$l" = "$(relay_port "$n")" ] || relayed+=" $l->$t"; done < <(relay_pairs "$n")
      relayed=" [${relayed# }]"
    fi
    out="relay $n $HOST:$(relay_port "$n") -> $HOST:$(node_port "$n")$relayed"
    if pid=$(relay_pid "$n"); then
      if relay_complete "$n" "$pid"; then
        echo "$out running pid=$pid delay=$(delay_ms "$n")ms cap=$(cap_shown "$n" "$pid")"
      else
        echo "$out incomplete pid=$pid (does not relay all listeners: restart with start-broker $n)"
        [ "$MODE" != relayed ] || all=1
      fi
    elif [ "$MODE" = relayed ]; then
      echo "$out stopped"; all=1
    fi
  done
  return $all
}

cmd_secured() { # key=value lines for tests and clients (see "Secured" in the header)
  [ "$SECURED" = yes ] || die "the cluster in $STATE is not secured (start --secured)"
  [ -f "$PKI/.complete" ] || die "$PKI is missing or incomplete (start --secured makes it)"
  local i
  echo "ca=$PKI/ca.pem"
  echo "unknown_ca=$PKI/unknown-ca.pem"
  echo "broker_cert=$PKI/broker.pem"
  echo "broker_key=$PKI/broker.key"
  echo "kroute_cert=$PKI/kroute.pem"
  echo "kroute_key=$PKI/kroute.key"
  echo "kroute_keystore=$PKI/kroute-keystore.pem"
  echo "alice_cert=$PKI/alice.pem"
  echo "alice_key=$PKI/alice.key"
  echo "alice_keystore=$PKI/alice-keystore.pem"
  echo "expired_cert=$PKI/expired.pem"
  echo "expired_key=$PKI/expired.key"
  echo "unknown_ca_cert=$PKI/unknown-broker.pem"
  echo "unknown_ca_key=$PKI/unknown-broker.key"
  echo "plaintext=$BOOTSTRAP"
  for i in "${!SEC_KEYS[@]}"; do echo "${SEC_KEYS[$i]}=$(sec_bootstrap "$i")"; done
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

cap_mbps() { # N: broker N's cap as written by `cap` (MB/s; missing or not a decimal = 0)
  local v; v=$(tr -d ' \t\n' 2>/dev/null <"$(cap_file "$1")" || true)
  [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] && echo "$v" || echo 0
}

cap_shown() { # N PID: the cap for `status`
  if ! relay_caps "$1" "$2"; then echo "none(older relay: restart-relays)"
  elif awk -v v="$(cap_mbps "$1")" 'BEGIN { exit !(v + 0 == 0) }'; then echo unlimited
  else echo "$(cap_mbps "$1")MB/s"; fi
}

cap_lines() { # N: how many cap changes broker N's relay has logged
  local c; c=$(grep -cF -- "$(cap_file "$1"): cap " "$(relay_log "$1")" 2>/dev/null || true)
  echo "${c:-0}"
}

cmd_cap() { # N MBPS
  need_broker_id "${1:-}"
  [[ ${2:-} =~ ^[0-9]{1,7}(\.[0-9]{1,6})?$ ]] && awk -v v="$2" 'BEGIN { exit !(v <= 1000000) }' ||
    die "usage: cap N MBPS (MBPS: MB/s per direction, decimal with up to 6 places, at most 1000000; 0 = unlimited)"
  [ "$MODE" = relayed ] || die "caps need a cluster started in relayed mode (start --relayed); this one is $MODE"
  local n=$1 mbps=$2 pid= old seen
  if pid=$(relay_pid "$n"); then
    relay_caps "$n" "$pid" ||
      die "relay $n (pid $pid) was started without a cap file (an older delay_relay): run restart-relays first"
  else
    say "warning: relay $n is not running"; pid=
  fi
  old=$(cap_mbps "$n"); seen=$(cap_lines "$n")
  mkdir -p "$STATE/cap"
  # atomic replace: the relay never reads a half-written file
  echo "$mbps" >"$(cap_file "$n").tmp" && mv -f "$(cap_file "$n").tmp" "$(cap_file "$n")"
  # up to 6 decimals: two different values are different numbers of bytes/s for the relay too,
  # so a change shows up as a log line
  if [ -n "$pid" ] && awk -v a="$old" -v b="$mbps" 'BEGIN { exit !(a + 0 != b + 0) }'; then
    local deadline=$((SECONDS + 5))
    until [ "$(cap_lines "$n")" -gt "$seen" ]; do
      [ "$SECONDS" -lt "$deadline" ] || die "relay $n did not log the new cap within 5s (see $(relay_log "$n"))"
      sleep 0.05
    done
  fi
  if awk -v v="$mbps" 'BEGIN { exit !(v + 0 == 0) }'; then
    say "broker $n: bandwidth unlimited"
  else
    say "broker $n: bandwidth capped at $mbps MB/s per direction"
  fi
}

cmd_caps() { # one line per broker: "broker N MBPS" (0 = unlimited)
  local n
  for n in "${BROKERS[@]}"; do echo "broker $n $(cap_mbps "$n")"; done
}

cmd_restart_relays() { # [N...]: restart relays (e.g. a rebuilt binary); brokers keep running
  [ "$MODE" = relayed ] || die "restart-relays needs a cluster started in relayed mode; this one is $MODE"
  local n list=("$@")
  [ $# -gt 0 ] || list=("${BROKERS[@]}")
  for n in "${list[@]}"; do need_broker_id "$n"; done
  lock_state
  ensure_relay_bin
  for n in "${list[@]}"; do
    stop_relay "$n"
    start_relay "$n"
    say "relay $n restarted (pid $(relay_pid "$n")): connections through it were dropped"
  done
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
  [ "$SECURED" = no ] || { ensure_pki; ensure_encrypted_keystore; }
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
    ! node_gone "$n" || { log_tails; die "broker $n exited during startup"; }
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
  secured) cmd_secured ;;
  bootstrap) echo "$BOOTSTRAP" ;;
  default-version) echo "$DEFAULT_KAFKA_VERSION" ;;
  create-topic) cmd_create_topic "$@" ;;
  describe-topic) cmd_describe_topic "$@" ;;
  delete-topic) cmd_delete_topic "$@" ;;
  kill-broker) cmd_kill_broker "$@" ;;
  start-broker) cmd_start_broker "$@" ;;
  elect-leaders) cmd_elect_leaders "$@" ;;
  delay) cmd_delay "$@" ;;
  delays) cmd_delays ;;
  cap) cmd_cap "$@" ;;
  caps) cmd_caps ;;
  restart-relays) cmd_restart_relays "$@" ;;
  cut) cmd_cut "$@" ;;
  lib) [ -z "${1:-}" ] || use_version "$([ "$1" = default ] && echo "$DEFAULT_KAFKA_VERSION" || echo "$1")"
    ensure_lib; echo "$LIB" ;;
  tool) ensure_lib; [ $# -gt 0 ] || die "usage: tool CLASS ARGS..."; run_tool "$@" ;;
  -h|--help|help|"") usage ;;
  *) echo "cluster.sh: unknown command '$cmd'" >&2; usage ;;
esac
