#!/usr/bin/env bash
# The main job on the bundled default checkpoint: set up, build, and print the model's top
# next tokens for the bundled prompt (fed in chunks 13, 9, 1, 1, ...), writing all logits.
# Until the engine lands, the "default model" is the bundled fixture-sized V4.1 checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu --target deepinfer
MODEL=${MODEL:-tests/data/v41/ced}
mkdir -p build/out
./build/cpu/deepinfer info --model "$MODEL" | head -8
./build/cpu/deepinfer logits --model "$MODEL" --tokens "$MODEL/golden/tokens.npy" --chunks 13,9,1 \
  --out build/out/logits.npy "$@"
echo "logits written to build/out/logits.npy"
