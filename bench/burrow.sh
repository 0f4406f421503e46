#!/usr/bin/env bash
# kroute's consumer-lag verdicts side by side with LinkedIn's Burrow (issue 13, item 6).
#
#   bench/burrow.sh        build Burrow (once) and kroute, start both against the local cluster,
#                          run the scenarios of tests/lag.rs against both (examples/lag_scenarios.rs)
#                          and print the comparison table (~3 minutes when both are built)
#
# Burrow: BURROW_VERSION (default v1.9.5, the first that reads Kafka 4.1's offset commits) built
# with Go (GOTOOLCHAIN=local) into target/burrow/bin/burrow-$BURROW_VERSION, once. Its module
# comes from the Go module proxy (go install github.com/linkedin/Burrow@VERSION); where the proxy
# does not serve it, from a source tree or git repository given as BURROW_SRC (its tag VERSION
# is built, the dependencies still from the module proxy).
# Both get the same settings, by default both tools' defaults: intervals BENCH_LAG_INTERVALS [10]
# (Burrow's storage intervals, kroute's [lag] intervals), refresh BENCH_LAG_POLL_S seconds [10]
# (Burrow's offset-refresh and topic-refresh, kroute's poll_interval_ms), allowed lag 0,
# min-distance 0. The scenarios' consumers connect through kroute (BENCH_LAG_CONSUMERS=kroute,
# the default) or straight to the brokers (direct). Burrow: kafka-version
# "4.0.0" (the highest its sarama knows), no ZooKeeper, no notifier, inmemory storage, caching
# evaluator with expire-cache 1 s (default 10: its answers would be up to 10 s old), its
# __consumer_offsets consumer starting at the latest offsets (start-latest: the run's own groups
# only). kroute: [lag] enabled = true, cluster "local".
#
# Environment: BENCH_BUILD [1] (0: use target/release/kroute and the example as built),
# BENCH_LAG_SCENARIOS (LAG_SCENARIOS of the example, default all), BENCH_LAG_TIMEOUT_S [180].
# Output and logs: target/burrow/run-<date>/ (burrow.toml, kroute.toml, logs, results.md).
# Stops its Burrow and kroute on exit; leaves the topics (lagcmp-<pid>-*) it created.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

BURROW_VERSION=${BURROW_VERSION:-v1.9.5}
BUILD=${BENCH_BUILD:-1}
INTERVALS=${BENCH_LAG_INTERVALS:-10}
POLL_S=${BENCH_LAG_POLL_S:-10}
CONSUMERS=${BENCH_LAG_CONSUMERS:-kroute}
TIMEOUT_S=${BENCH_LAG_TIMEOUT_S:-180}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
EXAMPLE_BIN=target/release/examples/lag_scenarios
BURROW_BIN=$REPO/target/burrow/bin/burrow-$BURROW_VERSION

say() { echo "burrow.sh: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
poll() { # TRIES SLEEP CMD...: until CMD succeeds
  local n=$1 s=$2; shift 2
  for ((i = 0; i < n; i++)); do "$@" && return 0; sleep "$s"; done
  return 1
}
# a run of N free ports (N consecutive from a base, tried from START on)
free_ports() { # START N
  local base=$1 n=$2 p ok
  while :; do
    ok=1
    for ((p = base; p < base + n; p++)); do port_open "$p" && { ok=0; break; }; done
    [ $ok = 1 ] && { echo "$base"; return; }
    base=$((base + n + 7))
  done
}

# -------------------------------------------------------------------------------------------
# Burrow

if [ ! -x "$BURROW_BIN" ]; then
  mkdir -p target/burrow/bin
  say "building Burrow $BURROW_VERSION"
  if ! GOTOOLCHAIN=local GOBIN=$REPO/target/burrow/gobin go install "github.com/linkedin/Burrow@$BURROW_VERSION" 2>target/burrow/go-install.log; then
    [ -n "${BURROW_SRC:-}" ] || die "go install failed ($(tail -n 2 target/burrow/go-install.log | tr '\n' ' ')); give a Burrow source tree or git repository as BURROW_SRC"
    rm -rf target/burrow/src && mkdir -p target/burrow/src
    if git -C "$BURROW_SRC" rev-parse --git-dir >/dev/null 2>&1; then
      git -C "$BURROW_SRC" archive "$BURROW_VERSION" | tar -x -C target/burrow/src
    else
      cp -r "$BURROW_SRC"/. target/burrow/src/
    fi
    (cd target/burrow/src && GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -o "$BURROW_BIN" .)
  else
    mv target/burrow/gobin/Burrow "$BURROW_BIN"
  fi
fi
[ -x "$BURROW_BIN" ] || die "no Burrow binary at $BURROW_BIN"

# -------------------------------------------------------------------------------------------
# kroute and the scenario driver

if [ "$BUILD" = 1 ]; then
  say "cargo build --release (kroute), then the lag_scenarios example"
  cargo build --release
  cargo build --release --example lag_scenarios
fi
[ -x "$KROUTE_BIN" ] || die "$KROUTE_BIN not found (cargo build --release)"
[ -x "$EXAMPLE_BIN" ] || die "$EXAMPLE_BIN not found (cargo build --release --example lag_scenarios)"

BOOTSTRAP=$(scripts/cluster.sh bootstrap)
scripts/cluster.sh status >/dev/null || die "the local cluster is not running (scripts/cluster.sh start)"
SERVERS=$(sed 's/\([^,]*\)/"\1"/g' <<<"$BOOTSTRAP")

OUT=$REPO/target/burrow/run-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

KR_BOOT=$(free_ports 9692 5)           # bootstrap, then broker_port_base + 1..3 after it
KR_BASE=$KR_BOOT                       # broker_port_base: brokers at +1, +2, +3
KR_ADMIN=$(free_ports 9761 1)
BURROW_PORT=$(free_ports 9771 1)
[ "$KR_ADMIN" != "$BURROW_PORT" ] || BURROW_PORT=$(free_ports $((KR_ADMIN + 3)) 1)

cat >"$OUT/kroute.toml" <<EOF
# written by bench/burrow.sh
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = $KR_BOOT
broker_port_base = $KR_BASE

[upstream]
bootstrap_servers = [$SERVERS]

[admin]
listen = "127.0.0.1:$KR_ADMIN"

[lag]
enabled = true
cluster = "local"
poll_interval_ms = $((POLL_S * 1000))
intervals = $INTERVALS
min_distance_ms = 0
allowed_lag = 0
EOF

mkdir -p "$OUT/burrow"
cat >"$OUT/burrow/burrow.toml" <<EOF
# written by bench/burrow.sh
[general]
pidfile = "$OUT/burrow/burrow.pid"

[logging]
filename = "$OUT/burrow/burrow.log"
level = "info"

[client-profile.bench]
client-id = "burrow-bench"
kafka-version = "4.0.0"

[cluster.local]
class-name = "kafka"
servers = [$SERVERS]
client-profile = "bench"
topic-refresh = $POLL_S
offset-refresh = $POLL_S

[consumer.local]
class-name = "kafka"
cluster = "local"
servers = [$SERVERS]
client-profile = "bench"
offsets-topic = "__consumer_offsets"
start-latest = true

[storage.default]
class-name = "inmemory"
intervals = $INTERVALS
min-distance = 0
expire-group = 604800

[evaluator.default]
class-name = "caching"
expire-cache = 1

[httpserver.default]
address = "127.0.0.1:$BURROW_PORT"
EOF

"$KROUTE_BIN" --config "$OUT/kroute.toml" </dev/null >"$OUT/kroute.log" 2>&1 &
PIDS+=($!)
(cd "$OUT/burrow" && exec "$BURROW_BIN" --config-dir "$OUT/burrow") </dev/null >"$OUT/burrow/stdout.log" 2>&1 &
PIDS+=($!)

kroute_ready() { curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$KR_ADMIN/ready"; }
burrow_ready() { curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$BURROW_PORT/v3/kafka/local"; }
poll 100 0.2 kroute_ready || { tail -n 20 "$OUT/kroute.log" >&2; die "kroute not ready within 20 s"; }
poll 150 0.2 burrow_ready || { tail -n 20 "$OUT/burrow/burrow.log" "$OUT/burrow/stdout.log" >&2; die "Burrow not ready within 30 s"; }
say "kroute ready (bootstrap 127.0.0.1:$KR_BOOT, admin 127.0.0.1:$KR_ADMIN), Burrow $BURROW_VERSION ready (127.0.0.1:$BURROW_PORT)"
# Burrow's __consumer_offsets consumer and first offset refresh
sleep $((POLL_S * 3))

started=$(date +%s)
LAG_SCENARIOS=${BENCH_LAG_SCENARIOS:-} LAG_TIMEOUT_S=$TIMEOUT_S LAG_CONSUMERS=$CONSUMERS \
  "$EXAMPLE_BIN" "127.0.0.1:$KR_BOOT" "127.0.0.1:$KR_ADMIN" "127.0.0.1:$BURROW_PORT" "$BOOTSTRAP" \
  >"$OUT/table.md" 2>"$OUT/scenarios.log" || { cat "$OUT/scenarios.log" >&2; die "the scenario driver failed"; }
elapsed=$(($(date +%s) - started))

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "command: BENCH_LAG_CONSUMERS=$CONSUMERS bench/burrow.sh${BENCH_LAG_SCENARIOS:+ (BENCH_LAG_SCENARIOS=\"$BENCH_LAG_SCENARIOS\")}"
  echo "kroute: $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock examples/lag_scenarios.rs || echo ' + uncommitted changes')"
  echo "Burrow: $BURROW_VERSION ($(go version | awk '{print $3}'))"
  echo "Kafka: ${KROUTE_KAFKA_VERSION:-4.1.2}, cluster $BOOTSTRAP"
  echo "settings: intervals $INTERVALS, refresh/poll ${POLL_S} s, allowed lag 0, min-distance 0, Burrow expire-cache 1 s; consumers: $CONSUMERS"
  echo "scenarios took ${elapsed} s"
  echo
  cat "$OUT/table.md"
} >"$OUT/results.md"
cat "$OUT/results.md"
say "logs in $OUT"
