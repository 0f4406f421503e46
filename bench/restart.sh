#!/usr/bin/env bash
# Routing of a running idempotent producer before and after a kroute restart.
#
# One broker is slow (its delay relay, scripts/cluster.sh delay). The Java default producer
# (idempotent, acks=all) writes at a fixed rate through kroute for the whole run; kroute is
# restarted in the middle, with SIGTERM (graceful) or SIGKILL (a crash). For a window of
# BENCH_WINDOW_S seconds before and after the restart, kroute's own counters give the share of
# produce bytes the slow broker got and the share of batches kroute moved. The producer must
# finish with 0 errors. Results (with the exact command) go to stdout as a markdown table;
# paste them into docs/benchmarks.md.
#
#   bench/restart.sh                       # both signals, 20 s windows, 2000 records/s
#   BENCH_SIGNALS=KILL BENCH_WINDOW_S=30 bench/restart.sh
#   KROUTE_BIN=target/release/kroute bench/restart.sh   # skip the build
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh

SIGNALS=${BENCH_SIGNALS:-"TERM KILL"}
WINDOW=${BENCH_WINDOW_S:-20}
RATE=${BENCH_RATE:-2000}
SLOW_MS=${BENCH_SLOW_MS:-40}
BUILD=0
if [ -z "${KROUTE_BIN:-}" ]; then
  cargo build --release -q
  KROUTE_BIN=target/release/kroute
  BUILD=1
fi
bench_identity "bench/restart.sh"

status=$(scripts/cluster.sh status 2>/dev/null) || status=""
grep -qx 'mode relayed' <<<"$status" || { scripts/cluster.sh stop >/dev/null 2>&1 || true; scripts/cluster.sh start --relayed; }
work=$(mktemp -d)
kroute_pid=""
cleanup() {
  [ -n "$kroute_pid" ] && kill -KILL "$kroute_pid" 2>/dev/null || true
  scripts/cluster.sh delay 2 0 >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

admin=127.0.0.1:19790
start_kroute() {
  "$KROUTE_BIN" --config "$work/proxy.toml" >>"$work/kroute.log" 2>&1 &
  kroute_pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://$admin/ready" >/dev/null && return 0
    sleep 0.1
  done
  echo "kroute not ready; log:" >&2; tail -20 "$work/kroute.log" >&2; exit 1
}
# counter NAME [LABEL_FILTER]: the sum of a counter's series on kroute's /metrics.
counter() {
  curl -sf "http://$admin/metrics" | awk -v n="$1" -v f="${2:-}" \
    '$1 ~ "^"n"({|$)" && index($1, f) { s += $NF } END { printf "%.0f\n", s + 0 }'
}
# snapshot: broker-1 broker-2 broker-3 produce bytes, moved batches, renumbered batches.
snapshot() {
  echo "$(counter kroute_upstream_produce_bytes_total 'broker="1"') $(counter kroute_upstream_produce_bytes_total 'broker="2"')" \
    "$(counter kroute_upstream_produce_bytes_total 'broker="3"') $(counter kroute_batches_moved_total)" \
    "$(counter kroute_idempotent_batches_total 'outcome="renumbered"')"
}
# window_row LABEL "BEFORE" "AFTER": a table row from two snapshots.
window_row() {
  python3 - "$1" "$2" "$3" <<'EOF'
import sys
label, a, b = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split()))
d = [y - x for x, y in zip(a, b)]
total = d[0] + d[1] + d[2]
share = d[1] / total if total else float("nan")
moved = d[3] / d[4] if d[4] else 0.0
print(f"| {label} | {total / 1e6:.1f} | {share:.3f} | {int(d[4])} | {moved:.3f} |")
EOF
}
wait_for_renumbered() { # N: until kroute has renumbered N batches
  for _ in $(seq 1 600); do
    [ "$(counter kroute_idempotent_batches_total 'outcome="renumbered"')" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "no produce traffic through kroute" >&2; exit 1
}

echo "# restart benchmark"
bench_machine_meta
echo
echo "| window | MB produced | slow broker 2's byte share | batches renumbered | share of batches moved |"
echo "|---|---|---|---|---|"
for sig in $SIGNALS; do
  topic="route-restart-$(echo "$sig" | tr 'A-Z' 'a-z')-$(date +%s)"
  scripts/cluster.sh create-topic "$topic" --replica-assignment 1:2:3,1:3:2,2:3:1,2:1:3,3:1:2,3:2:1 \
    --config min.insync.replicas=2 >/dev/null
  cat >"$work/proxy.toml" <<EOF
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = 19700
broker_port_base = 19700
[upstream]
bootstrap_servers = [$(scripts/cluster.sh bootstrap | sed 's/[^,]*/"&"/g')]
[admin]
listen = "$admin"
[routing]
strategy = "strict-cost"
include = ["$topic"]
EOF
  : >"$work/kroute.log"
  start_kroute
  scripts/cluster.sh delay 2 "$SLOW_MS" >/dev/null
  count=$((RATE * (2 * WINDOW + 20)))
  tests/java/run.sh produce --bootstrap 127.0.0.1:19700 --topic "$topic" --count "$count" \
    --per-second "$RATE" --record-size "${BENCH_RECORD_BYTES:-1024}" >"$work/producer.out" 2>&1 &
  producer=$!
  wait_for_renumbered 200
  sleep 3 # the scores settle on the slow broker
  a0=$(snapshot); sleep "$WINDOW"; a1=$(snapshot)
  kill -"$sig" "$kroute_pid"; wait "$kroute_pid" 2>/dev/null || true
  start_kroute
  wait_for_renumbered 200
  sleep 3
  b0=$(snapshot); sleep "$WINDOW"; b1=$(snapshot)
  recovered=$(counter kroute_idempotent_producers_recovered_total)
  adopted=$(counter kroute_idempotent_producers_adopted_total)
  wait "$producer" || { echo "the producer failed:" >&2; tail -5 "$work/producer.out" >&2; exit 1; }
  window_row "SIG$sig: before the restart" "$a0" "$a1"
  window_row "SIG$sig: after (recovered $recovered, adopted $adopted)" "$b0" "$b1"
  grep '^produced=' "$work/producer.out" | sed "s/^/<!-- SIG$sig producer: /; s/\$/ -->/"
  kill -TERM "$kroute_pid"; wait "$kroute_pid" 2>/dev/null || true; kroute_pid=""
  scripts/cluster.sh delay 2 0 >/dev/null
  scripts/cluster.sh delete-topic "$topic" >/dev/null 2>&1 || true
done
