#!/usr/bin/env bash
# SmolLM2-135M-Instruct (the Q4_1 GGUF of scripts/fetch-smollm2.sh) on the CPU, four ways, with
# the same thread count, interleaved (A B C D A B C D ...) for ROUNDS rounds:
#   twofold-blocks  `twofold bench` as it loads the file by default: the Q4_1 matrices (and the
#                   Q8_0 embedding / tied LM head) in their blocks, on the integer kernels with
#                   16-bit activations
#   twofold-int8    the same with `--int8-activations` (8-bit activations, llama.cpp's scheme)
#   twofold-f32     `twofold bench --dequantize`: every quantized matrix dequantized to F32 at load
#   llama.cpp       `llama-bench` on the same file
# Each run reports prefill and decode tokens/s (batch 1, PROMPT-token prompt, GEN new tokens) and
# the process's peak resident set (/usr/bin/time); twofold also its load time (tokenizer, config,
# weights, KV pool) and the batch-1 decode roofline: its resident weight bytes over the copy
# bandwidth `twofold bench` measures once at the start (the runs themselves skip that test,
# whose buffers would count in their resident set). Each figure carries the load average at
# the time: on a shared machine the summary's min-max ranges are what to read
# (bench/vs_llamacpp.sh).
#
# usage: bench/smollm2_vs_llamacpp.sh [-r ROUNDS] [-t THREADS] [-p PROMPT] [-n GEN]
# env:   LLAMACPP_BUILD  llama.cpp build dir with bin/llama-bench (default /work/llamacpp/build;
#                        built from llama.cpp's own source outside this repository)
#        TWOFOLD_BUILD   twofold build dir (default ./build)
#        WORK            where the results go (default /tmp/smollm2_vs_llamacpp)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
name=smollm2_vs_llamacpp.sh
. "$here/bench/vs_llamacpp.sh"
rounds=3 threads=2 prompt=128 gen=64
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -p) prompt=$2; shift 2 ;;
    -n) gen=$2; shift 2 ;;
    -h|--help) vs_help; exit 0 ;;
    *) vs_fail "unknown argument $1 (see --help)" ;;
  esac
done
vs_setup /tmp/smollm2_vs_llamacpp
[ -x "$twofold" ] || vs_fail "$twofold not found (set TWOFOLD_BUILD)"
gguf=$(bash "$here/scripts/fetch-smollm2.sh")
emit() {  # engine prefill decode rss_kb [load_s roofline]
  vs_emit engine="$1" prefill_tokens_per_s="$2" decode_tokens_per_s="$3" peak_rss_mib="$(awk -v kb="$4" 'BEGIN { printf "%.1f", kb / 1024 }')" \
    load_s="${5:-null}" roofline_decode="${6:-null}"
}
run_twofold() {  # engine extra-args...
  local engine=$1; shift
  /usr/bin/time -f "%M" -o "$WORK/time.txt" "$twofold" bench -m "$gguf" -t "$threads" --prompt-len "$prompt" \
    --gen "$gen" --kv-dtype bf16 --no-membw --json "$@" 2> "$WORK/twofold.err" > "$WORK/twofold.json"
  python3 - "$WORK/twofold.json" "$copy_gb_s" <<'PY' | { read -r pre dec ls roof; emit "$engine" "$pre" "$dec" "$(cat "$WORK/time.txt")" "$ls" "$roof"; }
import json, sys
j = json.load(open(sys.argv[1])); r = j["runs"][0]
print(r["prefill_tokens_per_s"], r["decode_tokens_per_s"], j["load_s"], float(sys.argv[2]) * 1e9 / j["weight_bytes"])
PY
}
run_llama() {
  /usr/bin/time -f "%M" -o "$WORK/time.txt" "$llama_bench" -m "$gguf" -t "$threads" -p "$prompt" -n "$gen" -r 3 \
    -o jsonl 2> "$WORK/llama-bench.err" > "$WORK/llama.jsonl"
  vs_llama_ts < "$WORK/llama.jsonl" > "$WORK/llama.ts"
  emit llama.cpp "$(awk '$2 == "prefill" { print $3 }' "$WORK/llama.ts")" \
    "$(awk '$2 == "decode" { print $3 }' "$WORK/llama.ts")" "$(cat "$WORK/time.txt")"
}

vs_machine
echo "file: $gguf"
copy_gb_s=$("$twofold" bench -m "$gguf" -t "$threads" --gen 1 --prompt-len 1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["copy_gb_s"])')
echo "copy bandwidth: $copy_gb_s GB/s ($threads threads)"
echo "twofold: $(git -C "$here" rev-parse --short HEAD) (llama.cpp's build commit follows its first run)"
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds, load $(vs_load)"
  run_twofold twofold-blocks
  run_twofold twofold-int8 --int8-activations
  run_twofold twofold-f32 --dequantize
  run_llama
done
sed -n 's/.*"build_commit": "\([^"]*\)".*/llama.cpp build_commit \1/p' "$WORK/llama.jsonl" | head -1

vs_summary engine "prefill_tokens_per_s decode_tokens_per_s roofline_decode:0 peak_rss_mib load_s:2"
