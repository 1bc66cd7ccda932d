#!/usr/bin/env python3
"""Per-kernel GPU time of the last decode step from an ncu CSV (scripts/device_run.sh, stage
kernels: ncu --csv --metrics gpu__time_duration.sum,launch__grid_size). The kernels are split into
steps at each launch of the run's last kernel (name and grid: the decode step's draw on the GPU); the last full step is summarised by
kernel name, then listed in launch order (time, grid) to argv[2] if given."""
import csv, sys, collections

kern = collections.OrderedDict()
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
scale = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}
for r in csv.DictReader(lines):
    k = kern.setdefault(r["ID"], {"name": r["Kernel Name"], "ns": 0.0, "grid": 0})
    v = float(r["Metric Value"].replace(",", ""))
    if r["Metric Name"] == "gpu__time_duration.sum":
        k["ns"] = v * scale.get(r.get("Metric Unit", "ns"), 1)
    elif r["Metric Name"] == "launch__grid_size":
        k["grid"] = int(v)
rows = list(kern.values())
last = (rows[-1]["name"], rows[-1]["grid"]) if rows else None
marks = [i for i, k in enumerate(rows) if (k["name"], k["grid"]) == last]
print(f"{len(rows)} kernels, {len(marks)} ends of a step (the run's last kernel and grid)")
if len(marks) < 2:
    sys.exit(0)
step = rows[marks[-2] + 1: marks[-1] + 1]
tot = sum(k["ns"] for k in step)
def short(n):
    return n.split("(")[0] if "gemm_bf16_k" in n else n.split("(")[0].split("<")[0].replace("void ", "")
by = collections.defaultdict(lambda: [0, 0.0])
for k in step:
    by[short(k["name"])][0] += 1
    by[short(k["name"])][1] += k["ns"]
print(f"last step: {len(step)} kernels, {tot/1e3:.1f} us of GPU time")
for n, (c, ns) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{ns/1e3:10.1f} us {c:5d} x {ns/c/1e3:8.2f} us  {n[:150]}")
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        for k in step:
            f.write(f"{k['ns']/1e3:9.2f} us grid {k['grid']:7d}  {short(k['name'])[:120]}\n")
