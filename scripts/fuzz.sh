#!/usr/bin/env bash
# The libFuzzer targets (fuzz/, docs/fuzzing.md), built with clang under ASan + UBSan in build-fuzz/.
#   scripts/fuzz.sh build                      configure and build build-fuzz/ (only the fuzz targets)
#   scripts/fuzz.sh seeds                      rewrite the committed seed corpora fuzz/corpus/ from the encoders
#   scripts/fuzz.sh run TARGET SECONDS [ARGS]  fuzz one target (gguf, jinja, ...); new inputs go to
#                                              build-fuzz/corpus/TARGET, findings to build-fuzz/artifacts/
#   scripts/fuzz.sh ci [SECONDS]               build, then every target SECONDS (default 15) seconds, one at a time
# A crash, a leak, a sanitizer report, a timeout (30 s for one input) or running out of memory (2 GiB)
# is a finding: libFuzzer stops, writes the input, and this script exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
# Four builds (release, ASan, TSan, fuzz) with debug info outgrow ccache's default 5 GB: an evicted
# object is a recompile in the next CI run.
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-30G}"
TARGETS=(gguf request_parser jinja http_framing chunk_codec response_record manifest)
BUILD=build-fuzz

build() {
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSTASH_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ > "$BUILD-configure.log" 2>&1 ||
    { cat "$BUILD-configure.log"; exit 1; }
  ninja -C "$BUILD" -j"${KVSTASH_FUZZ_JOBS:-$(nproc)}" fuzz_all
}

# run TARGET SECONDS [libFuzzer args...]
run() {
  local target=$1 seconds=$2
  shift 2
  local work="$BUILD/corpus/$target" dict=()
  mkdir -p "$work" "$BUILD/artifacts"
  [ -f "fuzz/$target.dict" ] && dict=(-dict="fuzz/$target.dict")
  echo "== fuzzing $target for ${seconds}s"
  # halt_on_error: UBSan findings stop the run like ASan's; detect_leaks: a leak is a finding.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD/artifacts/$target-" "${dict[@]}" "$@" "$work" "fuzz/corpus/$target"
}

case "${1:-}" in
  build) build ;;
  seeds)
    build
    rm -rf fuzz/corpus
    "$BUILD/fuzz/fuzz_make_seeds" fuzz/corpus
    ;;
  run)
    [ $# -ge 3 ] || { echo "usage: scripts/fuzz.sh run TARGET SECONDS [libFuzzer args]" >&2; exit 2; }
    run "${@:2}"
    ;;
  ci)
    build
    for t in "${TARGETS[@]}"; do
      run "$t" "${2:-15}" > "$BUILD/$t.log" 2>&1 || { tail -n 60 "$BUILD/$t.log"; echo "FAILED: fuzz target $t found a bug (input in $BUILD/artifacts/)" >&2; exit 1; }
      grep -E '^#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb' "$BUILD/$t.log" | tr '\n' ' '
      echo
    done
    echo "fuzzing: no finding in ${#TARGETS[@]} targets"
    ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
