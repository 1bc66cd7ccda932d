#!/usr/bin/env python3
"""Check tools/train/v41_torch.py against the transformers goldens and the NumPy DSpark reference.

For every fixture in tests/data/v41 with transformers goldens (swa, ced-1src, ced, ced-reindex,
full, full-q, full-q-seed25): the logits of the golden prompt (all positions) and the 24 greedy
tokens after its first 16, float32 on the CPU; the bar is max|ours - ref| / max|ref| <= 1e-4 and
identical greedy tokens. full-q and full-q-seed25 are read in the release formats through
tools/train/release.py (so the dequantiser is checked too). Then the DSpark stages on
tests/data/v41/dspark (backbone `full`): draft ids identical, Markov-biased logits and
confidences within 1e-4 of the goldens tools/v41_reference.py wrote (cases without bounded
replay; the training forward has none). Exits 1 on any failure.

Usage: python3 tools/train/check_torch.py
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import release  # noqa: E402
import v41_torch as T  # noqa: E402

V41 = os.path.join(REPO, "tests/data/v41")
FIXTURE_MAP = os.path.join(REPO, "tests/data/tokenizer/fixture/engram_map.npy")
BAR = 1e-4


def load(folder: str, extra: str | None = None, draft: bool = False):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    cfg = cfg.get("text_config", cfg)
    if not draft:
        cfg = dict(cfg, num_nextn_predict_layers=0)
    emap = np.load(FIXTURE_MAP) if cfg.get("engram_layer_ids") else None
    m = T.V41(cfg, emap, draft=draft).eval()
    w = release.read_dequantized(os.path.join(folder if extra is None else os.path.join(V41, "full"),
                                              "model.safetensors"))
    if extra:
        w.update(release.read_dequantized(os.path.join(folder, extra)))
    T.load_state(m, w)
    return m


def greedy(m, prompt: np.ndarray, n: int) -> list[int]:
    toks = torch.tensor(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n):
            lg, _, _ = m(toks[None])
            t = int(torch.argmax(lg[0, -1]))
            out.append(t)
            toks = torch.cat([toks, torch.tensor([t])])
    return out


def main() -> int:
    torch.manual_seed(0)
    fails = 0
    for name in ("swa", "ced-1src", "ced", "ced-reindex", "full", "full-q", "full-q-seed25"):
        folder = os.path.join(V41, name)
        if not os.path.isdir(os.path.join(folder, "golden")):
            print(f"{name}: no goldens, skipped")
            continue
        m = load(folder)
        g = os.path.join(folder, "golden")
        tokens = np.load(os.path.join(g, "tokens.npy"))
        ref = np.load(os.path.join(g, "logits_full.npy"))
        with torch.no_grad():
            lg = m(torch.tensor(tokens)[None])[0][0].numpy()
        err = float(np.abs(lg - ref).max() / np.abs(ref).max())
        gt = np.load(os.path.join(g, "greedy_tokens.npy")).tolist()
        gr = greedy(m, np.load(os.path.join(g, "greedy_prompt.npy")), len(gt))
        ok = err <= BAR and gr == gt
        fails += not ok
        print(f"{name}: logits rel err {err:.3g}, greedy {'identical' if gr == gt else 'DIFFERENT'}: "
              f"{'ok' if ok else 'FAIL'}")
    d = os.path.join(V41, "dspark")
    m = load(d, extra="mtp.safetensors", draft=True)
    tokens = np.load(os.path.join(V41, "full/golden/tokens.npy"))
    for case in json.load(open(os.path.join(d, "golden/cases.json")))["cases"]:
        if case["replay_from"]:
            continue
        g = lambda k: np.load(os.path.join(d, f"golden/{case['name']}_{k}.npy"))  # noqa: E731
        ids, logits, conf = m.draft(torch.tensor(tokens[: case["prompt"]]), case["anchor"])
        e_l = float(np.abs(logits.numpy() - g("logits")).max() / np.abs(g("logits")).max())
        e_c = float(np.abs(conf.numpy() - g("confidence")).max() / max(np.abs(g("confidence")).max(), 1e-30))
        same = ids.tolist() == g("ids").tolist()
        ok = same and e_l <= BAR and e_c <= BAR
        fails += not ok
        print(f"dspark {case['name']}: ids {'identical' if same else 'DIFFERENT'}, logits rel err {e_l:.3g}, "
              f"confidence rel err {e_c:.3g}: {'ok' if ok else 'FAIL'}")
    # The training path (train.py's draft_loss): the whole sequence's taps, every position's context
    # keys, the anchor's window picked by a mask. It must give the single-sequence draft's values.
    P, c = 28, m.c
    with torch.no_grad():
        x = torch.tensor(tokens)[None]
        ids, ref_logits, ref_conf = m.draft(x[0, : P + 1], int(tokens[P + 1]))
        _, taps, _ = m(x, taps=True)
        ctx = m.context_keys(taps)
        j = torch.arange(x.shape[1])[None]
        vis = (j <= P) & (j > P - c.W)
        block = torch.tensor([[int(tokens[P + 1])] + [c.noise] * (c.block - 1)])
        xs, base = m.draft_block(ctx, vis, block, torch.arange(P + 1, P + 1 + c.block)[None])
        lg, conf = m.draft_heads(xs, base, ids[None, :-1])
    e = float((lg[0] - ref_logits).abs().max() / ref_logits.abs().max())
    ec = float((conf[0] - ref_conf).abs().max() / ref_conf.abs().max())
    ok = e <= 1e-5 and ec <= 1e-5
    fails += not ok
    print(f"dspark training path (masked context of the whole sequence) against the draft: logits rel err {e:.3g}, "
          f"confidence {ec:.3g}: {'ok' if ok else 'FAIL'}")
    fails += check_gradients(m, tokens)
    print(f"{fails} failed")
    return 1 if fails else 0


def check_gradients(m, tokens) -> int:
    """Every parameter the training phases update gets a nonzero gradient from train.py's losses
    (the straight-through quantisers let it reach the compressors and the indexer keys)."""
    sys.path.insert(0, HERE)
    import train  # noqa: E402
    x = torch.tensor(np.stack([tokens, tokens[::-1].copy()]))
    m.train()
    lg, _, aux = m(x[:, :-1], train_indexer=True)
    loss = torch.nn.functional.cross_entropy(lg.flatten(0, 1), x[:, 1:].flatten()) + sum(aux)
    m.zero_grad()
    loss.backward()
    backbone = [(n, p) for n, p in m.named_parameters() if not n.startswith("mtp.")]
    # routed experts no token chose get none, legitimately
    dead = [n for n, p in backbone if (p.grad is None or not p.grad.abs().sum() > 0) and ".ffn.experts." not in n]
    for n, p in m.named_parameters():
        p.requires_grad_(n.startswith("mtp."))
    m.zero_grad()
    loss2, _ = train.draft_loss(m, x, 4, np.random.default_rng(0), "cpu")
    loss2.backward()
    dead += [n for n, p in m.named_parameters() if n.startswith("mtp.") and ".ffn.experts." not in n and
             (p.grad is None or not p.grad.abs().sum() > 0)]
    for p in m.parameters():
        p.requires_grad_(True)
    m.eval()
    print(f"gradients: {len(aux)} indexer KL terms; parameters without a gradient: {dead if dead else 'none'}: "
          f"{'ok' if not dead else 'FAIL'}")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
