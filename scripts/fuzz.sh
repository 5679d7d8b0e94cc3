#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan) and runs each for a while,
# starting from its checked-in seed corpus.
#
#   scripts/fuzz.sh                        every harness for 10 seconds (what CI runs)
#   scripts/fuzz.sh --seconds 600          a long run: 10 minutes each
#   scripts/fuzz.sh --seconds 600 jinja    only the named harnesses
#
# New inputs the fuzzer finds go to $BUILD/corpus/NAME, never into tests/fuzz/corpus. A crash,
# a hang (-timeout, 10 s an input) or an allocation past -rss_limit_mb stops that harness,
# leaves the input in $BUILD/crashes/NAME/ and makes the script fail. Keep a crash as a
# regression test: fix it, then copy the input to tests/fuzz/corpus/NAME/regress-WHAT (the
# corpus replay tests, fuzz_NAME_corpus, run it in every build).
#
# FUZZ_BUILD_DIR (default build-fuzz) names the build folder; an existing one is reused as it
# is configured (scripts/test_sanitizers.sh shares its ASan + UBSan build with the fuzzers).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=10
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done

BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
        -DCMAKE_CXX_COMPILER=clang++ -DTF_FUZZ=ON -DTF_TESTS=OFF
fi
cmake --build "$BUILD" --target tf_fuzzers

if [ ${#names[@]} -eq 0 ]; then
  for f in tests/fuzz/corpus/*/; do names+=("$(basename "$f")"); done
fi

failed=()
for name in "${names[@]}"; do
  bin="$BUILD/tests/fuzz/fuzz_$name"
  if [ ! -x "$bin" ]; then echo "fuzz.sh: no harness $bin" >&2; exit 2; fi
  mkdir -p "$BUILD/corpus/$name" "$BUILD/crashes/$name"
  echo "== fuzz_$name: $seconds s"
  dict=()
  if [ -f "tests/fuzz/$name.dict" ]; then dict=(-dict="tests/fuzz/$name.dict"); fi
  log="$BUILD/crashes/$name.log"
  # -rss_limit_mb also caps a single allocation (malloc_limit_mb defaults to it).
  if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
        -artifact_prefix="$BUILD/crashes/$name/" "$BUILD/corpus/$name" "tests/fuzz/corpus/$name" \
        > "$log" 2>&1; then
    failed+=("$name")
    tail -n 60 "$log"
  else
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" | tr '\n' ' '
    echo
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]} (inputs in $BUILD/crashes/)" >&2
  exit 1
fi
echo "fuzz.sh: ${#names[@]} harnesses, $seconds s each, no crash"
