#!/usr/bin/env bash
# The test suite under the sanitizers (clang). scripts/test.sh runs it after the normal suite
# with SANITIZERS=all|ci|tsan|fuzz|asan.
#
#   scripts/test_sanitizers.sh all     asan, then tsan: the whole sanitizer run
#   scripts/test_sanitizers.sh ci      what CI runs (scripts/test.sh): asan without the tests
#                                      listed in tests/sanitizer_heavy.txt, then the fuzzers
#   scripts/test_sanitizers.sh tsan    ThreadSanitizer: the tests labelled `threads` (engine,
#                                      scheduler, server, tensor-parallel ranks)
#   scripts/test_sanitizers.sh fuzz    ASan + UBSan on the parsers of untrusted bytes: every
#                                      libFuzzer harness replays its corpus, then fuzzes for
#                                      FUZZ_SECONDS (10) (scripts/fuzz.sh on build-asan;
#                                      FUZZ_SECONDS=0: none)
#   scripts/test_sanitizers.sh asan    ASan + UBSan: every test except those labelled
#                                      `no_sanitizer`, then the fuzzers as in `fuzz`
#
# Why ci leaves tests out: under ASan + UBSan at -O1 the model-sized tests run 10-50x slower
# than in Release, and the whole suite no longer fits CI's 90 minutes on 2 cores (docs/
# HARDENING.md, "Sanitizers in CI"). The tests left out are end-to-end runs (golden models,
# GGUF files, CLI verbs, serving) whose kernels, parsers and bookkeeping the short tests reach
# too; `all` runs them, and each stop's closing note says when it last ran.
#
# asan and fuzz share one build (build-asan, -DTF_FUZZ=ON -DTF_TESTS=ON), which instruments
# every target with -fsanitize=address,undefined and the fuzzers' coverage, which the tests do
# not notice; fuzz builds only the harnesses (target tf_fuzzers). Any report fails the test
# that caused it (-fno-sanitize-recover). tsan: build-tsan builds only target
# tf_threads_tests. OpenMP there is clang's libomp with Archer (libarcher.so, from
# libomp-dev), which tells TSan about the runtime's own synchronisation, so races inside
# parallel regions are reported and its barriers are not. Labels: tests/CMakeLists.txt.
# Times on 2 cores: docs/HARDENING.md ("Sanitizers").
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
light=0
case "$what" in
  ci) steps="asan" light=1 ;;
  all) steps="asan tsan" ;;
  asan|tsan|fuzz) steps=$what ;;
  *) echo "usage: $0 [ci|tsan|fuzz|asan|all]" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh

# configure BUILD_DIR CMAKE_OPTIONS...: a clang build at -O1 (what the sanitizers' authors
# advise: fast enough to run, quick to compile) with line tables (cmake/sanitizers.cmake).
configure() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
        -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DTF_TESTS=ON "$@"
}

# heavy_tests: a ctest regex of the tests named in tests/sanitizer_heavy.txt (one name a line;
# '#' starts a comment), which `ci` leaves out; its count on stderr.
heavy_tests() {
  local list=tests/sanitizer_heavy.txt
  local names
  names=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$list" | grep -v '^$' || true)
  echo "test_sanitizers.sh: left out of this ASan run: the $(printf '%s\n' "$names" | grep -c .) tests of $list" >&2
  # ctest's regex: each name from the start to its end or to the ' # GetParam() = ...' that
  # ctest appends to parameterized tests, joined by |; a '.' in a name matches itself too.
  printf '%s\n' "$names" | sed 's/.*/^&$|^& /' | paste -sd'|'
}

for step in $steps; do
  case $step in
  asan|fuzz)
    BUILD=${ASAN_BUILD_DIR:-build-asan}
    configure "$BUILD" -DTF_FUZZ=ON
    if [ "$step" = asan ]; then
      cmake --build "$BUILD"
      exclude=()
      if [ "$light" = 1 ]; then
        heavy=$(heavy_tests)
        if [ -n "$heavy" ]; then exclude=(-E "$heavy"); fi
      fi
      ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1} \
      UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
        ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" -LE no_sanitizer "${exclude[@]}"
    fi
    if [ "${FUZZ_SECONDS:-10}" -gt 0 ]; then
      FUZZ_BUILD_DIR="$BUILD" bash scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-10}"
    fi
    ;;
  tsan)
    BUILD=${TSAN_BUILD_DIR:-build-tsan}
    configure "$BUILD" -DTF_SANITIZE=thread
    cmake --build "$BUILD" --target tf_threads_tests
    archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$archer" ]; then
      echo "test_sanitizers.sh: libarcher.so not found (Debian: libomp-dev)" >&2
      exit 1
    fi
    # ignore_noninstrumented_modules=1, as Archer itself asks at start-up: libomp is not
    # instrumented, and without it TSan reports libomp's reuse of its own heap blocks between
    # threads (memset in __kmp_free, seen in RankThreads.SharesTheHostThreads) as a race.
    OMP_TOOL_LIBRARIES="$archer" \
    TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1} \
      ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" -L threads
    ;;
  esac
done
