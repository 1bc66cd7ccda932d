"""The release checkpoint formats, in Python: safetensors with F32, BF16, F8_E4M3, F8_E8M0 and I8.

Quantising follows the engine's rule (kernels::quantize_weight_rows, the bytes `deepinfer
quantize` writes): per block (32 x 32 values for FP8 dense weights, 32 columns of a row for
Engram rows and MXFP4 experts) the ue8m0 scale is 2^ceil(log2(amax / max_code)) from the
exponent and mantissa fields of the float32 quotient (max_code 448 for e4m3, 6 for e2m1),
clamped to codes [0, 254], code 0 for an all-zero block; a value is stored as the code of
clamp(x / scale, -max, max) rounded to nearest even (e2m1 with the reference's tie rule: ties
at 0.25, 1.25, 2.5 and 5 down, at 0.75, 1.75 and 3.5 up; sign bit 3, low nibble = even input).
Which tensor gets which format is model::release_format's table (FORMAT below). Dequantising is
exact: value x 2^(scale - 127). tools/train/README.md says how this was checked against the engine.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import torch

DT_NP = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "I8": np.uint8, "F8_E4M3": np.uint8,
         "F8_E8M0": np.uint8, "BF16": np.uint16, "F16": np.float16}


def release_format(name: str) -> str:
    """F32, BF16, FP8B (32x32 blocks), FP8R (32 channels of a row) or MXFP4."""
    if name in ("embed.weight", "head.weight") or ".markov_head." in name:
        return "BF16"
    if ".engram.embed." in name:
        return "FP8R"
    if ".ffn.experts." in name:
        return "MXFP4"
    for part in (".engram.wkv.", ".shared_experts.", ".indexer.wq_b.", ".attn.wq_a.", ".attn.wq_b.", ".attn.wkv.",
                 ".attn.wo_a.", ".attn.wo_b.", ".main_proj."):
        if part in name:
            return "FP8B"
    return "F32"


# ----------------------------------------------------------------------------- safetensors


def read_raw(path: str) -> dict[str, tuple[str, list[int], np.ndarray]]:
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in DT_NP:
            raise SystemExit(f"{path}: tensor {name} has dtype {t['dtype']}; readable: {sorted(DT_NP)}")
        s, e = t["data_offsets"]
        a = np.frombuffer(data[8 + n + s:8 + n + e], dtype=DT_NP[t["dtype"]])
        out[name] = (t["dtype"], t["shape"], a)
    return out


def write_raw(path: str, tensors: dict[str, tuple[str, np.ndarray]]) -> int:
    """tensors: name -> (dtype string, array of the stored bytes' numpy type). Returns the file size."""
    names = sorted(tensors)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name in names:
        dt, a = tensors[name]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name][1]).tobytes())
    return 8 + len(h) + off


# ----------------------------------------------------------------------------- codes

_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
_THRESH = np.array([np.nextafter(np.float32(0.25), np.float32(1)), 0.75, np.nextafter(np.float32(1.25), np.float32(2)),
                    1.75, np.nextafter(np.float32(2.5), np.float32(3)), 3.5,
                    np.nextafter(np.float32(5.0), np.float32(6))], dtype=np.float32)


def e4m3_codes(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def e4m3_values(codes: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.array(codes, dtype=np.uint8)).view(torch.float8_e4m3fn).float().numpy()


def e2m1_codes(q: np.ndarray) -> np.ndarray:
    m = np.abs(q)
    code = (m[..., None] >= _THRESH).sum(-1).astype(np.uint8)
    return code | (np.signbit(q).astype(np.uint8) << 3)


def scale_codes(amax: np.ndarray, max_code: float) -> np.ndarray:
    t = (amax.astype(np.float32) / np.float32(max_code)).astype(np.float32)
    b = t.view(np.uint32)
    k = ((b >> 23) & 0xFF).astype(np.int64) - 127 + ((b & 0x7FFFFF) != 0)
    code = np.clip(k + 127, 0, 254).astype(np.uint8)
    return np.where(amax > 0, code, 0).astype(np.uint8)


def e8m0_values(codes: np.ndarray) -> np.ndarray:
    return np.ldexp(np.float32(1), codes.astype(np.int32) - 127).astype(np.float32)


def _pad(x: np.ndarray, rb: int, cb: int) -> np.ndarray:
    R, C = x.shape
    return np.pad(x, ((0, -R % rb), (0, -C % cb)))


def quantize(x: np.ndarray, fmt: str) -> dict[str, tuple[str, np.ndarray]]:
    """A float32 matrix [R, C] -> {"weight": (dtype, codes), "scale": (dtype, scales)} or {"weight": ...}."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if fmt == "F32":
        return {"weight": ("F32", x)}
    if fmt == "BF16":
        return {"weight": ("BF16", torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))}
    R, C = x.shape
    rb = 32 if fmt == "FP8B" else 1
    xp = _pad(x, rb, 32)
    blocks = xp.reshape(xp.shape[0] // rb, rb, xp.shape[1] // 32, 32)
    amax = np.abs(blocks).max(axis=(1, 3))  # [R/rb, C/32]
    max_code = 6.0 if fmt == "MXFP4" else 448.0
    sc = scale_codes(amax, max_code)
    s = np.repeat(np.repeat(e8m0_values(sc), rb, 0), 32, 1)[:R, :C]
    q = np.clip(x / s, -max_code, max_code).astype(np.float32)
    if fmt == "MXFP4":
        codes = e2m1_codes(q)
        if C % 2:
            codes = np.pad(codes, ((0, 0), (0, 1)))
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        return {"weight": ("I8", packed), "scale": ("F8_E8M0", sc)}
    return {"weight": ("F8_E4M3", e4m3_codes(q)), "scale": ("F8_E8M0", sc)}


def dequantize(dt: str, shape: list[int], a: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    """Stored bytes -> float32 of the logical shape (MXFP4: two codes a byte, so [R, 2*packed])."""
    if dt == "F32":
        return a.reshape(shape).astype(np.float32)
    if dt == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dt == "F16":
        return a.reshape(shape).astype(np.float32)
    if dt in ("I64", "I32"):
        return a.reshape(shape)
    R = shape[0]
    if dt == "F8_E4M3":
        v = e4m3_values(a).reshape(shape)
        C = shape[1]
    elif dt == "I8":
        p = a.reshape(shape)
        lo, hi = p & 0xF, p >> 4
        v = _E2M1[np.stack([lo, hi], -1).reshape(R, -1)]
        C = v.shape[1]
    else:
        raise ValueError(f"cannot dequantise dtype {dt}")
    if scale is None:
        raise ValueError(f"a {dt} tensor needs its .scale")
    scale = scale.reshape(scale.shape)
    rb = 32 if scale.shape[0] != R else 1
    s = np.repeat(np.repeat(e8m0_values(scale), rb, 0), 32, 1)[:R, :C]
    return (v * s).astype(np.float32)


def read_dequantized(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a release (or float) checkpoint as float32, scales folded in."""
    raw = read_raw(path)
    out = {}
    for name, (dt, shape, a) in raw.items():
        if dt == "F8_E8M0":
            continue
        sname = name[: -len(".weight")] + ".scale" if name.endswith(".weight") else None
        sc = None
        if sname and sname in raw and raw[sname][0] == "F8_E8M0":
            sc = raw[sname][2].reshape(raw[sname][1])
        out[name] = dequantize(dt, shape, a, sc)
    return out


def export(tensors: dict[str, np.ndarray]) -> dict[str, tuple[str, np.ndarray]]:
    """Float32 tensors by release name -> the stored tensors of the release formats."""
    out = {}
    for name, a in tensors.items():
        fmt = release_format(name) if a.ndim == 2 else "F32"
        q = quantize(a, fmt) if a.ndim == 2 else {"weight": ("F32", np.ascontiguousarray(a, dtype=np.float32))}
        out[name] = q["weight"]
        if "scale" in q:
            out[name[: -len(".weight")] + ".scale"] = q["scale"]
    return out
