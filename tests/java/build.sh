#!/usr/bin/env bash
# Compiles the Java test client (tests/java/src/*.java) against the kafka-clients jar of Kafka
# $KROUTE_JAVA_CLIENT_VERSION (default: the version the test cluster runs by default, whatever
# version it runs now: clients are newer than most brokers they meet) from its lib dir
# (scripts/cluster.sh lib VERSION; fetched from Maven Central on first use) into
# <repo>/target/java-client/ (or $KROUTE_JAVA_CLIENT_DIR). Recompiles only when the sources, the
# lib dir or this script changed. Last stdout line: the output dir, which also holds
#   classpath   the full -cp value:  java -cp "$(cat "$dir/classpath")" KrouteClient ...
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${KROUTE_JAVA_CLIENT_DIR:-$REPO/target/java-client}
LIB=$("$REPO/scripts/cluster.sh" lib "${KROUTE_JAVA_CLIENT_VERSION:-default}")

mkdir -p "$(dirname "$OUT")"
exec 9>"$OUT.lock"
flock -w 300 9 || { echo "build.sh: timed out waiting for $OUT.lock" >&2; exit 1; }

stamp=$( { echo "$LIB"; cat "$HERE/build.sh"; for f in "$HERE"/src/*; do echo "$f"; cat "$f"; done; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$OUT/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
  tmp=$(mktemp -d "$OUT.tmp.XXXXXX")
  if ! javac --release 17 -Xlint:-options -encoding UTF-8 -cp "$LIB/*" -d "$tmp" "$HERE"/src/*.java >&2; then
    rm -rf "$tmp"; echo "build.sh: javac failed" >&2; exit 1
  fi
  cp "$HERE/src/log4j2.properties" "$tmp/"
  echo "$stamp" >"$tmp/.stamp"
  rm -rf "$OUT"
  mv "$tmp" "$OUT"
  echo "$OUT:$LIB/*" >"$OUT/classpath"
  echo "build.sh: compiled KrouteClient into $OUT" >&2
fi
echo "$OUT"
