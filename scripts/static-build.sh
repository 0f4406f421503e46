# shellcheck shell=bash
# Sourced by scripts/image.sh, scripts/cluster.sh, scripts/demo.sh and bench/load.sh: the one static
# release build of this crate's binaries. Every caller must build with exactly the same target,
# RUSTFLAGS and profile settings, or cargo compiles every release dependency again (a test run
# builds the delay relay, then the image: with different debug settings that was a second full
# release build, about 3 minutes on 2 cores).
#
# static_build BIN...: builds target/x86_64-unknown-linux-gnu/release/BIN, glibc static-pie, no
# debug info, symbols stripped. The target directory differs from `cargo build --release`, so
# neither build invalidates the other. BIN is kroute or delay_relay (relay/, a package of its
# own); `--workspace` finds either, and resolves the dependencies' features over both packages,
# so a relay built alone first compiles them as kroute's build will want them.
STATIC_TARGET=x86_64-unknown-linux-gnu

#
# STATIC_ALLOCATOR=system builds without the jemalloc feature (the system allocator): the demo's
# build, whose few short runs do not depend on the allocator, without jemalloc's C build (125 s
# of the 270 s a first build took on 2 cores, docs/benchmarks.md "First run"). The dependencies
# are the same either way; cargo keeps both builds of kroute's own crate.
static_build() {
  local bins=() b features=()
  for b in "$@"; do bins+=(--bin "$b"); done
  if [ "${STATIC_ALLOCATOR:-jemalloc}" = system ]; then features=(--no-default-features); fi
  RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --quiet --release --target "$STATIC_TARGET" --workspace "${features[@]}" "${bins[@]}"
}
