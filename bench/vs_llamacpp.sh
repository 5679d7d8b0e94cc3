# The shell bench/cpu_vs_llamacpp.sh and bench/smollm2_vs_llamacpp.sh share (sourced, not run).
# Other work on a shared machine moves timings by 2x or more, so both run the engines
# interleaved for ROUNDS rounds; every figure is one JSON line in $results carrying its round
# and the load average at the time, and vs_summary prints min-max ranges over the rounds.
#
# The sourcing script sets `name` (for messages) and `here` (the repository root), then:
#   vs_setup WORK_DEFAULT  LLAMACPP_BUILD, TWOFOLD_BUILD and WORK from the environment or the
#                          defaults; llama_bench (checked), twofold; WORK made; results emptied
#   vs_help                prints the script's opening comment (its --help)
#   vs_fail MESSAGE        to stderr as "$name: MESSAGE", exit 1
#   vs_load                the 1-minute load average
#   vs_machine             prints the CPUs, their model and the load
#   vs_emit KEY=VALUE...   appends {"round": $round, KEY: VALUE, ..., "load": ...} to $results;
#                          values that are numbers or null are written bare, others quoted
#   vs_llama_ts            filter: llama-bench -o jsonl in, one "FORMAT PHASE TOKENS_PER_S" line
#                          out per result (FORMAT: the file name's last -part, PHASE prefill|decode)
#   vs_summary KEYS COLS   a table of $results: one row per distinct KEYS (space-separated), for
#                          each of COLS ("key" or "key:DIGITS") the min-max over the rounds
# Shellcheck cannot see that `name` and `round` come from the sourcing script, which also reads
# the variables vs_setup sets.
# shellcheck shell=bash disable=SC2034,SC2154

vs_help() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; }

vs_fail() {
  echo "$name: $*" >&2
  exit 1
}

vs_setup() {
  LLAMACPP_BUILD=${LLAMACPP_BUILD:-/work/llamacpp/build}
  TWOFOLD_BUILD=${TWOFOLD_BUILD:-$here/build}
  WORK=${WORK:-$1}
  llama_bench=$LLAMACPP_BUILD/bin/llama-bench
  twofold=$TWOFOLD_BUILD/tools/twofold
  [ -x "$llama_bench" ] || vs_fail "$llama_bench not found (set LLAMACPP_BUILD)"
  mkdir -p "$WORK"
  results=$WORK/results.jsonl
  : > "$results"
}

vs_load() { cut -d' ' -f1 /proc/loadavg; }

vs_machine() {
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(vs_load)"
}

vs_emit() {
  local line="{\"round\": $round" kv k v
  for kv in "$@"; do
    k=${kv%%=*} v=${kv#*=}
    if [[ $v =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ || $v == null ]]; then
      line+=", \"$k\": $v"
    else
      line+=", \"$k\": \"$v\""
    fi
  done
  printf '%s, "load": %s}\n' "$line" "$(vs_load)" >> "$results"
}

vs_llama_ts() {
  python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    fmt = r["model_filename"].rsplit("-", 1)[-1].replace(".gguf", "")
    print(fmt, "prefill" if r["n_prompt"] > 0 else "decode", r["avg_ts"])'
}

vs_summary() {
  python3 - "$results" "$1" "$2 load" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sys.argv[2].split()
cols = [(c.split(":")[0], int(c.split(":")[1]) if ":" in c else 1) for c in sys.argv[3].split()]
groups = collections.defaultdict(list)
for r in rows:
    groups[tuple(str(r[k]) for k in keys)].append(r)
def rng(rs, key, digits):
    v = sorted(r[key] for r in rs if r.get(key) is not None)
    return f"{v[0]:.{digits}f}-{v[-1]:.{digits}f}" if v else "-"
table = [keys + [key for key, _ in cols]]
for g, rs in sorted(groups.items()):
    table.append(list(g) + [rng(rs, key, digits) for key, digits in cols])
widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
print(f"\nmin-max over {max(r['round'] for r in rows)} rounds")
for row in table:
    print("  ".join(c.ljust(w) if i < len(keys) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
PY
  echo "every figure: $results"
}
