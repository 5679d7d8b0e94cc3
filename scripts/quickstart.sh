#!/usr/bin/env bash
# Fresh Debian 12 -> dependencies, a Release build tuned for this CPU, and a first generation
# on the bundled tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_NATIVE=ON -DTF_TESTS=OFF
cmake --build build --target twofold
./build/tools/twofold generate -m models/tiny-main -p "The LORD is my shepherd;" -n 48 --seed 1
