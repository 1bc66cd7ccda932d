#!/usr/bin/env python3
"""Train the demonstration model's tokenizer and encode the corpus with it.

The tokenizer is a byte-level BPE trained with Hugging Face `tokenizers` on the corpus's
training split only, shaped like DeepSeek-V4.1's: no normalizer, DeepSeek's three isolating
pre-tokenizer splits and ByteLevel (copied from tests/data/tokenizer/deepseek/tokenizer.json),
ByteLevel decoder, specials <｜begin▁of▁sentence｜> = 0, <｜end▁of▁sentence｜> = 1,
<｜▁pad▁｜> = 2 inside the BPE vocabulary (as in DeepSeek's), and after the BPE tokens the added
tokens the chat encoding, tool markup and DSpark use (ADDED below; the DSpark noise token is
DeepSeek's `<｜place▁holder▁no▁799｜>`). The vocabulary is exactly --vocab ids, no holes.

Outputs in --out (default build/train/tok):
  tokenizer.json, tokenizer_config.json   the tokenizer (what the checkpoint ships)
  special_ids.json                        bos/eos/pad/noise ids, vocab size, and the Engram
                                          compressed vocabulary size (tools/make_engram_token_map.py)
  engram_map.npy                          int32 [vocab]: Engram compressed id of each token id
  train_ids.npy, val_ids.npy              uint16: every document as [BOS] + ids + [EOS], concatenated
  val_offsets.npy                         int64 [docs + 1]: validation document k is
                                          val_ids[off[k]:off[k+1]]

Usage: python3 tools/train/tokenizer.py --corpus build/train/corpus [--out DIR] [--vocab 8192]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
from make_engram_token_map import build_compressed_token_map  # noqa: E402

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
NOISE = "<｜place▁holder▁no▁799｜>"
# (content, special): DeepSeek's flags for the tokens its V4 tokenizer has; V4.1's
# <｜System｜> and <｜deepseek_image｜> as non-special like the other role tokens.
ADDED = [("<｜User｜>", False), ("<｜Assistant｜>", False), ("<｜System｜>", False), ("<think>", False),
         ("</think>", False), ("<｜latest_reminder｜>", False), ("<｜deepseek_image｜>", False), ("｜DSML｜", False),
         ("<｜action｜>", False), ("<｜query｜>", False), ("<｜authority｜>", False), ("<｜domain｜>", False),
         ("<｜title｜>", False), ("<｜read_url｜>", False), ("<｜fim▁hole｜>", False), ("<｜fim▁begin｜>", False),
         ("<｜fim▁end｜>", False), (NOISE, True)]


def deepseek_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    with open(os.path.join(REPO, "tests/data/tokenizer/deepseek/tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)["pre_tokenizer"]
    return Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": spec, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "vocab": {}, "merges": []}})).pre_tokenizer


def read_texts(path: str):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def train(corpus: str, vocab: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = deepseek_pre_tokenizer()
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(ADDED), min_frequency=2, show_progress=False,
                                  special_tokens=[BOS, EOS, PAD], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(read_texts(os.path.join(corpus, "train.jsonl")), trainer=trainer)
    n_bpe = tok.get_vocab_size(with_added_tokens=True)
    if n_bpe != vocab - len(ADDED):
        raise SystemExit(f"BPE training gave {n_bpe} tokens, wanted {vocab - len(ADDED)}: the corpus is too small "
                         f"for --vocab {vocab}")
    for content, special in ADDED:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=not special, special=special)
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    return tok


def encode_split(tok: Tokenizer, path: str, bos: int, eos: int):
    ids, offsets = [], [0]
    texts = list(read_texts(path))
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        doc = [bos] + enc.ids + [eos]
        ids.append(np.asarray(doc, dtype=np.uint16))
        offsets.append(offsets[-1] + len(doc))
    return np.concatenate(ids), np.asarray(offsets, dtype=np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="build/train/corpus")
    ap.add_argument("--out", default="build/train/tok")
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    if not 512 <= a.vocab <= 65536:
        raise SystemExit(f"--vocab must be in 512..65536 (uint16 ids), got {a.vocab}")
    os.makedirs(a.out, exist_ok=True)
    tok = train(a.corpus, a.vocab)
    path = os.path.join(a.out, "tokenizer.json")
    tok.save(path)
    tok = Tokenizer.from_file(path)
    V = tok.get_vocab_size(with_added_tokens=True)
    ids = {name: tok.token_to_id(s) for name, s in (("bos", BOS), ("eos", EOS), ("pad", PAD), ("noise", NOISE))}
    if V != a.vocab or max(tok.get_vocab().values()) != V - 1 or [ids["bos"], ids["eos"], ids["pad"]] != [0, 1, 2]:
        raise SystemExit(f"tokenizer layout: vocab {V}, ids {ids}: expected {a.vocab} ids without holes, specials 0,1,2")
    for content, _ in ADDED:
        if tok.encode(content, add_special_tokens=False).ids != [tok.token_to_id(content)]:
            raise SystemExit(f"added token {content!r} does not encode to its own id")
    cmap, keys, _ = build_compressed_token_map(tok)
    np.save(os.path.join(a.out, "engram_map.npy"), cmap)
    info = {"vocab_size": V, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
            "dspark_noise_token_id": ids["noise"], "engram_compressed_vocab_size": len(keys)}
    with open(os.path.join(a.out, "special_ids.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"backend": "tokenizers", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
                   "model_max_length": 1048576, "tokenizer_class": "TokenizersBackend"}, f, indent=2,
                  ensure_ascii=False)
        f.write("\n")
    for split in ("train", "val"):
        arr, off = encode_split(tok, os.path.join(a.corpus, f"{split}.jsonl"), 0, 1)
        np.save(os.path.join(a.out, f"{split}_ids.npy"), arr)
        if split == "val":
            np.save(os.path.join(a.out, "val_offsets.npy"), off)
        print(f"{split}: {len(off) - 1} documents, {len(arr)} tokens")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
