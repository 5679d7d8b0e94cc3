#!/usr/bin/env bash
# twofold's CPU backend side by side with llama.cpp on one machine (issue 17): prefill and
# decode tokens/s of tiny-main (128-token prompt, 128 new tokens) and of the Llama-1B shape
# (64 / 32), in 16-bit, 8-bit and 4-bit weights, both engines with the same thread count.
#
#   llama.cpp  llama-bench -t T on GGUF files: tiny-main's (F16, Q8_0, Q4_0) and a random-weight
#              1B-shape GGUF written by bench/gguf_random_llama.py (F16), quantized with
#              llama-quantize (Q8_0, Q4_0).
#   twofold    `twofold bench -t T` end to end (BF16 weights of tiny-main; `--load-format dummy`
#              of the 1B shape), and bench_cpu_forward (bench/cpu_forward_bench.cpp) for the
#              quantized formats: the model's backend ops over random weights in Q8_0, Q4_0,
#              W8, W4 (the engine's quantized loading is not part of this branch).
#   twofold-native  the same `twofold bench` from a -DTF_NATIVE=ON build, when NATIVE_BUILD is set
#                   (the portable binary against one compiled for this machine).
#
# The engines run interleaved (A B A B ...) for ROUNDS rounds, each figure carries the load
# average at the time, and the summary gives min-max ranges (bench/vs_llamacpp.sh). --busy adds
# a round of the default thread count with `nproc` busy loops running beside it, against the
# same without them (p99 inter-token latency).
#
# usage: bench/cpu_vs_llamacpp.sh [-r ROUNDS] [-t THREADS] [--busy] [--skip-1b]
# env:   LLAMACPP_BUILD  llama.cpp build dir with bin/llama-bench, bin/llama-quantize
#                        (default /work/llamacpp/build; build it from llama.cpp's own source,
#                        outside this repository: cmake -S SRC -B BUILD -DCMAKE_BUILD_TYPE=Release
#                        -DLLAMA_CURL=OFF && cmake --build BUILD --target llama-bench llama-quantize)
#        TWOFOLD_BUILD   twofold build dir (default ./build); bench_cpu_forward is built in it
#        NATIVE_BUILD    optional second twofold build dir configured with -DTF_NATIVE=ON
#        GGUF_DIR        dir with tiny-main-{f16,q8_0,q4_0}.gguf (default models/gguf, the bundled files)
#        WORK            scratch dir for the 1B GGUFs, the 1B config folder and the results
#                        (default /tmp/cpu_vs_llamacpp)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
name=cpu_vs_llamacpp.sh
. "$here/bench/vs_llamacpp.sh"
rounds=3 threads=2 busy=0 skip_1b=0
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --busy) busy=1; shift ;;
    --skip-1b) skip_1b=1; shift ;;
    -h|--help) vs_help; exit 0 ;;
    *) vs_fail "unknown argument $1 (see --help)" ;;
  esac
done
vs_setup /tmp/cpu_vs_llamacpp
GGUF_DIR=${GGUF_DIR:-$here/models/gguf}
llama_quantize=$LLAMACPP_BUILD/bin/llama-quantize
[ -x "$llama_quantize" ] || vs_fail "$llama_quantize not found (set LLAMACPP_BUILD)"
mkdir -p "$WORK/gguf"
# The repository stores the f16 file xz-compressed: every file is read from $WORK/gguf.
for f in tiny-main-f16 tiny-main-q8_0 tiny-main-q4_0; do
  if [ -f "$GGUF_DIR/$f.gguf" ]; then cp "$GGUF_DIR/$f.gguf" "$WORK/gguf/"
  elif [ -f "$GGUF_DIR/$f.gguf.xz" ]; then xz -dc "$GGUF_DIR/$f.gguf.xz" > "$WORK/gguf/$f.gguf"
  else vs_fail "$GGUF_DIR/$f.gguf not found (set GGUF_DIR)"
  fi
done
GGUF_DIR=$WORK/gguf
cmake --build "$TWOFOLD_BUILD" --target twofold bench_cpu_forward > "$WORK/build.log" 2>&1 ||
  vs_fail "building twofold failed, see $WORK/build.log"
forward=$TWOFOLD_BUILD/bench/bench_cpu_forward

# ---- the 1B shape: GGUFs for llama.cpp, a config folder for twofold's dummy load
if [ "$skip_1b" = 0 ]; then
  if [ ! -f "$WORK/llama1b-f16.gguf" ]; then
    python3 "$here/bench/gguf_random_llama.py" --like "$GGUF_DIR/tiny-main-f16.gguf" --hidden 2048 --ffn 8192 \
      --layers 16 --heads 32 --kv-heads 8 --head-dim 64 -o "$WORK/llama1b-f16.gguf"
  fi
  for q in q8_0 q4_0; do
    [ -f "$WORK/llama1b-$q.gguf" ] || "$llama_quantize" "$WORK/llama1b-f16.gguf" "$WORK/llama1b-$q.gguf" "$q" > "$WORK/quantize-$q.log" 2>&1
  done
  sh "$here/bench/llama_1b_shape.sh" "$WORK/l1b"
fi

# Each engine writes its results to a file that is read once it has exited: a reader started
# beside it in a pipe (python's start-up) took CPU time from a 7 ms prefill on 2 cores, and the
# JSON-mode figures of `twofold bench` read 10-14 thousand tokens/s against 16-18 unpiped.
# Appends one result line: engine model format phase tokens_per_s [p99_ms]
emit() { vs_emit engine="$1" model="$2" format="$3" phase="$4" tokens_per_s="$5" p99_ms="${6:-null}"; }
run_llama() {  # model-tag prompt gen files...
  local tag=$1 p=$2 n=$3; shift 3
  local args=()
  for f in "$@"; do args+=(-m "$f"); done
  "$llama_bench" "${args[@]}" -t "$threads" -p "$p" -n "$n" -r 3 -o jsonl 2> "$WORK/llama-bench.err" > "$WORK/llama-bench.jsonl"
  vs_llama_ts < "$WORK/llama-bench.jsonl" | while read -r fmt phase ts; do emit llama.cpp "$tag" "$fmt" "$phase" "$ts"; done
}
run_twofold() {  # engine binary model-tag prompt gen model-args...
  local engine=$1 bin=$2 tag=$3 p=$4 n=$5; shift 5
  "$bin" bench "$@" -t "$threads" --prompt-len "$p" --gen "$n" --kv-dtype bf16 --no-membw --json 2> "$WORK/twofold.err" \
    > "$WORK/twofold.json"
  python3 -c '
import json, sys
r = json.load(sys.stdin)["runs"][0]
print(r["prefill_tokens_per_s"], r["decode_tokens_per_s"], r["itl_p99_s"] * 1e3)' < "$WORK/twofold.json" |
    { read -r pre dec p99; emit "$engine" "$tag" bf16 prefill "$pre"; emit "$engine" "$tag" bf16 decode "$dec" "$p99"; }
}
run_forward() {  # model-tag shape prompt gen
  "$forward" --shape "$2" --dtypes q8_0,q4_0,w8,w4 -p "$3" -n "$4" -t "$threads" --reps 3 --no-membw --json \
    > "$WORK/forward.jsonl"
  python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r["dtype"], max(r["pp_tok_s"]), max(r["tg_tok_s"]))' < "$WORK/forward.jsonl" |
    while read -r fmt pp tg; do emit twofold-forward "$1" "$fmt" prefill "$pp"; emit twofold-forward "$1" "$fmt" decode "$tg"; done
}

vs_machine
echo "twofold: $("$twofold" info -m "$here/models/tiny-main" -t "$threads" | grep 'cpu backend')"
echo "copy bandwidth: $("$twofold" bench -m "$here/models/tiny-main" -t "$threads" --gen 1 --prompt-len 1 | grep -m1 'copy bandwidth')"
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds, load $(vs_load)"
  run_llama tiny-main 128 128 "$GGUF_DIR/tiny-main-f16.gguf" "$GGUF_DIR/tiny-main-q8_0.gguf" "$GGUF_DIR/tiny-main-q4_0.gguf"
  run_twofold twofold "$twofold" tiny-main 128 128 -m "$here/models/tiny-main"
  [ -n "${NATIVE_BUILD:-}" ] && run_twofold twofold-native "$NATIVE_BUILD/tools/twofold" tiny-main 128 128 -m "$here/models/tiny-main"
  run_forward tiny-main tiny 128 128
  if [ "$skip_1b" = 0 ]; then
    run_llama 1b 64 32 "$WORK/llama1b-f16.gguf" "$WORK/llama1b-q8_0.gguf" "$WORK/llama1b-q4_0.gguf"
    run_twofold twofold "$twofold" 1b 64 32 -m "$WORK/l1b" --load-format dummy
    [ -n "${NATIVE_BUILD:-}" ] && run_twofold twofold-native "$NATIVE_BUILD/tools/twofold" 1b 64 32 -m "$WORK/l1b" --load-format dummy
    run_forward 1b 1b 64 32
  fi
done

if [ "$busy" = 1 ]; then  # default thread count, quiet against `nproc` busy loops beside it
  saved_threads=$threads
  threads=0
  for round in $(seq 1 "$rounds"); do
    run_twofold twofold-quiet "$twofold" tiny-main 128 128 -m "$here/models/tiny-main"
    pids=()
    for _ in $(seq 1 "$(nproc)"); do sh -c 'while :; do :; done' & pids+=($!); done
    run_twofold twofold-busy "$twofold" tiny-main 128 128 -m "$here/models/tiny-main"
    kill "${pids[@]}"
    wait "${pids[@]}" 2>/dev/null || true
  done
  threads=$saved_threads
fi

vs_summary "model phase format engine" "tokens_per_s p99_ms:2"
