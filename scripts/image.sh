#!/usr/bin/env bash
# Builds kroute's container image (docker/Dockerfile) and the example producer's
# (docker/producer), with docker or podman.
#
#   scripts/image.sh [kroute|producer|all]   build (default: kroute); prints the image names
#   scripts/image.sh podman ARGS...          the project's podman (same storage and settings)
#
# kroute is built statically (glibc static-pie, stripped; scripts/static-build.sh) for the image
# into target/x86_64-unknown-linux-gnu/release (cargo skips it when nothing changed), then the
# build context is laid out in target/image/kroute. The producer is built with CGO_ENABLED=0.
#
# Environment:
#   KROUTE_IMAGE_ENGINE  docker or podman (default: docker if its daemon answers, else podman)
#   KROUTE_IMAGE_TAG     image tag (default: the version in Cargo.toml); "latest" is tagged too
#   KROUTE_IMAGE_BINARY  a kroute binary built elsewhere (static, x86_64): used as is, no cargo
#
# podman runs with docker/containers.conf (CONTAINERS_CONF) and its storage under target/podman
# (--root/--runroot/--tmpdir, vfs), so the machine's container configuration is not used or changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

podman_() {
  # DISABLE_HC_SYSTEMD: no systemd timers for healthchecks (kube play turns liveness probes into
  # them; a scratch image has no shell to run them, and machines without systemd cannot).
  DISABLE_HC_SYSTEMD=true CONTAINERS_CONF="$root/docker/containers.conf" podman \
    --root "$root/target/podman/root" --runroot "$root/target/podman/run" \
    --tmpdir "$root/target/podman/tmp" --storage-driver vfs "$@"
}

if [ "${1:-}" = podman ]; then
  shift
  mkdir -p target/podman
  podman_ "$@"
  exit $?
fi

engine=${KROUTE_IMAGE_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    echo "image.sh: neither a docker daemon nor podman is available" >&2
    exit 1
  fi
fi
build_image() { # context dockerfile name
  case "$engine" in
    docker) docker build --quiet -f "$2" -t "$3:$tag" -t "$3:latest" "$1" >/dev/null ;;
    podman) mkdir -p target/podman
            podman_ build --quiet --layers -f "$2" -t "$3:$tag" -t "$3:latest" "$1" >/dev/null
            # Earlier builds' images, now untagged, would pile up in target/podman.
            podman_ image prune -f >/dev/null ;;
    *) echo "image.sh: KROUTE_IMAGE_ENGINE must be docker or podman, not $engine" >&2; exit 1 ;;
  esac
  echo "$3:$tag"
}

tag=${KROUTE_IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}
# shellcheck source=scripts/static-build.sh
. "$root/scripts/static-build.sh"

kroute_image() {
  local binary=${KROUTE_IMAGE_BINARY:-target/$STATIC_TARGET/release/kroute}
  if [ -z "${KROUTE_IMAGE_BINARY:-}" ]; then
    # scripts/static-build.sh: debug info off and symbols stripped for this build only (the
    # release profile keeps debug = 1 for the host binary).
    static_build kroute >&2
  fi
  local ctx=target/image/kroute bundle=/etc/ssl/certs/ca-certificates.crt
  if [ ! -s "$bundle" ]; then
    echo "image.sh: no CA bundle at $bundle (Debian: apt-get install ca-certificates)" >&2
    exit 1
  fi
  rm -rf "$ctx"
  mkdir -p "$ctx/etc"
  cp "$binary" "$ctx/kroute"
  cp docker/rootfs/etc/passwd docker/rootfs/etc/group docker/rootfs/etc/nsswitch.conf "$ctx/etc/"
  cp "$bundle" "$ctx/ca-certificates.crt"
  cp docker/proxy.toml "$ctx/proxy.toml"
  build_image "$ctx" docker/Dockerfile localhost/kroute
}

producer_image() {
  local ctx=target/image/producer
  mkdir -p "$ctx"
  (cd docker/producer && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/$ctx/producer" .)
  build_image "$ctx" docker/producer/Dockerfile localhost/kroute-demo-producer
}

case "${1:-kroute}" in
  kroute) kroute_image ;;
  producer) producer_image ;;
  all) kroute_image; producer_image ;;
  *) echo "usage: scripts/image.sh [kroute|producer|all] | scripts/image.sh podman ARGS..." >&2; exit 2 ;;
esac
