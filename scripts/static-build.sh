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
#
# STATIC_LTO=off builds without the release profile's default link-time optimization within each
# crate (cargo's "thin local" LTO): the demo's build, 135 s instead of 162 s cold on 2 cores, for
# a kroute that spends 6-11% more CPU per forwarded Produce request (bench/produce_cpu.sh; the
# shipped build keeps LTO; docs/benchmarks.md "First run"). Its compiled dependencies differ
# from the default build's, so a demo and a test run on one machine each compile their own.
static_build() {
  local bins=() b features=() lto=()
  for b in "$@"; do bins+=(--bin "$b"); done
  if [ "${STATIC_ALLOCATOR:-jemalloc}" = system ]; then features=(--no-default-features); fi
  if [ -n "${STATIC_LTO:-}" ]; then lto=(CARGO_PROFILE_RELEASE_LTO="$STATIC_LTO"); fi
  env RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols "${lto[@]}" \
    cargo build --quiet --release --target "$STATIC_TARGET" --workspace "${features[@]}" "${bins[@]}"
}
