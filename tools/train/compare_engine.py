#!/usr/bin/env python3
"""Compare the C++ engine on an exported checkpoint with the PyTorch evaluation's dump.

Reads --dump (tools/train/evaluate.py's dump folder) and runs the engine binary on --model:
  * `deepinfer logits` on every held-out window of nll_tokens.npy (float32, CPU): the NLL of
    each next token from the engine's logits against PyTorch's in two summation orders (nll.npy:
    the windows batched; nll_alone.npy: each alone); bar: per window, max |diff| <= --tol (1e-3)
    against the nearer order (a rounding boundary between the orders, a quantiser step or an
    indexer near-tie, can move PyTorch's own NLL by more than the bar; a wrong engine is far
    from both). Printed beside it: the difference against the batched order and PyTorch's spread
  * `deepinfer run-batch` with the greedy prompts (temperature 0, ignore_eos): the generated
    ids against greedy_tokens.npy; they must be identical (a step whose PyTorch top-2 margin is
    below 1e-4 of its logit scale is reported as a near tie if it is where they part)
Exits 1 when a bar is missed.

Usage: python3 tools/train/compare_engine.py --model DIR --dump EVAL/dump [--bin build/ci/deepinfer]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--bin", default="build/ci/deepinfer")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    toks = np.load(os.path.join(a.dump, "nll_tokens.npy"))
    ref = np.load(os.path.join(a.dump, "nll.npy"))
    alone_p = os.path.join(a.dump, "nll_alone.npy")
    alone = np.load(alone_p) if os.path.exists(alone_p) else ref
    spread = float(np.abs(alone - ref).max())
    fails = 0
    worst = worst_batched = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for k, t in enumerate(toks):
            tp, lp = os.path.join(tmp, "t.npy"), os.path.join(tmp, "l.npy")
            np.save(tp, t.astype(np.int64))
            cmd = [a.bin, "logits", "--model", a.model, "--tokens", tp, "--out", lp, "--top", "0"]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
            subprocess.run(cmd, check=True, capture_output=True)
            lg = np.load(lp)
            nll = -np.take_along_axis(log_softmax(lg[:-1]), t[1:, None], 1)[:, 0]
            d = float(np.abs(nll - ref[k]).max())
            d_alone = float(np.abs(nll - alone[k]).max())
            worst = max(worst, min(d, d_alone))
            worst_batched = max(worst_batched, d)
            print(f"window {k}: {len(t)} tokens, engine mean NLL {nll.mean():.6f}, PyTorch {ref[k].mean():.6f}, "
                  f"max |diff| {d:.2e} (batched), {d_alone:.2e} (alone)")
        ok = worst <= a.tol
        fails += not ok
        print(f"NLL: max over windows of |engine - PyTorch| in the nearer order = {worst:.2e} over "
              f"{toks.size - len(toks)} tokens: {'ok' if ok else 'FAIL'} (bar {a.tol}); against the batched "
              f"order {worst_batched:.2e}; PyTorch against itself (windows alone vs batched): {spread:.2e}")
        prompts = np.load(os.path.join(a.dump, "greedy_prompts.npy"))
        gold = np.load(os.path.join(a.dump, "greedy_tokens.npy"))
        margin = np.load(os.path.join(a.dump, "greedy_margin.npy"))
        if len(prompts):
            inp, outp = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
            with open(inp, "w") as f:
                for i, p in enumerate(prompts):
                    f.write(json.dumps({"custom_id": f"g{i}", "body": {
                        "prompt_token_ids": p.tolist(), "max_tokens": int(gold.shape[1]), "temperature": 0,
                        "ignore_eos": True}}) + "\n")
            cmd = [a.bin, "run-batch", "--model", a.model, "--input", inp, "--output", outp]
            subprocess.run(cmd, check=True, capture_output=True)
            got = {}
            for line in open(outp):
                r = json.loads(line)
                got[r["custom_id"]] = r["response"]["token_ids"] if "response" in r else r
            for i in range(len(prompts)):
                g = got.get(f"g{i}")
                same = g == gold[i].tolist()
                if not same:
                    fails += 1
                    j = next((j for j in range(len(gold[i])) if not isinstance(g, list) or j >= len(g) or g[j] != gold[i][j]), 0)
                    print(f"greedy {i}: DIFFERENT at step {j} (PyTorch top-2 margin there {margin[i][j]:.3g}); "
                          f"engine {g}, PyTorch {gold[i].tolist()}")
                else:
                    print(f"greedy {i}: {len(g)} tokens identical")
    print(f"{fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
