#!/usr/bin/env python3
"""Build the Engram compressed token map exactly as the reference does.

Reference: transformers `models/deepseek_v41/modeling_deepseek_v41.py`,
`build_compressed_token_map`, and docs spec deepseek-v41-forward.md section 3.9.

For every token id in [0, vocab_size):
  text = raw Rust tokenizer decode([id], skip_special_tokens=False)
  if U+FFFD in text: key = id_to_token(id)          (raw byte-level token string)
  else:              key = NORM(text) or text       (empty normalization -> raw text)
  compressed id = index of key in first-seen order.

NORM is a `tokenizers.normalizers.Sequence` (the reference builds it with the same
library, so we call the same library here rather than re-implementing it):
  NFKC, NFD, StripAccents, Lowercase,
  Replace(Regex("[ \\t\\r\\n]+"), " "),
  Replace(Regex("^ $"), "\\ue000"),
  Strip(),
  Replace("\\ue000", " ")

`vocab_size` is `len(tokenizer)` of the transformers fast tokenizer, which is
`Tokenizer.get_vocab_size(with_added_tokens=True)` of the Rust backend; we also check
that it equals max id + 1 so the map has no holes.

Outputs, per tokenizer, in OUT_DIR:
  engram_map.npy     int32 [vocab_size]  compressed id of each token id
  engram_keys.jsonl  one JSON string per line: the key of compressed id 0, 1, ...

Usage:
  python3 tools/make_engram_token_map.py            # both tokenizers, default paths
  python3 tools/make_engram_token_map.py --tokenizer T.json --out DIR [--expect N]
No network access is needed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from tokenizers import Regex, Tokenizer, normalizers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTINEL = "\ue000"  # private-use char protecting a text that is exactly one space

DEFAULT_JOBS = [
    # (tokenizer.json, output dir, expected distinct keys or None, config.json or None)
    (os.path.join(REPO, "tests/data/tokenizer/deepseek/tokenizer.json"),
     os.path.join(REPO, "tests/data/tokenizer/deepseek"), 99092, None),
    (os.path.join(REPO, "tests/data/tokenizer/fixture/tokenizer.json"),
     os.path.join(REPO, "tests/data/tokenizer/fixture"), None,
     "/work/shared/golden/v41/full/config.json"),
]


def make_normalizer():
    return normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.NFD(),
            normalizers.StripAccents(),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
            normalizers.Replace(Regex(r"^ $"), SENTINEL),
            normalizers.Strip(),
            normalizers.Replace(SENTINEL, " "),
        ]
    )


def vocab_len(tok: Tokenizer) -> int:
    n = tok.get_vocab_size(with_added_tokens=True)
    ids = list(tok.get_vocab(with_added_tokens=True).values())
    if max(ids) + 1 != n or len(set(ids)) != n:
        raise SystemExit(f"vocab has holes/duplicates: size {n}, max id {max(ids)}, distinct {len(set(ids))}")
    return n


def build_compressed_token_map(tok: Tokenizer):
    norm = make_normalizer()
    key_to_new: dict[str, int] = {}
    lookup = np.zeros(vocab_len(tok), dtype=np.int32)
    stats = {"fffd_raw": 0, "empty_raw": 0}
    for token_id in range(len(lookup)):
        text = tok.decode([token_id], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(token_id)
            stats["fffd_raw"] += 1
        else:
            normalized = norm.normalize_str(text)
            if not normalized:
                stats["empty_raw"] += 1
            key = normalized or text
        new_id = key_to_new.get(key)
        if new_id is None:
            new_id = len(key_to_new)
            key_to_new[key] = new_id
        lookup[token_id] = new_id
    keys = [None] * len(key_to_new)
    for k, v in key_to_new.items():
        keys[v] = k
    return lookup, keys, stats


def run(tokenizer_path: str, out_dir: str, expect: int | None, config_path: str | None) -> bool:
    tok = Tokenizer.from_file(tokenizer_path)
    lookup, keys, stats = build_compressed_token_map(tok)
    os.makedirs(out_dir, exist_ok=True)
    np.save(os.path.join(out_dir, "engram_map.npy"), lookup)
    with open(os.path.join(out_dir, "engram_keys.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for k in keys:
            f.write(json.dumps(k, ensure_ascii=False) + "\n")
    if config_path and expect is None:
        with open(config_path, encoding="utf-8") as f:
            cfg = json.load(f)
        expect = cfg.get("engram_compressed_vocab_size")
    ok = expect is None or expect == len(keys)
    print(f"{tokenizer_path}: vocab {len(lookup)}, distinct keys {len(keys)}"
          f" (expected {expect}: {'OK' if ok else 'MISMATCH'}),"
          f" U+FFFD->raw {stats['fffd_raw']}, empty->raw {stats['empty_raw']}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer")
    ap.add_argument("--out")
    ap.add_argument("--expect", type=int)
    ap.add_argument("--config", help="config.json whose engram_compressed_vocab_size is expected")
    a = ap.parse_args()
    if a.tokenizer:
        jobs = [(a.tokenizer, a.out or os.path.dirname(os.path.abspath(a.tokenizer)), a.expect, a.config)]
    else:
        jobs = DEFAULT_JOBS
    ok = True
    for job in jobs:
        ok &= run(*job)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
