#!/usr/bin/env bash
# Load: many mostly idle client connections plus many small producers, through kroute; what an idle
# connection costs kroute (and an L4 relay), kroute's CPU per GB produced, and the latency kroute
# adds for the producers (the same producers straight to the brokers, side by side in one run).
#
#   bench/load.sh                                      full run (~4 minutes on 2 cores, plus builds)
#   LOAD_IDLE=1000 LOAD_PRODUCERS=100 LOAD_SECONDS=20 bench/load.sh      quick check (~1.5 minutes)
#
# Needs the local cluster running in relayed mode (scripts/cluster.sh start --relayed; it is used as
# it is, never started or stopped here), no broker delay or cap set.
#
# What it does (examples/load_gen.rs is the client side; all its connections come from many
# loopback addresses, 127.x.y.z, LOAD_SOURCE_NET.*):
#  1. builds kroute (cargo build --release), the load generator (cargo build --release --example
#     load_gen) and, if missing, the delay_relay (scripts/cluster.sh's static build), unless
#     LOAD_BUILD=0; raises the open-files limit (ulimit -n) to the hard limit; waits while
#     /tmp/kroute-bench-running exists (someone else measuring), then holds it until the end;
#  2. creates a topic load-<time> (LOAD_PARTITIONS partitions, RF 3, leaders spread by Kafka);
#  3. starts kroute (its own config, target/bench-load/kroute.toml: bootstrap 127.0.0.1:12092,
#     brokers 127.0.0.1:12100+id, admin 127.0.0.1:12144, [routing] strategy LOAD_ROUTING with
#     include = ["load-*"]; [limits] max_connections / max_connections_per_ip set far above the
#     run's needs when this kroute knows those keys) in front of the cluster's relayed addresses,
#     and a delay_relay with delay 0 (127.0.0.1:12192-12194 -> the brokers' own ports
#     127.0.0.1:19092-19094: the L4 floor, one task pair per connection, single-threaded as
#     scripts/cluster.sh runs it);
#  4. relay: opens LOAD_IDLE idle connections to the relay (each ApiVersions v3 + Metadata v12 for
#     the topic, then silent), in LOAD_STEPS steps, the relay's RSS (VmRSS) after each step (3 s
#     after the step's last handshake); closes them, RSS 3 s later;
#  5. kroute: the same LOAD_IDLE idle connections to kroute's broker addresses (connection i to
#     broker 1 + i mod 3), RSS after each step; kroute_client_connections_active must read
#     LOAD_IDLE; the connections stay open through step 6;
#  6. producers: LOAD_PRODUCERS producers straight to the brokers (the cluster's relayed addresses,
#     as any client of this cluster) and LOAD_PRODUCERS through kroute, at the same time with the
#     same schedule: each its own connection to its partition's leader, one Produce request (v9,
#     acks LOAD_ACKS, one batch of LOAD_RECORDS keyless records of LOAD_RECORD_SIZE bytes) every
#     1/LOAD_RATE s; LOAD_WARMUP s not counted, then LOAD_SECONDS measured. kroute's CPU
#     (/proc/<pid>/stat utime+stime) and counters are read at the window's start and end;
#  7. closes the idle connections (none may have been closed by kroute meanwhile), kroute's RSS 5 s
#     later; opens the same LOAD_IDLE again in one step and closes them (RSS after each: the memory
#     the first round freed is reused, not added to); reads the topic's end offsets; stops kroute
#     and the relay, deletes the topic.
#
# Reported:
#  - RSS per idle connection: (RSS with N idle - RSS before) / N, kroute and relay, at each step;
#  - kroute CPU seconds per GB produced: CPU in the window / kroute_request_bytes_total{api=Produce}
#    in the window;
#  - latency per Produce request (written -> answer read), exact percentiles over every request
#    of the window, per side; added latency = kroute - direct, and the ratio kroute / direct.
#  - kroute's threads' time running and waiting for a CPU in the window (schedstat): on a shared
#    machine, what the latency figures mean depends on it.
# The run fails unless: every idle connection opened and stayed open, kroute's active-connections
# gauge read LOAD_IDLE, every producer ran without a failure, no Produce answer carried an error,
# kroute's own counters saw exactly the kroute side's traffic (kroute_requests_total{api=Produce}
# and kroute_request_bytes_total{api=Produce} over the producer run = the requests and bytes the
# generator wrote through kroute), and the brokers hold at least the records acknowledged.
#
# File descriptors: kroute holds 2 per client connection (the client's and its upstream; one
# upstream per client connection), plus, with LOAD_ROUTING=strict-cost, up to 2 side connections
# per producer connection (batches moved to the other two brokers); the relay 2 per connection.
# The open-files hard limit caps the run: LOAD_IDLE is lowered to fit kroute in it (with a note)
# if it does not.
#
# Environment (defaults in brackets):
#   LOAD_IDLE          idle connections [9000; lowered to fit the open-files limit, see above]
#   LOAD_PRODUCERS     producers per side [1000]
#   LOAD_RATE          Produce requests per second per producer [2]
#   LOAD_RECORDS       records per request [5]      LOAD_RECORD_SIZE   bytes per record [100]
#   LOAD_ACKS          1, or -1 (all) [1]
#   LOAD_WARMUP        seconds of producing not counted [10]
#   LOAD_SECONDS       measured seconds [60]
#   LOAD_PARTITIONS    partitions of the topic [30]
#   LOAD_STEPS         steps the idle connections open in [4]
#   LOAD_ROUTING       kroute's [routing] strategy: strict-cost (kroute's default) or off [strict-cost]
#   LOAD_SOURCE_NET    first two octets of the clients' addresses [127.20] (the idle connections
#                      to the relay from A.B, to kroute from A.B+1, the direct producers from A.B+2,
#                      those through kroute from A.B+3)
#   LOAD_BUILD         1 = build first [1]
#   KROUTE_BIN [target/release/kroute]   LOAD_GEN_BIN [target/release/examples/load_gen]
#   RELAY_BIN [target/x86_64-unknown-linux-gnu/release/delay_relay]
# Output: target/bench-load/ (report.txt, kroute.log, relay.log, the generator's output, metrics
# scrapes, rss.tsv).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
REPO=$PWD

IDLE=${LOAD_IDLE:-9000}
PRODUCERS=${LOAD_PRODUCERS:-1000}
RATE=${LOAD_RATE:-2}
RECORDS=${LOAD_RECORDS:-5}
RECORD_SIZE=${LOAD_RECORD_SIZE:-100}
ACKS=${LOAD_ACKS:-1}
WARMUP=${LOAD_WARMUP:-10}
SECONDS_MEASURED=${LOAD_SECONDS:-60}
PARTITIONS=${LOAD_PARTITIONS:-30}
STEPS=${LOAD_STEPS:-4}
ROUTING=${LOAD_ROUTING:-strict-cost}
SOURCE_NET=${LOAD_SOURCE_NET:-127.20}
BUILD=${LOAD_BUILD:-1}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
LOAD_GEN_BIN=${LOAD_GEN_BIN:-target/release/examples/load_gen}
RELAY_BIN=${RELAY_BIN:-target/x86_64-unknown-linux-gnu/release/delay_relay}

RELAYED_BOOTSTRAP=127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194
KR_BOOT=12092 KR_BASE=12100 KR_ADMIN=127.0.0.1:12144
RELAY_PORTS=(12192 12193 12194) BROKER_PORTS=(19092 19093 19094)
OUT=$REPO/target/bench-load
LOCK=/tmp/kroute-bench-running
TOPIC=load-$(date +%s)-$RANDOM

say() { echo "load: $*" >&2; }
die() { echo "load: FAILED: $*" >&2; exit 1; }

for v in IDLE PRODUCERS RECORDS RECORD_SIZE WARMUP SECONDS_MEASURED PARTITIONS STEPS BUILD; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer (got '${!v}')"
done
[[ $RATE =~ ^[0-9]+([.][0-9]+)?$ ]] || die "LOAD_RATE must be a number (got '$RATE')"
[[ $ACKS == 1 || $ACKS == -1 ]] || die "LOAD_ACKS must be 1 or -1"
[[ $ROUTING == strict-cost || $ROUTING == off ]] || die "LOAD_ROUTING must be strict-cost or off"
if ! [[ $SOURCE_NET =~ ^127\.([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -gt 252 ]; then
  die "LOAD_SOURCE_NET must be 127.B with B <= 252 (got '$SOURCE_NET')"
fi
NET_B=${SOURCE_NET#127.}
for v in IDLE PRODUCERS SECONDS_MEASURED STEPS; do
  [ "${!v}" -ge 1 ] || die "LOAD_IDLE, LOAD_PRODUCERS, LOAD_SECONDS and LOAD_STEPS must be >= 1"
done
command -v curl >/dev/null || die "curl missing"
mkdir -p "$OUT"

# ---------------------------------------------------------------------------------------------
# cleanup

KROUTE_PID='' RELAY_PID='' IDLE_PID='' PROD_PID='' lock_held=0 topic_created=0

cleanup() {
  local rc=$? p
  set +e
  exec 7>&- 2>/dev/null
  for p in $PROD_PID $IDLE_PID $KROUTE_PID $RELAY_PID; do
    kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  [ "$topic_created" = 1 ] && scripts/cluster.sh delete-topic "$TOPIC" >/dev/null 2>&1
  [ "$lock_held" = 1 ] && [ "$(cat "$LOCK" 2>/dev/null)" = "bench/load.sh $$" ] && rm -f "$LOCK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# helpers

kroute_ready() { curl -fsS --max-time 2 -o /dev/null "http://$KR_ADMIN/ready" 2>/dev/null; }
scrape() { curl -fsS --max-time 10 "http://$KR_ADMIN/metrics" >"$1" || die "cannot read kroute's metrics"; }
metric() { # FILE NAME: the sum of NAME's samples
  awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%.0f\n", s }' "$1"
}
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; } # utime + stime
# ns its threads ran and ns they waited, runnable, for a CPU (/proc/<pid>/task/*/schedstat)
# (per thread: a thread that ends between two samples drops out of the sums, so the delta is taken
# per thread id, over the threads of the second sample)
sched_snapshot() { # PID FILE
  local t
  for t in /proc/"$1"/task/*; do printf '%s %s\n' "${t##*/}" "$(cat "$t/schedstat" 2>/dev/null)"; done >"$2"
}
sched_delta() { # BEFORE AFTER: "ran_ns waited_ns"
  awk 'NR == FNR { r[$1] = $2; w[$1] = $3; next } NF >= 3 { dr += $2 - r[$1]; dw += $3 - w[$1] } END { printf "%.0f %.0f\n", dr, dw }' "$1" "$2"
}
alive() { kill -0 "$1" 2>/dev/null; }
wait_line() { # FILE PATTERN COUNT TIMEOUT_S PID: until FILE has COUNT lines matching PATTERN
  local i
  for ((i = 0; i < $4 * 20; i++)); do
    [ "$(grep -c -- "$2" "$1" 2>/dev/null || true)" -ge "$3" ] && return 0
    alive "$5" || { sleep 0.2; [ "$(grep -c -- "$2" "$1" 2>/dev/null || true)" -ge "$3" ] && return 0; return 1; }
    sleep 0.05
  done
  return 1
}
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------------------------------------
# cluster, builds, limits

scripts/cluster.sh status >/dev/null 2>&1 || die "the cluster is not running (scripts/cluster.sh start --relayed)"
[ "$(scripts/cluster.sh bootstrap)" = "$RELAYED_BOOTSTRAP" ] ||
  die "the cluster does not run in relayed mode (it advertises $(scripts/cluster.sh bootstrap))"
if scripts/cluster.sh delays | awk '$3 != 0 { bad = 1 } END { exit !bad }'; then
  die "a broker has a delay set ($(scripts/cluster.sh delays | tr '\n' ' '))"
fi
if scripts/cluster.sh caps | awk '$3 != "unlimited" && $3 != 0 { bad = 1 } END { exit !bad }'; then
  die "a broker has a bandwidth cap set ($(scripts/cluster.sh caps | tr '\n' ' '))"
fi

if [ "$BUILD" = 1 ]; then
  say "cargo build --release"
  cargo build --release --quiet || die "cargo build --release failed"
  # a cargo run of its own: built together, the dev-dependencies' features would change kroute's
  say "cargo build --release --example load_gen"
  cargo build --release --quiet --example load_gen || die "cargo build --release --example load_gen failed"
  if [ ! -x "$RELAY_BIN" ]; then
    say "cargo build --release --target x86_64-unknown-linux-gnu --workspace --bin delay_relay (static, as scripts/cluster.sh)"
    (. scripts/static-build.sh && static_build delay_relay) ||
      die "building the delay_relay failed"
  fi
fi
for b in "$KROUTE_BIN" "$LOAD_GEN_BIN" "$RELAY_BIN"; do [ -x "$b" ] || die "$b not found (LOAD_BUILD=1 builds it)"; done

ulimit -n "$(ulimit -Hn)" || die "cannot raise the open-files limit"
NOFILE=$(ulimit -n)
# kroute: 2 fds per client connection, 2 side connections per producer with routing, 100 spare
side=0; [ "$ROUTING" = strict-cost ] && side=2
fit=$(((NOFILE - 100 - PRODUCERS * (2 + side)) / 2))
NOTE=
if [ "$IDLE" -gt "$fit" ]; then
  [ "$fit" -ge 1 ] || die "the open-files limit ($NOFILE) leaves kroute no room for idle connections"
  NOTE="LOAD_IDLE lowered from $IDLE to $fit: kroute's open-files limit is $NOFILE (hard limit), and it needs 2 per client connection + $side per producer for side connections"
  say "$NOTE"
  IDLE=$fit
fi
STEPS=$((STEPS > IDLE ? IDLE : STEPS))

# ---------------------------------------------------------------------------------------------
# wait for the machine, then hold it

if [ -e "$LOCK" ]; then
  say "waiting: $LOCK exists ($(cat "$LOCK" 2>/dev/null)), someone else is measuring"
  while [ -e "$LOCK" ]; do sleep 5; done
fi
echo "bench/load.sh $$" >"$LOCK"
lock_held=1
say "holding $LOCK"

for p in $KR_BOOT $((KR_BASE + 1)) $((KR_BASE + 2)) $((KR_BASE + 3)) "${KR_ADMIN##*:}" "${RELAY_PORTS[@]}"; do
  port_open 127.0.0.1 "$p" && die "port $p is already in use (another bench/load.sh?)"
done

# ---------------------------------------------------------------------------------------------
# topic, kroute, relay

say "creating $TOPIC ($PARTITIONS partitions, RF 3)"
scripts/cluster.sh create-topic "$TOPIC" --partitions "$PARTITIONS" --replication-factor 3 >/dev/null ||
  die "creating $TOPIC failed"
topic_created=1

write_config() { # EXTRA_LIMITS
  cat <<EOF
# written by bench/load.sh
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = $KR_BOOT
broker_port_base = $KR_BASE

[upstream]
bootstrap_servers = ["127.0.0.1:19192", "127.0.0.1:19193", "127.0.0.1:19194"]

[limits]
$1
[admin]
listen = "$KR_ADMIN"

[routing]
strategy = "$ROUTING"
include = ["load-*"]
EOF
}
# connection limits far above the run's needs, if this kroute has them
limits="max_connections = 1000000
max_connections_per_ip = 1000000
"
write_config "$limits" >"$OUT/kroute.toml"
if ! "$KROUTE_BIN" check-config --config "$OUT/kroute.toml" >/dev/null 2>&1; then
  limits=
  write_config "" >"$OUT/kroute.toml"
  "$KROUTE_BIN" check-config --config "$OUT/kroute.toml" >"$OUT/check-config.out" 2>&1 ||
    { cat "$OUT/check-config.out" >&2; die "kroute refuses $OUT/kroute.toml"; }
  say "this kroute has no [limits] max_connections / max_connections_per_ip: none set"
fi

"$KROUTE_BIN" --config "$OUT/kroute.toml" </dev/null >"$OUT/kroute.log" 2>&1 &
KROUTE_PID=$!
echo 0 >"$OUT/relay-delay"
relay_args=()
for i in 0 1 2; do relay_args+=(--listen "127.0.0.1:${RELAY_PORTS[$i]}" --target "127.0.0.1:${BROKER_PORTS[$i]}"); done
"$RELAY_BIN" "${relay_args[@]}" --delay-file "$OUT/relay-delay" </dev/null >"$OUT/relay.log" 2>&1 &
RELAY_PID=$!
poll 100 0.2 kroute_ready || { tail -n 20 "$OUT/kroute.log" >&2; die "kroute not ready within 20 s"; }
poll 50 0.2 port_open 127.0.0.1 "${RELAY_PORTS[2]}" || { tail -n 20 "$OUT/relay.log" >&2; die "the relay does not listen"; }
for p in 1 2 3; do
  poll 50 0.2 port_open 127.0.0.1 $((KR_BASE + p)) || die "kroute does not listen for broker $p on $((KR_BASE + p))"
done
say "kroute pid $KROUTE_PID (routing $ROUTING, open files $NOFILE), relay pid $RELAY_PID"
sleep 3
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
printf 'proxy\tidle\trss_kb\n' >"$OUT/rss.tsv"

# ---------------------------------------------------------------------------------------------
# idle connections

idle_run() { # NAME PID TARGETS NET: opens IDLE connections in STEPS steps, RSS of PID after each
  local name=$1 pid=$2 k line base
  rm -f "$OUT/idle-$name.fifo"; mkfifo "$OUT/idle-$name.fifo"
  base=$(rss_kb "$pid")
  printf '%s\t0\t%s\n' "$name" "$base" >>"$OUT/rss.tsv"
  "$LOAD_GEN_BIN" idle --targets "$3" --count "$IDLE" --steps "$STEPS" --topic "$TOPIC" --source-net "$4" \
    --client-id "load-gen-idle-$name" <"$OUT/idle-$name.fifo" >"$OUT/idle-$name.out" 2>"$OUT/idle-$name.err" &
  IDLE_PID=$!
  exec 7>"$OUT/idle-$name.fifo"
  for ((k = 1; k <= STEPS; k++)); do
    wait_line "$OUT/idle-$name.out" '^open ' "$k" 600 "$IDLE_PID" ||
      { cat "$OUT/idle-$name.err" >&2; die "$name: idle step $k did not finish"; }
    line=$(grep '^open ' "$OUT/idle-$name.out" | sed -n "${k}p")
    [[ $line == *" failed 0" ]] || { head -n 5 "$OUT/idle-$name.err" >&2; die "$name: idle connections failed ($line)"; }
    sleep 3
    alive "$pid" || die "$name exited with $(awk '{ print $2 }' <<<"$line") idle connections"
    printf '%s\t%s\t%s\n' "$name" "$(awk '{ print $2 }' <<<"$line")" "$(rss_kb "$pid")" >>"$OUT/rss.tsv"
    say "$name: $line, RSS $(rss_kb "$pid") kB (before: $base kB)"
    if [ "$k" -lt "$STEPS" ]; then echo next >&7; fi
  done
}
idle_close() { # NAME PID: closes the idle connections, RSS of PID 5 s later
  exec 7>&-
  wait "$IDLE_PID" || { cat "$OUT/idle-$1.err" >&2; die "$1: idle connections were closed by the peer ($(tail -n 1 "$OUT/idle-$1.out"))"; }
  IDLE_PID=
  sleep 5
  printf '%s\tclosed\t%s\n' "$1" "$(rss_kb "$2")" >>"$OUT/rss.tsv"
  say "$1: idle connections closed, RSS $(rss_kb "$2") kB"
}

relay_targets=$(printf '127.0.0.1:%s,' "${RELAY_PORTS[@]}"); relay_targets=${relay_targets%,}
kroute_targets=$(printf '127.0.0.1:%s,' $((KR_BASE + 1)) $((KR_BASE + 2)) $((KR_BASE + 3))); kroute_targets=${kroute_targets%,}

say "relay: $IDLE idle connections in $STEPS steps"
idle_run relay "$RELAY_PID" "$relay_targets" "127.$NET_B"
idle_close relay "$RELAY_PID"
kill -TERM "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null || true; RELAY_PID=

scrape "$OUT/m-before-idle.prom"
say "kroute: $IDLE idle connections in $STEPS steps"
idle_run kroute "$KROUTE_PID" "$kroute_targets" "127.$((NET_B + 1))"
scrape "$OUT/m-idle.prom"
active=$(metric "$OUT/m-idle.prom" kroute_client_connections_active)
[ "$active" = "$IDLE" ] || die "kroute_client_connections_active reads $active with $IDLE idle connections open"
kroute_fds_idle=$(find "/proc/$KROUTE_PID/fd" -mindepth 1 | wc -l)

# ---------------------------------------------------------------------------------------------
# producers, with the idle connections open

say "producers: $PRODUCERS direct + $PRODUCERS through kroute, $RATE requests/s each, ${WARMUP} s warm-up + ${SECONDS_MEASURED} s measured"
scrape "$OUT/m-before-produce.prom"
"$LOAD_GEN_BIN" produce --side "direct=127.0.0.1:19192" --side "kroute=127.0.0.1:$KR_BOOT" --topic "$TOPIC" \
  --producers "$PRODUCERS" --rate "$RATE" --records "$RECORDS" --record-size "$RECORD_SIZE" --acks "$ACKS" \
  --warmup "$WARMUP" --seconds "$SECONDS_MEASURED" --source-net "127.$((NET_B + 2))" \
  >"$OUT/produce.out" 2>"$OUT/produce.err" &
PROD_PID=$!
wait_line "$OUT/produce.out" '^window-start' 1 $((WARMUP + 120)) "$PROD_PID" ||
  { cat "$OUT/produce.err" >&2; die "the producers did not start"; }
cpu0=$(cpu_ticks "$KROUTE_PID"); scrape "$OUT/m-window-start.prom"
sched_snapshot "$KROUTE_PID" "$OUT/sched-kroute-0"; sched_snapshot "$PROD_PID" "$OUT/sched-gen-0"
kroute_fds_load=$(find "/proc/$KROUTE_PID/fd" -mindepth 1 | wc -l)
wait_line "$OUT/produce.out" '^window-end' 1 $((SECONDS_MEASURED + 120)) "$PROD_PID" ||
  { cat "$OUT/produce.err" >&2; die "the producers did not finish"; }
cpu1=$(cpu_ticks "$KROUTE_PID"); scrape "$OUT/m-window-end.prom"
sched_snapshot "$KROUTE_PID" "$OUT/sched-kroute-1"; sched_snapshot "$PROD_PID" "$OUT/sched-gen-1"
read -r krun kwait < <(sched_delta "$OUT/sched-kroute-0" "$OUT/sched-kroute-1")
read -r grun gwait < <(sched_delta "$OUT/sched-gen-0" "$OUT/sched-gen-1")
rss_load=$(rss_kb "$KROUTE_PID")
printf 'kroute\tidle+producers\t%s\n' "$rss_load" >>"$OUT/rss.tsv"
prod_rc=0; wait "$PROD_PID" || prod_rc=$?
PROD_PID=
scrape "$OUT/m-after-produce.prom"
alive "$KROUTE_PID" || die "kroute exited (see $OUT/kroute.log)"
idle_close kroute "$KROUTE_PID"
# once more, in one step: memory freed by the first round is reused, not added to
STEPS_FIRST=$STEPS STEPS=1
say "kroute: $IDLE idle connections again (reuse of the memory the first round freed)"
idle_run kroute-again "$KROUTE_PID" "$kroute_targets" "127.$((NET_B + 1))"
idle_close kroute-again "$KROUTE_PID"
STEPS=$STEPS_FIRST
# the records on the brokers (a fresh topic: end offsets = records written)
scripts/cluster.sh tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$RELAYED_BOOTSTRAP" \
  --topic "$TOPIC" >"$OUT/offsets.txt" 2>"$OUT/offsets.err" || { cat "$OUT/offsets.err" >&2; die "GetOffsetShell failed"; }
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# report

# shellcheck disable=SC2034 # read by bench_identity
IDENTITY_PATHS="examples/load_gen.rs bench/load.sh"
bench_identity bench/load.sh
for v in $(compgen -e | grep -E '^LOAD_' | sort); do cmd="$v=\"${!v}\" $cmd"; done

for s in direct kroute; do grep -q "^side=$s " "$OUT/produce.out" || { cat "$OUT/produce.err" >&2; die "no result for side $s"; }; done

valid=0
python3 - "$OUT" "$IDLE" "$CLK_TCK" "$cpu0" "$cpu1" "$rss_load" "$prod_rc" "$RECORDS" \
  "$krun $kwait $grun $gwait $SECONDS_MEASURED" <<'EOF' >"$OUT/report.body" || valid=$?
import sys, re
out, idle, tck, cpu0, cpu1, rss_load, prod_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])

def prom(name):
    d = {}
    for line in open(f"{out}/{name}.prom"):
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        d[k] = float(v)
    return d

def total(d, metric, label=""):
    return sum(v for k, v in d.items() if (k == metric or k.startswith(metric + "{")) and label in k)

rss = {}
for line in list(open(f"{out}/rss.tsv"))[1:]:
    p, n, kb = line.split("\t")
    rss.setdefault(p, []).append((n, int(kb)))
sides = {}
for line in open(f"{out}/produce.out"):
    if line.startswith("side="):
        kv = dict(x.split("=", 1) for x in line.split())
        sides[kv["side"]] = kv
ws, we, b, a = prom("m-window-start"), prom("m-window-end"), prom("m-before-produce"), prom("m-after-produce")
fails = []

print("== RSS per idle connection (VmRSS; each connection: ApiVersions v3 + Metadata v12, then silent)")
per = {}
for p in ("kroute", "relay"):
    base = rss[p][0][1]
    cells = []
    for n, kb in rss[p][1:]:
        if n.isdigit():
            per_conn = (kb - base) * 1024 / int(n)
            cells.append(f"{n}: {kb / 1024:.1f} MiB, {per_conn / 1024:.1f} KiB/conn")
            per[p] = per_conn
        else:
            cells.append(f"{n}: {kb / 1024:.1f} MiB")
    print(f"{p:7s} before {base / 1024:.1f} MiB; " + "; ".join(cells))
print(f"kroute / relay per idle connection: {per['kroute'] / per['relay']:.2f}x")
if "kroute-again" in rss:
    print("kroute, the same idle connections opened again after all closed: "
          + "; ".join(f"{n}: {kb / 1024:.1f} MiB" for n, kb in rss["kroute-again"]))
    # Reuse: RSS with the second round open against RSS with the first round open (before the
    # producers ran). Not "what the second round adds": an allocator that returns freed pages
    # to the OS (jemalloc) adds the whole round again from a low base, and that is the goal.
    first = [kb for n, kb in rss["kroute"] if n.isdigit()][-1]
    again = [kb for n, kb in rss["kroute-again"] if n.isdigit() and n != "0"]
    if again:
        print(f"kroute RSS with the second round open / with the first round open: {again[-1] / first:.2f}x")
print()

cpu = (cpu1 - cpu0) / tck
pbytes = total(we, "kroute_request_bytes_total", 'api="Produce"') - total(ws, "kroute_request_bytes_total", 'api="Produce"')
preqs = total(we, "kroute_requests_total", 'api="Produce"') - total(ws, "kroute_requests_total", 'api="Produce"')
print("== kroute CPU per GB produced (window)")
print(f"kroute CPU {cpu:.2f} s (utime+stime), Produce bytes from clients {pbytes:.0f} ({pbytes / 1e6:.1f} MB): "
      f"{cpu / (pbytes / 1e9) if pbytes else float('nan'):.1f} CPU s per GB; {preqs:.0f} Produce requests, "
      f"{cpu / preqs * 1e6 if preqs else float('nan'):.1f} CPU us per request")
krun, kwait, grun, gwait, secs = (int(x) for x in sys.argv[9].split())
print(f"in the {secs} s window, kroute's threads ran {krun / 1e9:.2f} s and waited {kwait / 1e9:.2f} s for a CPU while runnable "
      f"(/proc/<pid>/task/*/schedstat); the generator's ran {grun / 1e9:.2f} s and waited {gwait / 1e9:.2f} s")
print()

print("== Produce latency per request, ms (written -> answer read), every request of the window")
print(f"{'':8s}{'requests':>10s}{'MB':>8s}{'errors':>8s}{'late':>6s}{'mean':>8s}{'p50':>8s}{'p90':>8s}{'p99':>8s}{'p99.9':>8s}{'max':>8s}")
for s in ("direct", "kroute"):
    v = sides[s]
    print(f"{s:8s}{int(v['requests']):>10d}{int(v['bytes']) / 1e6:>8.1f}{int(v['errors']):>8d}{int(v['late_sends']):>6d}"
          + "".join(f"{float(v[k]):>8.2f}" for k in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")))
d, k = sides["direct"], sides["kroute"]
for q in ("p50_ms", "p99_ms", "p999_ms"):
    dd, kk = float(d[q]), float(k[q])
    print(f"added {q[:-3]:6s} kroute - direct {kk - dd:+.2f} ms, kroute / direct {kk / dd if dd else float('nan'):.2f}x")
up = []
for br in ("1", "2", "3"):
    lab = f'broker="{br}",api="Produce"'
    n = total(we, "kroute_upstream_request_duration_seconds_count", lab) - total(ws, "kroute_upstream_request_duration_seconds_count", lab)
    t = total(we, "kroute_upstream_request_duration_seconds_sum", lab) - total(ws, "kroute_upstream_request_duration_seconds_sum", lab)
    if n:
        up.append(f"broker {br} {t / n * 1000:.2f} ms ({n:.0f})")
print("kroute's upstream Produce round trips in the window, mean (kroute_upstream_request_duration_seconds): " + ", ".join(up))
print()

print("== proof: kroute's own counters")
creq, cbytes = int(k["sent_total"]), int(k["sent_bytes_total"])
areq = total(a, "kroute_requests_total", 'api="Produce"') - total(b, "kroute_requests_total", 'api="Produce"')
abytes = total(a, "kroute_request_bytes_total", 'api="Produce"') - total(b, "kroute_request_bytes_total", 'api="Produce"')
print(f"whole producer run: the generator wrote {creq} Produce requests, {cbytes} bytes through kroute; "
      f"kroute_requests_total{{api=Produce}} +{areq:.0f}, kroute_request_bytes_total{{api=Produce}} +{abytes:.0f}")
ub = {}
for key, val in a.items():
    m = re.match(r'kroute_upstream_produce_bytes_total\{.*broker="(\d+)"', key)
    if m:
        ub[m.group(1)] = val - b.get(key, 0.0)
tot = sum(ub.values())
if tot:
    print("whole producer run: kroute_upstream_produce_bytes_total per broker: "
          + ", ".join(f"{br}: {v / tot:.0%}" for br, v in sorted(ub.items())) + f" of {tot / 1e6:.1f} MB")
for name in ("kroute_batches_moved_total", "kroute_client_connections_total", "kroute_upstream_connect_failures_total",
             "kroute_upstream_disconnects_total", "kroute_client_protocol_errors_total"):
    print(f"whole producer run: {name} +{total(a, name) - total(b, name):.0f}")
if creq == 0 or areq != creq:
    fails.append(f"kroute counted {areq:.0f} Produce requests, the generator wrote {creq} through it")
if cbytes == 0 or abytes != cbytes:
    fails.append(f"kroute counted {abytes:.0f} Produce bytes, the generator wrote {cbytes} through it")
for s in ("direct", "kroute"):
    v = sides[s]
    if int(v["errors"]) or int(v["failures"]):
        fails.append(f"{s}: {v['errors']} error answers ({v['error_codes']}), {v['failures']} producer failures")
offs = [int(l.strip().rsplit(":", 1)[1]) for l in open(f"{out}/offsets.txt") if l.count(":") >= 2]
acked = sum(int(sides[s]["acked_total"]) for s in sides)
records = int(sys.argv[8])
print(f"records on the brokers (end offsets of {len(offs)} partitions): {sum(offs)}; acknowledged to the generator "
      f"(both sides, whole run): {acked} requests x {records} = {acked * records}; per partition: "
      f"min {min(offs) if offs else 0}, max {max(offs) if offs else 0}, mean {sum(offs) / max(len(offs), 1):.0f}")
if sum(offs) < acked * records:
    fails.append(f"the brokers hold {sum(offs)} records, {acked * records} were acknowledged")
if prod_rc:
    fails.append(f"the generator exited with {prod_rc}")
print()
for f in fails:
    print("INVALID: " + f)
sys.exit(1 if fails else 0)
EOF

warns=$(grep -cE ' (WARN|ERROR) ' "$OUT/kroute.log" || true)
{
  echo "# bench/load.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
  bench_machine_meta
  cat <<EOF
topic=$TOPIC ($PARTITIONS partitions, RF 3)
idle=$IDLE steps=$STEPS producers=$PRODUCERS per side, rate=$RATE requests/s each, records=$RECORDS x $RECORD_SIZE B, acks=$ACKS
warmup_s=$WARMUP measured_s=$SECONDS_MEASURED routing=$ROUTING limits=$(tr '\n' ' ' <<<"${limits:-none}")
open_files_limit=$NOFILE kroute_fds: idle=$kroute_fds_idle idle+producers=$kroute_fds_load
loadavg_before=$load_before loadavg_after=$load_after
${NOTE:+note: $NOTE}

EOF
  cat "$OUT/report.body"
  echo "kroute log: $warns WARN/ERROR lines ($OUT/kroute.log)"
} | tee "$OUT/report.txt"
cp "$OUT/report.txt" "$OUT/report-$(date -u +%Y%m%dT%H%M%SZ).txt"
[ "$valid" = 0 ] || die "the run is invalid (see above)"
