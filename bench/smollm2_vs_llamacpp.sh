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
# whose buffers would count in their resident set). Each line
# carries the load average at the time: on a shared machine the summary's min-max ranges are
# what to read.
#
# usage: bench/smollm2_vs_llamacpp.sh [-r ROUNDS] [-t THREADS] [-p PROMPT] [-n GEN]
# env:   LLAMACPP_BUILD  llama.cpp build dir with bin/llama-bench (default /work/llamacpp/build;
#                        built from llama.cpp's own source outside this repository)
#        TWOFOLD_BUILD   twofold build dir (default ./build)
#        WORK            where the results go (default /tmp/smollm2_vs_llamacpp)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 threads=2 prompt=128 gen=64
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -p) prompt=$2; shift 2 ;;
    -n) gen=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "smollm2_vs_llamacpp.sh: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
done
LLAMACPP_BUILD=${LLAMACPP_BUILD:-/work/llamacpp/build}
TWOFOLD_BUILD=${TWOFOLD_BUILD:-$here/build}
WORK=${WORK:-/tmp/smollm2_vs_llamacpp}
llama_bench=$LLAMACPP_BUILD/bin/llama-bench
twofold=$TWOFOLD_BUILD/tools/twofold
for f in "$llama_bench" "$twofold"; do
  [ -x "$f" ] || { echo "smollm2_vs_llamacpp.sh: $f not found (set LLAMACPP_BUILD / TWOFOLD_BUILD)" >&2; exit 1; }
done
gguf=$(bash "$here/scripts/fetch-smollm2.sh")
mkdir -p "$WORK"
results=$WORK/results.jsonl
: > "$results"
load() { cut -d' ' -f1 /proc/loadavg; }
emit() {  # engine prefill decode rss_kb load_s roofline
  printf '{"round": %s, "engine": "%s", "prefill_tokens_per_s": %s, "decode_tokens_per_s": %s, "peak_rss_kb": %s, "load_s": %s, "roofline_decode": %s, "load": %s}\n' \
    "$round" "$1" "$2" "$3" "$4" "${5:-null}" "${6:-null}" "$(load)" >> "$results"
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
  python3 - "$WORK/llama.jsonl" <<'PY' | { read -r pre dec; emit llama.cpp "$pre" "$dec" "$(cat "$WORK/time.txt")"; }
import json, sys
ts = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    ts["prefill" if r["n_prompt"] > 0 else "decode"] = r["avg_ts"]
print(ts["prefill"], ts["decode"])
PY
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(load)"
echo "file: $gguf"
copy_gb_s=$("$twofold" bench -m "$gguf" -t "$threads" --gen 1 --prompt-len 1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["copy_gb_s"])')
echo "copy bandwidth: $copy_gb_s GB/s ($threads threads)"
echo "twofold: $(git -C "$here" rev-parse --short HEAD); llama.cpp: $(sed -n 's/.*"build_commit": "\([^"]*\)".*/\1/p' "$WORK/llama.jsonl" 2>/dev/null | head -1)"
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds, load $(load)"
  run_twofold twofold-blocks
  run_twofold twofold-int8 --int8-activations
  run_twofold twofold-f32 --dequantize
  run_llama
done
sed -n 's/.*"build_commit": "\([^"]*\)".*/llama.cpp build_commit \1/p' "$WORK/llama.jsonl" | head -1

python3 - "$results" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = collections.defaultdict(list)
for r in rows: groups[r["engine"]].append(r)
def rng(rs, key, fmt="{:.1f}"):
    v = sorted(r[key] for r in rs if r[key] is not None)
    return (fmt.format(v[0]) + "-" + fmt.format(v[-1])) if v else "-"
print(f"\n{'engine':16} {'prefill tok/s':>16} {'decode tok/s':>14} {'roofline':>10} {'peak RSS MiB':>14} {'load s':>12} {'load avg':>10}")
for engine, rs in groups.items():
    rss = sorted(r["peak_rss_kb"] / 1024 for r in rs)
    print(f"{engine:16} {rng(rs, 'prefill_tokens_per_s'):>16} {rng(rs, 'decode_tokens_per_s'):>14} "
          f"{rng(rs, 'roofline_decode', '{:.0f}'):>10} {rss[0]:>6.1f}-{rss[-1]:<7.1f} {rng(rs, 'load_s', '{:.2f}'):>12} "
          f"{min(r['load'] for r in rs):>4.1f}-{max(r['load'] for r in rs):<5.1f}")
PY
echo "every figure: $results"
