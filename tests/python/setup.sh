#!/usr/bin/env bash
# Sets up the Python test clients' virtualenvs from PyPI:
#   target/python      requirements.txt      kafka-python 3.x, today's client
#   target/python-old  requirements-old.txt  kafka-python 2.0.2, an old-protocol client
#                                            (SaslHandshake v0 with raw tokens, Produce v3)
# Used by scripts/test.sh; tests run <venv>/bin/python3. A virtualenv already holding exactly its
# pins is left alone.
set -euo pipefail
cd "$(dirname "$0")"
target=$(cd ../.. && pwd)/target

venv() { # DIR REQUIREMENTS
  local venv=$1 requirements=$2 stamp="$1/.requirements"
  if [ -x "$venv/bin/python3" ] && cmp -s "$requirements" "$stamp"; then
    return 0
  fi
  rm -rf "$venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian splits venv (and ensurepip) into python3-venv.
    echo "setting up python3-venv (apt-get)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
}

venv "$target/python" requirements.txt
venv "$target/python-old" requirements-old.txt
