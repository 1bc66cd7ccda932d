#!/usr/bin/env python3
"""Build the training corpus of the bundled demonstration model from text that packages ship.

Sources (each a Debian or PyPI package whose licence allows training on it and redistributing a
model derived from it; the manifest records package, version, licence and file count):
  python-stdlib  /usr/lib/python3.11/**/*.py        Debian libpython3.11-stdlib / -minimal (PSF-2.0)
  python-docs    /usr/share/doc/python3.11/html/_sources/**/*.rst.txt
                                                    Debian python3.11-doc (PSF-2.0; examples 0BSD)
  numpy          numpy/**/*.py of the installed wheel  PyPI numpy (BSD-3-Clause for its Python files)
  sympy          sympy/**/*.py, tests/ folders left out  PyPI sympy (BSD-3-Clause)

Every file is one document. The split is by file: a document is held out for validation when the
first 8 bytes of sha256("<source>/<relative path>") read as a big-endian integer, modulo 1000,
are below --val-permille; the rule depends on the path only, so adding or removing other files
never moves a document between the splits. Training never reads validation documents.

Outputs in --out (default build/train/corpus):
  train.jsonl, val.jsonl   one JSON object per line: {"source", "path", "text"}, sorted by
                           (source, path)
  manifest.json            sources (package, version, licence, files, bytes per split), the split
                           rule, and sha256 of both jsonl files

Usage: python3 tools/train/corpus.py [--out DIR] [--max-mb N] [--val-permille 30]
  --max-mb caps each source's bytes (files taken in path order), for a small smoke corpus.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys

DEBIAN = {
    "python-stdlib": ("/usr/lib/python3.11", ".py", "libpython3.11-stdlib", "PSF-2.0"),
    "python-docs": ("/usr/share/doc/python3.11/html/_sources", ".rst.txt", "python3.11-doc",
                    "PSF-2.0 (code examples: 0BSD)"),
}
# name -> (import name, licence, extra folder names to leave out)
PYPI = {"numpy": ("numpy", "BSD-3-Clause (its Python sources)", ()),
        "sympy": ("sympy", "BSD-3-Clause", ("tests",))}
SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def debian_version(pkg: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def debian_owners(paths: list[str]) -> dict[str, int]:
    """Debian package (name=version) -> how many of `paths` it installed."""
    owners: dict[str, int] = {}
    for i in range(0, len(paths), 200):
        out = subprocess.run(["dpkg", "-S"] + paths[i:i + 200], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            pkg = line.split(":")[0]
            key = f"{pkg}={debian_version(pkg)}"
            owners[key] = owners.get(key, 0) + 1
    return dict(sorted(owners.items()))


def list_files(root: str, suffix: str, skip=()) -> list[str]:
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and x not in skip)
        files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(suffix)]
    return sorted(files)


def is_validation(source: str, rel: str, permille: int) -> bool:
    h = hashlib.sha256(f"{source}/{rel}".encode()).digest()
    return int.from_bytes(h[:8], "big") % 1000 < permille


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # a few test files are deliberately not UTF-8
    return text if text.strip() else None


def sources() -> list[dict]:
    out = []
    for name, (root, suffix, pkg, lic) in DEBIAN.items():
        ver = debian_version(pkg)
        if not os.path.isdir(root) or not ver:
            raise SystemExit(f"source {name}: {root} or Debian package {pkg} is missing "
                             f"(apt-get install {pkg})")
        out.append({"name": name, "root": root, "suffix": suffix, "package": f"debian:{pkg}", "version": ver,
                    "license": lic, "skip": ()})
    for name, (module, lic, skip) in PYPI.items():
        try:
            mod = importlib.import_module(module)
        except ImportError:
            raise SystemExit(f"source {name}: the PyPI package {name} is not installed "
                             "(pip install -r tools/train/requirements.txt)")
        out.append({"name": name, "root": os.path.dirname(mod.__file__), "suffix": ".py", "package": f"pypi:{name}",
                    "version": importlib.metadata.version(name), "license": lic, "skip": skip})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/train/corpus")
    ap.add_argument("--max-mb", type=float, default=0, help="cap per source in MB (0: no cap)")
    ap.add_argument("--val-permille", type=int, default=30)
    a = ap.parse_args()
    if not 0 < a.val_permille < 1000:
        raise SystemExit(f"--val-permille must be in 1..999, got {a.val_permille}")
    os.makedirs(a.out, exist_ok=True)
    cap = int(a.max_mb * 1e6) if a.max_mb > 0 else None
    manifest = {"split": f"validation iff int(sha256('<source>/<path>')[:8]) % 1000 < {a.val_permille}",
                "sources": []}
    paths = {k: os.path.join(a.out, f"{k}.jsonl") for k in ("train", "val")}
    files = {k: open(p, "w", encoding="utf-8") for k, p in paths.items()}
    for s in sources():
        stat = {k: {"files": 0, "bytes": 0} for k in ("train", "val")}
        used = 0
        taken = []
        for rel in list_files(s["root"], s["suffix"], s["skip"]):
            text = read_text(os.path.join(s["root"], rel))
            if text is None:
                continue
            n = len(text.encode("utf-8"))
            if cap is not None and used + n > cap:
                break
            used += n
            taken.append(os.path.join(s["root"], rel))
            k = "val" if is_validation(s["name"], rel, a.val_permille) else "train"
            files[k].write(json.dumps({"source": s["name"], "path": rel, "text": text}, ensure_ascii=False) + "\n")
            stat[k]["files"] += 1
            stat[k]["bytes"] += n
        entry = {k: s[k] for k in ("name", "package", "version", "license")} | stat
        if s["package"].startswith("debian:"):
            entry["installed_by"] = debian_owners(taken)  # every Debian package the files come from
        manifest["sources"].append(entry)
        print(f"{s['name']}: {s['package']} {s['version']}: train {stat['train']}, val {stat['val']}")
    for f in files.values():
        f.close()
    for k, p in paths.items():
        manifest[f"{k}_sha256"] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
