#!/usr/bin/env bash
# The compatibility matrix: kroute's compatibility tests against every Kafka generation its users
# run, each on a real 3-broker cluster of that version (scripts/cluster.sh, relayed and secured),
# and with every Java client generation, written to docs/compatibility.md as two tables
# (broker version x capability, Java client version x capability).
#
#   scripts/matrix.sh [CONFIG...]      run CONFIGs (default: all below), then regenerate the doc
#                                      from every config's latest results
#   scripts/matrix.sh --check CONFIG   run one config and exit 1 if a capability failed (the test
#                                      command runs one old ZooKeeper version this way); no doc,
#                                      and without the capabilities slow to set up (SLOW_SETUP)
#   scripts/matrix.sh --doc            regenerate the doc from the results at hand
#   MATRIX_ONLY=REGEX scripts/matrix.sh [CONFIG...]
#                                      run only the capabilities whose names match REGEX (e.g.
#                                      '^Lag' after a change to the lag code) and replace just
#                                      those rows in each config's results
#
# CONFIG is a broker config VERSION:METADATA (e.g. 3.9.1:zookeeper or 4.4.0:kraft: every
# capability, the Java client of the default version), or a client config java-VERSION[@BROKER]
# (the capabilities that use the Java client, with kafka-clients VERSION, against BROKER or else
# the default version). Each runs on its own cluster (state target/matrix/cluster, ports + 3000,
# so the default test cluster can keep running), started fresh and stopped afterwards. Results:
# target/matrix/results/CONFIG.tsv, logs per capability in target/matrix/logs/CONFIG/. Builds the
# test clients itself, but needs the packages the test command installs (scripts/test.sh; run
# that once first on a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL=(2.8.2:zookeeper 3.3.1:zookeeper 3.6.2:zookeeper 3.6.2:kraft 3.9.1:zookeeper 3.9.1:kraft
  4.0.2:kraft 4.1.2:kraft 4.2.2:kraft 4.4.0:kraft)
# Java clients whose defaults differ: 2.8 (not idempotent by default: tests/java asks for it),
# 3.3 (the adaptive partitioner came), 3.9, and the newest, against the newest broker (topic-id
# OffsetFetch/OffsetCommit v10 and ListOffsets v11 from 4.2).
CLIENTS=(java-2.8.2 java-3.3.1 java-3.9.1 java-4.4.0@4.4.0:kraft)

# One line per capability: name | tests (binary::test, all must pass) | first version it applies
# to (empty: all) | why it does not apply before that version.
CAPABILITIES=(
  "Round trip: Java client|passthrough::java_idempotent_producer_and_acks_zero||"
  "Round trip: librdkafka|passthrough::librdkafka_produce_and_consume_through_kroute||"
  "Round trip: franz-go, idempotent batches moved|idempotent::franz_go_default_producer_batches_move_without_sequence_errors||"
  "Round trip: kafka-python, idempotent batches moved|idempotent::kafka_python_default_producer_batches_move_without_sequence_errors||"
  "Round trip: librdkafka 1.9, idempotent batches moved|idempotent::librdkafka_1_9_idempotent_producer_batches_move_without_sequence_errors||"
  "No upstream address reaches a client|wire::no_real_broker_address_reaches_a_client passthrough::admin_sees_only_kroute_addresses||"
  "Keyless batches leave a slow broker|routing::java_non_idempotent_keyless_producer_avoids_the_slow_broker||"
  "Idempotent batches leave a slow broker, exactly once|idempotent::java_default_producer_batches_move_without_sequence_errors||"
  "Keyed and transactional batches stay|routing::keyed_and_transactional_batches_stay_where_the_client_put_them||"
  "Transactions through kroute (v2 from 4.0: epoch bumps checked)|passthrough::java_transactions_commit_and_abort idempotent::transactional_producers_are_untouched_by_renumbering idempotent::transactions_v2_epoch_bumps_beside_a_renumbered_producer_lose_nothing||"
  "Consumer groups|passthrough::consumer_group_with_several_members||"
  "Restart recovery (DescribeProducers)|idempotent::after_a_kroute_crash_running_producers_are_routed_again_losing_nothing||"
  "SCRAM, kroute authenticates|sasl::originate_scram_sha_512_over_sasl_ssl_serves_java_and_librdkafka||"
  "SCRAM, clients authenticate through kroute|sasl::passthrough_scram_clients_authenticate_themselves_over_upstream_tls||"
  "Lag statuses, classic groups|lag::a_consumer_falling_behind_is_warn lag::a_consumer_that_stops_with_lag_is_stop_and_the_group_err lag::a_consumer_committing_the_same_offset_while_lag_grows_is_stall lag::offsets_reset_to_earliest_with_the_kafka_tool_are_rewind lag::a_classic_group_that_keeps_up_is_ok_with_its_owner||"
  "Lag statuses, KIP-848 groups|lag::a_kip_848_consumer_group_is_judged_with_its_owner|4.0|KIP-848 consumer groups came with Kafka 4.0"
  "Old-protocol client (kafka-python 2.0.2: SaslHandshake v0, Produce v3)|sasl::an_old_protocol_client_authenticates_with_raw_tokens_and_its_batches_move||"
  "Skew report and plan (applied with kafka-reassign-partitions and kafka-leader-election)|skew::the_report_shows_leaders_records_keyed_bytes_and_the_gauges skew::a_plan_applied_with_kafkas_tools_evens_out_the_leaders skew::unknown_topics_and_topics_being_reassigned_are_refused_by_name skew::a_group_member_with_far_more_partitions_is_flagged||"
)
# Capabilities no Java client takes part in: client configs skip them.
NOT_JAVA='^(Round trip: (librdkafka|franz-go|kafka-python)|Lag statuses|Old-protocol client|Skew)'
# Capabilities whose clients take minutes to build (librdkafka 1.9 from source): --check, which
# the test command runs, leaves them to the full matrix.
SLOW_SETUP='^Round trip: librdkafka 1\.9'
CHECK=0

OUT=target/matrix
DOC=docs/compatibility.md
PORT_OFFSET=3000
export KROUTE_CLUSTER_DIR=$PWD/$OUT/cluster KROUTE_CLUSTER_PORT_OFFSET=$PORT_OFFSET

die() { echo "matrix.sh: $*" >&2; exit 1; }
say() { echo "matrix.sh: $*" >&2; }

at_least() { # VERSION MAJOR.MINOR
  local v=$1 want=$2
  [ "$(printf '%s\n%s\n' "$want" "${v%.*}" | sort -V | head -n1)" = "$want" ]
}

BROKER_CONFIG='[0-9]+\.[0-9]+\.[0-9]+:(zookeeper|kraft)'
valid_config() { # CONFIG
  [[ $1 =~ ^($BROKER_CONFIG|java-[0-9]+\.[0-9]+\.[0-9]+(@$BROKER_CONFIG)?)$ ]] ||
    die "config '$1' is neither VERSION:zookeeper|kraft (e.g. 3.9.1:zookeeper) nor java-VERSION[@VERSION:METADATA]"
}

broker_of() { # CONFIG: the broker config it runs against
  case $1 in
    java-*@*) echo "${1#*@}" ;;
    java-*) local v; v=$(scripts/cluster.sh default-version)
      if at_least "$v" 4.0; then echo "$v:kraft"; else echo "$v:zookeeper"; fi ;;
    *) echo "$1" ;;
  esac
}

capabilities_of() { # CONFIG: its capability lines, one per line
  local line
  for line in "${CAPABILITIES[@]}"; do
    [[ $1 == java-* && ${line%%|*} =~ $NOT_JAVA ]] && continue
    [[ $CHECK = 1 && ${line%%|*} =~ $SLOW_SETUP ]] && continue
    [[ -z ${MATRIX_ONLY:-} || ${line%%|*} =~ $MATRIX_ONLY ]] || continue
    echo "$line"
  done
}

failure_reason() { # LOG: the first assertion message (the line after "panicked at"), one line
  awk '/panicked at/ { getline; print; exit }' "$1" | tr '|' '/' | cut -c1-160
}

run_capability() { # CONFIG BROKER_VERSION LINE: prints "name<TAB>pass|fail|n/a<TAB>reason<TAB>seconds"
  local config=$1 version=$2 name tests since why t bin test log started ok=1 reason=
  IFS='|' read -r name tests since why <<<"$3"
  if [ -n "$since" ] && ! at_least "$version" "$since"; then
    printf '%s\tn/a\t%s\t0\n' "$name" "$why"; return
  fi
  log=$OUT/logs/$config/$(tr -c 'a-zA-Z0-9\n' '_' <<<"$name").log
  : >"$log"
  started=$SECONDS
  for t in $tests; do
    bin=${t%%::*} test=${t#*::}
    # --include-ignored: tests too slow to set up for the test command (librdkafka 1.9) run here.
    if ! cargo test -q --test "$bin" -- --exact --include-ignored "$test" >"$log.one" 2>&1; then
      ok=0; reason=${reason:-$test: $(failure_reason "$log.one")}
    elif ! grep -q "^test result: ok. 1 passed" "$log.one"; then
      ok=0; reason=${reason:-$test: no such test ran (renamed?)}   # a filter matching nothing passes
    fi
    cat "$log.one" >>"$log"; rm -f "$log.one"
  done
  if [ $ok = 1 ]; then
    printf '%s\tpass\t\t%s\n' "$name" $((SECONDS - started))
  else
    printf '%s\tfail\t%s\t%s\n' "$name" "$reason" $((SECONDS - started))
  fi
}

run_config() { # CONFIG: start its cluster, run its capabilities, stop it; results to its tsv
  local config=$1 broker version meta line bootstrap failed=0 started=$SECONDS
  broker=$(broker_of "$config") version=${broker%%:*} meta=${broker#*:}
  mkdir -p "$OUT/results" "$OUT/logs/$config"
  scripts/cluster.sh stop >/dev/null 2>&1 || true
  if [[ $config == java-* ]]; then
    local client=${config%%@*}; client=${client#java-}
    export KROUTE_JAVA_CLIENT_VERSION=$client KROUTE_JAVA_CLIENT_DIR=$PWD/$OUT/java-client-$client
  else
    unset KROUTE_JAVA_CLIENT_VERSION KROUTE_JAVA_CLIENT_DIR
  fi
  say "$config: starting Kafka $version ($meta)"
  if ! bootstrap=$(KROUTE_KAFKA_VERSION=$version scripts/cluster.sh start --relayed --secured "--$meta" \
      2>"$OUT/logs/$config/cluster.log" | tail -n1); then
    tail -n 20 "$OUT/logs/$config/cluster.log" >&2
    printf 'cluster\tfail\tthe cluster did not start: %s\t0\n' \
      "$(grep -m1 'cluster.sh:' "$OUT/logs/$config/cluster.log" | tr '|\t' '/ ' | cut -c1-160)" \
      >"$OUT/results/$config.tsv"
    return 1
  fi
  export KROUTE_TEST_CLUSTER=$bootstrap
  : >"$OUT/results/$config.tsv.part"
  while IFS= read -r line; do
    run_capability "$config" "$version" "$line" | tee -a "$OUT/results/$config.tsv.part" |
      awk -F'\t' -v c="$config" '{ printf "matrix.sh: %s: %s: %s %s\n", c, $1, $2, $3 }' >&2
  done < <(capabilities_of "$config")
  scripts/cluster.sh stop >/dev/null 2>&1 || true
  if { [ -n "${MATRIX_ONLY:-}" ] || [ "$CHECK" = 1 ]; } && [ -f "$OUT/results/$config.tsv" ] &&
      ! grep -qP '^cluster\tfail' "$OUT/results/$config.tsv"; then
    # Keep the rows not run now (left out by MATRIX_ONLY, or by --check: SLOW_SETUP) from the
    # config's last results.
    awk -F'\t' 'NR == FNR { fresh[$1] = 1; next } !($1 in fresh)' \
      "$OUT/results/$config.tsv.part" "$OUT/results/$config.tsv" >>"$OUT/results/$config.tsv.part"
  fi
  mv -f "$OUT/results/$config.tsv.part" "$OUT/results/$config.tsv"
  grep -qP '\tfail\t' "$OUT/results/$config.tsv" && failed=1
  say "$config: done in $((SECONDS - started)) s"
  return $failed
}

cell_of() { # CONFIG CAPABILITY-NAME: one table cell from the config's results
  local results=$OUT/results/$1.tsv status reason
  [ -f "$results" ] || { echo "not run"; return; }
  if grep -qP '^cluster\tfail' "$results"; then echo "cluster did not start"; return; fi
  IFS=$'\t' read -r _ status reason _ < <(grep -P "^\Q$2\E\t" "$results" || true)
  case "${status:-}" in
    pass) echo pass ;;
    fail) echo "**fail**: $reason" ;;
    n/a) echo "n/a: $reason" ;;
    *) echo "not run" ;;
  esac
}

table() { # CONFIG...: capability rows x config columns (the first config's capabilities)
  local config line
  printf '| Capability |'; for config in "$@"; do printf ' %s |' "${config/:/ }"; done; echo
  printf '|---|'; for config in "$@"; do printf -- '---|'; done; echo
  while IFS= read -r line; do
    printf '| %s |' "${line%%|*}"
    for config in "$@"; do printf ' %s |' "$(cell_of "$config" "${line%%|*}")"; done
    echo
  done < <(MATRIX_ONLY='' capabilities_of "$1") # every row, whatever this run was limited to
}

write_doc() { # both tables from every config's latest results
  local default; default=$(scripts/cluster.sh default-version)
  {
    echo "# Compatibility: Kafka versions x what kroute does"
    echo
    echo "Generated by \`scripts/matrix.sh\` from its last run of each config (results in"
    echo "target/matrix/results). Each cell is the named integration tests run through kroute against a"
    echo "real 3-broker cluster (relayed, secured). pass, fail (the first assertion that failed) or n/a"
    echo "(why)."
    echo
    echo "## Broker versions"
    echo
    echo "The test clients: Java $default, librdkafka 2.12.1 (the newest rdkafka-sys on crates.io) and"
    echo "1.9.2, franz-go, kafka-python 3.x; the old-protocol row uses kafka-python 2.0.2."
    echo
    table "${ALL[@]}"
    echo
    echo "## Java client versions"
    echo
    echo "The capabilities the Java client takes part in, with each kafka-clients version, against"
    echo "Kafka $default (KRaft) unless the column names a broker. Where a test uses the default"
    echo "producer, clients before 3.0 run with enable.idempotence=true (their own default is not"
    echo "idempotent); their non-idempotent producer is the one of \"Keyless batches leave a slow broker\"."
    echo
    table "${CLIENTS[@]}"
    echo
    echo "Time per config on 2 cores: see each results file's last column (seconds per capability)."
  } >"$DOC"
  say "wrote $DOC"
}

setup() { # the test clients and binaries (quick when the test command already made them)
  tests/python/setup.sh
  tests/go/build.sh >&2
  cargo test --no-run --tests -q >&2
}

case "${1:-}" in
  --doc) write_doc; exit 0 ;;
  --check)
    [ $# = 2 ] || die "usage: matrix.sh --check CONFIG"
    valid_config "$2"
    CHECK=1
    setup
    run_config "$2"; exit $? ;;
esac
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=("${ALL[@]}" "${CLIENTS[@]}")
for c in "${configs[@]}"; do valid_config "$c"; done
setup
rc=0
for c in "${configs[@]}"; do run_config "$c" || rc=1; done
write_doc
exit $rc
