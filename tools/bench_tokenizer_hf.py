#!/usr/bin/env python3
"""Hugging Face `tokenizers` throughput on the same corpus as bench/bench_tokenizer.cpp,
single-threaded (RAYON_NUM_THREADS=1, one document per call): encode and decode MB/s.

usage: RAYON_NUM_THREADS=1 python3 tools/bench_tokenizer_hf.py [--reps N]
needs: pip install -r tools/requirements-reference.txt
"""
import argparse
import json
import os
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer", "deepseek")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    docs = [json.loads(line) for line in open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8")]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    tok = Tokenizer.from_file(os.path.join(DATA, "tokenizer.json"))
    best_enc = best_dec = float("inf")
    for _ in range(args.reps):
        t = time.perf_counter()
        ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
        best_enc = min(best_enc, time.perf_counter() - t)
        t = time.perf_counter()
        for i in ids:
            tok.decode(i, skip_special_tokens=False)
        best_dec = min(best_dec, time.perf_counter() - t)
    print(f"tokenizers {__import__('tokenizers').__version__}: {len(docs)} documents, {nbytes / 1e6:.2f} MB")
    print(f"encode: {nbytes / best_enc / 1e6:.2f} MB/s (best of {args.reps})")
    print(f"decode: {nbytes / best_dec / 1e6:.2f} MB/s (best of {args.reps})")


if __name__ == "__main__":
    main()
