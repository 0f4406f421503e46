#!/usr/bin/env bash
# Builds the Go test clients into target/go/ (modules come from the Go module proxy; go.sum pins
# them). Used by scripts/test.sh; tests find the binaries there.
set -euo pipefail
cd "$(dirname "$0")"
out=$(cd ../.. && pwd)/target/go
mkdir -p "$out"
(cd franz && go build -o "$out/franz-producer" .)
