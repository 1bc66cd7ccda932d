#!/usr/bin/env python3
"""Generates tests/data/grammar/schemas_generated.jsonl: random JSON Schemas that use every
feature the structured-output compiler supports (nested objects with required subsets,
additionalProperties, arrays with prefixItems and bounds, enums, consts, anyOf/oneOf/allOf,
$defs/$ref including recursion, string lengths/patterns/formats, integer and number bounds).

Deterministic (seeded). Every generated schema is satisfiable. Usage:
    python3 tools/make_grammar_corpus.py [--count 170] [--seed 2025] [--out PATH]
"""
import argparse
import json
import os
import random

PATTERNS = ["^[a-z]+$", "^[A-Z]{2,4}[0-9]{0,3}$", "^(foo|bar|baz)$", "^\\d{4}-\\d{2}$", "[aeiou]", "^[^\\s]{1,8}$",
            "^#[0-9a-f]{6}$", "^v\\d+\\.\\d+(\\.\\d+)?$", "^[\\w.-]+$", "x|y|z", "^(\\+|-)?[0-9]{1,5}$", "^\\S+ \\S+$"]
FORMATS = ["date", "time", "date-time", "email", "uuid", "ipv4"]
WORDS = ["id", "name", "value", "kind", "count", "items", "meta", "score", "label", "when", "ok", "tags", "x", "y",
         "note", "user", "price", "ratio", "level", "code", "data", "flag", "list", "mode", "size", "url", "ünï", "k\"q"]


def number_bounds(rng, integer):
    s = {}
    choice = rng.randrange(6)
    if choice == 0:
        return s
    if integer:
        lo = rng.choice([-1000, -50, -3, 0, 1, 7, 100, 99999])
        hi = lo + rng.choice([0, 1, 9, 10, 99, 1000, 123456])
    else:
        lo = round(rng.uniform(-100, 100), rng.randrange(0, 4))
        hi = round(lo + rng.choice([0.001, 0.5, 1, 2.75, 100, 12345.5]), 4)
    if choice in (1, 3, 5):
        s["exclusiveMinimum" if (choice == 5 and hi > lo) else "minimum"] = lo
    if choice in (2, 3, 5):
        key = "exclusiveMaximum" if (choice == 5 and hi > lo and (integer is False or hi - lo >= 2)) else "maximum"
        s[key] = hi
    if choice == 4:
        s["minimum"] = lo
        s["maximum"] = hi
    return s


def gen_string(rng):
    s = {"type": "string"}
    r = rng.randrange(5)
    if r == 1:
        s["pattern"] = rng.choice(PATTERNS)
    elif r == 2:
        s["format"] = rng.choice(FORMATS)
    elif r >= 3:
        lo = rng.choice([0, 0, 1, 3])
        s["minLength"] = lo
        s["maxLength"] = lo + rng.choice([0, 2, 5, 12])
    return s


def gen_enum(rng):
    pool = ["alpha", "beta", "γάμμα", "with \"quote\"", 0, 1, -2, 3.5, True, False, None, {"a": 1}, [1, "b"]]
    return {"enum": rng.sample(pool, rng.randrange(1, 5))}


class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.defs = {}

    def leaf(self):
        rng = self.rng
        k = rng.randrange(9)
        if k <= 2:
            return gen_string(rng)
        if k == 3:
            return dict({"type": "integer"}, **number_bounds(rng, True))
        if k == 4:
            return dict({"type": "number"}, **number_bounds(rng, False))
        if k == 5:
            return {"type": rng.choice(["boolean", "null"])}
        if k == 6:
            return gen_enum(rng)
        if k == 7:
            return {"const": rng.choice(["fixed", 42, True, None, {"z": [0]}])}
        return {"type": rng.choice([["string", "null"], ["integer", "boolean"], ["number", "string"]])}

    def node(self, depth):
        rng = self.rng
        if depth <= 0:
            return self.leaf()
        k = rng.randrange(10)
        if k <= 2:
            return self.obj(depth)
        if k <= 4:
            return self.arr(depth)
        if k == 5:
            return {"anyOf": [self.node(depth - 1) for _ in range(rng.randrange(2, 4))]}
        if k == 6:
            return self.ref(depth)
        if k == 7:
            return self.oneof_objects(depth)
        return self.leaf()

    def obj(self, depth):
        rng = self.rng
        names = rng.sample(WORDS, rng.randrange(0, 6))
        props = {n: self.node(depth - 1) for n in names}
        s = {"type": "object", "properties": props}
        req = [n for n in names if rng.random() < 0.5]
        if req:
            s["required"] = req
        r = rng.randrange(6)
        if r == 0:
            s["additionalProperties"] = True
        elif r == 1:
            s["additionalProperties"] = self.leaf()
        elif r == 2:
            s["additionalProperties"] = False
        if rng.random() < 0.1 and names:
            # allOf that adds a property and tightens nothing else
            extra = rng.choice([w for w in WORDS if w not in names] or ["zz"])
            if "additionalProperties" in s:
                s["additionalProperties"] = True  # a closed or typed member would constrain the new property
            s = {"allOf": [s, {"properties": {extra: self.leaf()}, "required": [extra]}]}
        return s

    def arr(self, depth):
        rng = self.rng
        s = {"type": "array"}
        r = rng.randrange(4)
        if r == 0:
            s["prefixItems"] = [self.node(depth - 1) for _ in range(rng.randrange(1, 4))]
            if rng.random() < 0.5:
                s["items"] = self.node(depth - 1)
        else:
            s["items"] = self.node(depth - 1)
        lo = rng.choice([0, 0, 1, 2])
        s["minItems"] = lo
        if rng.random() < 0.8:
            s["maxItems"] = lo + rng.choice([0, 1, 3, 6])
        if "prefixItems" in s and "items" not in s:
            s["minItems"] = min(s["minItems"], len(s["prefixItems"]))
        return s

    def oneof_objects(self, depth):
        kinds = self.rng.sample(["a", "b", "c", "d"], 2)
        return {"oneOf": [{"type": "object", "properties": {"kind": {"const": k}, "v": self.node(depth - 1)}, "required": ["kind"]}
                          for k in kinds]}

    def ref(self, depth):
        rng = self.rng
        if rng.random() < 0.4:
            name = f"rec{len(self.defs)}"
            self.defs[name] = None
            # recursion that can always stop: through an optional property or an anyOf with null
            self.defs[name] = {"type": "object", "properties": {"v": self.leaf(),
                                                                 "next": {"anyOf": [{"$ref": f"#/$defs/{name}"}, {"type": "null"}]},
                                                                 "kids": {"type": "array", "items": {"$ref": f"#/$defs/{name}"}, "maxItems": 2}},
                               "required": ["v"]}
        else:
            name = f"d{len(self.defs)}"
            self.defs[name] = None  # reserve the name before generating the body
            self.defs[name] = self.node(depth - 1)
        return {"$ref": f"#/$defs/{name}"}


def generate(rng):
    g = Gen(rng)
    root = g.obj(rng.randrange(1, 4)) if rng.random() < 0.75 else g.node(rng.randrange(1, 4))
    if g.defs:
        root = dict(root)
        root["$defs"] = g.defs
    return root


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=170)
    ap.add_argument("--seed", type=int, default=2025)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "grammar", "schemas_generated.jsonl"))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w") as f:
        for i in range(a.count):
            f.write(json.dumps({"name": f"gen_{i:03d}", "schema": generate(rng)}, ensure_ascii=False) + "\n")
    print(f"wrote {a.count} schemas to {a.out}")


if __name__ == "__main__":
    main()
