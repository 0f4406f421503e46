#!/usr/bin/env bash
# Runs the test command (scripts/test.sh) N times in a row and says how each run went, to show
# the suite is green every time and not by luck. With --hog, a busy loop at normal priority
# holds one of the machine's cores for the whole time (the CPU load a shared CI machine sees).
#
#   scripts/repeat-tests.sh N [--hog]
#
# The cluster is started once, by the first run, and left running afterwards (`scripts/cluster.sh
# stop` stops it), so each later run is the test command's own work. Each run's output goes to
# target/repeat/run-K.log; target/repeat/summary gets a line per run: "run K: pass|FAIL in S s".
# Exits 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-}
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 N [--hog]" >&2; exit 2; }
hog=0
case "${2:-}" in
  "") ;;
  --hog) hog=1 ;;
  *) echo "usage: $0 N [--hog]" >&2; exit 2 ;;
esac

out=target/repeat
mkdir -p "$out"
hog_pid=
cleanup() { if [ -n "$hog_pid" ]; then kill "$hog_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
if [ "$hog" = 1 ]; then
  # Pinned to the last core so it takes that core's time from whatever the scheduler puts there.
  core=$(( $(nproc) - 1 ))
  taskset -c "$core" bash -c 'while :; do :; done' &
  hog_pid=$!
  echo "repeat-tests: CPU hog on core $core (pid $hog_pid)" | tee -a "$out/summary"
fi

# The first run starts the cluster and leaves it running (KROUTE_KEEP_CLUSTER), the next ones
# use it as it is.
export KROUTE_KEEP_CLUSTER=1

failed=0
for k in $(seq 1 "$runs"); do
  start=$SECONDS
  if scripts/test.sh >"$out/run-$k.log" 2>&1; then result=pass; else result=FAIL; failed=1; fi
  line="run $k: $result in $((SECONDS - start)) s ($(date -u +%H:%M:%SZ), hog=$hog)"
  echo "$line" | tee -a "$out/summary"
done
exit "$failed"
