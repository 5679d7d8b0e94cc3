#!/usr/bin/env bash
# The whole test suite: dependencies, a Release build with tests, ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD=${BUILD_DIR:-build-test}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_TESTS=ON
cmake --build "$BUILD"
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)"
