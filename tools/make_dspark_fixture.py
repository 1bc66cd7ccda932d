#!/usr/bin/env python3
"""Make tests/data/v41/dspark: DSpark draft stages on top of the `full` fixture, with goldens.

The transformers reference does not build the draft stages, so the goldens come from the NumPy
transcription in tools/v41_reference.py. Its backbone is first checked against the `full`
fixture's transformers goldens (every position of the golden prompt, max|diff| / max|ref|);
the script stops if that is above 1e-5.

Writes, in tests/data/v41/dspark:
  config.json        `full`'s config with three draft stages (num_nextn_predict_layers 3, each
                     stage's MoE of 8 experts, top-3, Markov rank 16, block 5; taps 4, 6, 7:
                     an Engram layer, and two layers after the last KV source, which bounded
                     replay runs on the prompt's tail only)
  mtp.safetensors    the stages' random float32 weights (release names `mtp.{s}.*`; every
                     parameter perturbed); the backbone is `full`'s model.safetensors, which
                     the tests place beside it (tokenizer.json too: Engram needs it)
  golden/<case>_{ids,logits,confidence,ring_pos,ring_kv}.npy, golden/cases.json
                     the draft after the target has processed the first `prompt` golden tokens
                     and sampled the next one (the anchor): ids [6] (anchor + 5 drafted),
                     Markov-biased logits [5, V], raw confidence logits [5], the positions the
                     stages' rings hold and their keys [3, positions, head_dim]. Cases: a ring not yet full, a full ring, and the same
                     prompt under bounded replay (its late layers, two of the taps among them,
                     on the last `sliding_window` rows only).
The greedy draft ids are compared exactly, so every position's top two logits must differ by
at least 1e-3 of the largest logit; the script says so if a case does not.

Usage: python3 tools/make_dspark_fixture.py   (numpy, see tools/requirements-reference.txt)
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import v41_reference as R  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL = os.path.join(REPO, "tests/data/v41/full")
OUT = os.path.join(REPO, "tests/data/v41/dspark")
TOKEN_MAP = os.path.join(REPO, "tests/data/tokenizer/fixture/engram_map.npy")  # made from FULL's tokenizer.json
SEED = 4101

DRAFT_KEYS = {"num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_n_routed_experts": 8,
              "dspark_num_experts_per_tok": 3, "dspark_markov_rank": 16}
# (name, prompt tokens, replay_from)
CASES = [("tiny", 3, 0), ("short", 5, 0), ("long", 29, 0), ("replay", 29, 21)]


def stage_weights(c: R.Config, rng: np.random.Generator) -> dict[str, np.ndarray]:
    D, hc, H, hd = c.D, c.hc, c.H, c.hd
    ql = c.j["q_lora_rank"]
    mix = (2 + hc) * hc

    def mat(r, k, std=None):
        return rng.normal(0, std if std is not None else 1 / np.sqrt(k), (r, k)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.normal(size=n)).astype(np.float32)

    def small(n, std=0.1):
        return (std * rng.normal(size=n)).astype(np.float32)

    w = {}
    for s in range(c.n_stages):
        p = f"mtp.{s}."
        w[p + "attn_norm.weight"], w[p + "ffn_norm.weight"] = norm(D), norm(D)
        for site in ("attn", "ffn"):
            w[p + f"hc_{site}_fn"] = mat(mix, hc * D)
            w[p + f"hc_{site}_base"] = small(mix, 0.5)
            w[p + f"hc_{site}_scale"] = norm(3)
        a = p + "attn."
        w[a + "wq_a.weight"], w[a + "q_norm.weight"] = mat(ql, D), norm(ql)
        w[a + "wq_b.weight"] = mat(H * hd, ql)
        w[a + "wkv.weight"], w[a + "kv_norm.weight"] = mat(hd, D), norm(hd)
        w[a + "wo_a.weight"] = mat(c.o_groups * c.o_lora, H * hd // c.o_groups)
        w[a + "wo_b.weight"] = mat(D, c.o_groups * c.o_lora)
        w[a + "attn_sink"] = small(H, 1.0)
        f = p + "ffn."
        w[f + "gate.weight"], w[f + "gate.bias"] = mat(c.E_d, D), small(c.E_d)
        for e in [f"experts.{e}." for e in range(c.E_d)] + ["shared_experts."]:
            w[f + e + "w1.weight"], w[f + e + "w3.weight"] = mat(c.I, D), mat(c.I, D)
            w[f + e + "w2.weight"] = mat(D, c.I)
    w["mtp.0.main_proj.weight"] = mat(D, D * len(c.taps))
    w["mtp.0.main_norm.weight"] = norm(D)
    last = f"mtp.{c.n_stages - 1}."
    w[last + "norm.weight"] = norm(D)
    w[last + "markov_head.embed.weight"] = mat(c.V, c.rank, 1.0)
    w[last + "markov_head.head.weight"] = mat(c.V, c.rank, 0.5 / np.sqrt(c.rank))
    w[last + "confidence_head.proj.weight"] = mat(1, D + c.rank)
    return w


def main() -> None:
    cfg = json.load(open(os.path.join(FULL, "config.json")))
    cfg.update(DRAFT_KEYS)
    c = R.Config(cfg)
    rng = np.random.default_rng(SEED)
    mtp = stage_weights(c, rng)
    weights = dict(R.read_safetensors(os.path.join(FULL, "model.safetensors")))
    weights.update(mtp)
    model = R.Model(c, weights, R.Engram(c, np.load(TOKEN_MAP)))

    tokens = np.load(os.path.join(FULL, "golden/tokens.npy"))
    ref = np.load(os.path.join(FULL, "golden/logits_full.npy"))
    logits, _, _ = model.forward(tokens)
    err = float(np.abs(logits - ref).max() / np.abs(ref).max())
    print(f"backbone against the transformers goldens of `full`: rel err {err:.3g}")
    if err > 1e-5:
        raise SystemExit("the NumPy backbone does not reproduce the reference: not writing goldens")

    os.makedirs(os.path.join(OUT, "golden"), exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    R.write_safetensors(os.path.join(OUT, "mtp.safetensors"), mtp)
    cases, out = [], {}
    for name, n, replay in CASES:
        d = model.draft(tokens[:n], int(tokens[n]), replay)
        out[name] = d
        lg = d["logits"]
        top2 = np.sort(lg, axis=1)[:, -2:]
        margin = float(np.min(top2[:, 1] - top2[:, 0]) / np.abs(lg).max())
        print(f"{name}: prompt {n}, replay_from {replay}, ids {d['ids'].tolist()}, ring {d['ring_pos'].tolist()}, "
              f"smallest top-2 margin {margin:.3g}, confidence {np.round(d['confidence'], 4).tolist()}")
        if margin < 1e-3:
            print(f"  warning: case {name} has a near tie; choose another SEED")
        for k in ("ids", "logits", "confidence", "ring_pos", "ring_kv"):
            np.save(os.path.join(OUT, f"golden/{name}_{k}.npy"), d[k])
        cases.append({"name": name, "prompt": n, "anchor": int(tokens[n]), "replay_from": replay})
    moved = float(np.abs(out["replay"]["logits"] - out["long"]["logits"]).max() / np.abs(out["long"]["logits"]).max())
    print(f"replay against exact: rel diff {moved:.3g} (the rings hold the tail's approximate keys)")
    with open(os.path.join(OUT, "golden/cases.json"), "w") as f:
        json.dump({"tokens": "../full/golden/tokens.npy", "cases": cases}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
