#!/usr/bin/env python3
"""Export a trained model.pt (tools/train/train.py) as a release checkpoint directory.

Writes in --out:
  model.safetensors        release tensor names and formats (tools/train/release.py: FP8 e4m3 with
                           ue8m0 32x32 block scales for the attention projections, indexer wq_b,
                           shared experts, Engram wkv and the stages' main_proj; MXFP4 routed
                           experts; FP8 Engram rows with one scale per 32 channels; BF16
                           embedding, head and Markov head; F32 elsewhere), the same bytes
                           `deepinfer quantize` writes for the same float weights
  config.json              composite: text_config + quantization_config (as `deepinfer quantize`)
  tokenizer.json, tokenizer_config.json   copied from --tok
  MODEL_CARD.md            what the model is, its corpus and training, from train_log.json
With --float-out DIR, also the float32 checkpoint (flat config, release names), which
`deepinfer quantize --model DIR --out X` turns into the same bytes as model.safetensors.

Usage: python3 tools/train/export.py --ckpt OUT/model.pt --tok build/train/tok --out DIR
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import release  # noqa: E402

QUANT = {"quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": [32, 32], "activation_scheme": "dynamic",
         "expert_dtype": "fp4"}


def float_tensors(ckpt: str) -> tuple[dict, dict, dict]:
    ck = torch.load(ckpt, map_location="cpu")
    sd = {k: v.float().numpy() for k, v in ck["state_dict"].items()}
    return sd, ck["config"], ck.get("meta", {})


def write_dir(out: str, tensors: dict, cfg: dict, tok: str) -> int:
    os.makedirs(out, exist_ok=True)
    size = release.write_raw(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tok, name), os.path.join(out, name))
    return size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tok", default="build/train/tok")
    ap.add_argument("--out", required=True)
    ap.add_argument("--float-out")
    ap.add_argument("--log", help="train_log.json (default: beside --ckpt)")
    a = ap.parse_args()
    sd, text, meta = float_tensors(a.ckpt)
    composite = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
                 "tie_word_embeddings": False, "text_config": text, "quantization_config": QUANT}
    size = write_dir(a.out, release.export(sd), composite, a.tok)
    if a.float_out:
        write_dir(a.float_out, {k: ("F32", np.ascontiguousarray(v)) for k, v in sd.items()}, text, a.tok)
    logp = a.log or os.path.join(os.path.dirname(a.ckpt), "train_log.json")
    lg = json.load(open(logp)) if os.path.exists(logp) else {}
    n = sum(v.size for v in sd.values())
    nb = sum(v.size for k, v in sd.items() if not k.startswith("mtp."))
    total = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    with open(os.path.join(a.out, "MODEL_CARD.md"), "w") as f:
        f.write(
            "# DeepInfer demonstration model (DeepSeek-V4.1 architecture, trained from scratch)\n\n"
            "A small model of the DeepSeek-V4.1 architecture trained by `tools/train/` on Python's standard\n"
            "library sources, the Python 3.11 documentation and NumPy's and SymPy's Python sources (see\n"
            "`tools/train/CORPUS.md` for packages, versions and licences). It is a demonstration of the\n"
            "engine, not DeepSeek's weights: it continues Python code and documentation-like prose, and it\n"
            "knows nothing else.\n\n"
            f"- parameters: {n / 1e6:.2f}M ({nb / 1e6:.2f}M backbone, {(n - nb) / 1e6:.2f}M in the three DSpark stages)\n"
            f"- files: {total / 1e6:.2f} MB (model.safetensors {size / 1e6:.2f} MB in the release formats)\n"
            f"- training: {meta.get('backbone_steps')} backbone steps, {meta.get('draft_steps')} DSpark steps; "
            f"torch {lg.get('torch', '?')}\n")
        if lg.get("backbone_val"):
            v = lg["backbone_val"][-1][1]
            f.write(f"- held-out loss at the end of training (float weights, training windows): {v:.4f} nats/token\n")
    print(f"wrote {a.out}: model.safetensors {size / 1e6:.2f} MB, directory {total / 1e6:.2f} MB, {n / 1e6:.2f}M parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
