#!/usr/bin/env bash
# The demonstration model's training run on the GPU machine: one call of about 8.5 minutes.
# Trains the backbone (MINUTES, default 5) and then the DSpark stages (DRAFT_MINUTES, default
# 1.5) with tools/train/train.py, exports the release checkpoint with tools/train/export.py and
# evaluates it on the GPU with tools/train/evaluate.py. What comes back under $OUT:
#   model/          the checkpoint directory (model.safetensors in the release formats, config.json,
#                   tokenizer.json, tokenizer_config.json, MODEL_CARD.md), about 25 MB
#   train.log, train_log.json, eval/summary.json, eval/greedy.json, eval.log, device.txt
# The float32 model.pt (about 95 MB) stays on the machine. Inputs, made on the CPU machine and
# carried (git-ignored): build/train/tok (tokenizer.py's output) and build/train/config.json
# (model_config.py's output); tools/train/README.md gives the whole sequence.
# Usage (device tool, carry ["build/train/tok", "build/train/config.json"]):
#   bash tools/train/device_train.sh [extra train.py flags, e.g. --steps N --draft-steps M]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/train/device-out}
TOK=${TOK:-build/train/tok}
CONFIG=${CONFIG:-build/train/config.json}
RUN=${RUN:-/tmp/v41-demo-run}
mkdir -p "$OUT" "$RUN"
for f in "$TOK/train_ids.npy" "$TOK/val_ids.npy" "$TOK/engram_map.npy" "$TOK/tokenizer.json" "$CONFIG"; do
  [ -f "$f" ] || { echo "missing $f: build it on the CPU machine and carry it (tools/train/README.md)" >&2; exit 2; }
done
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  python3 -c "import torch, numpy, tokenizers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__, 'tokenizers', tokenizers.__version__)" || true
  date -u
} > "$OUT/device.txt" 2>&1
t0=$(date +%s)
python3 tools/train/train.py --tok "$TOK" --config "$CONFIG" --out "$RUN" --device cuda \
  --minutes "${MINUTES:-5}" --draft-minutes "${DRAFT_MINUTES:-1.5}" "$@" 2>&1 | tee "$OUT/train.log"
cp "$RUN/train_log.json" "$OUT/"
python3 tools/train/export.py --ckpt "$RUN/model.pt" --tok "$TOK" --out "$OUT/model" 2>&1 | tee -a "$OUT/train.log"
python3 tools/train/evaluate.py --model "$OUT/model" --tok "$TOK" --out "$OUT/eval" --device cuda --skip-dump \
  2>&1 | tee "$OUT/eval.log"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$OUT/device.txt"
