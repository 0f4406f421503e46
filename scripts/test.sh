#!/usr/bin/env bash
# Runs every kroute test: unit tests, then integration tests that run kroute as a process in
# front of a real 3-broker Apache Kafka cluster with real clients (Java, librdkafka).
# Starts the local cluster if it is not running, and stops it again afterwards if it started it.
# Extra arguments go to `cargo test` (e.g. scripts/test.sh --test wire).
set -euo pipefail
cd "$(dirname "$0")/.."

started_here=0
if ! scripts/cluster.sh status >/dev/null 2>&1; then
  scripts/cluster.sh stop >/dev/null 2>&1 || true   # clear a half-running cluster
  scripts/cluster.sh start
  started_here=1
fi
cleanup() { if [ "$started_here" = 1 ]; then scripts/cluster.sh stop >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

tests/java/build.sh >/dev/null
cargo test --all-targets "$@"
