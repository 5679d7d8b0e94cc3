#!/bin/bash
# One call on the GPU machine (the `device` tool): builds twofold with TF_CUDA=ON against the
# packed sysroot (tests/backend/cuda/make_device_sysroot.sh), then runs the steps named in
# $STEPS (default when unset: tests bench; STEPS="" only builds), logging each to $OUT/<step>.log:
#   tests     test_cuda_ops (the per-op pass/fail table and the engine checks)
#   bench     twofold bench on the Llama-3-8B shape with dummy weights ($BENCH_ARGS)
#   prefill   twofold bench prefill of $PREFILL_LENS tokens (default 512,4096) on the same shape
#   int8      the same shape with INT8 KV ($INT8_ARGS)
#   profile   nsys kernel summary of a short bench ($PROFILE_ARGS)
#   hf        Hugging Face transformers' generate on the same shape (bench/hf_baseline.py)
#   tiny      twofold bench on the bundled tiny-main
#   quant     the quantized matmul kernels alone on the Llama-3-8B shapes, rows 1..256
#             (tests/backend/cuda/bench_quant_gemm; $QUANT_ARGS)
#   floor     the read floor of the batch-1 GEMVs' weight regions, per projection and in one
#             launch (tests/backend/cuda/bench_read_floor; $FLOOR_ARGS, e.g. --format int8)
#   stream    a batch-1 W4 chain of projections as PDL launches, one persistent kernel with
#             grid barriers, rows handed out at run time (tests/backend/cuda/bench_layer_stream;
#             $STREAM_ARGS, default --config 1; --check, --trace)
#   attn      the paged decode attention alone on the Llama-3-8B attention shape, per KV pool,
#             batch and context (tests/backend/cuda/bench_decode_attention; $ATTN_ARGS)
# PREBUILT=file.tar.xz skips the build (see below).
# Usage: STEPS="tests bench hf" bash bench/device_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
STEPS=${STEPS-tests bench}
S=/tmp/sysroot
mkdir -p "$S" "$OUT"
[ -f build-cuda-sysroot/sysroot.tar.xz ] && tar -C "$S" -xJf build-cuda-sysroot/sysroot.tar.xz
export PKG_CONFIG_PATH=$S/lib/pkgconfig LD_LIBRARY_PATH=$S/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
if [ -n "${PREBUILT:-}" ]; then
  # Binaries built on the development machine (TF_CUDA=ON, the same CUDA major), packed as
  # tests/backend/cuda/{test_cuda_ops,bench_quant_gemm,bench_read_floor,bench_layer_stream,
  # bench_decode_attention}, tools/twofold and lib/ (the shared libraries the device lacks
  # beyond the sysroot's, which may then stay behind): no build here.
  mkdir -p build-dev && tar -C build-dev -xJf "$PREBUILT" || exit 1
  export LD_LIBRARY_PATH=$PWD/build-dev/lib:$LD_LIBRARY_PATH
  echo "prebuilt: $(cat build-dev/BUILT_FROM 2>/dev/null)"
else
  {
    cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=ON -DTF_TESTS=ON -DTF_NATIVE=ON \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DPKG_CONFIG_EXECUTABLE=$S/bin/pkg-config &&
    cmake --build build-dev -j16 --target test_cuda_ops twofold bench_quant_gemm bench_read_floor \
      bench_layer_stream bench_decode_attention
  } > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  echo "build ok ($(git rev-parse --short HEAD 2>/dev/null) + working tree)"
fi
TF=build-dev/tools/twofold
for step in $STEPS; do
  case $step in
    tests)
      build-dev/tests/backend/cuda/test_cuda_ops ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$OUT/tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|^op |pass$|FAIL$" "$OUT/tests.log" | tail -40 ;;
    bench)
      sh bench/llama3_8b_shape.sh /tmp/l8
      $TF bench -m /tmp/l8 --load-format dummy --backend cuda ${BENCH_ARGS:---kv-dtype bf16 --batch 1,8,32 --prompt-len 128 --gen 256 --max-batch-tokens 4096} > "$OUT/bench.log" 2>&1
      echo "bench rc=$?"; cat "$OUT/bench.log" | grep -v "^loading" | tail -40 ;;
    prefill)
      sh bench/llama3_8b_shape.sh /tmp/l8
      $TF bench -m /tmp/l8 --load-format dummy --backend cuda --kv-dtype bf16 --batch 1 \
        --prompt-len ${PREFILL_LENS:-512,4096} --gen 4 --max-batch-tokens 4096 ${PREFILL_ARGS:-} > "$OUT/prefill.log" 2>&1
      echo "prefill rc=$?"; grep -v "^loading\|^tuning" "$OUT/prefill.log" | tail -12 ;;
    int8)
      sh bench/llama3_8b_shape.sh /tmp/l8
      $TF bench -m /tmp/l8 --load-format dummy --backend cuda --kv-dtype int8 ${INT8_ARGS:---batch 1,32 --prompt-len 128 --gen 256 --max-batch-tokens 4096} > "$OUT/int8.log" 2>&1
      echo "int8 rc=$?"; grep -v "^loading\|^tuning" "$OUT/int8.log" | tail -8 ;;
    profile)
      sh bench/llama3_8b_shape.sh /tmp/l8
      NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
      if [ -z "$NSYS" ]; then echo "profile: no nsys"; continue; fi
      $NSYS profile -o /tmp/prof --force-overwrite true --cuda-graph-trace=node $TF bench -m /tmp/l8 --load-format dummy \
        --backend cuda --no-membw ${PROFILE_ARGS:---kv-dtype bf16 --batch 1 --prompt-len 128 --gen 64} > "$OUT/profile_run.log" 2>&1
      $NSYS stats --report cuda_gpu_kern_sum --format csv /tmp/prof.nsys-rep > "$OUT/profile_kern.csv" 2>&1
      echo "profile rc=$?"; head -25 "$OUT/profile_kern.csv" | cut -c1-200 ;;
    hf)
      sh bench/llama3_8b_shape.sh /tmp/l8
      python3 bench/hf_baseline.py --config /tmp/l8 ${HF_ARGS:---batch 1,32 --prompt-len 128 --gen 256} > "$OUT/hf.log" 2>&1
      echo "hf rc=$?"; grep -v Warning "$OUT/hf.log" | tail -8 ;;
    quant)
      build-dev/tests/backend/cuda/bench_quant_gemm ${QUANT_ARGS:-} > "$OUT/quant.log" 2>&1
      echo "quant rc=$?"; cat "$OUT/quant.log" | tail -80 ;;
    floor)
      build-dev/tests/backend/cuda/bench_read_floor ${FLOOR_ARGS:-} > "$OUT/floor.log" 2>&1
      echo "floor rc=$?"; tail -6 "$OUT/floor.log" ;;
    stream)
      build-dev/tests/backend/cuda/bench_layer_stream ${STREAM_ARGS:---config 1} > "$OUT/stream.log" 2>&1
      echo "stream rc=$?"; grep -v "^round 1" "$OUT/stream.log" | tail -40 ;;
    attn)
      build-dev/tests/backend/cuda/bench_decode_attention ${ATTN_ARGS:-} > "$OUT/attn.log" 2>&1
      echo "attn rc=$?"; tail -40 "$OUT/attn.log" ;;
    tiny)
      $TF bench -m models/tiny-main --backend cuda ${TINY_ARGS:---kv-dtype bf16 --batch 1,64 --prompt-len 128 --gen 128} > "$OUT/tiny.log" 2>&1
      echo "tiny rc=$?"; tail -12 "$OUT/tiny.log" ;;
  esac
done
