#!/usr/bin/env python3
"""Write the demonstration model's config.json and report its size in the release formats.

Every part of the V4.1 architecture is present (preset `demo`, 8 layers):
  layers 0-1   window attention only (ratio 0)
  layers 2-4   CED encoder: ratio 2, KV source and index source 2
  layers 5-7   CED decoder: ratio 1, KV source and index source 5 (also the candidate source),
               index source 7 = a Reindex layer (scores layer 5's keys inside its candidate blocks)
  window attention on every layer; MoE with a shared expert on every layer; Engram at 1 and 4;
  mHC with 4 streams; three DSpark stages tapping layers 4, 6 and 7.
Token ids (vocabulary, BOS/EOS/pad, the DSpark noise token, the Engram compressed vocabulary)
come from the tokenizer's special_ids.json (tools/train/tokenizer.py). The Engram table sizes are
the sums of the consecutive primes the model derives (spec section 3.9).

The size printed is the bytes of model.safetensors in the release formats (FP8 dense weights,
MXFP4 routed experts, FP8 Engram rows, BF16 embedding, head and Markov head, F32 elsewhere),
measured by exporting a randomly initialised model with tools/train/release.py.

Usage: python3 tools/train/model_config.py --tok build/train/tok --out config.json [--preset demo|tiny]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

PRESETS = {
    # the bundled model
    "demo": dict(hidden_size=256, num_attention_heads=8, head_dim=64, qk_rope_head_dim=16, q_lora_rank=128,
                 o_groups=2, o_lora_rank=128, sliding_window=128, index_n_heads=4, index_head_dim=32,
                 index_topk=32, candidate_block_size=4, candidate_topk_blocks=16, n_routed_experts=8,
                 num_experts_per_tok=2, moe_intermediate_size=192, engram_n_heads=4, engram_head_dim=32,
                 engram_vocab_size=2000, dspark_n_routed_experts=4, dspark_num_experts_per_tok=2,
                 dspark_markov_rank=32, max_position_embeddings=4096, yarn_factor=4.0, yarn_original=1024),
    # the CPU smoke test: the same schedule, small widths
    "tiny": dict(hidden_size=64, num_attention_heads=2, head_dim=32, qk_rope_head_dim=8, q_lora_rank=32,
                 o_groups=2, o_lora_rank=16, sliding_window=32, index_n_heads=2, index_head_dim=32,
                 index_topk=8, candidate_block_size=2, candidate_topk_blocks=6, n_routed_experts=4,
                 num_experts_per_tok=2, moe_intermediate_size=64, engram_n_heads=2, engram_head_dim=32,
                 engram_vocab_size=300, dspark_n_routed_experts=2, dspark_num_experts_per_tok=2,
                 dspark_markov_rank=16, max_position_embeddings=1024, yarn_factor=4.0, yarn_original=256),
}


def is_prime(p: int) -> bool:
    return p > 1 and all(p % d for d in range(2, int(p**0.5) + 1))


def engram_sizes(n_layers: int, start: int, ngram: int, heads: int) -> list[int]:
    """Per Engram layer, the sum of its (ngram-1)*heads primes: each the next prime above
    start-1 that no earlier (layer, n, head) took (spec section 3.9)."""
    used, sizes = set(), []
    for _ in range(n_layers):
        total = 0
        for _ in range((ngram - 1) * heads):
            p = start - 1
            while True:
                p += 1
                if p not in used and is_prime(p):
                    break
            used.add(p)
            total += p
        sizes.append(total)
    return sizes


def make(preset: str, ids: dict) -> dict:
    p = PRESETS[preset]
    L = 8
    ratios = [0, 0, 2, 2, 2, 1, 1, 1]
    kv, idx = [2, 5], [2, 5, 7]
    engram_ids, ngram = [1, 4], 3
    rd, hd = p["qk_rope_head_dim"], p["head_dim"]
    yarn = {"beta_fast": 32, "beta_slow": 1, "factor": p["yarn_factor"],
            "original_max_position_embeddings": p["yarn_original"], "rope_type": "yarn"}
    cfg = {
        "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41_text",
        "attention_bias": False, "attention_dropout": 0.0, "dtype": "float32", "hidden_act": "silu",
        "vocab_size": ids["vocab_size"], "bos_token_id": ids["bos_token_id"], "eos_token_id": ids["eos_token_id"],
        "pad_token_id": ids["pad_token_id"], "dspark_noise_token_id": ids["dspark_noise_token_id"],
        "engram_compressed_vocab_size": ids["engram_compressed_vocab_size"], "engram_pad_id": ids["pad_token_id"],
        "num_hidden_layers": L, "compress_ratios": ratios, "kv_source_layer_ids": kv, "index_source_layer_ids": idx,
        "candidate_source_layer_id": 5,
        "layer_types": ["shared_compressed_attention" if i in kv else "sliding_attention" for i in range(L)],
        "num_key_value_heads": 1, "n_shared_experts": 1, "norm_topk_prob": True, "scoring_func": "sqrtsoftplus",
        "routed_scaling_factor": 1.5, "gate_temp": 1.0, "swiglu_limit": 10.0, "topk_method": "noaux_tc",
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-20,
        "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "rope_scaling": yarn,
        "rope_parameters": {
            "main": {"partial_rotary_factor": rd / hd, "rope_theta": 10000.0, "rope_type": "default"},
            "compress": dict({k: v for k, v in yarn.items()}, attention_factor=1.0, partial_rotary_factor=rd / hd,
                             rope_theta=160000.0)},
        "engram_layer_ids": engram_ids, "engram_max_ngram_size": ngram,
        "engram_num_embeddings": engram_sizes(len(engram_ids), p["engram_vocab_size"], ngram, p["engram_n_heads"]),
        "num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_target_layer_ids": [4, 6, 7],
        "tie_word_embeddings": False, "use_cache": True, "transformers_version": "5.17.0",
    }
    for k, v in p.items():
        if not k.startswith("yarn_"):
            cfg[k] = v
    return dict(sorted(cfg.items()))


def release_size(cfg: dict, emap: np.ndarray) -> tuple[int, dict]:
    import release
    import v41_torch as T
    m = T.V41(cfg, emap)
    m.init_weights(0)
    sd = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    stored = release.export(sd)
    by_fmt: dict[str, int] = {}
    for name, (dt, a) in stored.items():
        by_fmt[dt] = by_fmt.get(dt, 0) + a.nbytes
    params = {"total": sum(v.size for v in sd.values()),
              "backbone": sum(v.size for k, v in sd.items() if not k.startswith("mtp.")),
              "routed experts": sum(v.size for k, v in sd.items() if ".ffn.experts." in k)}
    return sum(by_fmt.values()), {"bytes by stored dtype": by_fmt, "parameters": params}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tok", default="build/train/tok")
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    ap.add_argument("--max-mb", type=float, default=25.0, help="fail when the release size is above this")
    a = ap.parse_args()
    ids = json.load(open(os.path.join(a.tok, "special_ids.json")))
    cfg = make(a.preset, ids)
    size, info = release_size(cfg, np.load(os.path.join(a.tok, "engram_map.npy")))
    print(json.dumps(info, indent=1))
    print(f"release size: {size / 1e6:.2f} MB ({size} bytes of tensor data)")
    if size > a.max_mb * 1e6:
        raise SystemExit(f"the {a.preset} config is {size / 1e6:.2f} MB in the release formats, over --max-mb {a.max_mb}")
    with open(a.out, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
