# Sourced by the benchmark scripts: what identifies a run in its report.
#
# bench_identity SCRIPT sets:
#   cmd        the command line as run, with the BENCH_* / KROUTE_BIN settings that were given
#   commit     kroute's git commit, marked if src/ differs or the binary was not rebuilt
#   cpu_model  the CPU, from /proc/cpuinfo
# It reads $BUILD (1 if the script built kroute), $KROUTE_BIN and, if set, $IDENTITY_PATHS (more
# paths whose uncommitted changes mark the commit, e.g. the client example a run used).
bench_identity() {
  cmd=$1
  local v
  for v in $(compgen -e | grep -E '^(BENCH_|KROUTE_BIN$)' | sort); do cmd="$v=\"${!v}\" $cmd"; done
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD -- src Cargo.toml Cargo.lock ${IDENTITY_PATHS:-} 2>/dev/null || commit="$commit + uncommitted changes"
  [ "$BUILD" = 1 ] || commit="$commit (not rebuilt: $KROUTE_BIN of $(date -u -r "$KROUTE_BIN" '+%Y-%m-%d %H:%M UTC'))"
  cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
}

# bench_machine_meta prints the key=value lines every report starts with (after bench_identity).
bench_machine_meta() {
  cat <<EOF
date=$(date -u '+%Y-%m-%d %H:%M UTC')
command=$cmd
nproc=$(nproc)
cpu=${cpu_model:-unknown}
mem=$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
kernel=$(uname -r)
kroute=$commit
kafka=${KROUTE_KAFKA_VERSION:-4.1.2}
java=$(java -version 2>&1 | head -n 1)
EOF
}

# poll TRIES INTERVAL CMD...: runs CMD until it succeeds, at most TRIES times, INTERVAL s apart.
poll() {
  local tries=$1 interval=$2 i
  shift 2
  for ((i = 0; i < tries; i++)); do "$@" && return 0; sleep "$interval"; done
  return 1
}

# port_open HOST PORT: whether something accepts connections there.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Uses the relayed cluster in $KROUTE_CLUSTER_DIR if it runs, else starts one; sets BOOT (its
# bootstrap), caps_before (the caps to put back, when it was running) and started_cluster=1 (when
# this call started it). Needs the caller's say and die.
relayed_cluster_up() {
  if scripts/cluster.sh status >/dev/null 2>&1; then
    grep -qx 'mode relayed' < <(scripts/cluster.sh status) ||
      die "the cluster in $KROUTE_CLUSTER_DIR runs in direct mode; stop it or give another KROUTE_CLUSTER_DIR"
    caps_before=$(scripts/cluster.sh caps)
    say "using the running cluster in $KROUTE_CLUSTER_DIR"
    # A cluster that has carried the test suite and earlier benches holds thousands of
    # partitions and gigabytes: its brokers answer slower, and a bench's shares shift (broker
    # 2 got 0.15-0.28 through kroute instead of 0.06-0.14 on 9 GB in bench/coverage.sh).
    local gb
    gb=$(du -s --block-size=1G "$KROUTE_CLUSTER_DIR/data" 2>/dev/null | cut -f1)
    [ "${gb:-0}" -lt 2 ] ||
      say "WARNING: the cluster holds ${gb} GB of earlier topics; for clean numbers restart it empty (scripts/cluster.sh stop, then start)"
  else
    scripts/cluster.sh status 2>/dev/null | grep -q ' running pid=' &&
      die "the cluster in $KROUTE_CLUSTER_DIR is partly running; fix it (scripts/cluster.sh status) first"
    scripts/cluster.sh stop >/dev/null 2>&1 || true
    say "starting a cluster (relayed mode, port offset $KROUTE_CLUSTER_PORT_OFFSET, $KROUTE_CLUSTER_DIR)"
    started_cluster=1
    scripts/cluster.sh start --relayed >/dev/null
  fi
  BOOT=$(scripts/cluster.sh bootstrap)
}

# build_kroute_and_rdkafka_perf: the release kroute and examples/rdkafka_perf, in two cargo runs
# (built together, the dev-dependencies' features would change kroute's). Needs say and die.
build_kroute_and_rdkafka_perf() {
  say "cargo build --release --bin kroute"
  cargo build --release --quiet --bin kroute || die "cargo build --release --bin kroute failed"
  say "cargo build --release --example rdkafka_perf"
  cargo build --release --quiet --example rdkafka_perf || die "cargo build --release --example rdkafka_perf failed"
}

# brokers_own_listeners: "1=127.0.0.1:P1,2=...,3=..." of the cluster at $KROUTE_CLUSTER_PORT_OFFSET,
# the brokers' own ports rather than the relays' (a sampler there does not queue behind a cap).
brokers_own_listeners() {
  local o=$KROUTE_CLUSTER_PORT_OFFSET
  echo "1=127.0.0.1:$((19092 + o)),2=127.0.0.1:$((19093 + o)),3=127.0.0.1:$((19094 + o))"
}

# leader_assignment A B C prints, for a topic of A + B + C partitions led A by broker 1, B by
# broker 2 and C by broker 3 (RF 3), the --replica-assignment "1:2:3,2:3:1,..." on line 1 and the
# leaders "1,2,3,..." on line 2: leaders interleaved 1,2,3,1,2,3,... while each has some left,
# followers alternating between the two orders of the other brokers (bench/routing.sh's layout).
leader_assignment() {
  python3 - "$@" <<'PY'
import sys
left = [int(x) for x in sys.argv[1:4]]
led = [0, 0, 0]
asg, leaders = [], []
while sum(left):
    for b in range(3):
        if left[b]:
            left[b] -= 1
            o = [(b + 1) % 3, (b + 2) % 3]
            if led[b] % 2:
                o.reverse()
            led[b] += 1
            asg.append(":".join(str(x + 1) for x in [b] + o))
            leaders.append(str(b + 1))
print(",".join(asg))
print(",".join(leaders))
PY
}

# start_sidecar_kroute STEM BASE TOPIC PORT_VAR COMMENT [UPSTREAM [EXTRA_TOML [ROUTING_TOML]]]: a kroute in front
# of the cluster at UPSTREAM (default $BOOT; EXTRA_TOML goes after [upstream], e.g. its tls/sasl,
# ROUTING_TOML last, in [routing]),
# its brokers on ports BASE+1..3, bootstrap BASE+4, admin BASE+5, routing TOPIC (strict-cost); its
# config $RAW/STEM.toml (first line: "# COMMENT"), its log $RAW/STEM.log, its pid appended to
# KR_PIDS. Dies naming PORT_VAR (the setting that moves the ports) if one of them is taken.
start_sidecar_kroute() {
  local stem=$1 base=$2 topic=$3 port_var=$4 comment=$5 upstream=${6:-$BOOT} extra=${7:-} routing=${8:-} p
  for p in 1 2 3 4 5; do
    port_open 127.0.0.1 $((base + p)) && die "port $((base + p)) is in use ($port_var)"
  done
  cat >"$RAW/$stem.toml" <<EOF
# $comment
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = $((base + 4))
broker_port_base = $base

[upstream]
bootstrap_servers = [$(sed 's/\([^,]*\)/"\1"/g; s/,/, /g' <<<"$upstream")]
$extra

[admin]
listen = "127.0.0.1:$((base + 5))"

[routing]
strategy = "strict-cost"
include = ["$topic"]
$routing
EOF
  "$KROUTE_BIN" --config "$RAW/$stem.toml" </dev/null >"$RAW/$stem.log" 2>&1 &
  KR_PIDS+=($!)
}

# wait_sidecar_ready STEM BASE: waits (30 s at most) for the kroute of start_sidecar_kroute to be
# ready, or dies with the end of its log.
wait_sidecar_ready() {
  poll 150 0.2 curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$(($2 + 5))/ready" ||
    { tail -n 20 "$RAW/$1.log" >&2; die "$1 not ready within 30s"; }
}

# --- the read benches (fetch_memory, fetch_group, share_fetch, fetch_cpu_share)

# read_bench_start NAME: say and die with NAME's prefix, and a fresh $raw (target/bench-NAME,
# underscores as dashes) for the bench's files.
read_bench_start() {
  read_bench_name=$1
  say() { echo "$read_bench_name: $*" >&2; }
  die() { echo "$read_bench_name: FAILED: $*" >&2; exit 1; }
  raw=target/bench-${1//_/-}
  rm -rf "$raw"; mkdir -p "$raw"
}

# read_bench_kroute_bins: KROUTE_BINS as given, or target/release/kroute, built.
read_bench_kroute_bins() {
  [ -n "${KROUTE_BINS:-}" ] && return 0
  say "cargo build --release --bin kroute"
  cargo build --release --quiet --bin kroute || die "building kroute failed"
  KROUTE_BINS=target/release/kroute
}

# read_bench_cluster_up: uses the running test cluster (scripts/cluster.sh, any mode), or starts
# one in direct mode and sets started_cluster=1 (stop_started_cluster stops it); sets BOOT.
read_bench_cluster_up() {
  started_cluster=0
  if ! scripts/cluster.sh status >/dev/null 2>&1; then
    say "starting a cluster (direct mode)"
    started_cluster=1
    scripts/cluster.sh start >/dev/null
  fi
  BOOT=$(scripts/cluster.sh bootstrap)
}
stop_started_cluster() { [ "${started_cluster:-0}" != 1 ] || scripts/cluster.sh stop >/dev/null 2>&1; }

# read_bench_cleanup: the read benches' EXIT trap: stops what they started (consumer_pids,
# hog_pid, kroute_pid, and the cluster if read_bench_cluster_up started it).
read_bench_cleanup() {
  set +e
  local p
  for p in ${consumer_pids[@]+"${consumer_pids[@]}"} ${hog_pid:-}; do kill "$p" 2>/dev/null; done
  [ -n "${kroute_pid:-}" ] && kill "$kroute_pid" 2>/dev/null && wait "$kroute_pid" 2>/dev/null
  stop_started_cluster
}

# fill_read_topic TOPIC RECORDS DIR: creates TOPIC (6 partitions, 2 led by each broker, RF 3) and
# writes RECORDS keyless records of 1 KiB into it with examples/rdkafka_perf (built by the caller).
fill_read_topic() {
  scripts/cluster.sh create-topic "$1" --replica-assignment 1:2:3,2:3:1,3:1:2,1:3:2,2:1:3,3:2:1 >/dev/null 2>&1 ||
    die "creating topic $1 failed"
  say "filling $1: $2 records of 1 KiB"
  target/release/examples/rdkafka_perf "$BOOT" "$1" "$2" 1024 -1 acks=all linger.ms=20 \
    >"$3/fill.txt" 2>"$3/fill.err" || { cat "$3/fill.err" >&2; die "filling the topic failed"; }
}

# plain_kroute_config FILE UPSTREAM: the config of a kroute with no routing in front of UPSTREAM
# (bootstrap servers, comma-separated): bootstrap 127.0.0.1:29092, brokers 29101-29103, admin
# 127.0.0.1:29199 (the read benches).
plain_kroute_config() {
  cat >"$1" <<EOF
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = 29092
broker_port_base = 29100

[upstream]
bootstrap_servers = [$(sed 's/\([^,]*\)/"\1"/g; s/,/, /g' <<<"$2")]

[admin]
listen = "127.0.0.1:29199"
EOF
}

# start_plain_kroute BIN CONFIG LOG: starts BIN with CONFIG (plain_kroute_config), its output
# appended to LOG, sets kroute_pid, and waits 10 s at most for it to be ready. Needs die.
start_plain_kroute() {
  "$1" --config "$2" </dev/null >>"$3" 2>&1 &
  kroute_pid=$!
  poll 100 0.1 curl -sf -o /dev/null http://127.0.0.1:29199/ready || { tail -n 20 "$3" >&2; die "kroute $1 not ready"; }
}

# median: the median of the numbers in the words of stdin (e.g. "3.1 2.0 5.2 ").
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# cpu_seconds PID: the user and system CPU seconds PID has used so far.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.3f", ($12 + $13) / hz }' "/proc/$1/stat"; }

# answer_bytes API: the bytes of API's answers the kroute of start_plain_kroute has written so far.
answer_bytes() {
  curl -sf http://127.0.0.1:29199/metrics |
    awk -v api="api=\"$1\"" 'index($0, "kroute_response_bytes_total{") == 1 && index($0, api) { s += $NF } END { printf "%.0f", s }'
}
