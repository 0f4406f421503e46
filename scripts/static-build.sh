# shellcheck shell=bash
# Sourced by scripts/image.sh, scripts/cluster.sh, scripts/demo.sh and bench/load.sh: the one static
# release build of this crate's binaries. Every caller must build with exactly the same target,
# RUSTFLAGS and profile settings, or cargo compiles every release dependency again (a test run
# builds the delay relay, then the image: with different debug settings that was a second full
# release build, about 3 minutes on 2 cores).
#
# static_build BIN...: builds target/x86_64-unknown-linux-gnu/release/BIN, glibc static-pie, no
# debug info, symbols stripped. The target directory differs from `cargo build --release`, so
# neither build invalidates the other.
STATIC_TARGET=x86_64-unknown-linux-gnu

static_build() {
  local bins=() b
  for b in "$@"; do bins+=(--bin "$b"); done
  RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --quiet --release --target "$STATIC_TARGET" "${bins[@]}"
}
