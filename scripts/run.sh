#!/usr/bin/env bash
# The main job on the bundled default model: set up, build, and run a batch of requests
# (examples/prompts.jsonl) through the offline engine, writing one JSON line per request.
# The default model is a fixture-sized DeepSeek-V4.1 checkpoint with random weights
# (tests/data/v41/full: Engram, both compress ratios, indexers, a tokenizer), so the text it
# produces is noise; point MODEL at a real checkpoint directory for real text.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu --target deepinfer
MODEL=${MODEL:-tests/data/v41/full}
INPUT=${INPUT:-examples/prompts.jsonl}
mkdir -p build/out
./build/cpu/deepinfer run-batch --model "$MODEL" --input "$INPUT" --output build/out/results.jsonl \
  --metrics build/out/metrics.json "$@"
echo "results in build/out/results.jsonl:"
cat build/out/results.jsonl
