#!/bin/sh
# Builds the device binaries on this machine (TF_CUDA=ON, sm_90) and packs them for
# bench/device_run.sh's PREBUILT, so a device call spends no time building: tools/twofold,
# tests/backend/cuda/{test_cuda_ops,bench_quant_gemm}, and lib/ with the shared libraries the
# device lacks beyond the sysroot's (make_device_sysroot.sh): fmt and GNU OpenMP. Stripped,
# xz with a large dictionary (the binaries share most of their kernels): ~14 MB. device_run.sh's
# steps floor, stream and attn need their own benches, which this leaves out.
#   sh tests/backend/cuda/pack_prebuilt.sh [build-dir] [out]
#   (defaults build-cuda, build-cuda-sysroot/prebuilt.tar.xz; then on the device:
#    PREBUILT=build-cuda-sysroot/prebuilt.tar.xz bash bench/device_run.sh)
set -eu
build=${1:-build-cuda}
out=${2:-build-cuda-sysroot/prebuilt.tar.xz}
[ -f "$build/CMakeCache.txt" ] ||
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=ON -DTF_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90
ninja -C "$build" twofold test_cuda_ops bench_quant_gemm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tools" "$tmp/tests/backend/cuda" "$tmp/lib"
cp "$build/tools/twofold" "$tmp/tools/"
cp "$build/tests/backend/cuda/test_cuda_ops" "$build/tests/backend/cuda/bench_quant_gemm" "$tmp/tests/backend/cuda/"
strip "$tmp/tools/twofold" "$tmp/tests/backend/cuda/"*
for lib in libfmt.so.9 libgomp.so.1; do cp -L "/lib/x86_64-linux-gnu/$lib" "$tmp/lib/"; done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + working tree'), $(date -u +%FT%TZ)" > "$tmp/BUILT_FROM"
mkdir -p "$(dirname "$out")"
tar -C "$tmp" -cf - . | xz -T2 --lzma2=preset=9,dict=256MiB > "$out"
ls -l "$out"
