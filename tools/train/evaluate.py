#!/usr/bin/env python3
"""Evaluate an exported checkpoint on the held-out split, in PyTorch, on the release weights.

The checkpoint directory (tools/train/export.py) is read back through tools/train/release.py
(its FP8/MXFP4/BF16 tensors dequantised exactly), so what is measured is what ships.

Measures (written to --out/summary.json and printed):
  * held-out negative log-likelihood and perplexity: every validation document cut into windows
    of --seq tokens, each window run from position 0, every token after a window's first
    predicted; next to a unigram (add-one) and an interpolated absolute-discounting bigram
    (d = 0.75) baseline counted on the training split, on the same predicted tokens
  * greedy continuations (--gen tokens, EOS not stopping) of --prompts held-out prompts of
    --prompt-len tokens, as ids and decoded text (greedy.json)
  * DSpark acceptance at k = 5, greedy: along each prompt's greedy continuation, rounds of
    anchor + 5 drafts (the draft after the target processed the context and chose the anchor);
    a round accepts the drafts' longest prefix equal to the target's greedy tokens and moves
    past them and the anchor; per position i the share of rounds that accepted at least i drafts
  * a dump for the engine comparison (--out/dump, float32 CPU): nll_tokens.npy int64 [K, L]
    (held-out windows), nll.npy float32 [K, L-1] (NLL of token t+1 given tokens 0..t, the
    windows batched), nll_alone.npy (the same, each window alone: another summation order),
    greedy_prompts.npy int64 [P, prompt_len], greedy_tokens.npy int64 [P, gen] and
    greedy_margin.npy float32 [P, gen] (top-1 minus top-2 logit at each step: a near tie may
    resolve either way in another float32 summation order)

Usage: python3 tools/train/evaluate.py --model DIR --tok build/train/tok --out DIR [--device cpu]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import release  # noqa: E402
import v41_torch as T  # noqa: E402


def load_model(d: str, tok: str, device: str) -> T.V41:
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg = cfg.get("text_config", cfg)
    w = release.read_dequantized(os.path.join(d, "model.safetensors"))
    draft = any(k.startswith("mtp.") for k in w) and cfg.get("num_nextn_predict_layers", 0) > 0
    m = T.V41(cfg, np.load(os.path.join(tok, "engram_map.npy")), draft=draft)
    T.load_state(m, {k: v for k, v in w.items() if draft or not k.startswith("mtp.")})
    return m.to(device).eval()


def windows(ids: np.ndarray, offsets: np.ndarray, seq: int) -> list[np.ndarray]:
    out = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        for s in range(a, b, seq):
            w = ids[s:min(b, s + seq)]
            if len(w) >= 2:
                out.append(w.astype(np.int64))
    return out


@torch.no_grad()
def nll_windows(m: T.V41, wins: list[np.ndarray], device: str, batch: int) -> list[np.ndarray]:
    out: list[np.ndarray | None] = [None] * len(wins)
    by_len: dict[int, list[int]] = {}
    for i, w in enumerate(wins):
        by_len.setdefault(len(w), []).append(i)
    for n, idx in by_len.items():
        for k in range(0, len(idx), batch):
            part = idx[k:k + batch]
            x = torch.from_numpy(np.stack([wins[i] for i in part])).to(device)
            lg, _, _ = m(x)
            nll = F.cross_entropy(lg[:, :-1].float().flatten(0, 1), x[:, 1:].flatten(), reduction="none")
            nll = nll.view(len(part), n - 1).cpu().numpy()
            for j, i in enumerate(part):
                out[i] = nll[j]
    return out  # type: ignore[return-value]


def baselines(train: np.ndarray, V: int, wins: list[np.ndarray]) -> dict:
    train = train.astype(np.int64)
    uni = np.bincount(train, minlength=V).astype(np.float64)
    p_uni = (uni + 1) / (uni.sum() + V)
    keys, cnt = np.unique(train[:-1] * V + train[1:], return_counts=True)
    ctx = np.bincount(train[:-1], minlength=V).astype(np.float64)
    n1 = np.bincount(keys // V, minlength=V).astype(np.float64)  # distinct followers of each u
    d = 0.75
    tot_u = tot_b = 0.0
    n = 0
    for w in wins:
        u, v = w[:-1], w[1:]
        tot_u -= np.log(p_uni[v]).sum()
        k = u * V + v
        pos = np.searchsorted(keys, k)
        pos = np.minimum(pos, len(keys) - 1)
        c = np.where(keys[pos] == k, cnt[pos], 0).astype(np.float64)
        cu = ctx[u]
        lam = np.where(cu > 0, d * n1[u] / np.maximum(cu, 1), 1.0)
        p = np.where(cu > 0, np.maximum(c - d, 0) / np.maximum(cu, 1), 0.0) + lam * p_uni[v]
        tot_b -= np.log(p).sum()
        n += len(v)
    return {"unigram_nll": tot_u / n, "bigram_nll": tot_b / n, "tokens": n}


@torch.no_grad()
def greedy(m: T.V41, prompt: np.ndarray, n: int, device: str):
    toks = torch.from_numpy(prompt).to(device)
    out, margin = [], []
    for _ in range(n):
        lg, _, _ = m(toks[None])
        top = torch.topk(lg[0, -1], 2)
        t = int(top.indices[0])
        out.append(t)
        margin.append(float(top.values[0] - top.values[1]))
        toks = torch.cat([toks, torch.tensor([t], device=device)])
    return out, margin


@torch.no_grad()
def acceptance(m: T.V41, prompt: np.ndarray, g: list[int], device: str, k: int = 5) -> list[int]:
    """Accepted drafts per round along the greedy continuation g of prompt."""
    rounds = []
    t = 0
    while t + k < len(g):
        ctx = torch.from_numpy(np.concatenate([prompt, np.array(g[:t], dtype=np.int64)])).to(device)
        ids, _, _ = m.draft(ctx, g[t])
        d = ids[1:1 + k].tolist()
        a = 0
        while a < k and d[a] == g[t + 1 + a]:
            a += 1
        rounds.append(a)
        t += a + 1
    return rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tok", default="build/train/tok")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-windows", type=int, default=0, help="evenly spaced subset of the held-out windows (0: all)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--gen", type=int, default=48)
    ap.add_argument("--draft-prompts", type=int, default=8)
    ap.add_argument("--dump-windows", type=int, default=8)
    ap.add_argument("--dump-len", type=int, default=256)
    ap.add_argument("--skip-dump", action="store_true", help="no engine-comparison dump (it runs on the CPU)")
    a = ap.parse_args()
    torch.manual_seed(0)
    os.makedirs(a.out if a.skip_dump else os.path.join(a.out, "dump"), exist_ok=True)
    t0 = time.time()
    m = load_model(a.model, a.tok, a.device)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    vids = np.load(os.path.join(a.tok, "val_ids.npy"))
    voff = np.load(os.path.join(a.tok, "val_offsets.npy"))
    wins = windows(vids, voff, a.seq)
    if 0 < a.max_windows < len(wins):
        wins = [wins[i] for i in np.linspace(0, len(wins) - 1, a.max_windows).astype(int)]
    nll = nll_windows(m, wins, a.device, a.batch)
    n_tok = sum(len(x) for x in nll)
    model_nll = float(sum(x.sum() for x in nll) / n_tok)
    base = baselines(np.load(os.path.join(a.tok, "train_ids.npy")), m.c.V, wins)
    summary = {"model": a.model, "heldout_windows": len(wins), "window": a.seq, "predicted_tokens": n_tok,
               "model_nll": model_nll, "model_ppl": math.exp(model_nll),
               "unigram_ppl": math.exp(base["unigram_nll"]), "bigram_ppl": math.exp(base["bigram_nll"]),
               "unigram_nll": base["unigram_nll"], "bigram_nll": base["bigram_nll"]}
    print(f"held-out: {n_tok} tokens in {len(wins)} windows of <= {a.seq}: model ppl {summary['model_ppl']:.2f}, "
          f"bigram {summary['bigram_ppl']:.2f}, unigram {summary['unigram_ppl']:.2f}")

    # prompts: the start of evenly spaced held-out documents
    docs = [vids[s:e] for s, e in zip(voff[:-1], voff[1:]) if e - s > a.prompt_len + a.gen]
    pick = np.linspace(0, len(docs) - 1, min(a.prompts, len(docs))).astype(int) if docs else []
    prompts = [docs[i][: a.prompt_len].astype(np.int64) for i in pick]
    gens, margins, shown = [], [], []
    for p in prompts:
        g, mg = greedy(m, p, a.gen, a.device)
        gens.append(g)
        margins.append(mg)
        shown.append({"prompt": tok.decode(p.tolist(), skip_special_tokens=True),
                      "completion": tok.decode(g, skip_special_tokens=False), "prompt_ids": p.tolist(), "ids": g})
    with open(os.path.join(a.out, "greedy.json"), "w") as f:
        json.dump(shown, f, indent=1, ensure_ascii=False)
    for s in shown[:3]:
        print(f"--- prompt: {s['prompt'][-120:]!r}\n    greedy: {s['completion'][:200]!r}")

    if m.mtp is not None and prompts:
        rounds = []
        for p, g in list(zip(prompts, gens))[: a.draft_prompts]:
            rounds += acceptance(m, p, g, a.device)
        r = np.array(rounds)
        per_pos = [float((r >= i).mean()) for i in range(1, 6)]
        summary["dspark"] = {"k": 5, "rounds": len(rounds), "accepted_per_round": float(r.mean()),
                             "tokens_per_round": float(r.mean() + 1), "accept_rate_by_position": per_pos,
                             "conditional_rate_by_position": [float((r >= i).sum() / max(1, (r >= i - 1).sum()))
                                                              for i in range(1, 6)]}
        print(f"DSpark k=5 greedy: {len(rounds)} rounds, {r.mean():.2f} drafts accepted a round; "
              f"by position {np.round(per_pos, 3).tolist()}")

    summary["seconds"] = time.time() - t0
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "dspark"}))
    if a.skip_dump:
        return 0
    # the engine comparison's dump: float32 on the CPU
    mc = m if a.device == "cpu" else load_model(a.model, a.tok, "cpu")
    full = [w for w in windows(vids, voff, a.dump_len) if len(w) == a.dump_len]
    pick = np.linspace(0, len(full) - 1, min(a.dump_windows, len(full))).astype(int) if full else []
    dump_t = np.stack([full[i] for i in pick]) if len(pick) else np.zeros((0, a.dump_len), np.int64)
    dump_n = np.stack(nll_windows(mc, list(dump_t), "cpu", a.batch)) if len(dump_t) else np.zeros((0, a.dump_len - 1))
    d = os.path.join(a.out, "dump")
    np.save(os.path.join(d, "nll_tokens.npy"), dump_t.astype(np.int64))
    np.save(os.path.join(d, "nll.npy"), dump_n.astype(np.float32))
    # The same windows one at a time: another float32 summation order (other GEMM blockings).
    # Where the two differ, the model's answer depends on rounding (a quantiser boundary or an
    # indexer near-tie), and no implementation can be held to it.
    alone = [nll_windows(mc, [w], "cpu", 1)[0] for w in dump_t]
    np.save(os.path.join(d, "nll_alone.npy"), np.stack(alone).astype(np.float32) if alone else dump_n)
    gp, gt, gm = [], [], []
    for p in prompts[:4]:
        g, mg = greedy(mc, p, min(a.gen, 32), "cpu")
        gp.append(p)
        gt.append(g)
        gm.append(mg)
    np.save(os.path.join(d, "greedy_prompts.npy"), np.array(gp, dtype=np.int64))
    np.save(os.path.join(d, "greedy_tokens.npy"), np.array(gt, dtype=np.int64))
    np.save(os.path.join(d, "greedy_margin.npy"), np.array(gm, dtype=np.float32))
    print(f"dump: {len(dump_t)} windows of {a.dump_len} tokens, {len(gp)} greedy prompts in {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
