#!/usr/bin/env bash
# Runs every kroute test: unit tests, then integration tests that run kroute as a process in
# front of a real 3-broker Apache Kafka cluster with real clients (Java, librdkafka), then the
# compatibility set on a Kafka 3.9.1 cluster with ZooKeeper (scripts/matrix.sh --check), then a
# fuzz smoke of every decoder (scripts/fuzz-smoke.sh).
#
# The cluster runs in "relayed" mode (see scripts/cluster.sh): each broker advertises a delaying
# relay in front of it, so the routing tests can make one broker slow for every client; and
# "secured": every broker also has SSL, mTLS, SASL_PLAINTEXT and SASL_SSL listeners, users and
# ACLs for the security tests. It is
# started here if it is not running (and stopped again afterwards); a cluster running in another
# mode is restarted in relayed mode. Extra arguments go to `cargo test` (e.g. --test wire).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests need beyond the README's tools is set up here, so this command works on a fresh
# machine by itself: librdkafka (built by the rdkafka dev-dependency) needs pkg-config and zlib;
# the Python clients run in a pinned virtualenv; Kafka's jars come from Maven Central; the
# container tests (tests/sidecar.rs) build and run images with podman (runc, catatonit for its
# pause image, netavark) and put the CA bundle (ca-certificates) into the image.
# Each step prints its time (stderr), so a slow CI run says where the minutes went.
lap_start=$SECONDS
lap() { echo "test.sh: $1 took $((SECONDS - lap_start)) s" >&2; lap_start=$SECONDS; }
need=()
for pkg in pkg-config zlib1g-dev openssl prometheus podman runc catatonit netavark ca-certificates; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (apt-get)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
tests/python/setup.sh
scripts/cluster.sh lib >/dev/null
lap "setup (packages, Python clients, Kafka jars)"

started_here=0
# The suite runs on the default Kafka version (or $KROUTE_KAFKA_VERSION): a cluster left running
# another version is restarted.
kafka=${KROUTE_KAFKA_VERSION:-$(scripts/cluster.sh default-version)}
# The status is captured first: `status | grep -q` under pipefail fails whenever grep's early exit
# kills the status script with SIGPIPE, which restarted a perfectly good cluster.
status=$(scripts/cluster.sh status 2>/dev/null) && status_ok=1 || status_ok=0
if [ "$status_ok" = 0 ] || ! grep -qx 'mode relayed' <<<"$status" || ! grep -qx 'secured yes' <<<"$status" ||
    ! grep -q "^kafka $kafka " <<<"$status"; then
  scripts/cluster.sh stop >/dev/null 2>&1 || true   # clear a half-running, direct, unsecured or other-version cluster
  KROUTE_KAFKA_VERSION=$kafka scripts/cluster.sh start --relayed --secured
  started_here=1
fi
# KROUTE_KEEP_CLUSTER=1 leaves a cluster started here running (scripts/repeat-tests.sh).
cleanup() {
  if [ "$started_here" = 1 ] && [ "${KROUTE_KEEP_CLUSTER:-0}" != 1 ]; then
    scripts/cluster.sh stop >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
lap "cluster"

KROUTE_TEST_CLUSTER=$(scripts/cluster.sh bootstrap)
export KROUTE_TEST_CLUSTER
tests/java/build.sh >/dev/null
tests/go/build.sh
lap "Java and Go test clients"
# Every test binary runs even when one fails (--no-fail-fast), so a run shows every failure at
# once; the command still fails then, after the fuzz smoke.
tests_ok=1
# Its output is kept too: a failing run repeats each failure's message at its very end, where a
# CI log that shows only its last lines still has them.
cargo_log=target/test-output.log
mkdir -p target
cargo test --workspace --all-targets --no-fail-fast "$@" 2>&1 | tee "$cargo_log" || tests_ok=0
lap "cargo test"

# The compatibility set (scripts/matrix.sh) on one old ZooKeeper version as well, so that a
# regression on the brokers most managed clusters still run shows at once; the whole matrix is
# its own command. On a cluster of its own (ports + 3000): the default one is stopped first if
# it was started here. KROUTE_COMPAT=none skips it; arguments select cargo tests only.
# Only the capabilities whose code paths differ most by broker version run here (Produce and
# Metadata versions, the brokers' producer state, SASL): 45 s of the set's 230 s, so that CI
# stays under 30 minutes. The rest (other clients' round trips, addresses, transactions, lag,
# skew, groups) runs with the matrix, or here with KROUTE_COMPAT_ONLY='' (the whole set).
compat=${KROUTE_COMPAT:-3.9.1:zookeeper}
compat_only=${KROUTE_COMPAT_ONLY-'^(Round trip: (Java|librdkafka)|Idempotent batches|Restart recovery|SCRAM, clients)'}
if [ $# -eq 0 ] && [ "$compat" != none ]; then
  cleanup
  MATRIX_ONLY=$compat_only scripts/matrix.sh --check "$compat" || tests_ok=0
  lap "compatibility set on $compat"
fi

# The fuzz smoke (docs/hardening.md, "Fuzzing"): a few seconds of libFuzzer per decoder, with the
# memory bound of each, on a quick, unoptimized build (2 minutes cold on 2 cores instead of 5).
# Run with the whole suite only: arguments select cargo tests.
if [ $# -eq 0 ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-2} FUZZ_QUICK_BUILD=1 scripts/fuzz-smoke.sh
  lap "fuzz smoke"
fi
if [ "$tests_ok" = 0 ]; then
  # Each failing test's header ("---- name stdout ----") and its own last 30 lines, which end
  # with its panic message: kroute's log lines and backtrace frames (RUST_BACKTRACE) left out,
  # or a backtrace would fill the 30.
  if grep -q '^---- ' "$cargo_log"; then
    echo "test.sh: the failures, repeated from $cargo_log:" >&2
    awk 'function flush() { for (i = (n > 30 ? n - 30 : 0); i < n; i++) print buf[i % 30]; n = 0 }
      /^---- / { flush(); print; show = 1; next }
      /^failures:$/ { flush(); show = 0 }
      /^\[kroute\]|^ +[0-9]+: |^ +at |^stack backtrace:$|^note: Some details/ { next }
      show { buf[n % 30] = $0; n++ }
      END { flush() }' "$cargo_log" >&2
  fi
  echo "test.sh: some tests failed (cargo test's summary above names them)" >&2
  exit 1
fi
