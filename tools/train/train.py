#!/usr/bin/env python3
"""Train the demonstration model: the backbone, then the DSpark stages on the frozen backbone.

The model is tools/train/v41_torch.py (the V4.1 forward, checked against the transformers
goldens by tools/train/check_torch.py). Data: the training split's token ids (uint16, from
tools/train/tokenizer.py); every step draws --batch windows of --seq tokens at seeded random
offsets, each run as a sequence from position 0.

Phase 1, backbone: next-token cross-entropy, plus the indexer's KL term (v41_torch.py), AdamW
(betas 0.9/0.95, weight decay 0.1 on matrices), linear warm-up then cosine decay to 10%; after
every step each MoE router's selection bias moves by --bias-step towards balanced load
(DeepSeek's auxiliary-loss-free balancing).
Phase 2, DSpark: the backbone frozen (embedding and head included: the stages share them), the
stages trained on --anchors random anchors per sequence: the block [x_{P+1}, noise x 4] at
positions P+1..P+5 with the context ring of positions P-W+1..P, loss (system spec section 4.2)
  0.1 * CE(draft_i, x_{P+2+i}) + 0.9 * TV(softmax(draft_i), softmax(target_{P+1+i}))
  + 1.0 * BCE(confidence_i, [argmax draft_i == argmax target_{P+1+i}])
with the Markov bias fed the true previous tokens (teacher forcing).

Steps: --steps / --draft-steps fix the step counts (what makes a run reproducible); without them
the first 20 steps are timed and the count is chosen to fill --minutes / --draft-minutes (a
phase that runs 10 % over its budget stops early), and the count used is written to the output's
train_log.json, so passing it back reproduces the run on the same hardware and versions (up to
the GPU's nondeterministic reductions; a phase stopped early is not reproduced that way).

Outputs in --out: model.pt (float32 state dict by release name, the config, step counts),
written after each phase and every --save-minutes; train_log.json (losses, held-out loss, steps).

Usage: python3 tools/train/train.py --tok build/train/tok --config CONFIG --out OUT
       [--minutes 8] [--draft-minutes 2] [--device cuda] [--seed 0]
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import v41_torch as T  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Batches:
    """Seeded random windows of a uint16 token stream."""

    def __init__(self, ids: np.ndarray, seq: int, batch: int, seed: int, device):
        if len(ids) <= seq + 1:
            raise SystemExit(f"the token stream has {len(ids)} tokens, fewer than --seq {seq} + 2")
        self.ids, self.seq, self.batch, self.device = ids, seq, batch, device
        self.rng = np.random.default_rng(seed)

    def next(self) -> torch.Tensor:
        starts = self.rng.integers(0, len(self.ids) - self.seq - 1, size=self.batch)
        x = np.stack([self.ids[s:s + self.seq + 1] for s in starts]).astype(np.int64)
        return torch.from_numpy(x).to(self.device)


def held_out(ids: np.ndarray, seq: int, n: int) -> torch.Tensor:
    """n evenly spaced windows of the validation stream (fixed: the same every evaluation)."""
    if len(ids) < seq + 2:
        raise SystemExit(f"the held-out stream has {len(ids)} tokens, fewer than --seq {seq} + 2")
    n = max(1, min(n, (len(ids) - 1) // (seq + 1)))
    starts = np.linspace(0, len(ids) - seq - 2, n).astype(np.int64)
    return torch.from_numpy(np.stack([ids[s:s + seq + 1] for s in starts]).astype(np.int64))


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(params, lr: float, wd: float):
    decay = [p for n, p in params if p.ndim == 2 and not n.endswith("_fn")]
    other = [p for n, p in params if not (p.ndim == 2 and not n.endswith("_fn"))]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=False)


def save(model: T.V41, cfg: dict, out: str, meta: dict) -> None:
    tmp = os.path.join(out, "model.pt.tmp")
    torch.save({"state_dict": {k: v.detach().float().cpu() for k, v in model.state_dict().items()}, "config": cfg,
                "meta": meta}, tmp)
    os.replace(tmp, os.path.join(out, "model.pt"))


def autocast(device: str, amp: str):
    if amp == "bf16":
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return torch.autocast(device_type=device.split(":")[0], enabled=False)


@torch.no_grad()
def val_loss(model: T.V41, val: torch.Tensor, device: str, amp: str, bs: int) -> float:
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(val), bs):
        x = val[i:i + bs].to(device)
        with autocast(device, amp):
            lg, _, _ = model(x[:, :-1])
        tot += float(F.cross_entropy(lg.float().flatten(0, 1), x[:, 1:].flatten(), reduction="sum"))
        n += x[:, 1:].numel()
    model.train()
    return tot / n


def plan_steps(fixed: int, minutes: float, step_fn, name: str) -> tuple[int, list]:
    """Run 20 timed steps (they count), then choose the total that fills `minutes`."""
    if fixed > 0:
        return fixed, []
    losses = []
    t0 = time.time()
    for s in range(20):
        losses.append(step_fn(s, 10**9))
    dt = (time.time() - t0) / 20
    total = max(21, int(minutes * 60 / dt))
    log(f"{name}: {dt * 1000:.0f} ms a step: {total} steps fill {minutes} minutes")
    return total, losses


def train_backbone(model, cfg, a, data, val, logd):
    params = [(n, p) for n, p in model.named_parameters() if not n.startswith("mtp.")]
    opt = make_optimizer(params, a.lr, a.wd)
    moes = [blk.ffn for blk in model.layers]
    state = {"total": a.steps if a.steps > 0 else 10**9}

    def step(s: int, total: int) -> float:
        for g in opt.param_groups:
            g["lr"] = lr_at(s, min(total, state["total"]), a.lr, a.warmup)
        x = data.next()
        with autocast(a.device, a.amp):
            lg, _, aux = model(x[:, :-1], train_indexer=True)
        loss = F.cross_entropy(lg.float().flatten(0, 1), x[:, 1:].flatten())
        kl = sum(aux) / max(1, len(aux)) if aux else torch.zeros((), device=lg.device)
        opt.zero_grad(set_to_none=True)
        (loss + a.indexer_coef * kl).backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
        opt.step()
        with torch.no_grad():
            for m in moes:
                m.gate.bias += a.bias_step * torch.sign(m.load.mean() - m.load)
        return float(loss.detach())

    t0 = time.time()
    total, losses = plan_steps(a.steps, a.minutes, lambda s, t: step(s, t), "backbone")
    state["total"] = total
    last_save = time.time()
    for s in range(len(losses), total):
        if a.steps <= 0 and time.time() - t0 > a.minutes * 60 * 1.1:
            log(f"backbone: over the time budget by 10 % at step {s}: stopping (the log records the steps run)")
            total = s
            break
        losses.append(step(s, total))
        if (s + 1) % a.log_every == 0 or s + 1 == total:
            log(f"backbone step {s + 1}/{total}: loss {np.mean(losses[-a.log_every:]):.4f}")
        if (s + 1) % a.eval_every == 0:
            v = val_loss(model, val, a.device, a.amp, a.batch)
            logd["backbone_val"].append([s + 1, v])
            log(f"  held-out loss {v:.4f} (ppl {math.exp(v):.2f})")
        if time.time() - last_save > a.save_minutes * 60:
            save(model, cfg, a.out, {"phase": "backbone", "step": s + 1, "backbone_steps": total})
            last_save = time.time()
    logd["backbone_steps"] = total
    logd["backbone_loss"] = [float(np.mean(losses[i:i + a.log_every])) for i in range(0, len(losses), a.log_every)]
    logd["backbone_seconds"] = time.time() - t0
    v = val_loss(model, val, a.device, a.amp, a.batch)
    logd["backbone_val"].append([total, v])
    log(f"backbone done: held-out loss {v:.4f} (ppl {math.exp(v):.2f})")


def draft_loss(model: T.V41, x: torch.Tensor, anchors: int, gen: np.random.Generator, device: str):
    c = model.c
    B, S1 = x.shape
    S = S1 - 1
    Bk = c.block
    with torch.no_grad():
        tgt, taps, _ = model(x[:, :-1], taps=True)
    ctx = model.context_keys(taps)  # per stage [B, S, hd]
    P = torch.from_numpy(gen.integers(0, S - Bk - 1, size=(B, anchors))).to(device)  # target processed 0..P
    bidx = torch.arange(B, device=device)[:, None].expand(B, anchors).flatten()
    Pf = P.flatten()
    off = torch.arange(Bk, device=device)
    block_pos = Pf[:, None] + 1 + off  # P+1 .. P+Bk
    anchor = x[bidx, Pf + 1]
    ids = torch.cat([anchor[:, None], torch.full((len(Pf), Bk - 1), c.noise, device=device)], 1)
    prev = x[bidx[:, None], block_pos]  # the true token before each slot's prediction
    gold = x[bidx[:, None], block_pos + 1]
    j = torch.arange(S, device=device)[None, :]
    vis = (j <= Pf[:, None]) & (j > Pf[:, None] - c.W)
    xs, base = model.draft_block([k[bidx] for k in ctx], vis, ids, block_pos)
    logits, conf = model.draft_heads(xs, base, prev)
    t = tgt[bidx[:, None], block_pos].float()  # the target's distributions at P+1 .. P+Bk
    logits = logits.float()
    ce = F.cross_entropy(logits.flatten(0, 1), gold.flatten())
    tv = 0.5 * (torch.softmax(logits, -1) - torch.softmax(t, -1)).abs().sum(-1).mean()
    acc = (logits.argmax(-1) == t.argmax(-1)).float()
    bce = F.binary_cross_entropy_with_logits(conf.float(), acc)
    return 0.1 * ce + 0.9 * tv + 1.0 * bce, {"ce": float(ce.detach()), "tv": float(tv.detach()), "bce": float(bce.detach()),
                                             "accept": acc.mean(0).tolist()}


def train_draft(model, cfg, a, data, logd):
    for n, p in model.named_parameters():
        p.requires_grad_(n.startswith("mtp."))
    params = [(n, p) for n, p in model.named_parameters() if n.startswith("mtp.")]
    opt = make_optimizer(params, a.draft_lr, a.wd)
    moes = [st.ffn for st in model.mtp]
    gen = np.random.default_rng(a.seed + 2)
    model.eval()  # no behaviour depends on it; the backbone is frozen
    hist = []

    def step(s: int, total: int) -> float:
        for g in opt.param_groups:
            g["lr"] = lr_at(s, total, a.draft_lr, a.draft_warmup)
        x = data.next()
        with autocast(a.device, a.amp):
            loss, parts = draft_loss(model, x, a.anchors, gen, a.device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
        opt.step()
        with torch.no_grad():
            for m in moes:
                m.gate.bias += a.bias_step * torch.sign(m.load.mean() - m.load)
        hist.append(parts)
        return float(loss.detach())

    t0 = time.time()
    total, losses = plan_steps(a.draft_steps, a.draft_minutes, step, "dspark")
    for s in range(len(losses), total):
        if a.draft_steps <= 0 and time.time() - t0 > a.draft_minutes * 60 * 1.1:
            log(f"dspark: over the time budget by 10 % at step {s}: stopping")
            total = s
            break
        losses.append(step(s, total))
        if (s + 1) % a.log_every == 0 or s + 1 == total:
            h = hist[-a.log_every:]
            acc = np.mean([p["accept"] for p in h], 0)
            log(f"dspark step {s + 1}/{total}: loss {np.mean(losses[-a.log_every:]):.4f} "
                f"ce {np.mean([p['ce'] for p in h]):.3f} tv {np.mean([p['tv'] for p in h]):.3f} "
                f"bce {np.mean([p['bce'] for p in h]):.3f} per-slot agreement {np.round(acc, 3).tolist()}")
    logd["draft_steps"] = total
    logd["draft_loss"] = [float(np.mean(losses[i:i + a.log_every])) for i in range(0, len(losses), a.log_every)]
    logd["draft_agreement_last"] = np.mean([p["accept"] for p in hist[-a.log_every:]], 0).tolist()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tok", default="build/train/tok")
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--amp", default=None, choices=["bf16", "none"], help="default: bf16 on cuda, none on cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--draft-warmup", type=int, default=50)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--draft-minutes", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--draft-steps", type=int, default=0)
    ap.add_argument("--anchors", type=int, default=16, help="DSpark anchors per sequence")
    ap.add_argument("--indexer-coef", type=float, default=1.0)
    ap.add_argument("--bias-step", type=float, default=1e-3)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--val-windows", type=int, default=64)
    ap.add_argument("--save-minutes", type=float, default=3.0)
    ap.add_argument("--init", help="model.pt to start from (e.g. to train only the stages: --steps 0 is not "
                                   "allowed, use --skip-backbone)")
    ap.add_argument("--skip-backbone", action="store_true")
    a = ap.parse_args()
    a.amp = a.amp or ("bf16" if a.device.startswith("cuda") else "none")
    # The 20 timed steps must lie in the warm-up, whose rate does not depend on the total: then a
    # run with the chosen counts passed back as --steps/--draft-steps repeats it.
    if (a.steps <= 0 and a.warmup < 20) or (a.draft_steps <= 0 and a.draft_warmup < 20):
        raise SystemExit("--warmup and --draft-warmup must be at least 20 when the step counts come from the time budget")
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = json.load(open(a.config))
    cfg = cfg.get("text_config", cfg)
    ids = np.load(os.path.join(a.tok, "train_ids.npy"), mmap_mode="r")
    vids = np.load(os.path.join(a.tok, "val_ids.npy"))
    if int(ids.max()) >= cfg["vocab_size"]:
        raise SystemExit(f"token id {int(ids.max())} in train_ids.npy is outside vocab_size {cfg['vocab_size']}")
    model = T.V41(cfg, np.load(os.path.join(a.tok, "engram_map.npy")))
    model.init_weights(a.seed)
    if a.init:
        ck = torch.load(a.init, map_location="cpu")
        model.load_state_dict(ck["state_dict"])
    model.to(a.device).train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters; device {a.device}, amp {a.amp}, torch {torch.__version__}")
    logd = {"args": vars(a), "torch": torch.__version__, "backbone_val": []}
    data = Batches(ids, a.seq, a.batch, a.seed, a.device)
    val = held_out(vids, a.seq, a.val_windows)
    if not a.skip_backbone:
        train_backbone(model, cfg, a, data, val, logd)
        save(model, cfg, a.out, {"phase": "backbone", "backbone_steps": logd["backbone_steps"]})
    if model.mtp is not None and (a.draft_steps > 0 or a.draft_minutes > 0):
        dd = Batches(ids, a.seq, max(1, a.batch // 2), a.seed + 1, a.device)
        train_draft(model, cfg, a, dd, logd)
    save(model, cfg, a.out, {"phase": "done", "backbone_steps": logd.get("backbone_steps"),
                             "draft_steps": logd.get("draft_steps")})
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(logd, f, indent=1)
    log(f"wrote {a.out}/model.pt and train_log.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
