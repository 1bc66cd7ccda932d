#!/usr/bin/env bash
# The whole pipeline at the `tiny` preset on the CPU, about 3 minutes: corpus (1.5 MB a source),
# tokenizer (1,024 ids), config, training (fixed step counts, so the run repeats), export,
# PyTorch evaluation with the engine dump, and the engine comparison (build/ci/deepinfer).
# With --fixture, the export and the dump are copied to tests/data/v41/trained-tiny, the
# checkpoint tests/model/test_trained.cpp reads.
# Usage: tools/train/smoke.sh [--fixture]   (PY=python with tools/train/requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
S=build/train-smoke
$PY tools/train/corpus.py --out $S/corpus --max-mb 1.5
$PY tools/train/tokenizer.py --corpus $S/corpus --out $S/tok --vocab 1024
$PY tools/train/model_config.py --tok $S/tok --out $S/config.json --preset tiny
$PY tools/train/train.py --tok $S/tok --config $S/config.json --out $S/run --device cpu --seq 128 --batch 8 \
  --steps 150 --draft-steps 100 --warmup 20 --draft-warmup 20 --log-every 25 --eval-every 75 --val-windows 8
$PY tools/train/export.py --ckpt $S/run/model.pt --tok $S/tok --out $S/export
$PY tools/train/evaluate.py --model $S/export --tok $S/tok --out $S/eval --seq 128 --prompts 4 --prompt-len 16 \
  --gen 24 --draft-prompts 4 --dump-windows 4 --dump-len 96
[ -x build/ci/deepinfer ] || cmake --build build/ci -j2 --target deepinfer
$PY tools/train/compare_engine.py --model $S/export --dump $S/eval/dump
if [ "${1:-}" = --fixture ]; then
  F=tests/data/v41/trained-tiny
  rm -rf $F && mkdir -p $F/dump
  cp $S/export/{config.json,model.safetensors,tokenizer.json,tokenizer_config.json} $F/
  cp $S/eval/dump/*.npy $F/dump/
  cp $S/eval/summary.json $F/dump/
  echo "wrote $F"
fi
