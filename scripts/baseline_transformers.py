#!/usr/bin/env python3
"""Baseline: speed of the Hugging Face transformers reference implementation of
DeepSeek-V4.1 (`transformers.models.deepseek_v41`) on a DeepInfer benchmark shape.

This is what a user would get without DeepInfer: the reference model built from the
bench config with random weights, bf16, on one GPU, run eagerly (the reference is
eager-only: no SDPA / flash / flex attention, per-expert Python dispatch loop).

The reference files are not part of any released transformers wheel and are third-party
code, so they are never part of this repository.  Supply them one of two ways:
  * install a transformers build that contains `transformers/models/deepseek_v41`, or
  * pass `--v41-dir DIR` (a folder holding `configuration_deepseek_v41.py` and
    `modeling_deepseek_v41.py`); the folder is then registered at runtime as the
    package `transformers.models.deepseek_v41` so its relative imports resolve against
    the installed transformers (>= 5.24 internals are needed).

Measurements (torch.cuda.synchronize wall-clock timing):
  (a) prefill of 1 prompt x N tokens (use_cache=True): time, tokens/s
  (b) decode step time at batch 1 after that prompt (median of a few steps, using
      the returned cache)
  (c) decode at batch B after short prompts (skipped when (a)+(b) took too long)
Each measurement catches its own errors / OOM and prints them.

Usage (device):
  python3 scripts/baseline_transformers.py --config bench/configs/v41-flash-l16-e64/config.json
Usage (CPU smoke test of the plumbing, tiny shape):
  python3 scripts/baseline_transformers.py --tiny --device cpu
"""

import argparse
import importlib
import importlib.machinery
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback


def log(msg=""):
    print(msg, flush=True)


def import_v41(v41_dir):
    """Return (config module, modeling module) of the reference DeepSeek-V4.1 code."""
    import transformers  # noqa: F401
    import transformers.models as tm

    name = "transformers.models.deepseek_v41"
    if v41_dir:
        v41_dir = os.path.abspath(v41_dir)
        if name not in sys.modules:
            # Register the folder as the package itself (no __init__ executed: the
            # reference __init__ only sets up lazy imports), so `from ...utils` etc.
            # resolve against the installed transformers.
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [v41_dir]
            pkg = importlib.util.module_from_spec(spec)
            pkg.__path__ = [v41_dir]
            sys.modules[name] = pkg
            setattr(tm, "deepseek_v41", pkg)
    cfg_mod = importlib.import_module(name + ".configuration_deepseek_v41")
    mdl_mod = importlib.import_module(name + ".modeling_deepseek_v41")
    return cfg_mod, mdl_mod


# DeepInfer bench configs already use the reference's field names; only the YaRN
# dict's `type` key is spelled the legacy way (the reference config reads `rope_type`
# and would otherwise silently fall back to plain RoPE on the compressed branch).
PASS_THROUGH_KEYS = [
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "q_lora_rank", "qk_rope_head_dim", "o_groups", "o_lora_rank", "sliding_window",
    "index_n_heads", "index_head_dim", "index_topk", "candidate_topk_blocks", "candidate_block_size",
    "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
    "scoring_func", "routed_scaling_factor", "swiglu_limit", "hc_mult", "hc_sinkhorn_iters", "hc_eps",
    "rms_norm_eps", "rope_theta", "compress_rope_theta", "max_position_embeddings",
    "num_nextn_predict_layers", "eos_token_id", "bos_token_id", "compress_ratios",
    "kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id",
]


def load_shape(path):
    with open(path) as f:
        raw = json.load(f)
    kw = {k: raw[k] for k in PASS_THROUGH_KEYS if k in raw}
    rs = dict(raw.get("rope_scaling") or {})
    if rs:
        if "rope_type" not in rs and "type" in rs:
            rs["rope_type"] = rs.pop("type")
        kw["rope_scaling"] = rs
    if raw.get("n_shared_experts", 1) != 1:
        log(f"WARNING: reference builds exactly 1 shared expert; config says {raw['n_shared_experts']}")
    kw["engram_layer_ids"] = []  # the DeepInfer bench shape has no engram tables
    return kw


def tiny_shape():
    return dict(
        vocab_size=1000, hidden_size=64, num_hidden_layers=16, num_attention_heads=4,
        num_key_value_heads=1, head_dim=64, q_lora_rank=32, qk_rope_head_dim=16, o_groups=2,
        o_lora_rank=16, sliding_window=8, index_n_heads=2, index_head_dim=32, index_topk=8,
        candidate_topk_blocks=4, candidate_block_size=8, moe_intermediate_size=32,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        compress_ratios=[0, 0] + [2] * 6 + [1] * 8, kv_source_layer_ids=[2, 8],
        index_source_layer_ids=[2, 8, 12], candidate_source_layer_id=8,
        num_nextn_predict_layers=0, engram_layer_ids=[],
        rope_scaling={"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                      "original_max_position_embeddings": 65536},
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="bench/configs/v41-flash-l16-e64/config.json")
    ap.add_argument("--tiny", action="store_true", help="tiny shape (plumbing smoke test)")
    ap.add_argument("--v41-dir", default=None, help="folder with the reference deepseek_v41 files")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prefill-len", type=int, default=4096)
    ap.add_argument("--warmup-len", type=int, default=512)
    ap.add_argument("--prefill-reps", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batch-prompt-len", type=int, default=128)
    ap.add_argument("--ab-budget-s", type=float, default=120.0,
                    help="skip (c) if (a)+(b) took longer than this")
    ap.add_argument("--phase-budget-s", type=float, default=90.0,
                    help="stop repeating a measurement once it used this long")
    args = ap.parse_args()

    import torch

    if args.tiny:
        args.prefill_len = min(args.prefill_len, 64)
        args.warmup_len = min(args.warmup_len, 24)
        args.batch = min(args.batch, 4)
        args.batch_prompt_len = min(args.batch_prompt_len, 16)

    dev = torch.device(args.device)
    is_cuda = dev.type == "cuda"

    def sync():
        if is_cuda:
            torch.cuda.synchronize()

    def mem(tag):
        if is_cuda:
            log(f"  [{tag}] mem allocated {torch.cuda.memory_allocated() / 2**30:.1f} GiB, "
                f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")

    import transformers

    cfg_mod, mdl_mod = import_v41(args.v41_dir)
    log(f"torch {torch.__version__}, transformers {transformers.__version__} "
        f"({os.path.dirname(transformers.__file__)}), v41 from {os.path.dirname(mdl_mod.__file__)}")
    if is_cuda:
        log(f"device: {torch.cuda.get_device_name(0)}, "
            f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")

    kw = tiny_shape() if args.tiny else load_shape(args.config)
    config = cfg_mod.DeepseekV41TextConfig(**kw)
    config._attn_implementation = "eager"
    log(f"config: layers={config.num_hidden_layers} hidden={config.hidden_size} heads={config.num_attention_heads}"
        f"x{config.head_dim} experts={config.n_routed_experts}(+{config.n_shared_experts}) top{config.num_experts_per_tok}"
        f" ratios={config.compress_ratios} kv_src={config.kv_source_layer_ids}"
        f" idx_src={config.index_source_layer_ids} cand={config.candidate_source_layer_id}"
        f" layer_types={config.layer_types}")
    log(f"rope_parameters: {config.rope_parameters}")

    # ---- build: random weights, bf16, directly on the device ------------------------
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(dev):
        model = mdl_mod.DeepseekV41ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.eval()
    sync()
    n_params = sum(p.numel() for p in model.parameters())
    dtypes = {}
    for p in model.parameters():
        dtypes[str(p.dtype)] = dtypes.get(str(p.dtype), 0) + p.numel()
    log(f"built model in {time.perf_counter() - t0:.1f} s: {n_params / 1e9:.2f} B params {dtypes}, "
        f"attn_impl={model.config._attn_implementation}")
    mem("after build")
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        log(f"WARNING: non-finite params after init: {bad[:5]} ... ({len(bad)})")

    vocab = config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1234)

    def rand_ids(b, s):
        return torch.randint(0, vocab, (b, s), generator=gen).to(dev)

    results = {}

    from transformers.cache_utils import Cache, DynamicSlidingWindowLayer

    def new_cache():
        # `DynamicCache(config=...)` (what the reference's forward builds when no cache
        # is passed) cannot construct the V4.1 cache layers on released transformers:
        # `get_layer_types_and_kwargs` does not hand `config` to the new
        # "shared_compressed_attention" layer class (the reference branch patches
        # cache_utils for that). Assemble the same layer list by hand, as the
        # reference's own tests do.
        return Cache(layers=[
            mdl_mod.DeepseekV41CSACache(config) if t == "shared_compressed_attention"
            else DynamicSlidingWindowLayer(sliding_window=config.sliding_window)
            for t in config.layer_types
        ])

    def run_prefill(ids):
        cache = new_cache()
        sync()
        t = time.perf_counter()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        sync()
        return time.perf_counter() - t, out

    def run_decode(out, steps, budget_s, tag):
        cache = out.past_key_values
        nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
        times = []
        t_start = time.perf_counter()
        for i in range(steps + 1):  # first step is a warm-up
            sync()
            t = time.perf_counter()
            o = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            sync()
            dt = time.perf_counter() - t
            cache = o.past_key_values
            nxt = o.logits[:, -1, :].argmax(-1, keepdim=True)
            del o
            if i > 0:
                times.append(dt)
            log(f"  {tag} step {i}{' (warm-up)' if i == 0 else ''}: {dt * 1e3:.1f} ms")
            if time.perf_counter() - t_start > budget_s and len(times) >= 1:
                log(f"  {tag}: phase budget reached after {len(times)} timed steps")
                break
        return times, cache

    phase_t0 = time.perf_counter()
    with torch.inference_mode():
        # ---- warm-up: short prompt, exercises every path (compressors, indexers,
        # candidate blocks, MoE dispatch) and the decode path ---------------------------
        try:
            t, out = run_prefill(rand_ids(1, args.warmup_len))
            log(f"warm-up prefill 1 x {args.warmup_len}: {t:.3f} s")
            o = model(input_ids=out.logits[:, -1:, :].argmax(-1), past_key_values=out.past_key_values,
                      use_cache=True)
            sync()
            del out, o
        except Exception as e:  # noqa: BLE001
            log(f"warm-up FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
        if is_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

        # ---- (a) prefill 1 x N ---------------------------------------------------------
        out = None
        try:
            ids = rand_ids(1, args.prefill_len)
            times = []
            for r in range(args.prefill_reps):
                if out is not None:
                    del out
                    out = None
                    if is_cuda:
                        torch.cuda.empty_cache()
                t, out = run_prefill(ids)
                times.append(t)
                log(f"(a) prefill 1 x {args.prefill_len} rep {r}: {t:.3f} s = {args.prefill_len / t:.0f} tok/s")
                if time.perf_counter() - phase_t0 > args.phase_budget_s:
                    break
            best = min(times)
            results["prefill_s"] = best
            log(f"RESULT prefill_1x{args.prefill_len}_s {best:.3f} (min of {len(times)}; all "
                f"{', '.join(f'{x:.3f}' for x in times)}) tok_per_s {args.prefill_len / best:.0f}")
            mem("after prefill")
        except Exception as e:  # noqa: BLE001
            log(f"(a) prefill FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
            out = None

        # ---- (b) decode batch 1 at context N ------------------------------------------
        if out is not None:
            try:
                if is_cuda:
                    torch.cuda.reset_peak_memory_stats()
                times, cache = run_decode(out, args.decode_steps, args.phase_budget_s, "(b) decode b=1")
                med = statistics.median(times)
                results["decode_b1_ms"] = med * 1e3
                log(f"RESULT decode_b1_ctx{args.prefill_len}_ms median {med * 1e3:.1f} (steps "
                    f"{', '.join(f'{x * 1e3:.1f}' for x in times)}) tok_per_s {1 / med:.1f}")
                mem("after decode b=1")
                del cache
            except Exception as e:  # noqa: BLE001
                log(f"(b) decode FAILED: {type(e).__name__}: {e}")
                traceback.print_exc()
        out = None
        if is_cuda:
            torch.cuda.empty_cache()
        ab = time.perf_counter() - phase_t0
        log(f"(a)+(b) took {ab:.1f} s")

        # ---- (c) decode batch B after short prompts ------------------------------------
        if ab > args.ab_budget_s:
            log(f"(c) SKIPPED: (a)+(b) took {ab:.1f} s > {args.ab_budget_s:.0f} s")
        else:
            try:
                if is_cuda:
                    torch.cuda.reset_peak_memory_stats()
                t, outc = run_prefill(rand_ids(args.batch, args.batch_prompt_len))
                log(f"(c) prefill {args.batch} x {args.batch_prompt_len}: {t:.3f} s = "
                    f"{args.batch * args.batch_prompt_len / t:.0f} tok/s")
                times, cache = run_decode(outc, args.decode_steps, args.phase_budget_s,
                                          f"(c) decode b={args.batch}")
                del outc
                med = statistics.median(times)
                results[f"decode_b{args.batch}_ms"] = med * 1e3
                log(f"RESULT decode_b{args.batch}_ctx{args.batch_prompt_len}_ms median {med * 1e3:.1f} (steps "
                    f"{', '.join(f'{x * 1e3:.1f}' for x in times)}) tok_per_s {args.batch / med:.0f}")
                mem(f"after decode b={args.batch}")
                del cache
            except Exception as e:  # noqa: BLE001
                log(f"(c) FAILED: {type(e).__name__}: {e}")
                traceback.print_exc()

    log(f"SUMMARY {json.dumps(results)}")


if __name__ == "__main__":
    main()
