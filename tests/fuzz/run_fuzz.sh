#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer + ASan + UBSan) and runs each for a bounded
# time (or RUNS=N executions). Usage: [RUNS=N] tests/fuzz/run_fuzz.sh [SECONDS_PER_TARGET=60] [TARGETS...]
# Targets: the grammar front ends (ebnf json_schema regex), run-batch's --resume reader (resume),
# the file readers (config safetensors npy tokenizer) and the inputs users send
# (tokenizer_encode batch_line chat_encoding); the default is all of them.
# Needs clang (apt-get install clang). Crashes are written to build/fuzz/crashes/<target>/
# and make the script exit non-zero. FUZZ_RUNS=N stops each target after N executions.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
shift || true
TARGETS=${*:-"ebnf json_schema regex resume config safetensors npy tokenizer tokenizer_encode batch_line chat_encoding"}
OUT=build/fuzz
mkdir -p "$OUT/obj"
CXX=${CXX_FUZZ:-clang++}
FLAGS="-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Isrc -Iinclude -Itests -DDEEPINFER_TEST_DATA=\"$PWD/tests/data\""
SRCS="src/api/batch_output.cpp src/api/batch_file.cpp $(ls src/types/*.cpp) $(ls src/grammar/*.cpp) $(ls src/tokenizer/*.cpp) src/core/dtype.cpp src/core/npy.cpp src/core/thread_pool.cpp src/core/rng.cpp src/core/numpy_rng.cpp src/loader/config.cpp src/loader/safetensors.cpp"
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
seeds = {"json_schema": [], "regex": [], "ebnf": [], "resume": [], "tokenizer_encode": [], "batch_line": [], "chat_encoding": []}
for f in ["schemas_hand.jsonl", "schemas_generated.jsonl", "schemas_invalid.jsonl"]:
    for line in open(os.path.join("tests/data/grammar", f)):
        seeds["json_schema"].append(json.dumps(json.loads(line)["schema"]))
for line in open("tests/data/grammar/regexes.jsonl"):
    seeds["regex"].append(json.loads(line)["pattern"])
seeds["ebnf"] = ['root ::= "a" b*\nb ::= [0-9] | "(" root ")"', 'root ::= x{2,5} "\\u00e9" .\nx ::= [^"\\\\]',
                 'root ::= obj\nobj ::= "{" (str ":" val ("," str ":" val)*)? "}"\nstr ::= "\\"" [a-z]* "\\""\nval ::= str | obj | [0-9]+']
seeds["resume"] = ['{"custom_id":"r0","response":{"text":"Hi","token_ids":[1,2],"finish_reason":"length","usage":{"prompt_tokens":3,'
                   '"completion_tokens":2,"total_tokens":5},"choices":[{"index":0,"text":"Hi","token_ids":[1,2],"finish_reason":"length"}]}}\n'
                   '{"custom_id":"line 2","error":{"message":"malformed JSON on line 2"}}\n{"custom_id":"r2","resp',
                   '{"custom_id":"a","error":{"message":"m"}}\r\n\n', '']
# File readers: the fixture configs, small safetensors and .npy files, small tokenizer.json texts.
import struct, glob
seeds["config"] = [open(p).read() for p in sorted(glob.glob("tests/data/v41/*/config.json"))]
def st(tensors):
    h, off, data = {"__metadata__": {"format": "pt"}}, 0, b""
    for name, dtype, shape, n in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        data += bytes((i * 13 + 5) % 256 for i in range(n))
        off += n
    hb = json.dumps(h).encode()
    return struct.pack("<Q", len(hb)) + hb + data
seeds["safetensors"] = [st([("a", "F32", [2, 3], 24), ("b", "BF16", [4], 8), ("c", "U8", [0, 5], 0)]),
                        st([("w.weight", "F8_E4M3", [4, 8], 32), ("w.scale", "F8_E8M0", [1, 1], 1)]),
                        st([("x", "I64", [], 8)])]
seeds["npy"] = [open(p, "rb").read() for p in ["tests/data/v41/ced/golden/greedy_prompt.npy",
                                                "tests/data/tokenizer/fixture/doc_index.npy"]]
seeds["tokenizer"] = [json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<s>": 4, "c": 5},
                                            "merges": ["a b"], "unk_token": "c"},
                                  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
                                  "decoder": {"type": "ByteLevel"},
                                  "added_tokens": [{"id": 4, "content": "<s>", "special": True},
                                                   {"id": 6, "content": "<|x|>", "lstrip": True, "rstrip": True}],
                                  "post_processor": {"type": "TemplateProcessing",
                                                     "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                                                     "special_tokens": {"<s>": {"id": "<s>", "ids": [4]}}}})]
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
# Input targets: text from the tokenizer corpora, run-batch lines, arbitrary bytes for chats.
for root, _, files in os.walk("tests/data/tokenizer"):
    for f in sorted(files)[:20]:
        data = open(os.path.join(root, f), "rb").read()
        seeds["tokenizer_encode"] += [data[i:i + 512] for i in range(0, min(len(data), 8192), 512)]
for line in open("examples/prompts.jsonl", "rb"):
    seeds["batch_line"].append(line.rstrip(b"\n"))
seeds["batch_line"] += [b'{"custom_id":"a","body":{"prompt":[1,2],"n":2,"logprobs":true,"top_logprobs":3,"stop":["x"],"seed":5}}',
                        b'{"custom_id":"b","body":{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}}}']
seeds["chat_encoding"] = [bytes(range(i, i + 64)) for i in range(0, 192, 16)]
for k, items in seeds.items():
    d = os.path.join(out, "seeds", k)
    os.makedirs(d, exist_ok=True)
    for i, s in enumerate(items):
        open(os.path.join(d, f"seed_{i:04d}"), "wb").write(s if isinstance(s, bytes) else s.encode())
PY
status=0
for t in $TARGETS; do
  $CXX $FLAGS -fsanitize=fuzzer tests/fuzz/fuzz_$t.cpp $OBJS $(pkg-config --libs libpcre2-8 libutf8proc) -o "$OUT/fuzz_$t"
  mkdir -p "$OUT/corpus/$t" "$OUT/crashes/$t"
  RUNS=${RUNS:-${FUZZ_RUNS:-}}
  LIMIT="-max_total_time=$SECS"
  if [ -n "$RUNS" ]; then LIMIT="-runs=$RUNS"; fi
  DICT=""
  if [ -f "tests/fuzz/$t.dict" ]; then DICT="-dict=tests/fuzz/$t.dict"; fi
  echo "== fuzz_$t ($LIMIT)"
  if ! "$OUT/fuzz_$t" $LIMIT -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 $DICT \
       -artifact_prefix="$OUT/crashes/$t/" "$OUT/corpus/$t" "$OUT/seeds/$t" 2>&1 | tail -n 12; then
    status=1
  fi
  if [ -n "$(ls -A "$OUT/crashes/$t")" ]; then
    echo "fuzz_$t: CRASH inputs in $OUT/crashes/$t"
    status=1
  fi
done
exit $status
