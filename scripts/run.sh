#!/usr/bin/env bash
# The main job on the bundled default model: set up, build, and run a batch of requests
# (examples/prompts.jsonl) through the offline engine, writing one JSON line per request.
# The default model is models/v41-demo: a 23M-parameter model of the DeepSeek-V4.1 architecture
# with its DSpark draft stages, trained here by tools/train on Python code and documentation (a
# demonstration model, not DeepSeek's weights). MODEL=DIR runs another checkpoint, INPUT=FILE
# another batch file; further arguments go to run-batch (e.g. --speculative dspark).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu --target deepinfer
MODEL=${MODEL:-models/v41-demo}
INPUT=${INPUT:-examples/prompts.jsonl}
mkdir -p build/out
./build/cpu/deepinfer run-batch --model "$MODEL" --input "$INPUT" --output build/out/results.jsonl \
  --metrics build/out/metrics.json "$@"
echo "results in build/out/results.jsonl:"
cat build/out/results.jsonl
