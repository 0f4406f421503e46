#!/usr/bin/env bash
# A few seconds of fuzzing per decoder (docs/hardening.md, "Fuzzing"): builds every target in
# fuzz/ with cargo-fuzz (libFuzzer) on the stable toolchain and runs each from its seeds,
# failing on the first crash, panic, hang or allocation over a target's bound.
#
#   scripts/fuzz-smoke.sh                 # every target, FUZZ_SECONDS (5) each
#   scripts/fuzz-smoke.sh batch_inspect   # some targets
#   FUZZ_SECONDS=600 scripts/fuzz-smoke.sh rewrite_metadata    # a longer run
#   FUZZ_RUNS=10000000 scripts/fuzz-smoke.sh request_header    # a number of executions instead
#
# FUZZ_SANITIZER: address (the default when the toolchain ships the ASan runtime) or none.
# FUZZ_QUICK_BUILD=1: a quicker, less optimized build (what scripts/test.sh uses).
# New inputs go to a temporary corpus; the seeds in fuzz/corpus/<target>/ are only read.
# A crash leaves its input in fuzz/artifacts/<target>/; replay it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run -O -a -s <sanitizer> <target> fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-5}
# FUZZ_RUNS=N: stop each target after N executions rather than after FUZZ_SECONDS.
if [ -n "${FUZZ_RUNS:-}" ]; then
  limit=(-runs="$FUZZ_RUNS")
  length="$FUZZ_RUNS runs"
else
  limit=(-max_total_time="$seconds")
  length="$seconds s"
fi
# cargo-fuzz passes nightly-only flags (-Z) to rustc: the installed stable toolchain takes them
# with RUSTC_BOOTSTRAP=1.
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz (cargo install)" >&2
  cargo install --locked cargo-fuzz
fi

sanitizer=${FUZZ_SANITIZER:-}
if [ -z "$sanitizer" ]; then
  if ls "$(rustc --print target-libdir)"/librustc-*_rt.asan.a >/dev/null 2>&1; then
    sanitizer=address
  else
    sanitizer=none
  fi
fi

# -O: release; -a: debug assertions (and so overflow checks) on.
flags=(-O -a --sanitizer "$sanitizer")
# FUZZ_QUICK_BUILD=1 (scripts/test.sh): unoptimized, for a cold build of 2 minutes instead of 5 on
# 2 cores (opt-level 1 took 300 s in CI, 0 takes 126 s); about 10x fewer executions a second,
# still thousands per target in 3 s, enough for a smoke. Long runs leave it unset.
if [ "${FUZZ_QUICK_BUILD:-0}" = 1 ]; then
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0
fi
start=$(date +%s)
cargo fuzz build "${flags[@]}"
built=$(date +%s)

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target" "fuzz/corpus/$target"
  # batch_inspect's budgets are at most 64 MiB: no single allocation, Rust's or the C
  # decoders', may pass twice that. Elsewhere libFuzzer's default (the RSS limit) applies.
  extra=()
  if [ "$target" = batch_inspect ]; then extra+=(-malloc_limit_mb=128); fi
  echo "== $target ($length)"
  if ! cargo fuzz run "${flags[@]}" "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
      "${limit[@]}" -timeout=10 -rss_limit_mb=2048 "${extra[@]}" \
      -print_final_stats=1 2>"$scratch/$target.log"; then
    tail -n 40 "$scratch/$target.log" >&2
    failed+=("$target")
    continue
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$scratch/$target.log" \
    | tr -s ' \n' ' '
  echo
  grep '^note:' "$scratch/$target.log" || true
done

end=$(date +%s)
echo "fuzz smoke: ${#targets[@]} targets, build $((built - start)) s, runs $((end - built)) s," \
  "sanitizer $sanitizer"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
