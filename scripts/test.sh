#!/usr/bin/env bash
# The whole test suite: dependencies, a Release build with tests, ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD=${BUILD_DIR:-build-test}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_TESTS=ON
cmake --build "$BUILD"
# The CUDA kernels compile wherever nvcc is installed (they run only on a GPU: see
# tests/backend/cuda); a compile error there fails CI too.
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$NVCC" ]; then
  cmake -S . -B "$BUILD-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=ON -DTF_TESTS=OFF \
        -DCMAKE_CUDA_COMPILER="$NVCC"
  cmake --build "$BUILD-cuda" --target tf_backend_cuda
fi
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)"
# The suite under ASan + UBSan (clang), without the end-to-end tests of
# tests/sanitizer_heavy.txt, then each fuzzer 10 s (scripts/test_sanitizers.sh ci;
# docs/HARDENING.md, "Sanitizers in CI"). SANITIZERS=all runs every test under ASan + UBSan
# and the threaded ones under ThreadSanitizer too (about 45 minutes more); none skips them;
# asan, tsan, fuzz run a part.
if [ "${SANITIZERS:-ci}" != none ]; then
  bash scripts/test_sanitizers.sh "${SANITIZERS:-ci}"
fi
