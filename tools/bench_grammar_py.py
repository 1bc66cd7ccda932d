#!/usr/bin/env python3
"""xgrammar and llguidance on the same schemas, vocabulary and token sequences as
bench/bench_grammar (one thread each), for a side-by-side of mask time and compile time.

    ./build/cpu/bench/bench_grammar --dump-walks /tmp/walks.jsonl --dump-vocab /tmp/vocab.json
    pip install xgrammar llguidance torch transformers   # test tooling only
    python3 tools/bench_grammar_py.py /tmp/walks.jsonl /tmp/vocab.json \
        --tokenizer tests/data/tokenizer/deepseek/tokenizer.json

Every step of every recorded walk is replayed: time the mask fill, then accept the recorded
token. A library whose grammar rejects a recorded token (its JSON dialect differs, e.g. in
number or white-space rules) stops that walk there; the steps compared are reported.
Compile time: schema -> compiled grammar with its mask cache (xgrammar: GrammarCompiler with
max_threads=1 and no cache; llguidance: grammar_from_json_schema + LLMatcher, which computes
masks lazily).
"""
import argparse
import json
import statistics
import time


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def load(walks_path):
    schemas, walks = {}, []
    with open(walks_path) as f:
        for line in f:
            w = json.loads(line)
            schemas.setdefault(w["name"], w["schema"])
            walks.append(w)
    return schemas, walks


def report(name, mask_us, compile_ms, steps, total_steps, failed):
    print(f"{name}: schemas compiled {len(compile_ms)}, failed {failed}; steps compared {steps}/{total_steps}")
    print(f"  mask time per token: p50 {pct(mask_us, 0.5):.2f} us, p99 {pct(mask_us, 0.99):.2f} us, "
          f"mean {statistics.fmean(mask_us) if mask_us else float('nan'):.2f} us")
    print(f"  compile time per schema: p50 {pct(compile_ms, 0.5):.1f} ms, p99 {pct(compile_ms, 0.99):.1f} ms, "
          f"mean {statistics.fmean(compile_ms) if compile_ms else float('nan'):.1f} ms")


def bench_xgrammar(schemas, walks, vocab):
    import torch
    import xgrammar as xgr
    torch.set_num_threads(1)
    enc = [b"" if sp else bytes.fromhex(h) for h, sp in zip(vocab["tokens_hex"], vocab["special"])]
    n = len(enc)
    info = xgr.TokenizerInfo(enc, vocab_type=xgr.VocabType.RAW, vocab_size=n, stop_token_ids=vocab["stop_ids"])
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    compiled, compile_ms, failed = {}, [], 0
    for name, schema in schemas.items():
        t0 = time.perf_counter()
        try:
            if schema is None:
                g = compiler.compile_builtin_json_grammar()
            else:
                g = compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"  xgrammar cannot compile {name}: {str(e)[:120]}")
            continue
        compile_ms.append((time.perf_counter() - t0) * 1e3)
        compiled[name] = g
    mask_us, steps, total = [], 0, 0
    bitmask = xgr.allocate_token_bitmask(1, n)
    for w in walks:
        total += len(w["tokens"])
        if w["name"] not in compiled:
            continue
        m = xgr.GrammarMatcher(compiled[w["name"]])
        for t in w["tokens"]:
            t0 = time.perf_counter_ns()
            m.fill_next_token_bitmask(bitmask)
            mask_us.append((time.perf_counter_ns() - t0) / 1e3)
            steps += 1
            if not m.accept_token(t):
                break
    report("xgrammar " + getattr(xgr, "__version__", "0.2.9"), mask_us, compile_ms, steps, total, failed)


def bench_llguidance(schemas, walks, tokenizer_path):
    import numpy as np
    import llguidance as llg
    tok = llg.LLTokenizer(tokenizer_path)
    n = tok.vocab_size
    grammars, compile_ms, failed = {}, [], 0
    for name, schema in schemas.items():
        t0 = time.perf_counter()
        if schema is None:
            schema = {"type": "object"}
        elif schema is True:
            schema = {}
        try:
            src = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": True})
        except ValueError as e:
            failed += 1
            print(f"  llguidance cannot compile {name}: {str(e)[:120]}")
            continue
        m = llg.LLMatcher(tok, src, log_level=0)
        if m.is_error():
            failed += 1
            print(f"  llguidance cannot compile {name}: {m.get_error()[:120]}")
            continue
        compile_ms.append((time.perf_counter() - t0) * 1e3)
        grammars[name] = src
    mask_us, steps, total = [], 0, 0
    mask = np.zeros((n + 31) // 32, dtype=np.int32)
    ptr, size = mask.ctypes.data, mask.size * 4
    for w in walks:
        total += len(w["tokens"])
        if w["name"] not in grammars:
            continue
        m = llg.LLMatcher(tok, grammars[w["name"]], log_level=0)
        for t in w["tokens"]:
            t0 = time.perf_counter_ns()
            m.unsafe_compute_mask_ptr(ptr, size)
            mask_us.append((time.perf_counter_ns() - t0) / 1e3)
            steps += 1
            if not m.consume_token(t) or m.is_error():
                break
    report(f"llguidance {llg.get_version() if hasattr(llg, 'get_version') else ''}", mask_us, compile_ms, steps, total, failed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("walks")
    ap.add_argument("vocab")
    ap.add_argument("--tokenizer", default="tests/data/tokenizer/deepseek/tokenizer.json")
    ap.add_argument("--only", choices=["xgrammar", "llguidance"])
    a = ap.parse_args()
    schemas, walks = load(a.walks)
    vocab = json.load(open(a.vocab))
    print(f"{len(schemas)} schemas, {len(walks)} walks, {sum(len(w['tokens']) for w in walks)} steps, vocabulary {len(vocab['tokens_hex'])}")
    if a.only != "llguidance":
        bench_xgrammar(schemas, walks, vocab)
    if a.only != "xgrammar":
        bench_llguidance(schemas, walks, a.tokenizer)


if __name__ == "__main__":
    main()
