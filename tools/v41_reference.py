#!/usr/bin/env python3
"""A NumPy transcription of the DeepSeek-V4.1 forward and its DSpark draft stages.

Written from the project's model spec (deepseek-v41-forward.md: sections 3.1-3.11, 4 and 5),
independently of the C++ engine, in float32. The transformers reference does not build the
DSpark stages (section 3.11), so this is the reference the engine's draft stages are tested
against: tools/make_dspark_fixture.py checks the backbone part against the transformers goldens
of a fixture first, then writes the draft goldens.

What it covers: the cache-path semantics of one forward over a whole prompt from position 0
(KV sources' compressed entries and indexer keys, index sources' top-k, Engram with the
compressed token map given as data, mHC, MoE, the fake quantisers), CED bounded replay (the
late layers on the prompt's tail only), the DSpark taps, the stages' context rings, the draft
block and the heads. Not covered (asserted): the candidate mask of index sources after the
candidate source, partial compressor groups carried across calls.
"""
from __future__ import annotations

import json
import struct

import numpy as np

F32 = np.float32


# ----------------------------------------------------------------------------- safetensors

_DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in _DTYPES:
            raise SystemExit(f"{path}: tensor {name} has dtype {t['dtype']}; this reader takes {sorted(_DTYPES)}")
        s, e = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + s : 8 + n + e], dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    names = sorted(tensors)
    header, off = {}, 0
    for name in names:
        a = np.ascontiguousarray(tensors[name], dtype=F32)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name], dtype=F32).tobytes())


def canonical(name: str) -> str:
    """Transformers names to the release scheme (the engine's canonical names)."""
    if name.startswith("model."):
        name = name[len("model.") :]
    return "head.weight" if name == "lm_head.weight" else name


# ----------------------------------------------------------------------------- numerics


def rms(x, w, eps):
    x = x.astype(F32)
    y = x * (F32(1) / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + F32(eps)))
    return y if w is None else (w * y).astype(F32)


def sigmoid(x):
    return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


def softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(F32)


def pow2ceil(t):
    """2^ceil(log2 t) for float32 t > 0, from the exponent and mantissa fields (section 4.3)."""
    bits = np.asarray(t, dtype=F32).view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int64) - 127 + ((bits & 0x7FFFFF) != 0)
    return np.ldexp(1.0, e).astype(F32)


def round_e4m3(v):
    """Round float32 values in [-448, 448] to e4m3fn, nearest even, subnormal step 2^-9."""
    a = np.abs(v.astype(np.float64))
    _, ex = np.frexp(a)
    e = np.maximum(ex - 1, -6)
    q = np.ldexp(1.0, e - 3)
    r = np.minimum(np.round(a / q) * q, 448.0)
    return np.where(v < 0, -r, r).astype(F32)


def round_e2m1(q):
    """e2m1 by counting thresholds: 0.25, 1.25, 2.5, 5 round up only above; 0.75, 1.75, 3.5 at."""
    a = np.abs(q)
    code = ((a > 0.25).astype(np.int64) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    vals = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=F32)[code]
    return np.where(q < 0, -vals, vals).astype(F32)


def _blocks(x, block):
    d = x.shape[-1]
    return x.reshape(x.shape[:-1] + (d // block, block))


def fq8(x, block=32):
    if x.shape[-1] % block:
        return x
    b = _blocks(x.astype(F32), block)
    amax = np.maximum(np.max(np.abs(b), axis=-1, keepdims=True), F32(1e-4))
    s = pow2ceil((amax * (F32(1) / F32(448))).astype(F32))
    q = round_e4m3(np.clip(b / s, F32(-448), F32(448)).astype(F32))
    return (q * s).astype(F32).reshape(x.shape)


def fq4_pow2(x, block=32):
    if x.shape[-1] % block:
        return x
    b = _blocks(x.astype(F32), block)
    amax = np.maximum(np.max(np.abs(b), axis=-1, keepdims=True), F32(6 * 2.0**-126))
    s = pow2ceil((amax * (F32(1) / F32(6))).astype(F32))
    return (round_e2m1(np.clip(b / s, F32(-6), F32(6)).astype(F32)) * s).astype(F32).reshape(x.shape)


def fq4_e4m3(x, block=16):
    if x.shape[-1] % block:
        return x
    b = _blocks(x.astype(F32), block)
    amax = np.maximum(np.max(np.abs(b), axis=-1, keepdims=True), F32(6 * 2.0**-9))
    s = round_e4m3((amax / F32(6)).astype(F32))
    return (round_e2m1(np.clip(b / s, F32(-6), F32(6)).astype(F32)) * s).astype(F32).reshape(x.shape)


def inv_freq(p: dict, rd: int, max_pos: int):
    half = rd // 2
    pf = np.array([F32(p["rope_theta"] ** float(F32(2 * i) / F32(rd))) for i in range(half)], dtype=F32)
    if p.get("rope_type", "default") != "yarn":
        return (F32(1) / pf).astype(F32)
    orig = float(p["original_max_position_embeddings"])
    factor = float(p["factor"]) if "factor" in p else max_pos / orig
    base = float(p["rope_theta"])

    def corr(rot):
        return rd * np.log(orig / (rot * 2 * np.pi)) / (2 * np.log(base))

    low, high = corr(p.get("beta_fast", 32)), corr(p.get("beta_slow", 1))
    if p.get("truncate", True):
        low, high = np.floor(low), np.ceil(high)
    low, high = max(low, 0.0), min(high, rd - 1.0)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(half, dtype=F32) - F32(low)) / F32(high - low), 0, 1).astype(F32)
    extrap_factor = (F32(1) - ramp).astype(F32)
    return ((F32(1) / (F32(factor) * pf)) * (F32(1) - extrap_factor) + (F32(1) / pf) * extrap_factor).astype(F32)


def rope(x, pos, freqs, rd, inverse=False):
    """Interleaved pairs on the last rd channels of x [rows, d] or [rows, heads, d]; pos [rows]."""
    ang = (pos.astype(F32)[:, None] * freqs[None, :]).astype(F32)
    c = np.cos(ang.astype(np.float64)).astype(F32)
    s = np.sin(ang.astype(np.float64)).astype(F32)
    if inverse:
        s = -s
    if x.ndim == 3:  # [rows, heads, d]
        c, s = c[:, None, :], s[:, None, :]
    y = x.astype(F32).copy()
    d = x.shape[-1]
    a, b = x[..., d - rd :: 2], x[..., d - rd + 1 :: 2]
    y[..., d - rd :: 2] = a * c - b * s
    y[..., d - rd + 1 :: 2] = a * s + b * c
    return y


# ----------------------------------------------------------------------------- the model


class Config:
    def __init__(self, j: dict):
        g = j.get
        self.j = j
        self.V, self.D, self.L = j["vocab_size"], j["hidden_size"], j["num_hidden_layers"]
        self.H, self.hd, self.W = j["num_attention_heads"], j["head_dim"], j["sliding_window"]
        self.rd, self.o_groups, self.o_lora = j["qk_rope_head_dim"], j["o_groups"], j["o_lora_rank"]
        self.hc, self.iters, self.hc_eps, self.eps = j["hc_mult"], j["hc_sinkhorn_iters"], j["hc_eps"], j["rms_norm_eps"]
        self.ratios = list(j["compress_ratios"]) + [0] * (self.L + g("num_nextn_predict_layers", 3) - len(j["compress_ratios"]))
        self.kv_src, self.idx_src = j["kv_source_layer_ids"], j["index_source_layer_ids"]
        self.cand_src = g("candidate_source_layer_id", self.kv_src[-1] if self.kv_src else -1)
        self.n_idx, self.d_idx, self.topk = j["index_n_heads"], j["index_head_dim"], j["index_topk"]
        self.E, self.K, self.I = j["n_routed_experts"], j["num_experts_per_tok"], j["moe_intermediate_size"]
        self.gate_temp, self.scaling = j.get("gate_temp", 1.0), j["routed_scaling_factor"]
        self.norm_topk, self.limit = j.get("norm_topk_prob", True), j["swiglu_limit"]
        assert j.get("scoring_func", "sqrtsoftplus") == "sqrtsoftplus"
        self.engram_ids = g("engram_layer_ids", [])
        self.n_stages = g("num_nextn_predict_layers", 3)
        self.block = g("dspark_block_size", 5)
        self.noise = g("dspark_noise_token_id", 128799)
        self.taps = j["dspark_target_layer_ids"]
        self.E_d, self.K_d = g("dspark_n_routed_experts", 128), g("dspark_num_experts_per_tok", 3)
        self.rank = g("dspark_markov_rank", 256)
        rp = j["rope_parameters"]
        mp = j.get("max_position_embeddings", 1048576)
        self.freq_main = inv_freq(rp["main"], self.rd, mp)
        self.freq_comp = inv_freq(rp["compress"], self.rd, mp)
        self.late = max(self.kv_src) + 1 if self.kv_src else self.L
        assert not [s for s in self.idx_src if 0 <= self.cand_src < s], "candidate masking is not transcribed"

    def kv_source_of(self, i):
        return max([s for s in self.kv_src if s <= i], default=-1) if self.ratios[i] > 0 else -1

    def index_source_of(self, i):
        return max([s for s in self.idx_src if s <= i], default=-1) if self.ratios[i] > 0 else -1


class Engram:
    """Hash ids (section 3.9) from a compressed token map given as data."""

    def __init__(self, c: Config, token_map: np.ndarray):
        j = c.j
        self.map = token_map.astype(np.int64)
        self.N, self.heads = j["engram_max_ngram_size"], j["engram_n_heads"]
        cvocab = j["engram_compressed_vocab_size"]
        self.pad = int(self.map[j["engram_pad_id"]])
        used, primes, offsets = set(), [], []
        for _ in c.engram_ids:
            layer = []
            for _n in range(2, self.N + 1):
                for _h in range(self.heads):
                    p = j["engram_vocab_size"] - 1
                    while True:
                        p += 1
                        if p not in used and all(p % d for d in range(2, int(p**0.5) + 1)):
                            break
                    used.add(p)
                    layer.append(p)
            primes.append(layer)
            offsets.append(np.concatenate([[0], np.cumsum(layer)[:-1]]).astype(np.int64))
        for li, layer in enumerate(primes):
            assert sum(layer) == j["engram_num_embeddings"][li], "primes do not sum to engram_num_embeddings"
        bound = max(1, (2**63 - 1) // cvocab // 2)
        self.mult = [2 * np.random.default_rng(10007 * l).integers(0, bound, size=self.N, dtype=np.int64) + 1
                     for l in c.engram_ids]
        self.primes, self.offsets = primes, offsets

    def ids(self, tokens: np.ndarray) -> np.ndarray:
        """[S, engram layers, (N-1)*heads] for a prompt from position 0."""
        hist = self.map[tokens]
        S = len(tokens)
        out = np.zeros((S, len(self.primes), (self.N - 1) * self.heads), dtype=np.int64)
        for li in range(len(self.primes)):
            for p in range(S):
                blocked, toks = False, []
                for s in range(self.N):
                    blocked = blocked or p < s
                    toks.append(self.pad if blocked else int(hist[p - s]))
                h = toks[0] * int(self.mult[li][0])
                for i in range(1, self.N):
                    h ^= toks[i] * int(self.mult[li][i])
                    for ch in range(self.heads):
                        k = (i - 1) * self.heads + ch
                        out[p, li, k] = h % self.primes[li][k] + self.offsets[li][k]
        return out


class Model:
    def __init__(self, c: Config, w: dict[str, np.ndarray], engram: Engram | None):
        self.c, self.w, self.engram = c, {canonical(k): v for k, v in w.items()}, engram

    def t(self, name):
        return self.w[name]

    # --- mHC
    def mixes(self, X, p):
        c = self.c
        S, hc, D = X.shape
        f = X.reshape(S, hc * D)
        fh = (f * (F32(1) / np.sqrt(np.mean(f * f, axis=-1, keepdims=True) + F32(c.eps)))).astype(F32)
        m = fh @ self.t(p + "_fn").T
        sc, base = self.t(p + "_scale"), self.t(p + "_base")
        pre = sigmoid(m[:, :hc] * sc[0] + base[:hc]) + F32(c.hc_eps)
        post = F32(2) * sigmoid(m[:, hc : 2 * hc] * sc[1] + base[hc : 2 * hc])
        C = softmax((m[:, 2 * hc :] * sc[2] + base[2 * hc :]).reshape(S, hc, hc), axis=-1) + F32(c.hc_eps)
        C = C / (C.sum(axis=1, keepdims=True) + F32(c.hc_eps))
        for _ in range(c.iters - 1):
            C = C / (C.sum(axis=2, keepdims=True) + F32(c.hc_eps))
            C = C / (C.sum(axis=1, keepdims=True) + F32(c.hc_eps))
        return pre.astype(F32), post.astype(F32), C.astype(F32)

    @staticmethod
    def collapse(X, pre):
        return np.einsum("sk,skd->sd", pre, X).astype(F32)

    @staticmethod
    def expand(y, R, post, C):
        return (post[:, :, None] * y[:, None, :] + np.einsum("sjk,sjd->skd", C, R)).astype(F32)

    # --- MoE (section 3.8), for the backbone (E, K) or a draft stage (E_d, K_d)
    def moe(self, p, x, E, K):
        c = self.c
        z = (x @ self.t(p + "gate.weight").T) / F32(c.gate_temp)
        sp = np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, 20)))).astype(F32)
        s = np.sqrt(sp).astype(F32)
        sel = s + self.t(p + "gate.bias")
        y = np.zeros_like(x)
        for t in range(x.shape[0]):
            idx = sorted(np.argsort(-sel[t], kind="stable")[:K].tolist())
            wts = s[t, idx]
            if c.norm_topk and K > 1:
                wts = wts / (wts.sum() + F32(1e-20))
            wts = (wts * F32(c.scaling)).astype(F32)
            acc = np.zeros(x.shape[1], dtype=F32)
            for e, wt in zip(idx, wts):
                acc = acc + self.expert(p + f"experts.{e}.", x[t], wt)
            y[t] = acc + self.expert(p + "shared_experts.", x[t], None)
        return y

    def expert(self, p, x, weight):
        lim = F32(self.c.limit)
        g, u = x @ self.t(p + "w1.weight").T, x @ self.t(p + "w3.weight").T
        if lim > 0:
            u, g = np.clip(u, -lim, lim), np.minimum(g, lim)
        a = (g * sigmoid(g) * u).astype(F32)
        if weight is not None:
            a = (a * weight).astype(F32)
        return (a @ self.t(p + "w2.weight").T).astype(F32)

    # --- attention pieces
    def q_kv(self, a, xn, pos, freqs):
        c = self.c
        qr = rms(xn @ self.t(a + "wq_a.weight").T, self.t(a + "q_norm.weight"), c.eps)
        q = rope((qr @ self.t(a + "wq_b.weight").T).reshape(len(xn), c.H, c.hd), pos, freqs, c.rd)
        kv = fq8(rope(rms(xn @ self.t(a + "wkv.weight").T, self.t(a + "kv_norm.weight"), c.eps), pos, freqs, c.rd))
        return qr, q, kv

    def attend(self, a, q, pos, keys, visible, freqs):
        """One softmax over `keys` [T, hd] (visible [S, T]) with the sink; out projected to D."""
        c = self.c
        logits = np.einsum("shd,td->sht", q, keys) * F32(1 / np.sqrt(c.hd))
        logits = np.where(visible[:, None, :], logits, F32(-np.inf))
        sink = self.t(a + "attn_sink")[None, :, None]
        m = np.maximum(np.max(logits, axis=-1, keepdims=True), sink)
        e = np.exp(logits - m)
        o = np.einsum("sht,td->shd", e, keys) / (e.sum(axis=-1, keepdims=True) + np.exp(sink - m))
        o = rope(o.astype(F32), pos, freqs, c.rd, inverse=True)
        G, S = c.o_groups, len(q)
        og = o.reshape(S, G, c.H * c.hd // G)
        wa = self.t(a + "wo_a.weight").reshape(G, c.o_lora, c.H * c.hd // G)
        z = np.einsum("sgk,gnk->sgn", og, wa).reshape(S, G * c.o_lora)
        return (z @ self.t(a + "wo_b.weight").T).astype(F32)

    def backbone_attention(self, i, xn, pos, shared, all_pos):
        c = self.c
        a = f"layers.{i}.attn."
        r = c.ratios[i]
        freqs = c.freq_comp if r > 0 else c.freq_main
        qr, q, kv = self.q_kv(a, xn, pos, freqs)
        keys, visible = kv, (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - c.W)
        if r > 0:
            if i in c.kv_src:
                self.compress(i, xn, pos, shared)
            if i in c.idx_src:
                self.index(i, qr, xn, pos, shared)
            comp = shared["comp"]
            sel = shared["topk"][np.searchsorted(all_pos, pos)] if "topk" in shared else np.zeros((len(pos), len(comp)), bool)
            keys, visible = np.concatenate([kv, comp]), np.concatenate([visible, sel], axis=1)
        return self.attend(a, q, pos, keys, visible, freqs)

    def compress(self, i, xn, pos, shared):
        """A KV source over the whole prompt from position 0: its complete groups."""
        c = self.c
        a, r = f"layers.{i}.attn.", c.ratios[i]
        assert pos[0] == 0 and len(pos) == pos[-1] + 1
        if r == 1:
            lat = rms(xn @ self.t(a + "compressor.wkv.weight").T, self.t(a + "compressor.norm.weight"), c.eps)
        else:
            n = len(xn) // r
            kv = (xn[: n * r] @ self.t(a + "compressor.wkv.weight").T).reshape(n, r, c.hd)
            gate = (xn[: n * r] @ self.t(a + "compressor.wgate.weight").T).reshape(n, r, c.hd)
            lat = rms(np.sum(kv * softmax(gate, axis=1), axis=1), self.t(a + "compressor.norm.weight"), c.eps)
        gpos = np.arange(len(lat)) * r
        shared["comp"] = fq4_e4m3(rope(lat, gpos, c.freq_comp, c.rd), 16)
        if i in c.idx_src:
            k = rms(lat @ self.t(a + "indexer.wk.weight").T, self.t(a + "indexer.k_norm.weight"), c.eps)
            shared["index_k"] = fq4_pow2(rope(k, gpos, c.freq_comp, c.rd), 32)

    def index(self, i, qr, xn, pos, shared):
        c = self.c
        a, r = f"layers.{i}.attn.", c.ratios[i]
        k = shared["index_k"]
        qi = (qr @ self.t(a + "indexer.wq_b.weight").T).reshape(len(qr), c.n_idx, c.d_idx)
        qi = fq4_pow2(rope(qi, pos, c.freq_comp, c.rd), 32)
        s = np.maximum(np.einsum("shd,td->sht", qi, k), 0) * F32(1 / np.sqrt(c.d_idx))
        w = (xn @ self.t(a + "indexer.weights_proj.weight").T) * F32(1 / np.sqrt(c.n_idx))
        score = np.einsum("sht,sh->st", s, w).astype(F32)
        score = np.where(np.arange(len(k))[None, :] >= ((pos + 1) // r)[:, None], F32(-np.inf), score)
        sel = np.zeros(score.shape, bool)
        kk = min(c.topk, len(k))
        for t in range(len(score)):
            order = sorted(range(len(k)), key=lambda j: (-score[t, j], j))[:kk]
            for j in order:
                sel[t, j] = np.isfinite(score[t, j])
        shared["topk"] = sel

    def engram_layer(self, i, X, hash_ids):
        c = self.c
        j = c.engram_ids.index(i)
        p = f"layers.{i}.engram."
        S, hc, D = X.shape
        E = self.t(p + "embed.weight")[hash_ids[:, j, :]].reshape(S, -1)
        kv = E @ self.t(p + "wkv.weight").T
        key, value = kv[:, : hc * D].reshape(S, hc, D), kv[:, hc * D :]
        wgt = self.t(p + "q_weight") * self.t(p + "k_weight")
        rstd = (F32(1) / np.sqrt(np.mean(X * X, -1) + F32(c.eps))) * (F32(1) / np.sqrt(np.mean(key * key, -1) + F32(c.eps)))
        dot = np.sum(X * wgt[None] * key, -1) * rstd * F32(1 / np.sqrt(D))
        gate = sigmoid(np.sign(dot) * np.sqrt(np.maximum(np.abs(dot), F32(1e-6))))
        gate = np.where(dot == 0, sigmoid(F32(np.sqrt(1e-6))), gate)
        return (X + gate[:, :, None] * value[:, None, :]).astype(F32)

    def block(self, p, X, pre_in, attention, E, K):
        c = self.c
        R = X
        a_pre, a_post, a_comb = self.mixes(X, p + "hc_attn")
        y = attention(rms(self.collapse(X, pre_in), self.t(p + "attn_norm.weight"), c.eps))
        X = self.expand(y, R, a_post, a_comb)
        R = X
        f_pre, f_post, f_comb = self.mixes(X, p + "hc_ffn")
        y = self.moe(p + "ffn.", rms(self.collapse(X, a_pre), self.t(p + "ffn_norm.weight"), c.eps), E, K)
        return self.expand(y, R, f_post, f_comb), f_pre

    def forward(self, tokens: np.ndarray, replay_from: int = 0):
        """Logits of the rows that run every layer, their positions and the DSpark taps there."""
        c = self.c
        S = len(tokens)
        pos = np.arange(S)
        X = np.repeat(self.t("embed.weight")[tokens][:, None, :], c.hc, axis=1).astype(F32)
        pre = np.zeros((S, c.hc), F32)
        pre[:, 0] = 1
        hash_ids = self.engram.ids(tokens) if c.engram_ids else None
        shared, taps = {}, {}
        rows = pos
        for i in range(c.L):
            if replay_from > 0 and i == c.late:
                keep = rows >= replay_from
                rows, X, pre = rows[keep], X[keep], pre[keep]
                taps = {t: v[keep] for t, v in taps.items()}
            if i in c.engram_ids:
                X = self.engram_layer(i, X, hash_ids[rows])
            if i in c.taps:
                taps[i] = np.mean(X, axis=1).astype(F32)
            att = lambda xn, i=i, rows=rows: self.backbone_attention(i, xn, rows, shared, pos)
            X, pre = self.block(f"layers.{i}.", X, pre, att, c.E, c.K)
        logits = rms(self.collapse(X, pre), self.t("norm.weight"), c.eps) @ self.t("head.weight").T
        return logits.astype(F32), rows, np.concatenate([taps[t] for t in c.taps], axis=-1)

    # --- DSpark (section 3.11)
    def context_rings(self, rows, main_hidden):
        """Each stage's ring: the window's most recent rows' main-stream keys (positions, [n, hd])."""
        c = self.c
        keep = slice(max(0, len(rows) - c.W), len(rows))
        ring_pos = rows[keep]
        main_x = rms(main_hidden[keep] @ self.t("mtp.0.main_proj.weight").T, self.t("mtp.0.main_norm.weight"), c.eps)
        rings = []
        for s in range(c.n_stages):
            a = f"mtp.{s}.attn."
            kv = rms(main_x @ self.t(a + "wkv.weight").T, self.t(a + "kv_norm.weight"), c.eps)
            rings.append(fq8(rope(kv, ring_pos, c.freq_main, c.rd)))
        return ring_pos, rings

    def draft(self, tokens: np.ndarray, anchor: int, replay_from: int = 0):
        """The draft after the target processed `tokens` (positions 0..P) and sampled `anchor`."""
        c = self.c
        _, rows, main_hidden = self.forward(tokens, replay_from)
        ring_pos, rings = self.context_rings(rows, main_hidden)
        P = len(tokens) - 1
        B = c.block
        bpos = np.arange(P + 1, P + 1 + B)
        ids = np.array([anchor] + [c.noise] * (B - 1))
        X = np.repeat(self.t("embed.weight")[ids][:, None, :], c.hc, axis=1).astype(F32)
        pre = np.zeros((B, c.hc), F32)
        pre[:, 0] = 1
        for s in range(c.n_stages):
            a = f"mtp.{s}.attn."

            def att(xn, a=a, ring=rings[s]):
                _, q, kv = self.q_kv(a, xn, bpos, c.freq_main)
                keys = np.concatenate([ring, kv])  # every ring entry, every block entry: no mask
                return self.attend(a, q, bpos, keys, np.ones((B, len(keys)), bool), c.freq_main)

            X, pre = self.block(f"mtp.{s}.", X, pre, att, c.E_d, c.K_d)
        last = f"mtp.{c.n_stages - 1}."
        x = self.collapse(X, pre)
        logits = (rms(x, self.t(last + "norm.weight"), c.eps) @ self.t("head.weight").T).astype(F32)
        membed, mhead = self.t(last + "markov_head.embed.weight"), self.t(last + "markov_head.head.weight")
        out_ids, embs = [anchor], []
        for i in range(B):
            emb = membed[out_ids[-1]]
            logits[i] = logits[i] + emb @ mhead.T
            embs.append(emb)
            out_ids.append(int(np.argmax(logits[i])))
        conf = (np.concatenate([x, np.stack(embs)], axis=1) @ self.t(last + "confidence_head.proj.weight").T)[:, 0]
        return {"ids": np.array(out_ids, np.int64), "logits": logits, "confidence": conf.astype(F32),
                "ring_pos": ring_pos.astype(np.int64), "ring_kv": np.stack(rings).astype(F32)}
