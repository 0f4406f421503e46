#!/usr/bin/env bash
# Builds the librdkafka 1.9.2 test producer (src/main.rs) into <repo>/target/rdkafka-1.9 and
# prints the binary's path. cargo makes a second run a no-op. Compiling librdkafka from source
# needs what the suite's own rdkafka build needs (a C compiler, make, pkg-config, zlib headers;
# scripts/test.sh installs them) and takes 2-3 minutes on 2 cores the first time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
target=$(cd "$here/../.." && pwd)/target/rdkafka-1.9
cargo build --release --quiet --locked --manifest-path "$here/Cargo.toml" --target-dir "$target" >&2
echo "$target/release/rdkafka-1-9-producer"
