#!/usr/bin/env bash
# What kroute is for, end to end on this machine: a local 3-broker Apache Kafka cluster in which
# one broker takes less than the others, and the same Java producer run twice, first straight to
# the brokers, then through kroute. The report puts the two runs side by side: throughput, p99
# latency and each broker's share of the records, counted on the brokers; kroute's own counters
# show that the second run went through kroute and the direct ones did not.
#
#   scripts/demo.sh [RECORDS]        RECORDS of 1 KiB per run (default 60000)
#
#   DEMO_SLOW="cap 2"     (default) broker 2's link carries at most 2 MB/s each way, like a broker
#                         on a slower network or disk (scripts/cluster.sh cap 2 2)
#   DEMO_SLOW="delay 20"  broker 2 answers every request 20 ms late instead (scripts/cluster.sh
#                         delay 2 20), like a broker in GC pauses or on a busy disk
#
# Runs, in order, each by a fresh producer JVM on a fresh topic:
#   warm-up     30 s straight to the brokers, not counted: brokers fresh from a start run a few
#               times slower until their JVMs have compiled the hot paths
#   direct      broker 2 slowed, straight to the brokers
#   kroute      broker 2 slowed, through kroute (proxy.toml: strict-cost routing of every topic)
#   fullspeed   every broker at full speed again, straight to the brokers: what this machine
#               does without a slow broker (run last, so the warmest)
# The producer: Kafka's ProducerPerformance with the Java client's defaults (idempotent, acks=all,
# linger.ms 5, the built-in adaptive partitioner), keyless records, at full speed. The topics:
# 6 partitions, two led by each broker, replication factor 3, min.insync.replicas=2. Broker 2 is
# back at full speed after the kroute run, and whenever the demo ends early.
#
# The cluster: if none runs, the demo starts one in relayed mode (scripts/cluster.sh start
# --relayed: the relays are what slow a broker for every client) and stops it at the end. A
# cluster already running in relayed mode is used as it is and left running (the demo's topics
# are deleted); one in direct mode, or one with a broker already slowed or capped, is refused.
# Files: target/demo/ (each run's producer output, end offsets, kroute's log and metrics).
# About 80 s with a cluster to start (65 s with one running; 2 cores), once the static build below
# is done and Kafka's jars are cached (~/.cache/kroute). The first run on a fresh machine also
# compiles kroute and fetches the jars meanwhile: 212-229 s in all on 2 cores, 133-147 s of it
# the build (281 s on a slower machine; docs/benchmarks.md, "First run").
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-60000}
record_size=1024
slow_broker=2
read -r slow_kind slow_value <<<"${DEMO_SLOW:-cap 2}"
[[ $records =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/demo.sh [RECORDS]" >&2; exit 2; }
warmup_seconds=30   # first, uncounted: brokers fresh from a start take about that long to reach full speed
case $slow_kind in
  cap) if ! [[ $slow_value =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! awk -v v="$slow_value" 'BEGIN { exit !(v > 0) }'; then
         echo 'DEMO_SLOW: "cap MB/s" (more than 0)' >&2; exit 2
       fi
       slow_text="broker $slow_broker capped at $slow_value MB/s each way" ;;
  delay) [[ $slow_value =~ ^[1-9][0-9]*$ ]] || { echo 'DEMO_SLOW: "delay MS" (more than 0)' >&2; exit 2; }
       slow_text="broker $slow_broker answering $slow_value ms late" ;;
  *) echo 'DEMO_SLOW must be "cap MB/s" or "delay MS"' >&2; exit 2 ;;
esac
work=target/demo
rm -rf "$work"; mkdir -p "$work"
say() { echo "demo: $*" >&2; }
die() { echo "demo: FAILED: $*" >&2; exit 1; }
demo_start=$SECONDS

# Kafka's jars (from Maven Central, the first time) download while kroute compiles.
scripts/cluster.sh lib >"$work/fetch-jars.log" 2>&1 &
jars_pid=$!

# kroute and the relays that slow a broker, in one static release build (scripts/static-build.sh),
# made to compile fast: with the system allocator (STATIC_ALLOCATOR=system; jemalloc's C build
# was half of a first run's compile time) and without link-time optimization within each crate
# (STATIC_LTO=off: 135 s instead of 162 s cold on 2 cores). Neither shows in the demo's result:
# its runs are bound by the capped broker, not by kroute's CPU (6-11% more per request without
# LTO). The image's kroute (scripts/image.sh) keeps jemalloc and LTO.
# shellcheck source=scripts/static-build.sh
. scripts/static-build.sh
kroute_bin=${CARGO_TARGET_DIR:-target}/$STATIC_TARGET/release/kroute
say "building kroute and delay_relay (static release build, target/$STATIC_TARGET)"
STATIC_ALLOCATOR=system STATIC_LTO=off static_build kroute delay_relay
say "  built ($((SECONDS - demo_start)) s since the start)"
wait "$jars_pid" || { cat "$work/fetch-jars.log" >&2; die "fetching Kafka's jars failed"; }
jars_pid=''

# --- the cluster ---------------------------------------------------------------------------------
started_here=0 slowed=0 kroute_pid='' warmup_pid='' topics=()
current_slow() { scripts/cluster.sh "${slow_kind}s" | awk -v b="$slow_broker" '$2 == b { print $3 }'; }
unslow() { # back to full speed, unless someone else changed the setting meanwhile
  [ "$(current_slow)" = "$slow_value" ] && scripts/cluster.sh "$slow_kind" "$slow_broker" 0 >/dev/null 2>&1
  slowed=0
}
cleanup() {
  local rc=$?
  set +e
  [ -n "$jars_pid" ] && kill "$jars_pid" 2>/dev/null
  [ "$slowed" = 1 ] && unslow
  [ -n "$kroute_pid" ] && kill "$kroute_pid" 2>/dev/null && wait "$kroute_pid" 2>/dev/null
  [ -n "$warmup_pid" ] && kill "$warmup_pid" 2>/dev/null && wait "$warmup_pid" 2>/dev/null
  if [ "$started_here" = 1 ]; then
    say "stopping the cluster (started by the demo)"; scripts/cluster.sh stop >/dev/null 2>&1
  else
    [ "${#topics[@]}" = 0 ] || "${tool_jvm[@]}" org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "$bootstrap" --delete --topic "demo-$id-.*" >/dev/null 2>&1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! scripts/cluster.sh status >/dev/null 2>&1; then
  [[ $(scripts/cluster.sh status 2>/dev/null) == *" running pid="* ]] &&
    die "a cluster is partly running (scripts/cluster.sh status); stop it (scripts/cluster.sh stop) and rerun"
  scripts/cluster.sh stop >/dev/null 2>&1 || true
  say "starting a local cluster in relayed mode (scripts/cluster.sh start --relayed)"
  started_here=1
  scripts/cluster.sh start --relayed >/dev/null
fi
[ "$(scripts/cluster.sh status 2>/dev/null | sed -n 1p)" = "mode relayed" ] ||
  die "a cluster runs in direct mode, where no broker can be slowed; stop it (scripts/cluster.sh stop) and rerun"
if scripts/cluster.sh delays | awk '$3 != 0 { bad = 1 } END { exit !bad }' ||
  scripts/cluster.sh caps | awk '$3 + 0 != 0 { bad = 1 } END { exit !bad }'; then
  die "a broker is already slowed or capped (delays:$(scripts/cluster.sh delays | awk '{ printf " %s", $3 }'), caps:$(scripts/cluster.sh caps | awk '{ printf " %s", $3 }')); the comparison needs the other brokers at full speed"
fi
bootstrap=$(scripts/cluster.sh bootstrap)
lib=$(scripts/cluster.sh lib)
log4j=-Dlog4j2.configurationFile=scripts/kafka/log4j2-tools.properties
tool_jvm=(java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true "$log4j" -cp "$lib/*")
# the producer JVM as kafka-producer-perf-test.sh runs it (full JIT, 512 MB heap)
producer_jvm=(java -Xms256m -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true "$log4j" -cp "$lib/*"
  org.apache.kafka.tools.ProducerPerformance)

# --- kroute (proxy.toml, bootstrapping from the cluster's advertised addresses) ---------------------
admin=127.0.0.1:9644
"$kroute_bin" --config proxy.toml --bootstrap-servers "$bootstrap" </dev/null 2>"$work/kroute.log" &
kroute_pid=$!
for _ in $(seq 1 100); do
  curl -sf "http://$admin/ready" >/dev/null 2>&1 && break
  kill -0 "$kroute_pid" 2>/dev/null || { cat "$work/kroute.log" >&2; die "kroute exited"; }
  sleep 0.1
done
curl -sf "http://$admin/ready" >/dev/null || { cat "$work/kroute.log" >&2; die "kroute never became ready"; }
scrape() { curl -sf "http://$admin/metrics" >"$work/metrics-$1.txt" || die "cannot read kroute's /metrics"; }
metric() { # SNAPSHOT NAME LABEL...: the sum of NAME's samples whose labels contain every LABEL
  local f=$work/metrics-$1.txt n=$2; shift 2
  awk -v n="$n" -v ls="$*" 'BEGIN { k = split(ls, l, " ") }
    index($0, n) == 1 && substr($0, length(n) + 1, 1) ~ /[{ ]/ {
      for (i = 1; i <= k; i++) if (!index($0, l[i])) next
      s += $NF }
    END { printf "%.0f", s }' "$f"
}
delta() { echo $(($(metric "$2" "${@:3}") - $(metric "$1" "${@:3}"))); }   # FROM TO NAME LABEL...

# --- topics: one per run, the same layout ------------------------------------------------------------
id=$(date +%s)
assignment=1:2:3,2:3:1,3:1:2,1:3:2,2:1:3,3:2:1   # partitions 0-5 led by brokers 1,2,3,1,2,3
leaders=(1 2 3 1 2 3)
create_topic() { # RUN: each creation is two JVM starts (create, then wait for leaders): about 2.5 s
  topics+=("demo-$id-$1")
  scripts/cluster.sh create-topic "demo-$id-$1" --replica-assignment "$assignment" \
    --config min.insync.replicas=2 >/dev/null 2>"$work/create-topic-$1.err" || { cat "$work/create-topic-$1.err" >&2; die "create-topic failed"; }
}
check_leaders() { # every run's topic led as planned
  local got
  got=$("${tool_jvm[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --describe \
    --topic "demo-$id-.*" 2>/dev/null | awk '$1 == "Topic:" && $3 == "Partition:" { print $2, $4, $6 }' |
    sort -k1,1 -k2n | awk '{ printf "%s ", $3 }')
  [ "$got" = "$(printf '%s ' "${leaders[@]}" "${leaders[@]}" "${leaders[@]}" "${leaders[@]}")" ] ||
    die "the topics' leaders are '$got', planned ${leaders[*]} for each"
}

# --- the runs --------------------------------------------------------------------------------------
# ProducerPerformance's last line: "N records sent, R records/sec (M MB/sec), A ms avg latency,
# X ms max latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
perf() { # RUN mbps|p99
  tail -n 1 "$work/producer-$1.txt" | awk -v f="$2" -F', ' '{
    for (i = 1; i <= NF; i++) {
      if (f == "mbps" && $i ~ /MB\/sec/) { sub(/.*\(/, "", $i); sub(/ MB.*/, "", $i); print $i }
      if (f == "p99" && $i ~ / 99th/) { sub(/ ms.*/, "", $i); print $i } } }'
}
retries=0   # the producers' "retrying (N attempts left)" warnings
produce() { # RUN BOOTSTRAP RECORDS
  local out=$work/producer-$1.txt
  say "run '$1': $3 records of $record_size B, bootstrap.servers=$2"
  "${producer_jvm[@]}" --topic "demo-$id-$1" --num-records "$3" --record-size "$record_size" \
    --throughput -1 --producer-props "bootstrap.servers=$2" "client.id=kroute-demo-$1" >"$out" 2>&1 ||
    { tail -n 20 "$out" >&2; die "the producer failed (run '$1', $out)"; }
  grep -q "^$3 records sent" "$out" || { tail -n 20 "$out" >&2; die "the producer did not send every record ($out)"; }
  ! grep -qE 'Exception|ERROR' "$out" || { grep -E 'Exception|ERROR' "$out" | head -n 5 >&2; die "the producer reported errors ($out)"; }
  retries=$((retries + $(grep -c 'retrying (' "$out" || true)))
  say "  $(perf "$1" mbps) MB/s, p99 $(perf "$1" p99) ms"
}
# The warm-up runs while the other runs' topics are created (eight JVM starts, about 10 s that
# would otherwise come before it): it is not counted, and it is there to load the brokers.
create_topic warmup
say "warm-up: ${warmup_seconds} s straight to the brokers, not counted (the other topics are created meanwhile)"
timeout "$warmup_seconds" "${producer_jvm[@]}" --topic "demo-$id-warmup" --num-records 1000000000 \
  --record-size "$record_size" --throughput -1 --producer-props "bootstrap.servers=$bootstrap" \
  client.id=kroute-demo-warmup </dev/null >"$work/producer-warmup.txt" 2>&1 &
warmup_pid=$!
for run in direct kroute fullspeed; do create_topic "$run"; done
check_leaders
rc=0
wait "$warmup_pid" || rc=$?
warmup_pid=''
[ "$rc" = 124 ] || { tail -n 20 "$work/producer-warmup.txt" >&2; die "the warm-up producer failed"; }
say "  last 5 s: $(grep 'records/sec' "$work/producer-warmup.txt" | tail -n 1 | sed 's/.*(\(.* MB\/sec\)).*/\1/')"
say "$slow_text (scripts/cluster.sh $slow_kind $slow_broker $slow_value)"
slowed=1
scripts/cluster.sh "$slow_kind" "$slow_broker" "$slow_value" >/dev/null 2>&1 || die "scripts/cluster.sh $slow_kind $slow_broker $slow_value failed"
sleep 0.3   # a relay re-reads its delay every 100 ms (cap returns once applied)
scrape 0
produce direct "$bootstrap" "$records"
scrape 1
produce kroute 127.0.0.1:9092 "$records"
scrape 2
unslow
say "every broker at full speed again"
produce fullspeed "$bootstrap" "$records"
scrape 3

# --- what reached the brokers ------------------------------------------------------------------------
"${tool_jvm[@]}" org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$bootstrap" --topic "demo-$id-.*" \
  >"$work/offsets.txt" 2>"$work/offsets.err" || { cat "$work/offsets.err" >&2; die "GetOffsetShell failed"; }
on_brokers() { # RUN [BROKER]: records in the run's topic (fresh: end offsets), on BROKER's partitions
  awk -F: -v t="demo-$id-$1" -v b="${2:-0}" -v ls="${leaders[*]}" 'BEGIN { split(ls, l, " ") }
    $1 == t && (b == 0 || l[$2 + 1] == b) { s += $3 } END { printf "%d", s }' "$work/offsets.txt"
}
for run in fullspeed direct kroute; do
  [ "$(on_brokers "$run")" = "$records" ] ||
    die "run '$run': the brokers hold $(on_brokers "$run") records, the producer sent $records"
done
kr_in_direct=$(($(delta 0 1 kroute_request_bytes_total 'api="Produce"') + $(delta 2 3 kroute_request_bytes_total 'api="Produce"')))
kr_in_kroute=$(delta 1 2 kroute_request_bytes_total 'api="Produce"')
[ "$kr_in_direct" = 0 ] || die "kroute saw $kr_in_direct Produce bytes during the direct runs"
[ "$kr_in_kroute" -ge $((records * record_size)) ] ||
  die "kroute forwarded $kr_in_kroute Produce bytes in the kroute run, fewer than the records' $((records * record_size))"

# --- report ----------------------------------------------------------------------------------------
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
para() { echo "$*" | fold -s -w 98 | sed 's/ *$//'; }
row() { printf '%-30s %9s %15s %14s | %14s\n' "$@"; }
share() { pct "$(on_brokers "$1" "$2")" "$records"; }
rate() { awk -v n="$(on_brokers "$1" "$2")" -v r="$records" -v m="$(perf "$1" mbps)" 'BEGIN { printf "%.2f", m * n / r }'; }   # RUN BROKER: MB/s
sent_to() { delta 1 2 kroute_upstream_produce_bytes_total "broker=\"$1\""; }
up_total=$(($(sent_to 1) + $(sent_to 2) + $(sent_to 3)))
f_mbps=$(perf fullspeed mbps) d_mbps=$(perf direct mbps) k_mbps=$(perf kroute mbps)

echo
echo "== one Java producer with the client's defaults (idempotent, acks=all), $records keyless records"
echo "   of 1 KiB per run at full speed; 6 partitions, 2 led by each broker, replication factor 3"
echo
printf '%-30s %-40s | %14s\n' "" " $slow_text" "no slow broker"
row "" direct "through kroute" "kroute/direct" "direct"
row "throughput (MB/s)" "$d_mbps" "$k_mbps" "$(ratio "$k_mbps" "$d_mbps")" "$f_mbps"
row "p99 latency, send to ack (ms)" "$(perf direct p99)" "$(perf kroute p99)" \
  "$(ratio "$(perf kroute p99)" "$(perf direct p99)")" "$(perf fullspeed p99)"
for b in 1 2 3; do
  row "records on broker $b" "$(share direct "$b")" "$(share kroute "$b")" "" "$(share fullspeed "$b")"
done
echo
para "With $slow_text, kroute gave broker $slow_broker $(share kroute "$slow_broker") of the records instead of" \
  "$(share direct "$slow_broker"): the producer ran $(ratio "$k_mbps" "$d_mbps") as fast, with $(ratio "$(perf kroute p99)" "$(perf direct p99)") the p99 latency." \
  "Broker $slow_broker took $(rate direct "$slow_broker") MB/s of records straight and $(rate kroute "$slow_broker") MB/s through kroute." \
  "Run last, with every broker at full speed again, the same producer straight to the brokers made" \
  "$f_mbps MB/s."
echo
echo "Each run: all $records records on the brokers exactly once (end offsets), producer errors 0, retries $retries."
para "kroute's counters: Produce bytes from clients during the direct runs $kr_in_direct, during the" \
  "kroute run $kr_in_kroute, passed on to brokers 1 / 2 / 3: $(pct "$(sent_to 1)" "$up_total") /" \
  "$(pct "$(sent_to 2)" "$up_total") / $(pct "$(sent_to 3)" "$up_total"); the producer's batches renumbered" \
  "$(delta 1 2 kroute_idempotent_batches_total 'outcome="renumbered"'), moved to another broker" \
  "$(delta 1 2 kroute_batches_moved_total 'topic='), sequence errors passed to the producer" \
  "$(delta 1 2 kroute_idempotent_batches_total 'outcome="sequence_error_passed"'); warnings and errors in its log:" \
  "$(grep -cE ' (WARN|ERROR) ' "$work/kroute.log" || true)."
echo "Demo time: $((SECONDS - demo_start)) s. Files: $work/"
