#!/usr/bin/env bash
# Sets up the Python test clients' virtualenv in target/python with the pinned packages of
# requirements.txt (from PyPI). Used by scripts/test.sh; tests run target/python/bin/python3.
# A virtualenv already holding exactly these pins is left alone.
set -euo pipefail
cd "$(dirname "$0")"
venv=$(cd ../.. && pwd)/target/python
stamp="$venv/.requirements"
if [ -x "$venv/bin/python3" ] && cmp -s requirements.txt "$stamp"; then
  exit 0
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
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r requirements.txt
cp requirements.txt "$stamp"
