#!/usr/bin/env bash
# Builds (if needed) and runs the Java test client: tests/java/run.sh SUBCOMMAND --bootstrap H:P ...
# See the comment at the top of tests/java/src/KrouteClient.java for subcommands and output.
set -euo pipefail
dir=$("$(dirname "${BASH_SOURCE[0]}")/build.sh")
exec "${JAVA:-java}" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$(cat "$dir/classpath")" KrouteClient "$@"
