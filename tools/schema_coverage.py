#!/usr/bin/env python3
"""JSON Schema coverage on JSONSchemaBench (not run in CI).

JSONSchemaBench is public (GitHub repository guidance-ai/jsonschemabench): one schema per file
under data/<subset>/. Clone it anywhere and pass --data CLONE (or --git GITDIR for a bare
copy). For a sample of each subset this script compiles every schema with the engine's JSON
Schema compiler and runs seeded generations through the grammar (bench/schema_walk: fixed
random logits over the fixture vocabulary as the model), then validates every finished
output with Python `jsonschema` (format checks on). Per subset it prints:

  compiled   schemas the engine accepts
  covered    accepted, and every generation finished and is valid (the coverage figure)
  invalid    accepted schemas with an invalid finished output (must be 0)
  unfinished accepted schemas with a generation that did not finish within the budget

    cmake --build build/ci --target schema_walk
    python3 tools/schema_coverage.py --data ~/jsonschemabench --per-subset 50 [--tool build/ci/bench/schema_walk]
        [--walks 3] [--budget 64] [--seed 0] [--errors 20] [--strict-keywords] [--json OUT]
Needs: pip install jsonschema rfc3339-validator.
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile

import jsonschema
from jsonschema.validators import validator_for


def list_dir(data):
    root = os.path.join(data, "data") if os.path.isdir(os.path.join(data, "data")) else data
    out = collections.defaultdict(list)
    for subset in sorted(os.listdir(root)):
        d = os.path.join(root, subset)
        if os.path.isdir(d):
            out[subset] = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".json"))
    return out


def list_git(gitdir, tmp):
    """Files of data/<subset>/ in a bare repository, written under tmp (absent blobs skipped)."""
    names = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "-r", "HEAD", "data"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    out = collections.defaultdict(list)
    for line in names:
        meta, path = line.split("\t", 1)
        parts = path.split("/")
        if len(parts) != 3 or not path.endswith(".json"):
            continue
        out[parts[1]].append((meta.split()[2], path))
    return out


def materialise(gitdir, entries, tmp):
    files = []
    for sha, path in entries:
        r = subprocess.run(["git", "--git-dir", gitdir, "cat-file", "blob", sha], capture_output=True)
        if r.returncode != 0:
            continue
        dst = os.path.join(tmp, path.replace("/", "__"))
        with open(dst, "wb") as f:
            f.write(r.stdout)
        files.append(dst)
    return files


def validate(schema, instance_text):
    try:
        instance = json.loads(instance_text)
    except ValueError as e:
        return f"not JSON: {e}"
    try:
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        v = cls(schema, format_checker=cls.FORMAT_CHECKER)
        err = next(iter(v.iter_errors(instance)), None)
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.RefResolutionError,
            jsonschema.exceptions._WrappedReferencingError) as e:
        return f"validator cannot use the schema: {type(e).__name__}"
    except Exception as e:  # a schema the validator itself cannot handle
        return f"validator error: {type(e).__name__}: {e}"
    return None if err is None else f"{list(err.absolute_path)}: {err.message[:200]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="a JSONSchemaBench checkout (with data/<subset>/*.json)")
    ap.add_argument("--git", help="a bare JSONSchemaBench git directory instead of --data")
    ap.add_argument("--tool", default="build/ci/bench/schema_walk")
    ap.add_argument("--per-subset", type=int, default=50, help="schemas sampled per subset (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--errors", type=int, default=20, help="most common compile errors to print")
    ap.add_argument("--strict-keywords", action="store_true")
    ap.add_argument("--json", help="write per-schema results here")
    args = ap.parse_args()
    if not args.data and not args.git:
        ap.error("give --data or --git")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        subsets = {}
        if args.data:
            for s, files in list_dir(args.data).items():
                subsets[s] = files if args.per_subset <= 0 else sorted(rng.sample(files, min(args.per_subset, len(files))))
        else:
            for s, entries in list_git(args.git, tmp).items():
                # The same sample as --data on a checkout (files absent from the copy are skipped).
                pick = entries if args.per_subset <= 0 else rng.sample(entries, min(args.per_subset, len(entries)))
                subsets[s] = materialise(args.git, sorted(pick, key=lambda e: e[1]), tmp)
        order = [(s, f) for s in sorted(subsets) for f in subsets[s]]
        cmd = [args.tool, "--walks", str(args.walks), "--budget", str(args.budget)]
        if args.strict_keywords:
            cmd.append("--strict-keywords")
        proc = subprocess.run(cmd, input="\n".join(f for _, f in order) + "\n", capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{args.tool} failed: {proc.stderr[-2000:]}")
        results = {}
        for line in proc.stdout.split("\n"):  # not splitlines(): outputs may hold U+2028, U+0085, ...
            if not line:
                continue
            r = json.loads(line)
            results[r["file"]] = r
        stats = collections.defaultdict(collections.Counter)
        errors = collections.Counter()
        invalid_examples = []
        per_schema = []
        for subset, f in order:
            st = stats[subset]
            st["schemas"] += 1
            r = results.get(f)
            if r is None:
                st["crashed"] += 1
                continue
            if not r["ok"]:
                msg = r["error"]
                key = msg.split(": ", 1)[1] if msg.startswith("JSON schema at ") and ": " in msg else msg
                errors[key[:110]] += 1
                per_schema.append({"subset": subset, "file": f, "ok": False, "error": msg})
                continue
            st["compiled"] += 1
            with open(f) as fh:
                schema = json.load(fh)
            bad = None
            unfinished = False
            for out, fin in zip(r["outputs"], r["finished"]):
                if not fin:
                    unfinished = True
                    continue
                why = validate(schema, out)
                if why is not None and bad is None:
                    bad = (out, why)
            if bad is not None and bad[1].startswith("validator "):
                st["validator_failed"] += 1
            elif bad is not None:
                st["invalid"] += 1
                invalid_examples.append((f, bad))
            elif unfinished:
                st["unfinished"] += 1
            else:
                st["covered"] += 1
            per_schema.append({"subset": subset, "file": f, "ok": True, "compile_ms": r["compile_ms"],
                               "invalid": bad is not None, "unfinished": unfinished})
    total = collections.Counter()
    print(f"{'subset':18} {'schemas':>7} {'compiled':>8} {'covered':>8} {'invalid':>7} {'unfinished':>10} {'coverage':>8}")
    for s in sorted(stats):
        st = stats[s]
        total.update(st)
        print(f"{s:18} {st['schemas']:7d} {st['compiled']:8d} {st['covered']:8d} {st['invalid']:7d} {st['unfinished']:10d}"
              f" {100.0 * st['covered'] / max(1, st['schemas']):7.1f}%")
    print(f"{'total':18} {total['schemas']:7d} {total['compiled']:8d} {total['covered']:8d} {total['invalid']:7d}"
          f" {total['unfinished']:10d} {100.0 * total['covered'] / max(1, total['schemas']):7.1f}%")
    if total["validator_failed"]:
        print(f"({total['validator_failed']} accepted schemas that Python jsonschema cannot use are not counted as covered)")
    ms = sorted(p["compile_ms"] for p in per_schema if p.get("ok"))
    if ms:
        print(f"compile ms (accepted): p50 {ms[len(ms) // 2]:.1f}  p99 {ms[min(len(ms) - 1, int(len(ms) * 0.99))]:.1f}"
              f"  max {ms[-1]:.1f}")
    if args.errors:
        print(f"\nmost common compile errors:")
        for msg, n in errors.most_common(args.errors):
            print(f"  {n:4d}  {msg}")
    for f, (out, why) in invalid_examples[:10]:
        print(f"\nINVALID {f}: {why}\n  {out[:300]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(per_schema, fh, indent=1)
    return 1 if total["invalid"] else 0


if __name__ == "__main__":
    sys.exit(main())
