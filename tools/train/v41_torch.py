"""A PyTorch transcription of the DeepSeek-V4.1 forward and its DSpark draft stages, for training.

Written from the project's model spec (deepseek-v41-forward.md, sections 3-5) and
tools/v41_reference.py (the NumPy transcription), batched over [B, S] and differentiable. The
forward's values are the reference's cache path: every sequence of a batch starts at position 0
and is run in one call, each KV source publishes only its own compressed entries and indexer
keys (the next source replaces them, as the transformers cache path does; its `use_cache=False`
path appends them instead, which this module never does), and the fake quantisers round exactly
as the reference's. tools/train/check_torch.py checks the logits against the transformers goldens
of every fixture in tests/data/v41 (max|diff| / max|ref| <= 1e-4, float32) and the draft stages
against tools/v41_reference.py on tests/data/v41/dspark.

Training-only differences, none of which changes a forward value:
  * The fake quantisers pass the gradient straight through (x + (q(x) - x).detach()).
  * The routed experts run densely: every expert on every row, multiplied by a routing weight
    that is zero for unselected experts (the same sum; gradients reach only selected experts).
  * Index sources also return a KL term (`aux`) that trains the indexer towards the heads'
    mean attention over the visible compressed entries (its inputs detached, as DeepSeek's
    sparse attention trains its indexer); the top-k selection itself has no gradient.
  * Each MoE records how often each expert was chosen (`load`), for the router bias update
    (the bias only selects; DeepSeek's auxiliary-loss-free balancing moves it by a fixed step).

Parameter names are the release checkpoint's (no `model.` prefix, `embed.weight`,
`head.weight`, `mtp.{s}.*`), so the state dict is the checkpoint's tensor list.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import v41_reference as R  # noqa: E402  (config derivation, rope frequencies, Engram primes)

# ----------------------------------------------------------------------------- fake quantisers


def pow2ceil(t: torch.Tensor) -> torch.Tensor:
    bits = t.float().contiguous().view(torch.int32)
    k = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return torch.exp2(k.float())


_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def round_e2m1(q: torch.Tensor) -> torch.Tensor:
    a = q.abs()
    code = ((a > 0.25).int() + (a >= 0.75).int() + (a > 1.25).int() + (a >= 1.75).int() + (a > 2.5).int() +
            (a >= 3.5).int() + (a > 5.0).int())
    vals = torch.tensor(_E2M1, dtype=torch.float32, device=q.device)[code.long()]
    return torch.where(q < 0, -vals, vals)


def _ste(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return x + (q - x).detach() if x.requires_grad else q


def fq8(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    d = x.shape[-1]
    if d % block:
        return x
    with torch.no_grad():
        b = x.float().reshape(*x.shape[:-1], d // block, block)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(1e-4)
        s = pow2ceil(amax * (1.0 / 448.0))
        q = ((b / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s).reshape(x.shape)
    return _ste(x, q)


def fq4_pow2(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    d = x.shape[-1]
    if d % block:
        return x
    with torch.no_grad():
        b = x.float().reshape(*x.shape[:-1], d // block, block)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(6 * 2.0**-126)
        s = pow2ceil(amax * (1.0 / 6.0))
        q = (round_e2m1((b / s).clamp(-6, 6)) * s).reshape(x.shape)
    return _ste(x, q)


def fq4_e4m3(x: torch.Tensor, block: int = 16) -> torch.Tensor:
    d = x.shape[-1]
    if d % block:
        return x
    with torch.no_grad():
        b = x.float().reshape(*x.shape[:-1], d // block, block)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(6 * 2.0**-9)
        s = (amax / 6.0).to(torch.float8_e4m3fn).float()
        q = (round_e2m1((b / s).clamp(-6, 6)) * s).reshape(x.shape)
    return _ste(x, q)


# ----------------------------------------------------------------------------- small pieces


def rms(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    x = x.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else w * y


class Norm(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


def linear(n_in: int, n_out: int) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Interleaved pairs on the last 2*cos.shape[-1] channels. cos/sin broadcast against
    x[..., :half] once a head axis is accounted for: x [..., S, d] with cos [..., S, half], or
    x [..., S, H, d] with cos [..., S, 1, half] (the caller unsqueezes)."""
    rd = cos.shape[-1] * 2
    if inverse:
        sin = -sin
    nope, r = x[..., :-rd], x[..., -rd:]
    a, b = r[..., 0::2], r[..., 1::2]
    rot = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([nope, rot], dim=-1)


def fp32(x: torch.Tensor):
    """A region computed in float32 even under autocast (the reference's fp32 parts: routers,
    mHC mixes, indexer scores)."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def top_stable(v: torch.Tensor, k: int):
    """The k largest values of the last axis and their indices, equal values in index order
    (the engine's and tools/v41_reference.py's rule; torch.topk leaves ties unspecified)."""
    val, ind = torch.sort(v, dim=-1, descending=True, stable=True)
    return val[..., :k], ind[..., :k]


def angles(pos: torch.Tensor, freqs: torch.Tensor):
    ang = pos.float()[..., None] * freqs
    return torch.cos(ang), torch.sin(ang)


# ----------------------------------------------------------------------------- modules


class Expert(nn.Module):
    def __init__(self, D: int, I: int):
        super().__init__()
        self.w1, self.w2, self.w3 = linear(D, I), linear(I, D), linear(D, I)


class Gate(nn.Module):
    def __init__(self, E: int, D: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, D))
        self.register_buffer("bias", torch.zeros(E))  # selection only; moved by the balancing rule


class MoE(nn.Module):
    def __init__(self, c: R.Config, E: int, K: int):
        super().__init__()
        self.c, self.E, self.K = c, E, K
        self.gate = Gate(E, c.D)
        self.experts = nn.ModuleList([Expert(c.D, c.I) for _ in range(E)])
        self.shared_experts = Expert(c.D, c.I)
        self.load = None

    def swiglu(self, x, w1, w3, weight=None):
        lim = self.c.limit
        g, u = x @ w1.T, x @ w3.T
        if lim > 0:
            u, g = u.clamp(-lim, lim), g.clamp(max=lim)
        a = F.silu(g) * u
        return a if weight is None else a * weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.c
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        with fp32(x):
            s = torch.sqrt(F.softplus(x.float() @ self.gate.weight.T / c.gate_temp))
        idx = top_stable(s + self.gate.bias, self.K)[1]
        w = s.gather(1, idx)
        if c.norm_topk and self.K > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c.scaling
        dense = torch.zeros_like(s).scatter(1, idx, w)  # [N, E]; zero for unselected experts
        with torch.no_grad():
            self.load = torch.bincount(idx.flatten(), minlength=self.E).float()
        W1 = torch.stack([e.w1.weight for e in self.experts])  # [E, I, D]
        W3 = torch.stack([e.w3.weight for e in self.experts])
        W2 = torch.stack([e.w2.weight for e in self.experts])  # [E, D, I]
        lim = c.limit
        g = torch.einsum("nd,eid->nei", x, W1)
        u = torch.einsum("nd,eid->nei", x, W3)
        if lim > 0:
            u, g = u.clamp(-lim, lim), g.clamp(max=lim)
        a = F.silu(g) * u * dense[:, :, None]
        y = torch.einsum("nei,edi->nd", a, W2)
        se = self.shared_experts
        y = y + self.swiglu(x, se.w1.weight, se.w3.weight) @ se.w2.weight.T
        return y.reshape(shape)


class Compressor(nn.Module):
    def __init__(self, c: R.Config, ratio: int):
        super().__init__()
        self.wkv = linear(c.D, c.hd)
        self.wgate = linear(c.D, c.hd) if ratio > 1 else None
        self.norm = Norm(c.hd)


class Indexer(nn.Module):
    def __init__(self, c: R.Config, owns_k: bool):
        super().__init__()
        self.wq_b = linear(c.j["q_lora_rank"], c.n_idx * c.d_idx)
        self.weights_proj = linear(c.D, c.n_idx)
        if owns_k:
            self.wk = linear(c.hd, c.d_idx)
            self.k_norm = Norm(c.d_idx)


class Attention(nn.Module):
    def __init__(self, c: R.Config, i: int, draft: bool):
        super().__init__()
        ql = c.j["q_lora_rank"]
        self.wq_a, self.q_norm, self.wq_b = linear(c.D, ql), Norm(ql), linear(ql, c.H * c.hd)
        self.wkv, self.kv_norm = linear(c.D, c.hd), Norm(c.hd)
        self.wo_a = linear(c.H * c.hd // c.o_groups, c.o_groups * c.o_lora)
        self.wo_b = linear(c.o_groups * c.o_lora, c.D)
        self.attn_sink = nn.Parameter(torch.zeros(c.H))
        if not draft and i in c.kv_src:
            self.compressor = Compressor(c, c.ratios[i])
        if not draft and i in c.idx_src:
            self.indexer = Indexer(c, i in c.kv_src)


class Engram(nn.Module):
    def __init__(self, c: R.Config, j: int):
        super().__init__()
        cols = (c.j["engram_max_ngram_size"] - 1) * c.j["engram_n_heads"]
        self.embed = nn.Embedding(c.j["engram_num_embeddings"][j], c.j["engram_head_dim"])
        self.wkv = linear(cols * c.j["engram_head_dim"], c.D * (c.hc + 1))
        self.q_weight = nn.Parameter(torch.ones(c.hc, c.D))
        self.k_weight = nn.Parameter(torch.ones(c.hc, c.D))


class Block(nn.Module):
    def __init__(self, c: R.Config, i: int, draft: bool = False):
        super().__init__()
        mix = (2 + c.hc) * c.hc
        self.attn_norm, self.ffn_norm = Norm(c.D), Norm(c.D)
        for site in ("attn", "ffn"):
            setattr(self, f"hc_{site}_fn", nn.Parameter(torch.zeros(mix, c.hc * c.D)))
            setattr(self, f"hc_{site}_base", nn.Parameter(torch.zeros(mix)))
            setattr(self, f"hc_{site}_scale", nn.Parameter(torch.ones(3)))
        self.attn = Attention(c, i, draft)
        self.ffn = MoE(c, c.E_d, c.K_d) if draft else MoE(c, c.E, c.K)
        if not draft and i in c.engram_ids:
            self.engram = Engram(c, c.engram_ids.index(i))


class Stage(Block):
    """A DSpark stage: a window-only block, plus stage 0's context projection and the last
    stage's heads."""

    def __init__(self, c: R.Config, s: int):
        super().__init__(c, c.L + s, draft=True)
        if s == 0:
            self.main_proj = linear(c.D * len(c.taps), c.D)
            self.main_norm = Norm(c.D)
        if s == c.n_stages - 1:
            self.norm = Norm(c.D)
            self.markov_head = nn.Module()
            self.markov_head.embed = nn.Embedding(c.V, c.rank)
            self.markov_head.head = linear(c.rank, c.V)
            self.confidence_head = nn.Module()
            self.confidence_head.proj = linear(c.D + c.rank, 1)


# ----------------------------------------------------------------------------- the model


class V41(nn.Module):
    def __init__(self, cfg: dict, engram_map: np.ndarray | None = None, draft: bool = True):
        super().__init__()
        c = self.c = make_config(cfg)
        self.embed = nn.Embedding(c.V, c.D)
        self.layers = nn.ModuleList([Block(c, i) for i in range(c.L)])
        self.norm = Norm(c.D)
        self.head = linear(c.D, c.V)
        self.mtp = nn.ModuleList([Stage(c, s) for s in range(c.n_stages)]) if draft and c.n_stages > 0 else None
        self.register_buffer("freq_main", torch.tensor(c.freq_main), persistent=False)
        self.register_buffer("freq_comp", torch.tensor(c.freq_comp), persistent=False)
        if c.engram_ids:
            if engram_map is None:
                raise ValueError("a config with engram_layer_ids needs the tokenizer's Engram map (engram_map)")
            e = R.Engram(c, engram_map)
            self.ngram, self.eheads = e.N, e.heads
            self.register_buffer("emap", torch.tensor(e.map, dtype=torch.int64), persistent=False)
            self.epad = e.pad
            self.register_buffer("emult", torch.tensor(np.stack(e.mult), dtype=torch.int64), persistent=False)
            self.register_buffer("eprime", torch.tensor(np.array(e.primes), dtype=torch.int64), persistent=False)
            self.register_buffer("eoff", torch.tensor(np.array(e.offsets), dtype=torch.int64), persistent=False)

    # --- parameter names and initialisation
    def init_weights(self, seed: int, std: float = 0.02):
        g = torch.Generator().manual_seed(seed)
        c = self.c
        for name, p in sorted(self.named_parameters()):
            with torch.no_grad():
                if name.endswith("norm.weight") or name.endswith("_scale") or name.endswith("q_weight") or \
                        name.endswith("k_weight"):
                    p.fill_(1.0)
                elif name.endswith("_base") or name.endswith("attn_sink"):
                    p.zero_()
                elif name.endswith("_fn"):
                    p.copy_(torch.randn(p.shape, generator=g) * 1e-3)
                else:
                    fan_in = p.shape[1] if p.ndim == 2 else p.shape[0]
                    sd = std if name in ("embed.weight",) or ".embed." in name else 1 / math.sqrt(fan_in)
                    if name.endswith("w2.weight") or name.endswith("wo_b.weight"):
                        sd = sd / math.sqrt(2 * c.L)
                    p.copy_(torch.randn(p.shape, generator=g) * sd)
        # the hc bases: pre ~ 1/hc-ish collapse weights, post ~ 1, comb ~ identity
        for blk in list(self.layers) + (list(self.mtp) if self.mtp is not None else []):
            for site in ("attn", "ffn"):
                base = getattr(blk, f"hc_{site}_base")
                with torch.no_grad():
                    hc = c.hc
                    base[2 * hc:] = (torch.eye(hc) * 4.0).flatten()

    # --- mHC
    def mixes(self, X, fn, base, scale):
        with fp32(X):
            return self._mixes(X.float(), fn, base, scale)

    def _mixes(self, X, fn, base, scale):
        c = self.c
        hc = c.hc
        f = X.flatten(-2)
        fh = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + c.eps)
        m = fh @ fn.T
        pre = torch.sigmoid(m[..., :hc] * scale[0] + base[:hc]) + c.hc_eps
        post = 2 * torch.sigmoid(m[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
        C = torch.softmax((m[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc)), dim=-1) + c.hc_eps
        C = C / (C.sum(-2, keepdim=True) + c.hc_eps)
        for _ in range(c.iters - 1):
            C = C / (C.sum(-1, keepdim=True) + c.hc_eps)
            C = C / (C.sum(-2, keepdim=True) + c.hc_eps)
        return pre, post, C

    @staticmethod
    def collapse(X, pre):
        with fp32(X):
            return torch.einsum("...k,...kd->...d", pre.float(), X.float())

    @staticmethod
    def expand(y, R_, post, C):
        with fp32(y):
            return post[..., None] * y.float()[..., None, :] + torch.einsum("...jk,...jd->...kd", C.float(), R_.float())

    def block(self, blk: Block, X, pre_in, attention):
        c = self.c
        Rr = X
        a_pre, a_post, a_comb = self.mixes(X, blk.hc_attn_fn, blk.hc_attn_base, blk.hc_attn_scale)
        y = attention(rms(self.collapse(X, pre_in), blk.attn_norm.weight, c.eps))
        X = self.expand(y, Rr, a_post, a_comb)
        Rr = X
        f_pre, f_post, f_comb = self.mixes(X, blk.hc_ffn_fn, blk.hc_ffn_base, blk.hc_ffn_scale)
        y = blk.ffn(rms(self.collapse(X, a_pre), blk.ffn_norm.weight, c.eps))
        return self.expand(y, Rr, f_post, f_comb), f_pre

    # --- attention
    def q_kv(self, A: Attention, xn, cs):
        """cs = (cos, sin) [.., S, half]. Returns qr, q [.., S, H, hd], kv [.., S, hd]."""
        c = self.c
        cos, sin = cs
        qr = rms(xn @ A.wq_a.weight.T, A.q_norm.weight, c.eps)
        q = (qr @ A.wq_b.weight.T).unflatten(-1, (c.H, c.hd))
        q = rope(q, cos[..., None, :], sin[..., None, :])
        kv = fq8(rope(rms(xn @ A.wkv.weight.T, A.kv_norm.weight, c.eps), cos, sin))
        return qr, q, kv

    def attend(self, A: Attention, q, keys, visible, cs):
        """q [N, S, H, hd], keys [N, T, hd], visible [N or 1, S, T] bool -> [N, S, D]."""
        c = self.c
        logits = torch.einsum("nshd,ntd->nhst", q, keys) * (1.0 / math.sqrt(c.hd))
        logits = logits.masked_fill(~visible[:, None], float("-inf"))
        sink = A.attn_sink[None, :, None, None].expand(logits.shape[0], -1, logits.shape[2], 1)
        lse = torch.logsumexp(torch.cat([logits, sink], dim=-1), dim=-1, keepdim=True)
        p = torch.exp(logits - lse)
        o = torch.einsum("nhst,ntd->nshd", p, keys)
        cos, sin = cs
        o = rope(o, cos[..., None, :], sin[..., None, :], inverse=True)
        G = c.o_groups
        og = o.reshape(*o.shape[:2], G, c.H * c.hd // G)
        wa = A.wo_a.weight.reshape(G, c.o_lora, c.H * c.hd // G)
        z = torch.einsum("nsgk,gok->nsgo", og, wa).flatten(-2)
        return z @ A.wo_b.weight.T, logits

    def backbone_attention(self, i, A: Attention, xn, shared):
        c = self.c
        B, S, _ = xn.shape
        r = c.ratios[i]
        pos = shared["pos"]
        cs = shared["cs_comp"] if r > 0 else shared["cs_main"]
        qr, q, kv = self.q_kv(A, xn, cs)
        keys, visible = kv, shared["window"][None].expand(B, S, S)
        if r > 0:
            if i in c.kv_src:
                self.compress(i, A, xn, shared)
            if i in c.idx_src:
                self.index(i, A, qr, xn, shared)
            comp = shared["comp"]
            sel = shared["topk"] if "topk" in shared else torch.zeros(B, S, comp.shape[1], dtype=torch.bool,
                                                                       device=xn.device)
            keys, visible = torch.cat([kv, comp], dim=1), torch.cat([visible, sel], dim=2)
        out, logits = self.attend(A, q, keys, visible, cs)
        if r > 0 and i in c.idx_src and shared.get("train_indexer") and "index_score" in shared:
            self.indexer_kl(q, shared, pos, r)
        return out

    def indexer_kl(self, q, shared, pos, r):
        """KL(heads' mean attention over the visible compressed entries || indexer softmax)."""
        c = self.c
        comp = shared["comp"].detach()
        score = shared.pop("index_score")  # [B, S, T] with -inf where not visible
        vis = torch.isfinite(score)
        with torch.no_grad():
            lg = torch.einsum("bshd,btd->bhst", q.detach(), comp) * (1.0 / math.sqrt(c.hd))
            lg = lg.masked_fill(~vis[:, None], float("-inf"))
            tgt = torch.softmax(lg, dim=-1).nan_to_num(0.0).mean(1)  # [B, S, T]
        rows = vis.any(-1)
        logp = torch.log_softmax(score.masked_fill(~vis, -1e30), dim=-1)
        kl = (tgt * (torch.log(tgt.clamp_min(1e-30)) - logp)).masked_fill(~vis, 0.0).sum(-1)
        shared["aux"].append(kl[rows].mean() if rows.any() else kl.sum() * 0)

    def compress(self, i, A: Attention, xn, shared):
        c = self.c
        B, S, _ = xn.shape
        r = c.ratios[i]
        C = A.compressor
        if r == 1:
            lat = rms(xn @ C.wkv.weight.T, C.norm.weight, c.eps)
        else:
            n = S // r
            kv = (xn[:, : n * r] @ C.wkv.weight.T).unflatten(1, (n, r))
            gate = (xn[:, : n * r] @ C.wgate.weight.T).unflatten(1, (n, r))
            lat = rms((kv * torch.softmax(gate, dim=2)).sum(2), C.norm.weight, c.eps)
        gpos = torch.arange(lat.shape[1], device=xn.device) * r
        cs = angles(gpos, self.freq_comp)
        shared["comp"] = fq4_e4m3(rope(lat, *cs), 16)
        if i in c.idx_src:
            I = A.indexer
            src = lat.detach() if shared.get("train_indexer") else lat
            k = rms(src @ I.wk.weight.T, I.k_norm.weight, c.eps)
            shared["index_k"] = fq4_pow2(rope(k, *cs), 32)

    def index(self, i, A: Attention, qr, xn, shared):
        c = self.c
        r = c.ratios[i]
        I = A.indexer
        k = shared["index_k"]
        if shared.get("train_indexer"):
            qr, xn = qr.detach(), xn.detach()
        cos, sin = shared["cs_comp"]
        qi = (qr @ I.wq_b.weight.T).unflatten(-1, (c.n_idx, c.d_idx))
        qi = fq4_pow2(rope(qi, cos[..., None, :], sin[..., None, :]), 32)
        with fp32(qi):
            s = torch.relu(torch.einsum("bshd,btd->bsht", qi.float(), k.float())) * (1.0 / math.sqrt(c.d_idx))
            w = (xn.float() @ I.weights_proj.weight.T) * (1.0 / math.sqrt(c.n_idx))
            score = torch.einsum("bsht,bsh->bst", s, w)
        T = k.shape[1]
        pos = shared["pos"]
        lens = ((pos + 1) // r)[:, None]  # [S, 1]
        ent = torch.arange(T, device=score.device)[None, :]
        score = score.masked_fill(ent >= lens, float("-inf"))
        if i == c.cand_src:
            shared["cand"] = self.candidates(score, lens)
        elif 0 <= c.cand_src < i and "cand" in shared:
            score = score.masked_fill(~shared["cand"], float("-inf"))
        shared["index_score"] = score
        kk = min(c.topk, T)
        with torch.no_grad():
            val, ind = top_stable(score, kk)
            sel = torch.zeros_like(score, dtype=torch.bool).scatter(-1, ind, torch.isfinite(val))
        shared["topk"] = sel

    def candidates(self, score, lens):
        c = self.c
        bs, nb_keep = c.j["candidate_block_size"], c.j["candidate_topk_blocks"]
        T = score.shape[-1]
        with torch.no_grad():
            sc = F.pad(score, (0, -T % bs), value=float("-inf")).unflatten(-1, (-1, bs)).amax(-1)
            nb = sc.shape[-1]
            last = torch.div(lens - 1, bs, rounding_mode="floor")  # [S, 1]
            sc = sc.masked_fill(torch.arange(nb, device=sc.device)[None, :] == last, float("inf"))
            val, ind = top_stable(sc, min(nb_keep, nb))
            keep = torch.zeros_like(sc, dtype=torch.bool).scatter(-1, ind, val > float("-inf"))
            return keep.repeat_interleave(bs, dim=-1)[..., :T]

    # --- Engram
    def engram_ids(self, tokens):
        """[B, S, n_layers, (N-1)*heads] hash rows for sequences starting at position 0."""
        hist = self.emap[tokens]
        B, S = tokens.shape
        toks = []
        for s in range(self.ngram):
            t = torch.full_like(hist, self.epad)
            if s < S:
                t[:, s:] = hist[:, : S - s]
            toks.append(t)
        out = []
        for li in range(self.emult.shape[0]):
            h = toks[0] * self.emult[li, 0]
            cols = []
            for i in range(1, self.ngram):
                h = torch.bitwise_xor(h, toks[i] * self.emult[li, i])
                for ch in range(self.eheads):
                    k = (i - 1) * self.eheads + ch
                    cols.append(torch.remainder(h, self.eprime[li, k]) + self.eoff[li, k])
            out.append(torch.stack(cols, -1))
        return torch.stack(out, 2)

    def engram(self, Em: Engram, X, ids):
        c = self.c
        B, S, hc, D = X.shape
        E = Em.embed(ids).flatten(-2)
        kv = E @ Em.wkv.weight.T
        key, value = kv[..., : hc * D].unflatten(-1, (hc, D)), kv[..., hc * D:]
        wgt = Em.q_weight * Em.k_weight
        rstd = torch.rsqrt(X.pow(2).mean(-1) + c.eps) * torch.rsqrt(key.pow(2).mean(-1) + c.eps)
        dot = (X * wgt * key).sum(-1) * rstd * (1.0 / math.sqrt(D))
        gate = torch.sigmoid(torch.copysign(torch.sqrt(dot.abs().clamp_min(1e-6)), dot))
        return X + gate[..., None] * value[..., None, :]

    # --- forward
    def forward(self, tokens: torch.Tensor, taps: bool = False, train_indexer: bool = False):
        """tokens [B, S] (each sequence from position 0) -> logits [B, S, V] (float32), the
        DSpark taps [B, S, len(taps)*D] when asked, and the indexer KL terms."""
        c = self.c
        B, S = tokens.shape
        dev = tokens.device
        pos = torch.arange(S, device=dev)
        X = self.embed(tokens)[:, :, None, :].expand(B, S, c.hc, c.D).float()
        pre = torch.zeros(B, S, c.hc, device=dev)
        pre[..., 0] = 1
        shared = {"pos": pos, "cs_main": angles(pos, self.freq_main), "cs_comp": angles(pos, self.freq_comp),
                  "window": (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - c.W), "aux": [],
                  "train_indexer": train_indexer}
        hash_ids = self.engram_ids(tokens) if c.engram_ids else None
        tap = {}
        for i, blk in enumerate(self.layers):
            if i in c.engram_ids:
                X = self.engram(blk.engram, X, hash_ids[:, :, c.engram_ids.index(i)])
            if taps and i in c.taps:
                tap[i] = X.mean(2)
            X, pre = self.block(blk, X, pre, lambda xn, i=i, blk=blk: self.backbone_attention(i, blk.attn, xn, shared))
        logits = rms(self.collapse(X, pre), self.norm.weight, c.eps) @ self.head.weight.T
        out_taps = torch.cat([tap[t] for t in c.taps], -1) if taps else None
        return logits.float(), out_taps, shared["aux"]

    # --- DSpark
    def context_keys(self, taps):
        """Each stage's context keys at every position of `taps` [B, S, 3D] -> list of [B, S, hd]."""
        c = self.c
        m0 = self.mtp[0]
        main_x = rms(taps @ m0.main_proj.weight.T, m0.main_norm.weight, c.eps)
        S = taps.shape[1]
        cs = angles(torch.arange(S, device=taps.device), self.freq_main)
        return [fq8(rope(rms(main_x @ st.attn.wkv.weight.T, st.attn.kv_norm.weight, c.eps), *cs)) for st in self.mtp]

    def draft_block(self, ctx, ctx_visible, block_ids, block_pos):
        """The stages on N blocks. ctx: per stage [N, T, hd] context keys, ctx_visible [N, T] bool;
        block_ids [N, Bk] (anchor, noise...), block_pos [N, Bk]. Returns the last stage's
        collapsed hidden x [N, Bk, D] and the logits before the Markov bias [N, Bk, V]."""
        c = self.c
        N, Bk = block_ids.shape
        X = self.embed(block_ids)[:, :, None, :].expand(N, Bk, c.hc, c.D).float()
        pre = torch.zeros(N, Bk, c.hc, device=X.device)
        pre[..., 0] = 1
        cs = angles(block_pos, self.freq_main)
        vis = torch.cat([ctx_visible, torch.ones(N, Bk, dtype=torch.bool, device=X.device)], dim=1)
        vis = vis[:, None, :].expand(N, Bk, vis.shape[1])  # no causal mask inside the block
        for s, st in enumerate(self.mtp):
            def att(xn, st=st, s=s):
                _, q, kv = self.q_kv(st.attn, xn, cs)
                return self.attend(st.attn, q, torch.cat([ctx[s], kv], dim=1), vis, cs)[0]

            X, pre = self.block(st, X, pre, att)
        last = self.mtp[-1]
        x = self.collapse(X, pre)
        return x, rms(x, last.norm.weight, c.eps) @ self.head.weight.T

    def draft_heads(self, x, base, prev_tokens):
        """Markov bias and confidence for slots whose previous tokens are `prev_tokens` [N, Bk]
        (the anchor, then each slot's predecessor): biased logits [N, Bk, V], confidence [N, Bk]."""
        last = self.mtp[-1]
        emb = last.markov_head.embed(prev_tokens)
        logits = base + emb @ last.markov_head.head.weight.T
        conf = (torch.cat([x, emb], -1) @ last.confidence_head.proj.weight.T)[..., 0]
        return logits, conf

    @torch.no_grad()
    def draft(self, tokens: torch.Tensor, anchor: int):
        """Greedy draft after the target processed `tokens` [S] (positions 0..P) and chose `anchor`:
        ids [Bk+1], Markov-biased logits [Bk, V], confidence [Bk] (section 3.11, one sequence)."""
        c = self.c
        _, taps, _ = self.forward(tokens[None], taps=True)
        S = tokens.shape[0]
        lo = max(0, S - c.W)
        ctx = [k[:, lo:] for k in self.context_keys(taps)]
        vis = torch.ones(1, S - lo, dtype=torch.bool, device=tokens.device)
        Bk = c.block
        ids = torch.tensor([[anchor] + [c.noise] * (Bk - 1)], device=tokens.device)
        bpos = torch.arange(S, S + Bk, device=tokens.device)[None]
        x, base = self.draft_block(ctx, vis, ids, bpos)
        out = [anchor]
        for i in range(Bk):  # the Markov chain is sequential: slot i's bias needs slot i-1's pick
            lg, _ = self.draft_heads(x[:, i:i + 1], base[:, i:i + 1], torch.tensor([[out[-1]]], device=tokens.device))
            out.append(int(torch.argmax(lg[0, 0])))
        logits, conf = self.draft_heads(x, base, torch.tensor([out[:-1]], device=tokens.device))
        return torch.tensor(out), logits[0], conf[0]


def make_config(cfg: dict) -> R.Config:
    """R.Config with the candidate mask allowed (this module transcribes it) and the draft
    taps derived when the config omits them (the last three non-KV-source layers)."""
    j = dict(cfg)
    L = j["num_hidden_layers"]
    kv = j["kv_source_layer_ids"]
    cand = j.get("candidate_source_layer_id", kv[-1] if kv else -1)
    j.setdefault("dspark_target_layer_ids", sorted([i for i in range(L) if i not in kv])[-3:])
    c = R.Config(dict(j, candidate_source_layer_id=-1))
    c.j, c.cand_src = j, cand
    return c


def load_state(model: V41, tensors: dict[str, np.ndarray]) -> None:
    """Load float32 arrays by release name (a transformers-named fixture is renamed first)."""
    sd = model.state_dict()
    seen = set()
    for name, a in tensors.items():
        n = R.canonical(name)
        if n not in sd:
            if n.endswith("bias_vl") or n.endswith(".scale"):
                continue
            raise KeyError(f"checkpoint tensor {name} has no place in the model")
        if tuple(sd[n].shape) != tuple(a.shape):
            raise ValueError(f"{name}: shape {a.shape}, model wants {tuple(sd[n].shape)}")
        sd[n].copy_(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)))
        seen.add(n)
    missing = [n for n in sd if n not in seen]
    if missing:
        raise KeyError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
