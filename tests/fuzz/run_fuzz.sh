#!/usr/bin/env bash
# Builds the grammar fuzz targets with clang (libFuzzer + ASan + UBSan) and runs each for a
# bounded time. Usage: tests/fuzz/run_fuzz.sh [SECONDS_PER_TARGET=60] [TARGETS...]
# RUNS=N runs each target for N executions instead (e.g. RUNS=1000000), without a time limit.
# Needs clang (apt-get install clang). Crashes are written to build/fuzz/crashes/<target>/
# and make the script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
shift || true
TARGETS=${*:-"ebnf json_schema regex"}
OUT=build/fuzz
mkdir -p "$OUT/obj"
CXX=${CXX_FUZZ:-clang++}
FLAGS="-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Isrc -Iinclude"
SRCS="$(ls src/grammar/*.cpp) $(ls src/tokenizer/*.cpp) src/core/dtype.cpp src/core/npy.cpp src/core/thread_pool.cpp src/core/rng.cpp src/core/numpy_rng.cpp"
OBJS=""
for s in $SRCS; do
  o="$OUT/obj/$(echo "$s" | tr '/' '_').o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ]; then
    $CXX $FLAGS $(pkg-config --cflags libpcre2-8 libutf8proc) -c "$s" -o "$o"
  fi
  OBJS="$OBJS $o"
done
# Seeds: the corpora under tests/data/grammar, one input per file.
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
seeds = {"json_schema": [], "regex": [], "ebnf": []}
for f in ["schemas_hand.jsonl", "schemas_generated.jsonl", "schemas_invalid.jsonl"]:
    for line in open(os.path.join("tests/data/grammar", f)):
        seeds["json_schema"].append(json.dumps(json.loads(line)["schema"]))
for line in open("tests/data/grammar/regexes.jsonl"):
    seeds["regex"].append(json.loads(line)["pattern"])
seeds["ebnf"] = ['root ::= "a" b*\nb ::= [0-9] | "(" root ")"', 'root ::= x{2,5} "\\u00e9" .\nx ::= [^"\\\\]',
                 'root ::= obj\nobj ::= "{" (str ":" val ("," str ":" val)*)? "}"\nstr ::= "\\"" [a-z]* "\\""\nval ::= str | obj | [0-9]+']
# Deep and wide inputs (within the targets' 4096 bytes): nested schemas, deep values, many
# properties, chains of rules, nested groups and repetitions.
nest = "".join('{"type":"object","properties":{"a":' for _ in range(60)) + '{"type":"integer","minimum":1e300}' + "}}" * 60
seeds["json_schema"] += [
    nest,
    '{"const":' + "[" * 1500 + "]" * 1500 + "}",
    '{"type":"array","items":' * 250 + '{"type":"null"}' + "}" * 250,
    json.dumps({"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(200)},
                "required": [f"p{i}" for i in range(0, 200, 2)]}),
    json.dumps({"properties": {"k" * 1500: {"type": "null"}}, "additionalProperties": {"type": "integer"}}),
    json.dumps({"oneOf": [{"type": "object", "properties": {"k": {"const": i}}, "required": ["k"]} for i in range(50)]}),
    '{"type":"integer","minimum":9007199254740993,"maximum":18446744073709551617}',
    '{"allOf":[{"maximum":9007199254740993},{"maximum":9007199254740992.0}],"type":"integer"}',
]
seeds["regex"] += ["(" * 200 + "a" + ")" * 200, "(a|" * 150 + "b" + ")" * 150, "a{1,3}" * 300]
seeds["ebnf"] += ["".join(f'r{i} ::= "x" r{i + 1}\n' for i in range(250)) + 'r250 ::= "y"\nroot ::= r0\n',
                  'root ::= "a"' + "?" * 3000, "root ::= " + "(" * 250 + '"a"' + ")" * 250,
                  "".join(f"a{i} ::= a{i + 1} | [0-9]\n" for i in range(300)) + 'a300 ::= "e"\nroot ::= a0\n']
for k, items in seeds.items():
    d = os.path.join(out, "seeds", k)
    os.makedirs(d, exist_ok=True)
    for i, s in enumerate(items):
        open(os.path.join(d, f"seed_{i:04d}"), "w").write(s)
PY
status=0
for t in $TARGETS; do
  $CXX $FLAGS -fsanitize=fuzzer tests/fuzz/fuzz_$t.cpp $OBJS $(pkg-config --libs libpcre2-8 libutf8proc) -o "$OUT/fuzz_$t"
  mkdir -p "$OUT/corpus/$t" "$OUT/crashes/$t"
  if [ -n "${RUNS:-}" ]; then LIMIT="-runs=$RUNS"; echo "== fuzz_$t for $RUNS runs"; else LIMIT="-max_total_time=$SECS"; echo "== fuzz_$t for ${SECS}s"; fi
  if ! "$OUT/fuzz_$t" $LIMIT -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
       -dict=tests/fuzz/$t.dict \
       -artifact_prefix="$OUT/crashes/$t/" "$OUT/corpus/$t" "$OUT/seeds/$t" 2>&1 | tail -n 12; then
    status=1
  fi
  if [ -n "$(ls -A "$OUT/crashes/$t")" ]; then
    echo "fuzz_$t: CRASH inputs in $OUT/crashes/$t"
    status=1
  fi
done
exit $status
